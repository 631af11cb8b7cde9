"""Text generation speed: volvox vs llama.cpp (llama-cpp-python) on the same GGUF, in one run.

    python tools/bench_generate.py [--model smollm2-135m-instruct] [--threads 1 2] [--new 128] [--rounds 3]
    python tools/bench_generate.py --hf DIR [--threads 2]     # vs transformers + torch (fp32)
    python tools/bench_generate.py --hf DIR --gguf FILE        # ... and llama.cpp on FILE
    python tools/bench_generate.py --hf DIR --volvox DIR OUT   # volvox on each (OUT: e.g.
                                                               # volvox convert DIR OUT --quantize f16)

(a GPT-2-small-shaped random checkpoint: ``python tools/make_random_gpt2.py DIR``; the same
weights as an f32 GGUF for llama.cpp: ``python tools/gpt2_to_gguf.py DIR FILE``)

For each thread count: load time, prefill tok/s (32-token prompt and a
512-token prompt) and greedy decode tok/s (128 new tokens after the 32-token
prompt), for both engines, and volvox / llama.cpp ratios (>1 = volvox faster).
The engines take turns for --rounds rounds and each figure is the median of its
rounds, so that a noisy neighbour on a shared machine slows both sides alike
rather than one run.
Both engines run greedy argmax over full logits in Python, so the per-token
harness cost is the same. With a GGUF model it also measures the DRAM read
bandwidth at each thread count (numpy's max over 512 MiB, a slice per thread)
and prints each engine's share of the decode ceiling it sets (bandwidth / the
file's tensor bytes, which every token streams) and its time per token beyond
streaming the weights.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import volvox
from volvox.hub import resolve_model_file

TEXT = ("The history of the city begins with a small settlement on the river, where traders from the north "
        "met farmers from the valleys to exchange grain, wool, salt and tools. ") * 40


def prompt_ids(tokenizer, n: int) -> list[int]:
    """The first ``n`` tokens of a fixed English text."""
    ids = tokenizer.encode(TEXT)
    assert len(ids) >= n
    return ids[:n]


def dram_read_gb_s(threads: int, nbytes: int = 2**29) -> float:
    """GB/s that ``threads`` threads read from memory: numpy's max (which releases the GIL) over one
    slice each of an array bigger than any cache, best of 5."""
    from concurrent.futures import ThreadPoolExecutor

    a = np.ones(nbytes // 4, np.float32)  # (nbytes / 4,)
    parts = np.array_split(a, threads)
    with ThreadPoolExecutor(threads) as ex:
        best = float("inf")
        for _ in range(5):
            t0 = time.perf_counter()
            list(ex.map(np.max, parts))
            best = min(best, time.perf_counter() - t0)
    return a.nbytes / best / 1e9


def weight_bytes(path: str) -> int:
    """Bytes of a GGUF file's tensors (what a decode step streams, the norms' few KB aside)."""
    import gguf

    return sum(int(t.n_bytes) for t in gguf.GGUFReader(path).tensors)


def print_ceiling(threads: int, streamed: int, decodes: dict[str, float]) -> None:
    """Each engine's decode tok/s against the ceiling the measured DRAM bandwidth sets."""
    bw = dram_read_gb_s(threads)
    ceiling = bw * 1e9 / streamed
    for name, tok_s in decodes.items():
        beyond = (1 / tok_s - streamed / (bw * 1e9)) * 1e3
        print(f"{threads:>7} {'ceiling':<10} {name}: {tok_s / ceiling:5.1%} of {ceiling:.0f} tok/s "
              f"({bw:.1f} GB/s over {streamed / 1e6:.1f} MB a token); {beyond:.2f} ms a token beyond streaming")


def median(rounds: list[dict]) -> dict:
    """Each figure's median over the rounds."""
    return {k: float(np.median([r[k] for r in rounds])) for k in rounds[0]}


def bench_volvox(path: str, threads: int, short: list[int], long: list[int], n_new: int) -> dict:
    t0 = time.perf_counter()
    lm = volvox.load(path, threads=threads)
    load = time.perf_counter() - t0
    warm = lm.new_session()  # warm-up: a prefill and a decode step (each path's plan is built on first use)
    warm.forward(short[:8])
    warm.forward(short[8:9])
    s = lm.new_session()
    t0 = time.perf_counter()
    s.forward(long)
    prefill_long = len(long) / (time.perf_counter() - t0)
    s = lm.new_session()
    t0 = time.perf_counter()
    logits = s.forward(short)[-1]
    prefill_short = len(short) / (time.perf_counter() - t0)
    t0 = time.perf_counter()
    for _ in range(n_new):
        logits = s.forward([int(np.argmax(logits))])[-1]
    decode = n_new / (time.perf_counter() - t0)
    lm.close()
    return dict(load_s=load, prefill32=prefill_short, prefill512=prefill_long, decode=decode)


def bench_llama_cpp(path: str, threads: int, short: list[int], long: list[int], n_new: int) -> dict:
    import llama_cpp

    t0 = time.perf_counter()
    llm = llama_cpp.Llama(model_path=path, n_ctx=1024, n_batch=512, n_threads=threads, n_threads_batch=threads,
                          verbose=False)
    load = time.perf_counter() - t0
    llm.eval(short[:8])  # warm-up: a prefill and a decode step
    llm.eval(short[8:9])
    llm.reset()
    t0 = time.perf_counter()
    llm.eval(long)
    prefill_long = len(long) / (time.perf_counter() - t0)
    llm.reset()
    t0 = time.perf_counter()
    llm.eval(short)
    prefill_short = len(short) / (time.perf_counter() - t0)
    t0 = time.perf_counter()
    for _ in range(n_new):
        tok = int(np.argmax(llm.scores[llm.n_tokens - 1]))
        llm.eval([tok])
    decode = n_new / (time.perf_counter() - t0)
    llm.close()
    return dict(load_s=load, prefill32=prefill_short, prefill512=prefill_long, decode=decode)


def bench_transformers(path: str, threads: int, short: list[int], long: list[int], n_new: int) -> dict:
    import torch
    from transformers import AutoModelForCausalLM

    torch.set_num_threads(threads)
    t0 = time.perf_counter()
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    load = time.perf_counter() - t0
    with torch.inference_mode():
        model(torch.tensor([short[:8]]))  # warm-up
        t0 = time.perf_counter()
        model(torch.tensor([long]))
        prefill_long = len(long) / (time.perf_counter() - t0)
        t0 = time.perf_counter()
        out = model(torch.tensor([short]), use_cache=True)
        prefill_short = len(short) / (time.perf_counter() - t0)
        t0 = time.perf_counter()
        for _ in range(n_new):
            tok = int(torch.argmax(out.logits[0, -1]))
            out = model(torch.tensor([[tok]]), past_key_values=out.past_key_values, use_cache=True)
        decode = n_new / (time.perf_counter() - t0)
    return dict(load_s=load, prefill32=prefill_short, prefill512=prefill_long, decode=decode)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--new", type=int, default=128, help="tokens to decode (default 128)")
    ap.add_argument("--rounds", type=int, default=3, help="turns each engine takes; figures are medians (default 3)")
    ap.add_argument("--hf", default=None, metavar="DIR", help="a Hugging Face checkpoint: compare with transformers")
    ap.add_argument("--gguf", default=None, metavar="FILE", help="with --hf: the same weights as GGUF, for llama.cpp")
    ap.add_argument("--volvox", nargs="+", default=None, metavar="PATH",
                    help="the models volvox runs, each against the peers (default: the --hf / --model one)")
    a = ap.parse_args()
    if a.hf:
        path, peers = a.hf, [("torch", a.hf, bench_transformers)]
        if a.gguf:
            peers.append(("llama.cpp", a.gguf, bench_llama_cpp))
    else:
        path = a.model if a.model.endswith(".gguf") else str(resolve_model_file(a.model))
        peers = [("llama.cpp", path, bench_llama_cpp)]
    with volvox.load(path) as lm:
        short, long = prompt_ids(lm.tokenizer, 32), prompt_ids(lm.tokenizer, 512)
    try:
        from volvox import cpu
    except ImportError:  # a build from before the kernels' API was named volvox.cpu (a before/after run)
        from volvox import kernels as cpu

    print(f"model: {path}\nvolvox: {volvox.__file__}, isa {cpu.isa()}")
    print(f"{'threads':>7} {'engine':<10} {'load ms':>8} {'prefill32':>10} {'prefill512':>11} {'decode':>8}   (tok/s)")
    mine = a.volvox or [path]
    for i, p in enumerate(mine):
        print(f"volvox {i}: {p}")
    streamed = weight_bytes(path) if path.endswith(".gguf") and mine == [path] else 0  # bytes a token reads
    for t in a.threads:
        mine_runs = [[] for _ in mine]   # [volvox model][round] -> figures
        peer_runs = {name: [] for name, _, _ in peers}
        for _ in range(a.rounds):
            for i, p in enumerate(mine):
                mine_runs[i].append(bench_volvox(p, t, short, long, a.new))
            for peer_name, peer_path, peer in peers:
                try:
                    peer_runs[peer_name].append(peer(peer_path, t, short, long, a.new))
                except ImportError:
                    peer_runs.pop(peer_name, None)
        runs = [median(r) for r in mine_runs]
        for i, v in enumerate(runs):
            print(f"{t:>7} {f'volvox {i}':<10} {v['load_s'] * 1e3:>8.1f} {v['prefill32']:>10.1f} {v['prefill512']:>11.1f} "
                  f"{v['decode']:>8.1f}")
        decodes = {f"volvox {i}": v["decode"] for i, v in enumerate(runs)}
        for peer_name, rounds in peer_runs.items():
            r = median(rounds)
            decodes[peer_name] = r["decode"]
            print(f"{t:>7} {peer_name:<10} {r['load_s'] * 1e3:>8.1f} {r['prefill32']:>10.1f} {r['prefill512']:>11.1f} {r['decode']:>8.1f}")
            for i, v in enumerate(runs):
                print(f"{t:>7} {'ratio':<10} {'':>8} {v['prefill32'] / r['prefill32']:>9.2f}x "
                      f"{v['prefill512'] / r['prefill512']:>10.2f}x {v['decode'] / r['decode']:>7.2f}x   "
                      f"(volvox {i} / {peer_name})")
        if streamed:
            print_ceiling(t, streamed, decodes)

if __name__ == "__main__":
    main()
