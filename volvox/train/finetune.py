"""The finetune loop: a training graph differentiated once, batches, optimiser steps, validation,
checkpoints and resume; ``finetune(model, dataset, ...)`` is the text-model front end (LoRA or
every weight), ``train_classifier(model, inputs, labels, ...)`` the one of single-input classifiers.

The training graph (train/graph.py) computes the mean next-token loss of ``tokens`` (batch, T)
against ``labels`` (batch, T); ``differentiate`` adds the backward nodes whose outputs are the
gradients of the trainable tensors, which are graph inputs: a step feeds the current parameter
views and reads the gradients, and frozen weights stay packed as the model loaded them.
"""

from __future__ import annotations

import hashlib
import json
import math
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
from tqdm import tqdm

from volvox.compile.autodiff import differentiate, grad_name
from volvox.errors import ShapeError, UnsupportedError, VolvoxError
from volvox.formats.safetensors import save_safetensors
from volvox.ir.graph import Graph, Node, TensorSpec
from volvox.ops.context import RunContext
from volvox.runtime.executor import Executor
from volvox.architectures.lora import LoraConfig, add_lora, find_sites
from volvox.loader import import_model, load
from volvox.ops import validate
from volvox.train.checkpoint import RunState, check_resumable, load_checkpoint, save_checkpoint
from volvox.train.data import IGNORE, Example, collate, load_dataset, split
from volvox.train.graph import block_checkpoints, trainable_graph, training_graph
from volvox.train.lora import init_adapters, save_adapter
from volvox.train.optim import GradAccumulator, Parameters, clip_grad_norm, make_optimizer
from volvox.train.schedule import make_schedule

LOSS = "loss"


class Trainer:
    """A training graph and its differentiated twin on the executor: the loss of a batch, and the loss
    with the gradient of every trainable tensor (graph inputs whose current values ``params`` holds)."""

    def __init__(self, graph: Graph, weights: dict[str, Any], params: Parameters, loss: str = LOSS,
                 checkpoints: list[str] | None = None):
        self.loss_name, self.params = loss, params
        # checkpoints: the forward tensors the backward keeps (the rest recomputed); None: all kept
        self.joint = differentiate(graph, loss, params.names, checkpoints)
        self.forward = Executor(graph, weights)      # validation: the loss only
        self.backward = Executor(self.joint, weights)

    def loss(self, feeds: dict[str, np.ndarray]) -> float:
        """The loss of one batch (``feeds``: the data inputs) at the current parameters."""
        out = self.forward.run(RunContext(), {**feeds, **self.params.views})
        return float(out[self.loss_name])

    def loss_and_grads(self, feeds: dict[str, np.ndarray]) -> tuple[float, dict[str, np.ndarray]]:
        """The loss of one batch and d loss / d parameter for every trainable tensor."""
        out = self.backward.run(RunContext(), {**feeds, **self.params.views})
        return float(out[self.loss_name]), {n: out[grad_name(n)] for n in self.params.names}


@dataclass
class TrainSettings:
    """Everything that shapes a run's arithmetic (a resume must use the same)."""

    steps: int | None = None       # optimiser steps; None: ``epochs`` passes over the training examples
    epochs: float = 1.0
    lr: float = 2e-4
    batch: int = 4
    grad_accum: int = 1
    schedule: str = "cosine"       # constant | cosine | linear (train/schedule.py)
    warmup: int = 0                # warmup steps
    min_lr_ratio: float = 0.1      # the decay's floor, a fraction of lr
    clip: float | None = 1.0       # global gradient norm cap; None: no clipping
    optimizer: str = "adamw"       # adamw | sgd
    weight_decay: float = 0.0
    seed: int = 0


@dataclass
class TrainResult:
    """What a run did: steps, per-step training loss, [step, loss] validation points, tokens seen,
    seconds, the trained tensors, and the adapter folder (LoRA) or tensors file (full) written."""

    steps: int
    train_losses: list[float]
    val_losses: list[list[float]]
    tokens: int
    seconds: float
    params: dict[str, np.ndarray] = field(repr=False, default_factory=dict)
    output: Path | None = None

    @property
    def val_perplexity(self) -> float | None:
        """exp(last validation loss), or None without validation."""
        return math.exp(self.val_losses[-1][1]) if self.val_losses else None


def total_steps(settings: TrainSettings, n_train: int) -> int:
    """Optimiser steps of a run: ``steps``, or ``epochs`` passes of ``batch`` x ``grad_accum`` examples."""
    if settings.steps is not None:
        if settings.steps < 1:
            raise VolvoxError(f"steps must be >= 1, got {settings.steps}")
        return int(settings.steps)
    per_epoch = max(math.ceil(n_train / settings.batch) / settings.grad_accum, 1.0)
    return max(int(math.ceil(per_epoch * settings.epochs)), 1)


def _batch(examples: list[Example], size: int, index: int, seed: int) -> list[Example]:
    """Micro-batch number ``index`` of the endless stream: epoch e is the examples in the order drawn
    by (seed, e), cut into batches of ``size`` (an epoch's last batch may be smaller)."""
    per_epoch = math.ceil(len(examples) / size)
    epoch, within = divmod(index, per_epoch)
    order = np.random.default_rng([seed, epoch]).permutation(len(examples))
    return [examples[i] for i in order[within * size:(within + 1) * size]]


# a list of examples -> (the graph's data feeds, items it holds (tokens, images), items its loss averages)
BatchFeeds = Callable[[list], tuple[dict[str, np.ndarray], int, int]]


def text_feeds(examples: list[Example]) -> tuple[dict[str, np.ndarray], int, int]:
    """A text batch: tokens and labels (batch, T) padded (data.collate), its tokens, its learnt labels."""
    tokens, labels = collate(examples)
    return {"tokens": tokens, "labels": labels}, int(tokens.size), int((labels != IGNORE).sum())


def validation_loss(trainer: Trainer, examples: list, batch: int, batch_feeds: BatchFeeds = text_feeds) -> float:
    """Mean loss over every learnt item of ``examples`` (each batch's mean weighted by its count)."""
    total, count = 0.0, 0
    for start in range(0, len(examples), batch):
        feeds, _, n = batch_feeds(examples[start:start + batch])
        if n:
            total += trainer.loss(feeds) * n
            count += n
    return total / max(count, 1)


def fit(trainer: Trainer, train: list, val: list, settings: TrainSettings, *,
        batch_feeds: BatchFeeds = text_feeds, out_dir: str | Path | None = None,
        val_every: int = 0, save_every: int = 0, resume: bool = True, fingerprint: str = "",
        progress: bool | None = None, log: Callable[[str], None] | None = None,
        callback: Callable[[int, float], None] | None = None) -> TrainResult:
    """Train ``trainer.params`` on ``train``: AdamW / SGD steps over ``grad_accum`` micro-batches each,
    clipped and scheduled as ``settings`` says; the validation loss every ``val_every`` steps and at the
    end; a checkpoint in ``out_dir`` every ``save_every`` steps and at the end, from which a later call
    with ``resume`` continues exactly. ``batch_feeds`` makes a batch's feeds (text: tokens and labels).
    ``callback(step, loss)`` runs after every optimiser step."""
    log = log or (lambda line: print(line, file=sys.stderr))
    if not train:
        raise VolvoxError("no training examples")
    steps = total_steps(settings, len(train))
    params = trainer.params
    opt = make_optimizer(settings.optimizer, params, settings.lr, weight_decay=settings.weight_decay)
    schedule = make_schedule(settings.schedule, steps, settings.warmup,
                             settings.min_lr_ratio if settings.schedule != "constant" else 0.0)
    acc = GradAccumulator(params, settings.grad_accum)
    state = RunState(0, 0, 0, settings.seed, fingerprint, [], [])
    saved = load_checkpoint(out_dir) if (out_dir is not None and resume) else None
    if saved is not None:
        tensors, opt_state, state = saved
        check_resumable(state, fingerprint, out_dir)
        if set(tensors) != set(params.names):
            raise VolvoxError(f"{out_dir}: the checkpoint's tensors are not this run's trainable tensors")
        for name in params.names:
            params.views[name][...] = tensors[name]
        opt.load_state_dict(opt_state)
        log(f"resuming from step {state.step} of {steps} ({Path(out_dir)})")
    show = sys.stderr.isatty() if progress is None else progress
    bar = tqdm(total=steps, initial=state.step, desc="finetune", unit="step", disable=not show, file=sys.stderr)
    tokens_seen, t0 = 0, time.perf_counter()

    def checkpoint():
        if out_dir is not None:
            save_checkpoint(out_dir, params.state(), opt.state_dict(), state)

    def validate():
        if val:
            loss = validation_loss(trainer, val, settings.batch, batch_feeds)
            state.val_losses.append([state.step, loss])
            log(f"step {state.step}: validation loss {loss:.4f}, perplexity {math.exp(min(loss, 700)):.2f}")

    if state.step == 0 and val_every and not state.val_losses:
        validate()
    while state.step < steps:
        losses = []
        for _ in range(settings.grad_accum):
            feeds, items, _ = batch_feeds(_batch(train, settings.batch, state.batch, settings.seed))
            loss, grads = trainer.loss_and_grads(feeds)
            if not math.isfinite(loss):
                raise VolvoxError(f"step {state.step}: the loss is {loss} (lower the learning rate?)")
            acc.add(grads)
            losses.append(loss)
            state.batch += 1
            tokens_seen += items
        grad = acc.mean()
        if settings.clip:
            clip_grad_norm(grad, settings.clip)
        opt.step(grad, settings.lr * schedule(state.step))
        state.step += 1
        state.epoch = state.batch // math.ceil(len(train) / settings.batch)
        state.train_losses.append(float(np.mean(losses)))
        elapsed = time.perf_counter() - t0
        bar.set_postfix(loss=f"{state.train_losses[-1]:.4f}", tok_s=f"{tokens_seen / max(elapsed, 1e-9):.0f}",
                        refresh=False)
        bar.update()
        if val_every and state.step % val_every == 0 and state.step < steps:
            validate()
        if save_every and state.step % save_every == 0 and state.step < steps:
            checkpoint()
        if callback is not None:
            callback(state.step, state.train_losses[-1])
    bar.close()
    if val and (not state.val_losses or state.val_losses[-1][0] != state.step):
        validate()
    checkpoint()
    return TrainResult(state.step, state.train_losses, state.val_losses, tokens_seen, time.perf_counter() - t0,
                       params.state())


def _fingerprint(model, examples: list[Example], settings: TrainSettings, what: str) -> str:
    """A short hash of the model source, the data and the settings: a checkpoint resumes only its own run."""
    h = hashlib.sha256(json.dumps([str(model.source), what, vars(settings)], sort_keys=True, default=str).encode())
    for e in examples:
        h.update(e.tokens.tobytes())
        h.update(e.labels.tobytes())
    return h.hexdigest()[:16]


def _run(model, examples, train, val, settings, trainer, what, *, log, **kw) -> TrainResult:
    """fit() after one line saying what trains on what."""
    log = log or (lambda line: print(line, file=sys.stderr))
    log(f"finetune: {trainer.params.flat.size:,} trainable values ({what[:60]}), {len(train)} training and "
        f"{len(val)} validation examples, {total_steps(settings, len(train))} steps")
    return fit(trainer, train, val, settings, log=log,
               fingerprint=_fingerprint(model, examples, settings, what), **kw)


def finetune(model, dataset, *, lora: LoraConfig | dict | None = None, trainable: str | list[str] | None = None,
             steps: int | None = None, epochs: float = 1.0, lr: float = 2e-4, batch: int = 4, grad_accum: int = 1,
             context: int = 256, schedule: str = "cosine", warmup: int = 0, min_lr_ratio: float = 0.1,
             clip: float | None = 1.0, optimizer: str = "adamw", weight_decay: float = 0.0,
             val_split: float = 0.1, val_every: int = 0, save_every: int = 0, out_dir: str | Path | None = None,
             resume: bool = True, seed: int = 0, recompute: bool = False, progress: bool | None = None,
             log: Callable[[str], None] | None = None, callback: Callable[[int, float], None] | None = None
             ) -> TrainResult:
    """Fine-tune a language model (loaded, or a name / path volvox.load takes) on ``dataset`` (a .txt / .jsonl file or folder, or a list of
    texts / {"text"} / {"messages"} records): LoRA adapters (``lora``: a LoraConfig or its fields; the
    default when ``trainable`` is None) or the model's own float weights (``trainable="all"`` or a
    list of weight names). ``recompute``: keep only each block's input for the backward and recompute the
    rest (lower peak memory, the same gradients, some more time). The run's checkpoints go to ``out_dir``; at the end a LoRA run writes its
    adapter there in PEFT's format (``volvox.load(model, adapter=out_dir)``), a full run its tensors
    (``trained.safetensors``, the model's weight names). Returns the TrainResult."""
    if isinstance(model, (str, Path)):
        with load(model) as loaded:
            return finetune(loaded, dataset, lora=lora, trainable=trainable, steps=steps, epochs=epochs, lr=lr,
                            batch=batch, grad_accum=grad_accum, context=context, schedule=schedule, warmup=warmup,
                            min_lr_ratio=min_lr_ratio, clip=clip, optimizer=optimizer, weight_decay=weight_decay,
                            val_split=val_split, val_every=val_every, save_every=save_every, out_dir=out_dir,
                            resume=resume, seed=seed, recompute=recompute, progress=progress, log=log,
                            callback=callback)
    if not hasattr(model, "tokenizer") or not hasattr(model, "source_graph"):
        raise UnsupportedError(f"finetune needs a loaded language model (volvox.load), got {type(model).__name__}")
    if lora is not None and trainable is not None:
        raise VolvoxError("pass either lora= (adapters) or trainable= (the model's own weights), not both")
    if model.metadata.get("adapter"):
        raise UnsupportedError(f"{model.source} was loaded with the adapter {model.metadata['adapter']}: finetune "
                               "trains from the base model (load it without adapter=)")
    settings = TrainSettings(steps, epochs, lr, batch, grad_accum, schedule, warmup, min_lr_ratio, clip, optimizer,
                             weight_decay, seed)
    examples = load_dataset(dataset, model.tokenizer, context)
    train, val = split(examples, val_split, seed)
    tg = training_graph(model, trainable=None if trainable is None else trainable)
    try:
        if trainable is None:
            config = lora if isinstance(lora, LoraConfig) else LoraConfig(**(lora or {}))
            sites = find_sites(tg.graph, config)
            adapters = init_adapters(sites, config, seed)
            graph, weights = add_lora(tg.graph, tg.weights, sites, adapters, config.scale)
            graph, frozen = trainable_graph(graph, weights, list(adapters))
            params, what = Parameters(adapters), f"lora {vars(config)}"
        else:
            sites = config = None
            graph, frozen, params = tg.graph, tg.weights, Parameters(tg.params)
            what = f"weights {sorted(tg.params)}"
        trainer = Trainer(graph, frozen, params, checkpoints=block_checkpoints(graph) if recompute else None)
        result = _run(model, examples, train, val, settings, trainer, what, out_dir=out_dir,
                      val_every=val_every, save_every=save_every, resume=resume, progress=progress, log=log,
                      callback=callback)
    finally:
        tg.close()
    if out_dir is not None and sites is not None:
        result.output = save_adapter(out_dir, sites, result.params, config, base_model=str(model.source))
    elif out_dir is not None:
        result.output = Path(out_dir) / "trained.safetensors"
        save_safetensors(result.output, result.params)
    return result


def classifier_graph(graph: Graph) -> Graph:
    """A classifier's graph (one output: logits (batch, classes)) with its mean cross entropy against an
    int64 ``labels`` (batch,) input as the output ``loss``."""
    if len(graph.outputs) != 1 or len(graph.specs[graph.outputs[0]].shape) != 2:
        raise UnsupportedError(f"a classifier graph has one output of shape (batch, classes); this one has "
                               f"{[graph.specs[o].describe() for o in graph.outputs]}")
    logits = graph.specs[graph.outputs[0]]
    inputs = list(graph.inputs) + [TensorSpec("labels", logits.shape[:1], "int64")]
    nodes = list(graph.nodes) + [Node(LOSS, "cross_entropy", {"logits": logits.name, "labels": "labels"},
                                      {"loss": LOSS, "lse": LOSS + ".lse"})]
    out = Graph(inputs, dict(graph.weights), nodes, [LOSS])
    validate(out)
    return out


def train_classifier(model, inputs: np.ndarray, labels: np.ndarray, *, steps: int | None = None, epochs: float = 1.0,
                     lr: float = 1e-3, batch: int = 16, grad_accum: int = 1, schedule: str = "constant", warmup: int = 0,
                     min_lr_ratio: float = 0.1, clip: float | None = None, optimizer: str = "adamw",
                     weight_decay: float = 0.0, val_split: float = 0.0, val_every: int = 0, save_every: int = 0,
                     out_dir: str | Path | None = None, resume: bool = True, seed: int = 0,
                     progress: bool | None = None, log: Callable[[str], None] | None = None,
                     callback: Callable[[int, float], None] | None = None) -> TrainResult:
    """Train every float weight of a loaded single-input classifier (a small CNN from ONNX, say) on
    ``inputs`` (N, ...) and class ``labels`` (N,) with the mean cross entropy, through the same loop
    as finetune(); its files are read again, uncompiled. A full run's tensors go to
    ``out_dir/trained.safetensors``. Returns the TrainResult."""
    inputs, labels = np.asarray(inputs, np.float32), np.asarray(labels, np.int64)
    if inputs.shape[:1] != labels.shape or labels.ndim != 1 or not len(labels):
        raise ShapeError(f"inputs {inputs.shape} and labels {labels.shape}: one label per input row needed")
    imported = import_model(Path(model.source))
    try:
        validate(imported.graph)
        if len(imported.graph.inputs) != 1:
            raise UnsupportedError(f"{model.source}: a classifier takes one input, this graph takes "
                                   f"{[s.name for s in imported.graph.inputs]}")
        x_name = imported.graph.inputs[0].name
        graph = classifier_graph(imported.graph)
        names = [n for n, s in graph.weights.items() if s.dtype == "float32"]
        graph, frozen = trainable_graph(graph, imported.weights, names)
        params = Parameters({n: np.asarray(imported.weights[n], np.float32) for n in names})
        settings = TrainSettings(steps, epochs, lr, batch, grad_accum, schedule, warmup, min_lr_ratio, clip,
                                 optimizer, weight_decay, seed)
        rows = list(range(len(labels)))
        train, val = split(rows, val_split, seed)

        def batch_feeds(picked: list[int]):
            return {x_name: inputs[picked], "labels": labels[picked]}, len(picked), len(picked)

        h = hashlib.sha256(json.dumps([str(model.source), vars(settings)], default=str).encode())
        h.update(inputs.tobytes())
        h.update(labels.tobytes())
        log = log or (lambda line: print(line, file=sys.stderr))
        log(f"train: {params.flat.size:,} trainable values, {len(train)} training and {len(val)} validation rows")
        result = fit(Trainer(graph, frozen, params), train, val, settings, batch_feeds=batch_feeds, out_dir=out_dir,
                     val_every=val_every, save_every=save_every, resume=resume, fingerprint=h.hexdigest()[:16],
                     progress=progress, log=log, callback=callback)
    finally:
        imported.close()
    if out_dir is not None:
        result.output = Path(out_dir) / "trained.safetensors"
        save_safetensors(result.output, result.params)
    return result
