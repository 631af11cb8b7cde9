"""The finetune loop: a small two-matrix language model trained by volvox (autodiff graph, executor,
AdamW, clipping, warmup + cosine, gradient accumulation) ends where torch ends from the same start on
the same batches; a run killed mid-way resumes from its last checkpoint to the very same result."""

import math
import re

import numpy as np
import pytest

from volvox.errors import VolvoxError
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


def _feeds(tokens, labels):
    return {"tokens": tokens, "labels": labels}


def _volvox_run(tmp=None, **kw):
    graph, weights, start = _two_layer_lm()
    trainer = Trainer(graph, weights, Parameters(start))
    examples = _examples()
    return fit(trainer, examples[:5], examples[5:], SETTINGS, feeds_of=_feeds, out_dir=tmp, progress=False,
               log=lambda line: None, **kw)


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
