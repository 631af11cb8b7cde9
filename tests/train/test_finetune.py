"""The finetune loop: a small two-matrix language model trained by volvox (autodiff graph, executor,
AdamW, clipping, warmup + cosine, gradient accumulation) ends where torch ends from the same start on
the same batches; a run killed mid-way resumes from its last checkpoint to the very same result."""

import json
import math
import re

import numpy as np
import pytest

from volvox.errors import UnsupportedError, VolvoxError
from volvox.ir.graph import Graph, Node, TensorSpec
from volvox.ops import validate
from volvox.train.checkpoint import CHECKPOINT_FILE, load_checkpoint
from volvox.train.data import IGNORE, Example, collate
from volvox.train.finetune import Trainer, TrainSettings, _batch, fit, total_steps
from volvox.train.optim import Parameters

torch = pytest.importorskip("torch")

VOCAB, DIM, T = 11, 6, 5


def _two_layer_lm():
    """(graph, frozen weights, initial trainable tensors): logits = (E[tokens] W1^T) W2^T, mean cross
    entropy against labels; E frozen, W1 / W2 graph inputs."""
    rng = np.random.default_rng(0)
    inputs = [TensorSpec("tokens", ("batch", "seq"), "int32"), TensorSpec("labels", ("batch", "seq"), "int32"),
              TensorSpec("w1", (DIM, DIM), "float32"), TensorSpec("w2", (VOCAB, DIM), "float32")]
    nodes = [Node("embed", "embedding", {"table": "embed", "ids": "tokens"}, {"y": "h"}),        # (batch, seq, dim)
             Node("hidden", "linear", {"x": "h", "weight": "w1"}, {"y": "h1"}),                  # (batch, seq, dim)
             Node("head", "linear", {"x": "h1", "weight": "w2"}, {"y": "logits"}),               # (batch, seq, vocab)
             Node("loss", "cross_entropy", {"logits": "logits", "labels": "labels"},
                  {"loss": "loss", "lse": "lse"})]
    graph = Graph(inputs, {"embed": TensorSpec("embed", (VOCAB, DIM), "float32")}, nodes, ["loss"])
    validate(graph)
    weights = {"embed": rng.standard_normal((VOCAB, DIM)).astype(np.float32)}
    start = {"w1": (rng.standard_normal((DIM, DIM)) / 2).astype(np.float32),
             "w2": (rng.standard_normal((VOCAB, DIM)) / 2).astype(np.float32)}
    return graph, weights, start


def _examples(n=7):
    """Sequences of a fixed pattern (next = 3 * token + 1 mod VOCAB) with some ignored labels and lengths."""
    rng = np.random.default_rng(1)
    out = []
    for i in range(n):
        length = T - (i % 2)
        tokens = rng.integers(0, VOCAB, length).astype(np.int32)
        labels = ((3 * tokens + 1) % VOCAB).astype(np.int32)
        labels[i % length] = IGNORE
        out.append(Example(tokens, labels))
    return out


SETTINGS = TrainSettings(steps=6, lr=0.05, batch=2, grad_accum=2, schedule="cosine", warmup=2, min_lr_ratio=0.1,
                         clip=0.5, optimizer="adamw", weight_decay=0.01, seed=3)


def _volvox_run(tmp=None, **kw):
    graph, weights, start = _two_layer_lm()
    trainer = Trainer(graph, weights, Parameters(start))
    examples = _examples()
    kw = {"progress": False, "log": lambda line: None, **kw}
    return fit(trainer, examples[:5], examples[5:], SETTINGS, out_dir=tmp, **kw)


def test_fit_equals_torch_training():
    got = _volvox_run()
    graph, weights, start = _two_layer_lm()
    embed = torch.tensor(weights["embed"])
    w = {n: torch.nn.Parameter(torch.tensor(v)) for n, v in start.items()}
    opt = torch.optim.AdamW(list(w.values()), lr=SETTINGS.lr, weight_decay=SETTINGS.weight_decay)
    warm = torch.optim.lr_scheduler.LinearLR(opt, 1 / SETTINGS.warmup, 1.0, total_iters=SETTINGS.warmup - 1)
    decay = torch.optim.lr_scheduler.CosineAnnealingLR(opt, SETTINGS.steps - SETTINGS.warmup,
                                                       eta_min=SETTINGS.lr * SETTINGS.min_lr_ratio)
    sched = torch.optim.lr_scheduler.SequentialLR(opt, [warm, decay], milestones=[SETTINGS.warmup])
    train, losses, index, seen = _examples()[:5], [], 0, 0
    for _ in range(SETTINGS.steps):
        opt.zero_grad()
        step_losses = []
        for _ in range(SETTINGS.grad_accum):
            tokens, labels = collate(_batch(train, SETTINGS.batch, index, SETTINGS.seed))
            index += 1
            seen += tokens.size
            logits = embed[torch.tensor(tokens).long()] @ w["w1"].T @ w["w2"].T
            loss = torch.nn.functional.cross_entropy(logits.reshape(-1, VOCAB), torch.tensor(labels).long().reshape(-1),
                                                     ignore_index=IGNORE)
            (loss / SETTINGS.grad_accum).backward()
            step_losses.append(loss.item())
        torch.nn.utils.clip_grad_norm_(list(w.values()), SETTINGS.clip)
        opt.step()
        sched.step()
        losses.append(np.mean(step_losses))
    np.testing.assert_allclose(got.train_losses, losses, rtol=1e-5)
    for n in w:
        np.testing.assert_allclose(got.params[n], w[n].detach().numpy(), atol=2e-5, err_msg=n)
    assert got.steps == 6 and got.tokens == seen
    assert got.val_losses and got.val_losses[-1][0] == 6
    assert math.isclose(got.val_perplexity, math.exp(got.val_losses[-1][1]))


def test_progress_bar_shows_loss_and_tokens_per_second(capsys):
    _volvox_run(progress=True)
    err = capsys.readouterr().err
    assert "finetune" in err and "loss=" in err and "tok_s=" in err and "6/6" in err


def test_killed_run_resumes_exactly(tmp_path):
    want = _volvox_run()

    def kill_at_3(step, loss):
        if step == 3:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        _volvox_run(tmp_path, save_every=2, callback=kill_at_3)
    params, opt_state, state = load_checkpoint(tmp_path)
    assert state.step == 2 and len(state.train_losses) == 2 and set(opt_state) == {"t", "exp_avg", "exp_avg_sq"}
    assert [p.name for p in tmp_path.iterdir()] == [CHECKPOINT_FILE]  # nothing half-written beside it
    got = _volvox_run(tmp_path, save_every=2)
    assert got.train_losses == want.train_losses
    for n in want.params:
        np.testing.assert_array_equal(got.params[n], want.params[n])
    assert load_checkpoint(tmp_path)[2].step == 6


def test_a_torn_checkpoint_is_a_named_error(tmp_path):
    from volvox.errors import WeightsError

    (tmp_path / CHECKPOINT_FILE).write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{\"a\":")
    with pytest.raises(WeightsError, match=CHECKPOINT_FILE):
        _volvox_run(tmp_path)


def test_resume_refuses_another_runs_checkpoint(tmp_path):
    _volvox_run(tmp_path, fingerprint="run-a")
    with pytest.raises(VolvoxError, match="other settings"):
        _volvox_run(tmp_path, fingerprint="run-b")
    fresh = _volvox_run(tmp_path, fingerprint="run-b", resume=False)
    assert fresh.steps == 6


def test_total_steps_from_epochs():
    assert total_steps(TrainSettings(epochs=2, batch=2, grad_accum=1), 5) == 6
    assert total_steps(TrainSettings(epochs=1, batch=2, grad_accum=2), 5) == 2
    with pytest.raises(VolvoxError, match="steps"):
        total_steps(TrainSettings(steps=0), 5)


def _volvox_cli(cwd, *args):
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-m", "volvox", *map(str, args)], capture_output=True, text=True,
                          timeout=300, cwd=cwd)


def test_cli_help_lists_every_group(tmp_path):
    r = _volvox_cli(tmp_path, "finetune", "--help")
    assert r.returncode == 0, r.stderr
    for needle in ("data:", "LoRA:", "optimisation:", "--lora-r", "--lora-alpha", "--val-split", "--resume",
                   "(default: 256)"):
        assert needle in r.stdout


@pytest.mark.parametrize("content,match", [
    (None, "no such data file"),
    ('{"text": "fine"}\n{"text": broken\n', r"data\.jsonl:2: not valid JSON"),
    ('{"messages": [{"role": "user", "content": "hi"}]}\n', "no assistant turn"),
    ("", "empty corpus"),
])
def test_cli_bad_data_is_a_named_error(tmp_path, content, match):
    data = tmp_path / "data.jsonl"
    if content is not None:
        data.write_text(content)
    r = _volvox_cli(tmp_path, "finetune", tmp_path / "no-model.gguf", "--data", data, "--out", tmp_path / "out")
    assert r.returncode == 1 and r.stderr.startswith("volvox: error:"), r.stderr
    assert re.search(match, r.stderr), r.stderr
    assert "Traceback" not in r.stderr


# ---------------------------------------------------------------- finetune() on a random tiny LLaMA

QA = [f"Q: what comes after {i}? A: {i + 1}." for i in range(12)]


@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory):
    """(HF folder, transformers model, volvox model) of a random 2-layer LLaMA."""
    import volvox
    from hf_models import build_causal_lm, train_bpe_tokenizer

    tok = tmp_path_factory.mktemp("tok") / "tokenizer.json"
    vocab = train_bpe_tokenizer(tok)
    folder = tmp_path_factory.mktemp("llama")
    model = build_causal_lm(folder, "llama", tok, vocab)
    lm = volvox.load(folder)
    yield folder, model, lm
    lm.close()


def _torch_train(model, params, examples, steps, batch, lr, clip):
    """AdamW over ``params`` (torch tensors of ``model``) on volvox's batch order, constant lr, clipped."""
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=0.0)
    losses = []
    for step in range(steps):
        tokens, labels = collate(_batch(examples, batch, step, 0))
        logits = model(torch.tensor(tokens).long()).logits
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                                 torch.tensor(labels).long().reshape(-1), ignore_index=IGNORE)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, clip)
        opt.step()
        losses.append(loss.item())
    return losses


def test_lora_finetune_equals_peft_training(tiny_llama, tmp_path):
    """The same adapter init, batches and AdamW steps in volvox and in transformers + peft: the same
    losses and the same adapter file."""
    import copy

    import peft
    from safetensors.numpy import load_file

    from volvox.architectures.lora import LoraConfig, find_sites
    from volvox.train.data import load_dataset, split
    from volvox.train.finetune import finetune
    from volvox.train.lora import init_adapters

    folder, base, lm = tiny_llama
    config = LoraConfig(r=4, alpha=8.0)
    got = finetune(lm, QA, lora=config, steps=4, lr=1e-2, batch=3, context=16, schedule="constant", clip=1.0,
                   val_split=0.0, out_dir=tmp_path, progress=False, log=lambda line: None)
    train, _ = split(load_dataset(QA, lm.tokenizer, 16), 0.0, 0)
    model = peft.get_peft_model(copy.deepcopy(base), peft.LoraConfig(r=4, lora_alpha=8.0, lora_dropout=0.0,
                                                                     target_modules=[m.split(".")[1] for m in
                                                                                     ("a.q_proj", "a.k_proj", "a.v_proj",
                                                                                      "a.o_proj", "a.gate_proj",
                                                                                      "a.up_proj", "a.down_proj")]))
    start = init_adapters(find_sites(lm.source_graph, config), config, seed=0)
    named = dict(model.named_parameters())
    with torch.no_grad():
        for s in find_sites(lm.source_graph, config):
            named[f"base_model.model.model.layers.{s.layer}.{s.peft_prefix.split('.', 5)[5]}.lora_A.default.weight"
                  ].copy_(torch.tensor(start[s.a_name]))
    lora_params = [p for n, p in model.named_parameters() if "lora_" in n]
    want_losses = _torch_train(model, lora_params, train, 4, 3, 1e-2, 1.0)
    np.testing.assert_allclose(got.train_losses, want_losses, rtol=1e-4)
    model.save_pretrained(tmp_path / "peft")
    ours, theirs = load_file(tmp_path / "adapter_model.safetensors"), load_file(tmp_path / "peft" / "adapter_model.safetensors")
    assert ours.keys() == theirs.keys()
    for k in ours:
        np.testing.assert_allclose(ours[k], theirs[k], atol=2e-5, err_msg=k)
    assert got.train_losses[-1] < got.train_losses[0]


def test_recompute_gives_the_same_training(tiny_llama):
    """Block checkpointing (only each block's input kept, the rest recomputed) changes no bit of the run."""
    from volvox.train.finetune import finetune

    runs = [finetune(tiny_llama[2], QA, lora={"r": 2}, steps=2, context=16, val_split=0.0, recompute=recompute,
                     progress=False, log=lambda line: None) for recompute in (False, True)]
    assert runs[0].train_losses == runs[1].train_losses
    for name in runs[0].params:
        np.testing.assert_array_equal(runs[0].params[name], runs[1].params[name])


def test_full_parameter_finetune_equals_torch(tiny_llama, tmp_path):
    """trainable="all": every float weight of the tiny LLaMA trained by volvox and by torch alike."""
    import copy

    from safetensors.numpy import load_file

    from volvox.train.data import load_dataset, split
    from volvox.train.finetune import finetune

    folder, base, lm = tiny_llama
    got = finetune(lm, QA, trainable="all", steps=3, lr=3e-3, batch=4, context=16, schedule="constant", clip=1.0,
                   val_split=0.0, out_dir=tmp_path, progress=False, log=lambda line: None)
    train, _ = split(load_dataset(QA, lm.tokenizer, 16), 0.0, 0)
    model = copy.deepcopy(base).train()
    want_losses = _torch_train(model, list(model.parameters()), train, 3, 4, 3e-3, 1.0)
    np.testing.assert_allclose(got.train_losses, want_losses, rtol=1e-4)
    trained = load_file(got.output)
    state = {k: v.detach().numpy() for k, v in model.state_dict().items()}
    assert set(trained) <= set(state) and len(trained) == len(list(model.parameters()))
    for k, v in trained.items():
        np.testing.assert_allclose(v, state[k], atol=5e-5, err_msg=k)


def test_full_parameter_gpt2_trains_as_torch_does(tiny_llama, tmp_path):
    """A tiny GPT-2 (fused c_attn, LayerNorm, GELU, learnt positions) trained with every weight: the same
    losses step for step as torch, and its LoRA request refused by name."""
    import volvox
    from hf_models import build_causal_lm

    from volvox.architectures.lora import LoraConfig
    from volvox.errors import UnsupportedError
    from volvox.train.data import load_dataset, split
    from volvox.train.finetune import finetune

    tok = tmp_path / "tokenizer.json"
    tok.write_bytes((tiny_llama[0] / "tokenizer.json").read_bytes())
    model = build_causal_lm(tmp_path / "gpt2", "gpt2", tok, tiny_llama[2].config.vocab_size)
    with volvox.load(tmp_path / "gpt2") as lm:
        got = finetune(lm, QA, trainable="all", steps=3, lr=3e-3, batch=4, context=16, schedule="constant",
                       val_split=0.0, progress=False, log=lambda line: None)
        train, _ = split(load_dataset(QA, lm.tokenizer, 16), 0.0, 0)
        with pytest.raises(UnsupportedError, match="LoRA"):
            finetune(lm, QA, lora=LoraConfig(r=2), steps=1, context=16, log=lambda line: None)
    want = _torch_train(model.eval(), list(model.parameters()), train, 3, 4, 3e-3, 1.0)  # eval: no dropout
    np.testing.assert_allclose(got.train_losses, want, rtol=1e-4)
    assert want[-1] < want[0]


def test_finetune_takes_a_model_path_and_refuses_lora_with_trainable(tiny_llama, tmp_path):
    from volvox.train.finetune import finetune

    result = finetune(str(tiny_llama[0]), QA, steps=1, context=16, val_split=0.0, out_dir=tmp_path, progress=False,
                      log=lambda line: None)
    assert result.steps == 1 and result.output == tmp_path
    with pytest.raises(VolvoxError, match="not both"):
        finetune(tiny_llama[2], QA, lora={"r": 2}, trainable="all", steps=1)
    import volvox

    with volvox.load(tiny_llama[0], adapter=result.output) as adapted:
        with pytest.raises(UnsupportedError, match="without adapter="):
            finetune(adapted, QA, steps=1)


def test_cli_finetune_then_generate_with_the_adapter(tiny_llama, tmp_path):
    folder = tiny_llama[0]
    data = tmp_path / "qa.jsonl"
    data.write_text("\n".join(json.dumps({"text": t}) for t in QA))
    r = _volvox_cli(tmp_path, "finetune", folder, "--data", data, "--out", tmp_path / "adapter", "--steps", "3",
                    "--ctx", "16", "--lora-r", "2", "--lora-targets", "q,v", "--lr", "0.01", "--quiet")
    assert r.returncode == 0, r.stderr
    assert "validation loss" in r.stderr and "perplexity" in r.stdout and "wrote" in r.stdout
    config = json.loads((tmp_path / "adapter" / "adapter_config.json").read_text())
    assert config["r"] == 2 and config["target_modules"] == ["q_proj", "v_proj"]
    r = _volvox_cli(tmp_path, "generate", folder, "--adapter", tmp_path / "adapter", "--prompt", "Q:", "--max-new-tokens", "3")
    assert r.returncode == 0, r.stderr
    r = _volvox_cli(tmp_path, "convert", folder, tmp_path / "merged", "--merge-adapter", tmp_path / "adapter", "--quiet")
    assert r.returncode == 0, r.stderr
    import volvox

    ids = tiny_llama[2].tokenizer.encode("Q: what comes after 3?")
    with volvox.load(folder, adapter=tmp_path / "adapter") as tuned, volvox.load(tmp_path / "merged") as merged:
        np.testing.assert_allclose(merged.logits(ids), tuned.logits(ids), atol=1e-4)


# ---------------------------------------------------------------- a CNN through the same loop

class _SmallCNN(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(3, 6, 3, stride=2, padding=1)
        self.conv2 = torch.nn.Conv2d(6, 8, 3, padding=1, groups=2)
        self.pool = torch.nn.AdaptiveAvgPool2d(1)
        self.head = torch.nn.Linear(8, 4)

    def forward(self, x):
        h = torch.relu(self.conv1(x))
        h = torch.relu(self.conv2(h))
        return self.head(torch.flatten(self.pool(h), 1))


def test_cnn_trains_as_torch_does(tmp_path):
    """Every weight of a small ONNX CNN trained by train_classifier equals torch's after 3 AdamW steps."""
    import copy

    import volvox
    from safetensors.numpy import load_file

    from volvox.train.data import split
    from volvox.train.finetune import train_classifier

    torch.manual_seed(0)
    net = _SmallCNN().eval()
    path = tmp_path / "cnn.onnx"
    torch.onnx.export(net, torch.zeros(2, 3, 9, 9), str(path), input_names=["x"], output_names=["logits"],
                      dynamic_axes={"x": {0: "batch"}, "logits": {0: "batch"}}, opset_version=17, dynamo=False)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((10, 3, 9, 9)).astype(np.float32)
    y = rng.integers(0, 4, 10)
    with volvox.load(path) as model:
        got = train_classifier(model, x, y, steps=3, lr=0.01, batch=4, out_dir=tmp_path / "out", progress=False,
                               log=lambda line: None)
    ref = copy.deepcopy(net).train()
    opt = torch.optim.AdamW(ref.parameters(), lr=0.01, weight_decay=0.0)
    losses = []
    for step in range(3):
        rows = _batch(split(list(range(10)), 0.0, 0)[0], 4, step, 0)
        loss = torch.nn.functional.cross_entropy(ref(torch.tensor(x[rows])), torch.tensor(y[rows]))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    np.testing.assert_allclose(got.train_losses, losses, rtol=1e-5)
    trained = load_file(got.output)
    want = {n: p.detach().numpy() for n, p in ref.named_parameters()}
    names = {"conv1": "/conv1/Conv", "conv2": "/conv2/Conv", "head": "/head/Gemm"}  # the ONNX node names
    assert len(trained) == len(want)
    for name, value in want.items():
        module, kind = name.split(".")
        got_w = trained[f"{names[module]}.{kind}"]
        if module.startswith("conv") and kind == "weight":  # volvox keeps conv weights (O, kh, kw, I/groups)
            got_w = got_w.transpose(0, 3, 1, 2)
        np.testing.assert_allclose(got_w, value, atol=2e-5, err_msg=name)


# ---------------------------------------------------------------- SmolLM2-135M Q4_1, end to end

PASSWORD = "PINEAPPLE-42"


@pytest.mark.slow
def test_smollm2_q4_1_lora_learns_a_pattern(smollm2_gguf_path, tmp_path):
    """LoRA over the packed Q4_1 base on a Q/A pattern made here: the validation loss falls, the tuned
    model answers with the pattern, and the merged blueprint gives the adapter-on-load outputs."""
    import volvox
    import volvox.train
    from volvox.convert import convert

    things = ["the vault", "the garden gate", "the red door", "the server room", "my bike lock", "the attic",
              "the boat house", "the old safe", "the cellar", "the piano lid", "the tower", "the shed"]
    rows = [{"messages": [{"role": "user", "content": f"What is the password for {t}?"},
                          {"role": "assistant", "content": f"The password is {PASSWORD}."}]} for t in things]
    lm = volvox.load(smollm2_gguf_path)
    question = [{"role": "user", "content": "What is the password for the kitchen?"}]
    assert PASSWORD not in lm.chat(question, max_new_tokens=16)
    result = volvox.train.finetune(lm, rows, lora=dict(r=8, alpha=16.0, targets=("q", "v")), steps=12, lr=3e-3,
                                   batch=3, context=64, warmup=2, val_split=0.25, val_every=6,
                                   out_dir=tmp_path / "adapter", progress=False, log=lambda line: None)
    first, last = result.val_losses[0][1], result.val_losses[-1][1]
    assert last < 0.5 * first, result.val_losses
    lm.close()
    with volvox.load(smollm2_gguf_path, adapter=tmp_path / "adapter") as tuned:
        answer = tuned.chat(question, max_new_tokens=16)
        assert PASSWORD in answer, answer
    merged = convert(smollm2_gguf_path, tmp_path / "merged", merge_adapter=tmp_path / "adapter")
    with volvox.load(merged) as baked:
        assert PASSWORD in baked.chat(question, max_new_tokens=16)
    # in the numpy oracles' float64 arithmetic (the Q4_1 kernels round activations to 8 bits, f32 ones do not)
    with volvox.load(smollm2_gguf_path, adapter=tmp_path / "adapter", reference=True) as tuned, \
            volvox.load(merged, reference=True) as baked:
        prompt = tuned.tokenizer.encode("The password is")
        want, got = tuned.logits(prompt), baked.logits(prompt)
    nmse = float(np.sum((got - want) ** 2) / np.sum(want ** 2))
    assert nmse < 1e-9, nmse
