"""The ``volvox`` command line: generate, chat, transcribe, seq2seq, run, info, finetune, serve, batch."""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time

import numpy as np

from volvox.convert import CONVERT_TYPES

DEFAULT_MODEL = "smollm2-135m-instruct"


def _add_load_args(p: argparse.ArgumentParser, model: str = "default") -> None:
    """Model argument ("default": optional with the default model, "required", "optional") and load options."""
    what = "model name, .gguf file or blueprint directory"
    if model == "required":
        p.add_argument("model", help=what)
    else:
        default = DEFAULT_MODEL if model == "default" else None
        p.add_argument("model", nargs="?", default=default, help=f"{what} (default: {default})")
    p.add_argument("--threads", type=int, default=None, help="CPU threads (default: physical cores)")
    p.add_argument("--backend", default="cpu", help="cpu (default) | auto | vulkan | opengl | gles | webgpu")
    p.add_argument("--debug", action="store_true", help="print load time, tokens/s and time per op type to stderr")
    p.add_argument("--trace", default=None, metavar="OUT.json", help="write a Chrome trace (Perfetto) of every node run")
    p.add_argument("--quiet", action="store_true", help="no download progress bars (they show only on a terminal anyway)")


def _add_sampling_args(p: argparse.ArgumentParser, stop: bool = True) -> None:
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default)")
    p.add_argument("--top-k", type=int, default=0)
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--repetition-penalty", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=None)
    if stop:
        p.add_argument("--stop", action="append", default=None, help="stop string (repeatable)")


def _sampling_kwargs(a) -> dict:
    return dict(max_new_tokens=a.max_new_tokens, temperature=a.temperature, top_k=a.top_k, top_p=a.top_p,
                repetition_penalty=a.repetition_penalty, seed=a.seed, stop=a.stop)


def _load(a):
    import volvox
    from volvox.hub import set_progress

    if a.quiet:
        set_progress(False)
    return volvox.load(a.model, threads=a.threads, backend=a.backend, profile=a.debug or bool(a.trace),
                       adapter=getattr(a, "adapter", None))


def _finish(a, model, stats=None) -> None:
    """After a command: the --debug report and the --trace file, when asked for."""
    if a.debug:
        _debug_report(model, stats)
    if a.trace:
        model.profile.write_trace(a.trace)
        print(f"trace: {a.trace} ({len(model.profile.events)} node runs)", file=sys.stderr)


def _debug_report(model, stats=None) -> None:
    from volvox import cpu

    err = sys.stderr
    print(f"\n--- volvox debug: {model.source}", file=err)
    print(f"load: {model.load_seconds * 1e3:.1f} ms   isa: {cpu.isa()}   threads: {cpu.get_num_threads()}   "
          f"nodes: {len(model.source_graph.nodes)} -> {len(model.graph.nodes)} after fusion", file=err)
    if hasattr(model.executor, "describe"):  # a GPU backend: where the nodes run
        print(model.executor.describe(), file=err)
    if stats is not None:
        print(f"prefill: {stats.prompt_tokens} tokens in {stats.prefill_seconds * 1e3:.1f} ms = {stats.prefill_tok_s:.1f} tok/s", file=err)
        print(f"decode: {stats.new_tokens} tokens in {stats.decode_seconds * 1e3:.1f} ms = {stats.decode_tok_s:.1f} tok/s "
              f"(finish: {stats.finish_reason})", file=err)
        if stats.decode_native_seconds and stats.new_tokens > 1:
            per_token = stats.decode_seconds / (stats.new_tokens - 1)
            outside = 1 - stats.decode_native_seconds / stats.decode_seconds
            print(f"decode step: {per_token * 1e3:.2f} ms per token in one native call (runtime/plan.py); "
                  f"{100 * outside:.1f}% of decode time outside it (sampling, detokenizing, Python)", file=err)
    if model.profile is not None and model.profile.runs:
        print(f"time per op type over {model.profile.runs} forward passes:", file=err)
        print(model.profile.table(), file=err)
        print("slowest nodes:", file=err)
        print(model.profile.node_table(model.graph, top=8), file=err)


def cmd_generate(a) -> int:
    lm = _load(a)
    for piece in lm.generate(a.prompt, stream=True, **_sampling_kwargs(a)):
        sys.stdout.write(piece)
        sys.stdout.flush()
    sys.stdout.write("\n")
    _finish(a, lm, lm.last_stats)
    return 0


def cmd_chat(a) -> int:
    lm = _load(a)
    messages = [{"role": "system", "content": a.system}] if a.system else []
    turns = [a.message] if a.message is not None else None
    interactive = turns is None
    while True:
        if interactive:
            try:
                text = input("> ")
            except EOFError:
                return 0
            if text.strip() in ("/exit", "/quit"):
                return 0
        else:
            if not turns:
                return 0
            text = turns.pop(0)
        messages.append({"role": "user", "content": text})
        reply = []
        for piece in lm.chat(messages, stream=True, **_sampling_kwargs(a)):
            reply.append(piece)
            sys.stdout.write(piece)
            sys.stdout.flush()
        sys.stdout.write("\n")
        messages.append({"role": "assistant", "content": "".join(reply)})
        _finish(a, lm, lm.last_stats)


def cmd_transcribe(a) -> int:
    model = _load(a)
    if not hasattr(model, "transcribe"):
        from volvox.errors import UnsupportedError

        raise UnsupportedError(f"{a.model} is not a speech-to-text model (its task is {model.metadata.get('task')!r})")
    for audio in a.audio:
        result = model.transcribe(audio, language=a.language, temperature=a.temperature, seed=a.seed,
                                  timestamps=a.timestamps)
        if a.timestamps:
            for segment in result:
                print(f"[{segment.start:.2f} --> {segment.end:.2f}] {segment.text}")
        else:
            print(result)
    _finish(a, model, model.last_stats)
    return 0


def cmd_seq2seq(a) -> int:
    model = _load(a)
    if not hasattr(model, "seq2seq") or model.spec.get("source") != "text":
        from volvox.errors import UnsupportedError

        raise UnsupportedError(f"{a.model} is not a text-to-text encoder-decoder model "
                               f"(its task is {model.metadata.get('task')!r}; speech models: volvox transcribe)")
    for piece in model.seq2seq(a.text, a.max_new_tokens, temperature=a.temperature, top_k=a.top_k, top_p=a.top_p,
                               repetition_penalty=a.repetition_penalty, seed=a.seed, stream=True):
        sys.stdout.write(piece)
        sys.stdout.flush()
    sys.stdout.write("\n")
    _finish(a, model, model.last_stats)
    return 0


def cmd_run(a) -> int:
    model = _load(a)
    feeds = {}
    for item in a.input:
        name, _, path = item.partition("=")
        if not path:
            raise SystemExit(f"volvox run: --input must be NAME=FILE.npy, got {item!r}")
        feeds[name] = np.load(path, allow_pickle=False)
    t0 = time.perf_counter()
    outputs = model.run(feeds)
    dt = time.perf_counter() - t0
    if a.output:
        np.savez(a.output, **outputs)
    for name, arr in outputs.items():
        print(f"{name}: {arr.dtype}{list(arr.shape)}  min {arr.min():.6g}  max {arr.max():.6g}  mean {arr.mean():.6g}")
    if a.debug:
        print(f"run: {dt * 1e3:.2f} ms", file=sys.stderr)
    _finish(a, model)
    return 0


def cmd_vision(a) -> int:
    """classify / detect / ctc one image; prints one JSON object."""
    model = _load(a)
    method = getattr(model, a.command, None)
    if method is None:
        from volvox.errors import UnsupportedError
        raise UnsupportedError(f"{a.model}: task {model.metadata.get('task')!r} has no {a.command}()")
    t0 = time.perf_counter()
    result = method(a.image, top_k=a.top_k) if a.command == "classify" else method(a.image)
    dt = time.perf_counter() - t0
    if a.command == "ctc":
        out = {"text": result.text, "score": result.score, "char_scores": list(result.char_scores)}
    else:
        out = [vars(r) for r in result]
    print(json.dumps(out, indent=2, ensure_ascii=False))
    if a.debug:
        print(f"{a.command}: {dt * 1e3:.2f} ms", file=sys.stderr)
        _debug_report(model)
    return 0


def cmd_convert(a) -> int:
    """GGUF file / HF folder / blueprint -> blueprint directory."""
    from volvox.convert import convert

    out = convert(a.src, a.out_dir, quantize=a.quantize, overwrite=a.force, progress=False if a.quiet else None,
                  merge_adapter=a.merge_adapter)
    print(f"wrote {out}")
    return 0


def cmd_finetune(a) -> int:
    """Train a LoRA adapter (or, with --full, every float weight) on a text / JSONL file."""
    from volvox.train.data import read_records
    from volvox.train.finetune import finetune
    from volvox.architectures.lora import DEFAULT_TARGETS, LoraConfig

    from volvox.errors import DataError

    records = read_records(a.data)  # bad data fails here, before the model loads
    if not records:
        raise DataError(f"{a.data}: empty corpus (no text, no records)")
    targets = tuple(t.strip() for t in a.lora_targets.split(",") if t.strip()) if a.lora_targets else DEFAULT_TARGETS
    lora = None if a.full else LoraConfig(r=a.lora_r, alpha=a.lora_alpha, targets=targets)
    lm = _load(a)
    result = finetune(lm, records, lora=lora, trainable="all" if a.full else None, steps=a.steps, epochs=a.epochs,
                      lr=a.lr, batch=a.batch, grad_accum=a.grad_accum, context=a.ctx, schedule=a.schedule,
                      warmup=a.warmup, clip=a.clip or None, weight_decay=a.weight_decay, val_split=a.val_split,
                      val_every=a.val_every, save_every=a.save_every, out_dir=a.out, resume=a.resume, seed=a.seed,
                      recompute=a.recompute, progress=False if a.quiet else None)
    line = f"trained {result.steps} steps, {result.tokens} tokens in {result.seconds:.1f} s"
    if result.train_losses:
        line += f"; last training loss {result.train_losses[-1]:.4f}"
    if result.val_losses:
        line += f"; validation loss {result.val_losses[-1][1]:.4f} (perplexity {result.val_perplexity:.2f})"
    print(line)
    print(f"wrote {result.output}")
    return 0


def _add_finetune_parser(sub) -> None:
    """``volvox finetune``: options grouped as llama.cpp's tools group theirs, every default shown."""
    p = sub.add_parser("finetune", help="train a LoRA adapter (or a small float model) on text / chat data",
                       formatter_class=_DefaultsShown,
                       description="Fine-tune MODEL on --data and write a PEFT-format LoRA adapter to --out "
                                   "(use it with `volvox generate MODEL --adapter OUT` or bake it in with "
                                   "`volvox convert MODEL DIR --merge-adapter OUT`).")
    _add_load_args(p, model="required")
    data = p.add_argument_group("data")
    data.add_argument("--data", required=True, metavar="FILE",
                      help=".txt (one document) or .jsonl ({\"text\": ...} or {\"messages\": [...]} per line)")
    data.add_argument("--ctx", type=int, default=256, help="context length of a training sequence (tokens)")
    data.add_argument("--val-split", type=float, default=0.1, help="fraction of examples held out for validation")
    lora = p.add_argument_group("LoRA")
    lora.add_argument("--lora-r", type=int, default=8, help="adapter rank")
    lora.add_argument("--lora-alpha", type=float, default=16.0, help="adapter alpha (scale = alpha / r)")
    lora.add_argument("--lora-targets", default="q,k,v,o,gate,up,down", help="projections to adapt (comma-separated)")
    lora.add_argument("--full", action="store_true", help="train every float weight instead (small float models)")
    opt = p.add_argument_group("optimisation")
    opt.add_argument("--lr", type=float, default=2e-4, help="peak learning rate (AdamW)")
    opt.add_argument("--steps", type=int, default=None, help="optimiser steps (default: --epochs over the data)")
    opt.add_argument("--epochs", type=float, default=1.0, help="passes over the training examples")
    opt.add_argument("--batch", type=int, default=4, help="sequences per micro-batch")
    opt.add_argument("--grad-accum", type=int, default=1, help="micro-batches per optimiser step")
    opt.add_argument("--schedule", choices=["cosine", "linear", "constant"], default="cosine", help="learning-rate decay")
    opt.add_argument("--warmup", type=int, default=0, help="linear warmup steps")
    opt.add_argument("--clip", type=float, default=1.0, help="gradient global-norm cap (0: none)")
    opt.add_argument("--weight-decay", type=float, default=0.0, help="AdamW decoupled weight decay")
    opt.add_argument("--seed", type=int, default=0, help="seed of the adapter init, split and batch order")
    opt.add_argument("--recompute", action="store_true",
                     help="keep only each block's input for the backward pass (less memory, more time)")
    run = p.add_argument_group("output and checkpoints")
    run.add_argument("--out", required=True, metavar="DIR", help="adapter folder (checkpoints are kept there too)")
    run.add_argument("--val-every", type=int, default=0, help="validation loss every N steps (0: at the end only)")
    run.add_argument("--save-every", type=int, default=50, help="checkpoint every N steps")
    run.add_argument("--resume", action=argparse.BooleanOptionalAction, default=True,
                     help="continue from the checkpoint in --out when there is one")
    p.set_defaults(func=cmd_finetune)


def cmd_embed(a) -> int:
    """Sentence embeddings of each --text, one JSON list per line."""
    model = _load(a)
    if not hasattr(model, "embed"):
        from volvox.errors import UnsupportedError
        raise UnsupportedError(f"{a.model}: task {model.metadata.get('task')!r} has no embed()")
    for row in model.embed(a.text, normalize=a.normalize, prompt_name=a.prompt_name):
        print(json.dumps([round(float(v), 7) for v in row]))
    return 0


def cmd_serve(a) -> int:
    """Serve a model over the OpenAI API until SIGTERM / Ctrl-C."""
    from volvox.hub import set_progress
    from volvox.serve.server import run

    if a.quiet:
        set_progress(False)
    run(a.model, host=a.host, port=a.port, threads=a.threads, max_batch=a.max_batch, max_queue=a.max_queue,
        prefill_chunk=a.prefill_chunk, api_key=a.api_key, alias=a.alias, drain_seconds=a.drain_timeout,
        log_level=a.log_level)
    return 0


def cmd_batch(a) -> int:
    """Run a JSONL file of inputs through a model, on Ray (local cluster by default) or in this process."""
    from volvox.batch import BatchOptions, run_local
    from volvox.hub import set_progress

    if a.quiet:
        set_progress(False)
    options = BatchOptions(task=a.task, max_new_tokens=a.max_new_tokens, temperature=a.temperature, top_p=a.top_p,
                           seed=a.seed, stop=a.stop, normalize=a.normalize, top_k_labels=a.top_k_labels)
    if a.no_ray:
        n = run_local(a.model, a.input, a.output, options, threads=a.threads, progress=not a.quiet)
    else:
        from volvox.ray import run_on_ray

        n = run_on_ray(a.model, a.input, a.output, options, address=a.ray_address, actors=a.actors,
                       cpus_per_actor=a.cpus_per_actor, batch_size=a.batch_size)
    print(f"wrote {n} rows to {a.output}", file=sys.stderr)
    return 0


class _DefaultsShown(argparse.HelpFormatter):
    """Help that ends each option with its default (unless the help already says it, or it has none)."""

    def _get_help_string(self, action):
        text = action.help or ""
        if action.default in (None, False, argparse.SUPPRESS) or "(default" in text:
            return text
        return f"{text} (default: %(default)s)"


def _add_serve_parser(sub) -> None:
    """``volvox serve``: options grouped as llama.cpp's server groups them, defaults shown."""
    p = sub.add_parser("serve", help="serve a model over the OpenAI API (continuous batching, chat page at /)",
                       formatter_class=_DefaultsShown,
                       description="An OpenAI-compatible HTTP server: /v1/chat/completions, /v1/completions, "
                                   "/v1/embeddings, /v1/models, /health, /metrics, and a chat page at /.")
    g = p.add_argument_group("model")
    g.add_argument("model", nargs="?", default=DEFAULT_MODEL,
                   help="model name, .gguf file, model folder, Hub repo (org/repo) or hf://org/repo[/file][@rev]")
    g.add_argument("--alias", default=None, metavar="NAME",
                   help="the model id clients send and /v1/models lists (default: MODEL)")
    g.add_argument("--threads", type=int, default=None, metavar="N",
                   help="CPU threads for the kernels (default: physical cores)")
    g.add_argument("--quiet", action="store_true", help="no download progress bars (shown only on a terminal anyway)")
    g = p.add_argument_group("server")
    g.add_argument("--host", default="127.0.0.1", help="address to listen on (0.0.0.0: every interface)")
    g.add_argument("--port", type=int, default=8080, help="port to listen on")
    g.add_argument("--api-key", default=None, metavar="KEY",
                   help="require 'Authorization: Bearer KEY' on every route but /health and / (default: none)")
    g.add_argument("--drain-timeout", type=float, default=60.0, metavar="SECONDS",
                   help="on SIGTERM, how long requests in flight may finish before exiting")
    g.add_argument("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"],
                   help="uvicorn log level (debug also logs each request)")
    g = p.add_argument_group("batching")
    g.add_argument("--max-batch", type=int, default=16, metavar="N",
                   help="sequence slots: requests decoded together per step")
    g.add_argument("--max-queue", type=int, default=64, metavar="N",
                   help="requests waiting for a slot before new ones get a 503")
    g.add_argument("--prefill-chunk", type=int, default=128, metavar="N",
                   help="prompt tokens prefilled per scheduler step (between decode steps)")
    p.set_defaults(func=cmd_serve)


def _add_batch_parser(sub) -> None:
    p = sub.add_parser("batch", help="run a JSONL file through a model on Ray (or --no-ray: this process)",
                       formatter_class=_DefaultsShown,
                       description="Each input line is a JSON object: {\"prompt\": ...} or {\"messages\": [...]} "
                                   "(generate), {\"text\": ...} (embed), {\"image\": path} (classify). Each "
                                   "output line is the input object plus the result, in input order.")
    p.add_argument("model", help="model name, file, folder or Hub repo")
    p.add_argument("--input", required=True, help="input JSONL file")
    p.add_argument("--output", required=True, help="output JSONL file (written whole at the end)")
    p.add_argument("--task", default=None, choices=["generate", "embed", "classify", "transcribe"],
                   help="what to run (default: the model's task)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    g = p.add_argument_group("ray")
    g.add_argument("--ray-address", default=None, help="an existing Ray cluster (default: start a local one)")
    g.add_argument("--no-ray", action="store_true", help="run in this process, without Ray")
    g.add_argument("--actors", type=int, default=None, help="model replicas (default: cluster CPUs / --cpus-per-actor)")
    g.add_argument("--cpus-per-actor", type=int, default=1, help="CPUs (kernel threads) per replica")
    g.add_argument("--batch-size", type=int, default=16, help="rows per map_batches call (decoded together)")
    g.add_argument("--threads", type=int, default=None, help="--no-ray: CPU threads (default: physical cores)")
    g = p.add_argument_group("generation")
    g.add_argument("--max-new-tokens", type=int, default=128)
    g.add_argument("--temperature", type=float, default=0.0, help="0 = greedy")
    g.add_argument("--top-p", type=float, default=1.0)
    g.add_argument("--seed", type=int, default=None)
    g.add_argument("--stop", action="append", default=None, help="stop string (repeatable)")
    g = p.add_argument_group("embed / classify")
    g.add_argument("--normalize", action="store_true", default=None,
                   help="embed: unit-length embeddings (default: as the model says)")
    g.add_argument("--top-k-labels", type=int, default=5, help="classify: labels per image")
    p.set_defaults(func=cmd_batch)


def cmd_info(a) -> int:
    from volvox import cpu
    from volvox.errors import VolvoxError
    from volvox.hub import recipe_names

    info = {"volvox": __import__("volvox").__version__, "python": platform.python_version(),
            "machine": platform.machine(), "isa": cpu.isa(), "isas_available": cpu.available_isas(),
            "isas_built": list(cpu.engine.compiled_isas()), "openmp": bool(cpu.engine.openmp_enabled()),
            "threads": cpu.get_num_threads(), "gpu_backends": _gpu_backends(), "known_models": recipe_names()}
    if a.model and str(a.model).endswith(".onnx"):
        from volvox.formats.onnx import op_report

        info["model_ops"] = op_report(a.model)   # before loading, which stops at the first op it lacks
    if a.model:
        try:
            model = _load(a)
        except VolvoxError as e:
            if "model_ops" not in info:
                raise
            info["load_error"] = str(e)
            print(json.dumps(info, indent=2, default=str))
            return 1
        g = model.graph
        if g is None:   # an ONNX model planned per value of some inputs (formats/onnx/value_plans.py)
            info["model"] = {"source": model.source, "metadata": model.metadata,
                             "planned_per_value_of": list(model.value_inputs), "load_ms": round(model.load_seconds * 1e3, 1)}
            print(json.dumps(info, indent=2, default=str))
            return 0
        info["model"] = {"source": model.source, "task": model.metadata.get("task"), "metadata": model.metadata,
                         "inputs": [s.describe() for s in g.inputs], "outputs": [g.specs[o].describe() for o in g.outputs],
                         "nodes": len(g.nodes), "weights": len(g.weights), "weight_bytes": model.weight_bytes(),
                         "load_ms": round(model.load_seconds * 1e3, 1)}
        if hasattr(model, "config"):
            info["model"]["config"] = vars(model.config)
        if a.plan:
            info["model"]["plan"] = _plan(model, a.dims)
    print(json.dumps(info, indent=2, default=str))
    return 0


def _gpu_backends() -> dict:
    """Each GPU backend: whether it opens here, its device and whether that is a CPU rasterizer,
    or why not."""
    from volvox._gpu.backend import BackendUnavailable
    from volvox._gpu.devices import GPU_BACKENDS, open_device

    report = {}
    for name in GPU_BACKENDS:
        try:
            device = open_device(name)
        except BackendUnavailable as e:
            report[name] = {"available": False, "reason": " ".join(str(e).split())[:200]}
            continue
        report[name] = {"available": True, "device": device.description, "software": device.software}
        device.close()
    return report


def _plan(model, dims_arg: list[str]) -> dict:
    """Compiler report and activation memory for ``volvox info --plan``: node counts per pass, the
    arena of a lifetime-based plan (offsets with reuse) against the peak alive at once and the
    naive sum of every intermediate, the weight bytes, and what the per-op executor's arena places
    (nodes writing into it) vs the nodes that allocate their outputs per run, by op."""
    from volvox.compile.memory import RUN_TIME_DIMS, bind_dims, plan_arena, plan_run_arena

    dims = {"seq": 1, "out_seq": 1}
    for item in dims_arg:
        name, _, value = item.partition("=")
        dims[name] = int(value)
    bound = bind_dims(model.graph, dims)
    plan = plan_arena(bound, dims)
    run = plan_run_arena(bound, {d: n for d, n in dims.items() if d not in RUN_TIME_DIMS},
                         {st.node_id for st in model.executor.steps if st.into is not None})
    ops = {n.id: n.op for n in model.graph.nodes}
    allocating: dict[str, int] = {}
    for node_id in run.allocating:
        allocating[ops[node_id]] = allocating.get(ops[node_id], 0) + 1
    weights = sum(model.weight_bytes().values())
    return {"passes": [{"pass": p, "nodes_before": b, "nodes_after": n} for p, b, n in model.compile_report.steps],
            "nodes_before": len(model.source_graph.nodes), "nodes_after": len(model.graph.nodes),
            "dims": dims, "arena_bytes": plan.arena_bytes, "peak_activation_bytes": plan.peak_bytes,
            "naive_activation_bytes": plan.naive_bytes, "weight_bytes": weights,
            "executor": {"arena_bytes": run.arena_bytes, "placed_nodes": len(run.slots), "placed_bytes": run.placed_bytes,
                         "allocating_nodes": len(run.allocating),
                         "allocated_bytes": sum(b for b in run.allocating.values() if b > 0),
                         "allocating_ops": dict(sorted(allocating.items(), key=lambda kv: -kv[1]))}}


def build_parser() -> argparse.ArgumentParser:
    """The argument parser for every subcommand."""
    parser = argparse.ArgumentParser(prog="volvox", description="volvox: small, fast neural network inference")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("generate", help="continue a prompt")
    _add_load_args(p)
    p.add_argument("--adapter", default=None, metavar="DIR", help="apply a LoRA adapter folder (PEFT format)")
    p.add_argument("--prompt", required=True)
    _add_sampling_args(p)
    p.set_defaults(func=cmd_generate)
    p = sub.add_parser("chat", help="chat with an instruct model (interactive, or one --message)")
    _add_load_args(p)
    p.add_argument("--adapter", default=None, metavar="DIR", help="apply a LoRA adapter folder (PEFT format)")
    p.add_argument("--system", default=None, help="system prompt")
    p.add_argument("--message", default=None, help="send one message, print the reply and exit")
    _add_sampling_args(p)
    p.set_defaults(func=cmd_chat)
    p = sub.add_parser("transcribe", help="the text spoken in audio files (Whisper)")
    _add_load_args(p, model="required")
    p.add_argument("audio", nargs="+", help="WAV / FLAC file(s); one line of text each")
    p.add_argument("--language", default=None, help="language code of a multilingual model (default: en)")
    p.add_argument("--timestamps", action="store_true", help="one line per segment: [start --> end] text")
    p.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default)")
    p.add_argument("--seed", type=int, default=None)
    p.set_defaults(func=cmd_transcribe)
    p = sub.add_parser("seq2seq", help="an encoder-decoder model's output text for an input text")
    _add_load_args(p, model="required")
    p.add_argument("--text", required=True, help="input text")
    _add_sampling_args(p, stop=False)
    p.set_defaults(func=cmd_seq2seq)
    p = sub.add_parser("run", help="run a blueprint graph on .npy inputs")
    _add_load_args(p, model="required")
    p.add_argument("--input", action="append", default=[], help="NAME=FILE.npy (repeatable)")
    p.add_argument("--output", default=None, help="write all outputs to this .npz")
    p.set_defaults(func=cmd_run)
    for name, what in (("classify", "top-k labels of an image"), ("detect", "objects (boxes, keypoints) in an image"),
                       ("ctc", "the text of a one-line image")):
        p = sub.add_parser(name, help=what)
        _add_load_args(p, model="required")
        p.add_argument("image", help="image file")
        if name == "classify":
            p.add_argument("--top-k", type=int, default=5)
        p.set_defaults(func=cmd_vision)
    p = sub.add_parser("convert", help="GGUF file or Hugging Face folder -> volvox blueprint directory")
    p.add_argument("src", help=".gguf file, Hugging Face checkpoint folder or blueprint directory")
    p.add_argument("out_dir", help="blueprint directory to create")
    p.add_argument("--quantize", choices=list(CONVERT_TYPES), default=None,
                   help="store float linear/embedding matrices in this block format (or f16: IEEE half)")
    p.add_argument("--merge-adapter", default=None, metavar="ADAPTER",
                   help="a LoRA adapter folder (PEFT format) baked into the weights it adapts")
    p.add_argument("--force", action="store_true", help="replace OUT_DIR if it exists")
    p.add_argument("--quiet", action="store_true", help="no progress bar (it shows only on a terminal anyway)")
    p.set_defaults(func=cmd_convert)
    p = sub.add_parser("embed", help="sentence embeddings of texts (pooled as the model says, mean by default), one JSON list per line")
    _add_load_args(p, model="required")
    p.add_argument("--text", action="append", required=True, help="text to embed (repeatable)")
    p.add_argument("--normalize", action="store_true", default=None,
                   help="scale each embedding to unit L2 norm (default: as the model says; sentence-transformers Normalize)")
    p.add_argument("--prompt-name", default=None,
                   help="prepend the model's named prompt (sentence-transformers prompts, e.g. query)")
    p.set_defaults(func=cmd_embed)
    p = sub.add_parser("info", help="machine, kernels and (optionally) a model's graph and weights")
    _add_load_args(p, model="optional")
    p.add_argument("--plan", action="store_true", help="compiler passes, node counts and activation memory")
    p.add_argument("--dims", action="append", default=[], metavar="SYMBOL=N", help="bind a symbolic dim for --plan (default seq=1)")
    p.set_defaults(func=cmd_info)
    _add_finetune_parser(sub)
    _add_serve_parser(sub)
    _add_batch_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``volvox`` command; volvox errors print one line and exit 1."""
    from volvox.errors import VolvoxError

    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except VolvoxError as e:
        print(f"volvox: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
