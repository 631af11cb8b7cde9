"""The config.json a model folder (a blueprint, a Hugging Face checkpoint) starts from."""

from __future__ import annotations

import json
from pathlib import Path

from volvox.errors import BlueprintError


def read_config_json(directory: Path, missing: type[Exception] = BlueprintError, name: str = "config.json"):
    """(parsed JSON, its path) of ``directory``/``name``: ``missing`` when there is none,
    BlueprintError naming the file when it is not valid JSON."""
    path = Path(directory) / name
    try:
        return json.loads(path.read_text(encoding="utf-8")), path
    except FileNotFoundError:
        raise missing(f"{directory}: no {name}") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise BlueprintError(f"{path}: not valid JSON: {e}") from None
