"""Batch inference on Ray: ``VolvoxPredictor`` for ``ray.data.Dataset.map_batches``, and ``run_on_ray``
behind ``volvox batch``.

Each actor loads its model once and runs its kernels on as many threads as Ray gave it CPUs::

    import ray, volvox.ray
    ds = ray.data.from_items([{"prompt": "Once upon a time"}, ...])
    out = ds.map_batches(volvox.ray.VolvoxPredictor, fn_constructor_kwargs={"model": "smollm2-135m-instruct"},
                         concurrency=4, num_cpus=2, batch_size=16, batch_format="pandas")

Ray is imported only by the functions that need it: ``import volvox`` and ``import volvox.ray`` work
without it. Rows travel through Ray as JSON text (one column), so any row shape round-trips
unchanged and the results are exactly ``volvox.batch.Predictor``'s, as in a single process.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

from volvox.batch import BatchOptions, Predictor, read_rows, write_rows
from volvox.errors import VolvoxError


def _ray():
    try:
        import ray
    except ImportError:
        raise VolvoxError("volvox batch on Ray needs ray: pip install 'volvox[ray]' (or run with --no-ray)") from None
    return ray


def actor_cpus() -> int:
    """CPUs Ray assigned to the calling actor or task (1 outside Ray)."""
    ray = _ray()
    if not ray.is_initialized():
        return 1
    return max(1, int(ray.get_runtime_context().get_assigned_resources().get("CPU", 1)))


class VolvoxPredictor:
    """A Ray Data callable class: one model per actor, loaded once; each batch's rows get their results.

    A batch is a pandas DataFrame (or a dict of columns) whose rows are the input objects, or whose
    one column ``json`` holds each row as JSON text (what ``run_on_ray`` sends); the result has the
    same form."""

    def __init__(self, model: str, threads: int | None = None, **options):
        self.predictor = Predictor(model, BatchOptions(**options), threads=threads or actor_cpus())

    def __call__(self, batch):
        import pandas as pd

        frame = batch if isinstance(batch, pd.DataFrame) else pd.DataFrame(batch)
        if list(frame.columns) == ["json"]:
            rows = [json.loads(text) for text in frame["json"]]
            return pd.DataFrame({"json": [json.dumps(r, ensure_ascii=False) for r in self.predictor.predict(rows)]})
        return pd.DataFrame(self.predictor.predict(frame.to_dict("records")))


def run_on_ray(model: str, input_path: str | Path, output_path: str | Path, options: BatchOptions, *,
               address: str | None = None, actors: int | None = None, cpus_per_actor: int = 1,
               batch_size: int = 16, num_cpus: int | None = None) -> int:
    """``volvox batch``: the rows of ``input_path`` through ``actors`` model replicas on Ray, written to
    ``output_path`` in input order; the number of rows. ``address`` None starts a local cluster
    (of ``num_cpus`` CPUs, default all) for this call."""
    ray = _ray()
    rows = read_rows(input_path)
    started_here = not ray.is_initialized()
    if started_here:
        ray.init(address=address, num_cpus=num_cpus if address is None else None, include_dashboard=False,
                 log_to_driver=False, configure_logging=False)
    try:
        from ray.data import DataContext

        DataContext.get_current().execution_options.preserve_order = True
        if actors is None:
            actors = max(1, int(ray.cluster_resources().get("CPU", 1)) // cpus_per_actor)
        actors = max(1, min(actors, -(-len(rows) // batch_size)))  # no idle replicas loading a model for nothing
        ds = ray.data.from_items([{"json": json.dumps(row, ensure_ascii=False)} for row in rows],
                                 override_num_blocks=max(1, -(-len(rows) // batch_size)))
        out = ds.map_batches(VolvoxPredictor, fn_constructor_kwargs={"model": model, **asdict(options)},
                             batch_size=batch_size, batch_format="pandas", concurrency=actors,
                             num_cpus=cpus_per_actor)
        results = [json.loads(r["json"]) for r in out.iter_rows()]
    finally:
        if started_here:
            ray.shutdown()
    write_rows(output_path, results)
    return len(results)
