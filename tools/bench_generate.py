"""Text generation speed: volvox vs llama.cpp (llama-cpp-python) on the same GGUF, in one run.

    python tools/bench_generate.py [--model smollm2-135m-instruct] [--threads 1 2] [--new 128] [--rounds 3]
    python tools/bench_generate.py --model FILE.gguf               # any GGUF volvox runs, vs llama.cpp
                                                                   # (a random MoE: tools/make_random_moe.py)
    python tools/bench_generate.py --hf DIR [--threads 2]     # vs transformers + torch (fp32)
    python tools/bench_generate.py --hf DIR --gguf FILE        # ... and llama.cpp on FILE
    python tools/bench_generate.py --hf DIR --volvox DIR OUT   # volvox on each (OUT: e.g.
                                                               # volvox convert DIR OUT --quantize f16)

(a GPT-2-small-shaped random checkpoint: ``python tools/make_random_gpt2.py DIR``; the same
weights as an f32 GGUF for llama.cpp: ``python tools/gpt2_to_gguf.py DIR FILE``)

For each thread count: load time, prefill tok/s (32-token prompt and a
512-token prompt) and greedy decode tok/s (--new tokens after a prompt of each
--context length, default 64 and 2048 tokens), for both engines, and volvox /
llama.cpp ratios (>1 = volvox faster). The engines take turns for --rounds
rounds and each figure is the median of its rounds, so that a noisy neighbour
on a shared machine slows both sides alike rather than one run.
Both engines run greedy argmax over full logits in Python, so the per-token
harness cost is the same. With a GGUF model it also measures the DRAM read
bandwidth at each thread count (numpy's max over 512 MiB, a slice per thread)
and prints, for each context, each engine's share of the decode ceiling it
sets: bandwidth / the bytes a token must read (the file's tensors, plus the KV
cache at that context in the engine's cache type: volvox f32, llama.cpp f16),
and its time per token beyond streaming those bytes.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

import volvox
from volvox.hub import resolve_model_file

TEXT = ("The history of the city begins with a small settlement on the river, where traders from the north "
        "met farmers from the valleys to exchange grain, wool, salt and tools. ") * 120


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
    """Bytes of a GGUF file's tensors that a decode step streams (the norms' few KB aside): all of them,
    but of a mixture-of-experts model's expert stacks (``*_exps``) only the share of the experts a token
    runs (expert_used_count of expert_count)."""
    import gguf

    r = gguf.GGUFReader(path)
    arch = bytes(r.fields["general.architecture"].parts[-1]).decode()
    experts = r.fields.get(f"{arch}.expert_count")
    used = r.fields.get(f"{arch}.expert_used_count")
    share = int(used.parts[-1][0]) / int(experts.parts[-1][0]) if experts and used else 1.0
    return int(sum(int(t.n_bytes) * (share if t.name.endswith("_exps.weight") else 1.0) for t in r.tensors))


def print_ceiling(threads: int, context: int, streamed: dict[str, int], decodes: dict[str, float]) -> None:
    """Each engine's decode tok/s at ``context`` against the ceiling the measured DRAM bandwidth sets
    for the bytes it must read per token (``streamed``)."""
    bw = dram_read_gb_s(threads)
    for name, tok_s in decodes.items():
        nbytes = streamed[name.split()[0]]
        ceiling = bw * 1e9 / nbytes
        beyond = (1 / tok_s - nbytes / (bw * 1e9)) * 1e3
        print(f"{threads:>7} {'ceiling':<10} ctx {context}, {name}: {tok_s / ceiling:5.1%} of {ceiling:.0f} tok/s "
              f"({bw:.1f} GB/s over {nbytes / 1e6:.1f} MB a token); {beyond:.2f} ms a token beyond streaming")


def kv_floats_per_position(path: str) -> int:
    """Values a LLaMA-family GGUF model's KV cache holds per position (K and V, every layer; any of its
    architectures, mixtures of experts too)."""
    import gguf

    r = gguf.GGUFReader(path)
    arch = bytes(r.fields["general.architecture"].parts[-1]).decode()
    get = lambda key: int(r.fields[f"{arch}.{key}"].parts[-1][0])  # noqa: E731
    heads = get("attention.head_count")
    kv_heads = get("attention.head_count_kv") if f"{arch}.attention.head_count_kv" in r.fields else heads
    return 2 * get("block_count") * kv_heads * (get("embedding_length") // heads)


def median(rounds: list[dict]) -> dict:
    """Each figure's median over the rounds."""
    return {k: float(np.median([r[k] for r in rounds])) for k in rounds[0]}


def bench_volvox(path: str, threads: int, short: list[int], long: list[int], n_new: int,
                 contexts: list[list[int]]) -> dict:
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
    s.forward(short)
    prefill_short = len(short) / (time.perf_counter() - t0)
    out = dict(load_s=load, prefill32=prefill_short, prefill512=prefill_long)
    for prompt in contexts:
        s = lm.new_session()
        logits = s.forward(prompt)[-1]
        t0 = time.perf_counter()
        for _ in range(n_new):
            logits = s.forward([int(np.argmax(logits))])[-1]
        out[f"decode{len(prompt)}"] = n_new / (time.perf_counter() - t0)
    lm.close()
    return out


def bench_llama_cpp(path: str, threads: int, short: list[int], long: list[int], n_new: int,
                    contexts: list[list[int]]) -> dict:
    import llama_cpp
    import llama_peer

    llama_peer.use_plain_cpu_buffers()

    n_ctx = max([1024] + [len(p) + n_new + 8 for p in contexts])
    t0 = time.perf_counter()
    llm = llama_cpp.Llama(model_path=path, n_ctx=n_ctx, n_batch=512, n_threads=threads, n_threads_batch=threads,
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
    out = dict(load_s=load, prefill32=prefill_short, prefill512=prefill_long)
    for prompt in contexts:
        llm.reset()
        llm.eval(prompt)
        t0 = time.perf_counter()
        for _ in range(n_new):
            logits = np.ctypeslib.as_array(llm._ctx.get_logits(), shape=(llm.n_vocab(),))  # the last token's
            llm.eval([int(np.argmax(logits))])
        out[f"decode{len(prompt)}"] = n_new / (time.perf_counter() - t0)
    llm.close()
    return out


def bench_transformers(path: str, threads: int, short: list[int], long: list[int], n_new: int,
                       contexts: list[list[int]]) -> dict:
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
        model(torch.tensor([short]), use_cache=True)
        prefill_short = len(short) / (time.perf_counter() - t0)
        figures = dict(load_s=load, prefill32=prefill_short, prefill512=prefill_long)
        for prompt in contexts:
            out = model(torch.tensor([prompt]), use_cache=True)
            t0 = time.perf_counter()
            for _ in range(n_new):
                tok = int(torch.argmax(out.logits[0, -1]))
                out = model(torch.tensor([[tok]]), past_key_values=out.past_key_values, use_cache=True)
            figures[f"decode{len(prompt)}"] = n_new / (time.perf_counter() - t0)
    return figures


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m-instruct", help="a volvox model name or a .gguf file")
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--new", type=int, default=128, help="tokens to decode (default 128)")
    ap.add_argument("--context", type=int, nargs="+", default=[64, 2048],
                    help="prompt lengths each decode runs after (default 64 2048)")
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
        path = a.model if a.model.endswith(".gguf") or Path(a.model).is_file() else str(resolve_model_file(a.model))
        peers = [("llama.cpp", path, bench_llama_cpp)]
    with volvox.load(path) as lm:
        short, long = prompt_ids(lm.tokenizer, 32), prompt_ids(lm.tokenizer, 512)
        contexts = [prompt_ids(lm.tokenizer, n) for n in a.context]
    try:
        from volvox import cpu
    except ImportError:  # a build from before the kernels' API was named volvox.cpu (a before/after run)
        from volvox import kernels as cpu

    print(f"model: {path}\nvolvox: {volvox.__file__}, isa {cpu.isa()}")
    decode_cols = "".join(f"{f'decode@{n}':>12}" for n in a.context)
    print(f"{'threads':>7} {'engine':<10} {'load ms':>8} {'prefill32':>10} {'prefill512':>11}{decode_cols}   (tok/s)")
    mine = a.volvox or [path]
    for i, p in enumerate(mine):
        print(f"volvox {i}: {p}")
    gguf_run = path.endswith(".gguf") and mine == [path]
    weights = weight_bytes(path) if gguf_run else 0  # bytes every token reads
    kv_per_position = kv_floats_per_position(path) if gguf_run else 0
    for t in a.threads:
        mine_runs = [[] for _ in mine]   # [volvox model][round] -> figures
        peer_runs = {name: [] for name, _, _ in peers}
        for _ in range(a.rounds):
            for i, p in enumerate(mine):
                mine_runs[i].append(bench_volvox(p, t, short, long, a.new, contexts))
            for peer_name, peer_path, peer in peers:
                try:
                    peer_runs[peer_name].append(peer(peer_path, t, short, long, a.new, contexts))
                except ImportError:
                    peer_runs.pop(peer_name, None)
        runs = [median(r) for r in mine_runs]
        peers_median = {name: median(rounds) for name, rounds in peer_runs.items()}

        def row(engine: str, r: dict) -> str:
            decodes = "".join(f"{r[f'decode{n}']:>12.1f}" for n in a.context)
            return f"{t:>7} {engine:<10} {r['load_s'] * 1e3:>8.1f} {r['prefill32']:>10.1f} {r['prefill512']:>11.1f}{decodes}"

        for i, v in enumerate(runs):
            print(row(f"volvox {i}", v))
        for peer_name, r in peers_median.items():
            print(row(peer_name, r))
            for i, v in enumerate(runs):
                ratios = "".join(f"{v[f'decode{n}'] / r[f'decode{n}']:>11.2f}x" for n in a.context)
                print(f"{t:>7} {'ratio':<10} {r['load_s'] / v['load_s']:>7.2f}x {v['prefill32'] / r['prefill32']:>9.2f}x "
                      f"{v['prefill512'] / r['prefill512']:>10.2f}x{ratios}   (volvox {i} / {peer_name}; load: "
                      f"{peer_name}'s time / volvox's)")
        if weights:
            for n in a.context:
                streamed = {"volvox": weights + 4 * kv_per_position * n,      # f32 cache
                            "llama.cpp": weights + 2 * kv_per_position * n}   # f16 cache
                decodes = {f"volvox {i}": v[f"decode{n}"] for i, v in enumerate(runs)}
                decodes.update({name: r[f"decode{n}"] for name, r in peers_median.items()})
                print_ceiling(t, n, streamed, decodes)


if __name__ == "__main__":
    main()
