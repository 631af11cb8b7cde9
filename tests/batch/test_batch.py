"""`volvox batch`: JSONL in, JSONL out in input order, each result equal to the model run on that row
alone in this process; on a local Ray cluster (2 CPUs, 2 actors) and without Ray."""

import json
import subprocess
from pathlib import Path
import sys

import pytest

import volvox
from volvox.batch import BatchOptions, run_local
from tiny_gguf import write_tiny_llama

ROWS = [{"id": i, "prompt": f"row {i}: " + "the " * (i % 4)} for i in range(10)]
ROWS.insert(3, {"id": "chat", "messages": [{"role": "user", "content": "hello"}]})


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return write_tiny_llama(tmp_path_factory.mktemp("batch") / "tiny.gguf", seed=5)


@pytest.fixture(scope="module")
def expected(model):
    """Each row generated alone, by the model's own generate / chat."""
    with volvox.load(model) as lm:
        return [{**row, "text": lm.chat(row["messages"], max_new_tokens=12) if "messages" in row
                 else lm.generate(row["prompt"], max_new_tokens=12)} for row in ROWS]


@pytest.fixture
def input_file(tmp_path):
    path = tmp_path / "in.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in ROWS))
    return path


def read(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_in_process(model, expected, input_file, tmp_path):
    n = run_local(str(model), input_file, tmp_path / "out.jsonl", BatchOptions(max_new_tokens=12), batch_size=4)
    assert n == len(ROWS) and read(tmp_path / "out.jsonl") == expected


def test_on_a_local_ray_cluster(model, expected, input_file, tmp_path, monkeypatch):
    pytest.importorskip("ray", reason="the Ray test needs ray")
    monkeypatch.chdir(tmp_path)  # Ray's workers start in the driver's directory: not the source tree
    from volvox.ray import run_on_ray

    n = run_on_ray(str(model), input_file, tmp_path / "out.jsonl", BatchOptions(max_new_tokens=12),
                   actors=2, batch_size=3, num_cpus=2)
    assert n == len(ROWS) and read(tmp_path / "out.jsonl") == expected


def test_predictor_class_in_map_batches(model, expected, tmp_path, monkeypatch):
    """volvox.ray.VolvoxPredictor used as users use it: rows as columns, Ray Data's own map_batches."""
    ray = pytest.importorskip("ray", reason="the Ray test needs ray")
    monkeypatch.chdir(tmp_path)  # Ray's workers start in the driver's directory: not the source tree
    from volvox.ray import VolvoxPredictor

    rows = [row for row in ROWS if "prompt" in row]
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:
        ray.data.DataContext.get_current().execution_options.preserve_order = True
        out = ray.data.from_items(rows).map_batches(
            VolvoxPredictor, fn_constructor_kwargs={"model": str(model), "max_new_tokens": 12},
            batch_size=4, batch_format="pandas", concurrency=2, num_cpus=1).take_all()
    finally:
        ray.shutdown()
    want = [row for row in expected if "prompt" in row]
    assert [(r["id"], r["text"]) for r in out] == [(r["id"], r["text"]) for r in want]


def test_cli_no_ray(model, expected, input_file, tmp_path):
    out = tmp_path / "cli.jsonl"
    run = subprocess.run([sys.executable, "-m", "volvox", "batch", str(model), "--input", str(input_file),
                          "--output", str(out), "--no-ray", "--max-new-tokens", "12"], capture_output=True, text=True,
                         cwd=tmp_path)  # outside the source tree: the installed package runs
    assert run.returncode == 0, run.stderr
    assert read(out) == expected


def test_transcribe_needs_a_speech_model(model, input_file, tmp_path):
    with pytest.raises(volvox.UnsupportedError, match="cannot run on this model"):
        run_local(str(model), input_file, tmp_path / "out.jsonl", BatchOptions(task="transcribe"))


def test_volvox_imports_without_ray():
    code = ("import sys; sys.modules['ray'] = None\n"
            "import volvox, volvox.ray, volvox.batch\n"
            "try:\n    volvox.ray._ray()\nexcept volvox.VolvoxError as e:\n    print('lazy:', e)")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=Path(__file__).parent)
    assert run.returncode == 0, run.stderr
    assert "lazy: volvox batch on Ray needs ray" in run.stdout


@pytest.mark.slow  # a real classifier, fetched once from PyPI
def test_embed_and_classify_rows(tmp_path):
    """The other tasks' rows: embeddings equal the encoder's embed(), labels the classifier's classify()."""
    pytest.importorskip("torch", reason="the tiny BERT is built with transformers")
    from hf_models import build_tiny_bert
    from vision_helpers import sample_image
    from PIL import Image

    texts = ["the cat sat", "a dog ran", "hello"]
    build_tiny_bert(tmp_path / "bert", texts)
    (tmp_path / "texts.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    run_local(str(tmp_path / "bert"), tmp_path / "texts.jsonl", tmp_path / "emb.jsonl", BatchOptions(normalize=True))
    with volvox.load(tmp_path / "bert") as enc:
        want = enc.embed(texts, normalize=True)
    got = [row["embedding"] for row in read(tmp_path / "emb.jsonl")]
    assert [row["text"] for row in read(tmp_path / "emb.jsonl")] == texts
    assert max(abs(a - b) for g, w in zip(got, want) for a, b in zip(g, w)) < 1e-6

    images = []
    for name in ("astronaut", "coffee"):
        Image.fromarray(sample_image(name)).save(tmp_path / f"{name}.png")
        images.append(str(tmp_path / f"{name}.png"))
    (tmp_path / "images.jsonl").write_text("".join(json.dumps({"image": p}) + "\n" for p in images))
    run_local("mltk-person-detection", tmp_path / "images.jsonl", tmp_path / "labels.jsonl",
              BatchOptions(top_k_labels=2))
    with volvox.load("mltk-person-detection") as classifier:
        want = [[vars(label) for label in classifier.classify(p, top_k=2)] for p in images]
    assert [row["labels"] for row in read(tmp_path / "labels.jsonl")] == want
