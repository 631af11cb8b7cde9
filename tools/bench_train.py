"""Training speed and memory: volvox against torch on the same step, in one run.

    python tools/bench_train.py [--jobs lora full] [--threads 1 2] [--steps 5] [--batch 4] [--ctx 128]
                                [--profile] [--plot bench_train.png]

Two jobs (--jobs picks some), each at every thread count:
- **LoRA step** on SmolLM2-135M-Instruct: volvox trains rank-8 adapters on q,k,v,o,gate,up,down over
  the Q4_1 GGUF as loaded (the base stays packed); torch + peft train the same adapters over the
  same file loaded by transformers (dequantized to float32, as transformers loads a GGUF).
- **Full-parameter step** on a random tiny GPT-2 (4 layers, 256 wide, built here with transformers):
  every weight trained by volvox (trainable="all") and by torch.

A step is forward, backward and an AdamW update on a (batch, ctx) batch of random tokens; the
figure is training tokens per second over --steps steps after one warm-up step. Each side runs in a
subprocess of its own, so its peak RSS (getrusage's ru_maxrss: load, graph and step together) is its
own. Prints a markdown table and, with matplotlib, writes a bar plot of tokens/s; --profile adds volvox's
per-op table of each run (the executor's profiler on, so those runs' tokens/s include its cost).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

LORA_TARGETS = ("q", "k", "v", "o", "gate", "up", "down")
HF_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
JOBS = ("lora", "full")
GPT2 = dict(n_layer=4, n_embd=256, n_head=4, n_positions=512, vocab_size=2048)


def random_batch(vocab: int, batch: int, ctx: int) -> tuple[np.ndarray, np.ndarray]:
    """tokens and next-token labels (batch, ctx) drawn with a fixed seed."""
    ids = np.random.default_rng(0).integers(0, vocab, (batch, ctx + 1)).astype(np.int32)
    return ids[:, :-1].copy(), ids[:, 1:].copy()


def timed_steps(step, steps: int) -> float:
    """Seconds per step, median over ``steps`` after one warm-up."""
    step()
    times = []
    for _ in range(steps):
        t = time.perf_counter()
        step()
        times.append(time.perf_counter() - t)
    return float(np.median(times))


def peak_rss_mb() -> float:
    """This process's peak resident set (MiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def volvox_child(job: str, model: str, threads: int, steps: int, batch: int, ctx: int, profile: bool = False) -> dict:
    """One side: volvox's training step of ``job`` (lora | full); ``profile``: with the joint graph's
    per-op table (Executor profiling, wall ms summed over the timed steps) under "profile"."""
    import volvox
    from volvox.architectures.lora import LoraConfig, add_lora, find_sites
    from volvox.train.finetune import Trainer
    from volvox.train.graph import trainable_graph, training_graph
    from volvox.train.lora import init_adapters
    from volvox.train.optim import AdamW, Parameters

    lm = volvox.load(model, threads=threads)
    if job == "lora":
        tg = training_graph(lm)
        config = LoraConfig(r=8, alpha=16.0, targets=LORA_TARGETS)
        sites = find_sites(tg.graph, config)
        adapters = init_adapters(sites, config)
        graph, weights = add_lora(tg.graph, tg.weights, sites, adapters, config.scale)
        graph, frozen = trainable_graph(graph, weights, list(adapters))
        params = Parameters(adapters)
    else:
        tg = training_graph(lm, trainable="all")
        graph, frozen, params = tg.graph, tg.weights, Parameters(tg.params)
    trainer = Trainer(graph, frozen, params)
    opt = AdamW(params, lr=1e-4)
    tokens, labels = random_batch(lm.config.vocab_size, batch, ctx)

    def step():
        _, grads = trainer.loss_and_grads({"tokens": tokens, "labels": labels})
        opt.step(params.gather(grads))

    if profile:
        from volvox.runtime.executor import Profile

        step()  # the warm-up, unprofiled
        trainer.backward.profile = Profile()
    seconds = timed_steps(step, steps)
    out = {"tok_s": batch * ctx / seconds, "rss_mb": peak_rss_mb(), "params": int(params.flat.size)}
    if profile:
        out["profile"] = trainer.backward.profile.table()
    return out


def torch_child(job: str, model: str, threads: int, steps: int, batch: int, ctx: int) -> dict:
    """The other side: torch (+ peft for LoRA) on the same model and batch shape."""
    import torch
    import transformers as tf

    torch.set_num_threads(threads)
    path = Path(model)
    if path.suffix == ".gguf":
        net = tf.AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32)
    else:
        net = tf.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    if job == "lora":
        import peft

        net = peft.get_peft_model(net, peft.LoraConfig(r=8, lora_alpha=16, target_modules=HF_TARGETS, lora_dropout=0.0))
    net.train()
    params = [p for p in net.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-4)
    tokens, labels = (torch.tensor(a).long() for a in random_batch(net.config.vocab_size, batch, ctx))

    def step():
        logits = net(tokens).logits
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()

    seconds = timed_steps(step, steps)
    return {"tok_s": batch * ctx / seconds, "rss_mb": peak_rss_mb(), "params": int(sum(p.numel() for p in params))}


def tiny_gpt2(directory: Path) -> Path:
    """A random GPT-2 folder (GPT2 sizes, the vocabulary its byte-level tokenizer.json reaches), built
    with transformers."""
    import torch
    import transformers as tf
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=GPT2["vocab_size"], special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    words = [f"volvox trains model number {i} on the CPU, step {i * 7}." for i in range(2000)]
    tok.train_from_iterator(words, trainer)
    torch.manual_seed(0)
    tf.GPT2LMHeadModel(tf.GPT2Config(**{**GPT2, "vocab_size": tok.get_vocab_size()})).save_pretrained(directory)
    tok.save(str(directory / "tokenizer.json"))
    return directory


def run_child(engine: str, job: str, model: str, threads: int, a) -> dict:
    """One side in its own process; its JSON result."""
    cmd = [sys.executable, __file__, "--child", engine, job, model, "--threads", str(threads), "--steps", str(a.steps),
           "--batch", str(a.batch), "--ctx", str(a.ctx)] + (["--profile"] if a.profile else [])
    r = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ,
                                                                 "OMP_NUM_THREADS": str(threads),
                                                                 "OPENBLAS_NUM_THREADS": str(threads)})
    if r.returncode != 0:
        return {"error": r.stderr.strip().splitlines()[-1] if r.stderr.strip() else f"exit {r.returncode}"}
    return json.loads(r.stdout.strip().splitlines()[-1])


def plot(rows: list[dict], path: str) -> None:
    """Grouped bars of tokens/s per (job, threads), one colour per engine (skipped without matplotlib)."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("(matplotlib missing: no plot)")
        return
    labels = sorted({(r["job"], r["threads"]) for r in rows})
    fig, ax = plt.subplots(figsize=(7, 4))
    for k, engine in enumerate(("volvox", "torch")):
        values = [next((r.get("tok_s", 0) for r in rows if (r["job"], r["threads"]) == lab and r["engine"] == engine), 0)
                  for lab in labels]
        ax.bar(np.arange(len(labels)) + 0.4 * k, values, 0.4, label=engine)
    ax.set_xticks(np.arange(len(labels)) + 0.2, [f"{j}\n{t} thr" for j, t in labels])
    ax.set_ylabel("training tokens / s")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print(f"wrote {path}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", nargs="+", choices=JOBS, default=list(JOBS), help="which steps to time")
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--steps", type=int, default=5, help="timed steps after one warm-up")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--ctx", type=int, default=128)
    ap.add_argument("--model", default=None, help="LoRA model GGUF (default: SmolLM2-135M-Instruct Q4_1)")
    ap.add_argument("--profile", action="store_true",
                    help="also print volvox's per-op time (Executor profiling; the step is timed with it on)")
    ap.add_argument("--plot", default="bench_train.png", help="PNG to write (needs matplotlib; '' for none)")
    ap.add_argument("--child", nargs=3, metavar=("ENGINE", "JOB", "MODEL"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        engine, job, model = a.child
        if engine == "volvox":
            result = volvox_child(job, model, a.threads[0], a.steps, a.batch, a.ctx, a.profile)
        else:
            result = torch_child(job, model, a.threads[0], a.steps, a.batch, a.ctx)
        print(json.dumps(result))
        return
    from volvox.hub import resolve_model_file

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        models = {"lora": lambda: a.model or str(resolve_model_file("smollm2-135m-instruct")),
                  "full": lambda: str(tiny_gpt2(Path(tmp) / "gpt2"))}
        for job in a.jobs:
            model = models[job]()
            for threads in a.threads:
                for engine in ("volvox", "torch"):
                    rows.append({"job": job, "threads": threads, "engine": engine,
                                 **run_child(engine, job, model, threads, a)})
                    print({k: v for k, v in rows[-1].items() if k != "profile"}, file=sys.stderr)
    print(f"\nbatch {a.batch} x ctx {a.ctx}, median of {a.steps} steps\n")
    print("| job | threads | volvox tok/s | torch tok/s | ratio | volvox peak RSS MiB | torch peak RSS MiB |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for job in a.jobs:
        for threads in a.threads:
            v, t = (next(r for r in rows if (r["job"], r["threads"], r["engine"]) == (job, threads, e))
                    for e in ("volvox", "torch"))
            ratio = v["tok_s"] / t["tok_s"] if "tok_s" in v and "tok_s" in t else float("nan")
            print(f"| {job} | {threads} | {v.get('tok_s', float('nan')):.1f} | {t.get('tok_s', float('nan')):.1f} | "
                  f"{ratio:.2f}x | {v.get('rss_mb', float('nan')):.0f} | {t.get('rss_mb', float('nan')):.0f} |")
    for r in rows:
        if "profile" in r:
            print(f"\nvolvox {r['job']} step, {r['threads']} thread(s), ms over {a.steps + 1} profiled steps:\n{r['profile']}")
    if a.plot:
        plot(rows, a.plot)


if __name__ == "__main__":
    main()
