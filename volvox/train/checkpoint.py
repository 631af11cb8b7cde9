"""Training checkpoints: the trained tensors, the optimiser's state and where the run stood, in ONE
safetensors file written atomically (temporary file, fsync, os.replace), so a run killed at any
moment leaves either the previous checkpoint or the new one, never half of one.

The run's position (step, epoch, batch within the epoch, seed, the settings that must match to
resume) is JSON in the file's metadata. Batch order is a function of (seed, epoch), so the step
and the position are all the random state a resumed run needs to continue exactly.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from volvox.errors import VolvoxError, WeightsError
from volvox.formats.safetensors import SafeTensorsFile, save_safetensors

CHECKPOINT_FILE = "checkpoint.safetensors"
_PARAM, _OPT = "param/", "optim/"


@dataclass
class RunState:
    """Where a run stands: optimiser steps taken, the epoch and the batch within it reached next, and
    ``fingerprint``: the settings that must be the same for a resume (model, data, hyperparameters)."""

    step: int
    epoch: int
    batch: int
    seed: int
    fingerprint: str
    train_losses: list[float]
    val_losses: list[list[float]]  # [step, loss] pairs


def save_checkpoint(directory: str | Path, params: dict[str, np.ndarray], optimizer_state: dict[str, np.ndarray],
                    state: RunState) -> Path:
    """Write ``directory/checkpoint.safetensors`` atomically; returns its path."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    tensors = {_PARAM + n: np.ascontiguousarray(v) for n, v in params.items()}
    tensors.update({_OPT + n: np.ascontiguousarray(v) for n, v in optimizer_state.items()})
    path = directory / CHECKPOINT_FILE
    save_safetensors(path, tensors, {"volvox_run": json.dumps(asdict(state))})
    return path


def load_checkpoint(directory: str | Path) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], RunState] | None:
    """(params, optimiser state, run state) of ``directory``'s checkpoint, or None when it has none;
    WeightsError for a file that is not a volvox checkpoint."""
    path = Path(directory) / CHECKPOINT_FILE
    if not path.exists():
        return None
    with SafeTensorsFile(path) as st:
        try:
            state = RunState(**json.loads(st.metadata["volvox_run"]))
        except (KeyError, TypeError, ValueError) as e:
            raise WeightsError(f"{path}: not a volvox training checkpoint ({e})") from None
        params = {n[len(_PARAM):]: np.array(st.tensor(n)) for n in st.names if n.startswith(_PARAM)}
        opt = {n[len(_OPT):]: np.array(st.tensor(n)) for n in st.names if n.startswith(_OPT)}
    return params, opt, state


def check_resumable(state: RunState, fingerprint: str, path: str | Path) -> None:
    """VolvoxError unless the checkpoint was taken by a run with the same settings."""
    if state.fingerprint != fingerprint:
        raise VolvoxError(f"{path}: the checkpoint there comes from a run with other settings "
                          f"({state.fingerprint} vs {fingerprint}); pass resume=False (--no-resume) or "
                          "another output folder to start afresh")
