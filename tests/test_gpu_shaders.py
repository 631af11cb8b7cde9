"""The shader toolchain: committed generated shaders match shaders/*.wgsl, kernels' interfaces parse,
and a broken shader is reported with its file and line."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from volvox._gpu.backend import SHADER_DIR, gles_from_glsl, glsl_source, kernel_info, kernel_names, wgsl_dir

ROOT = Path(__file__).resolve().parent.parent
TOOL = ROOT / "tools" / "compile_shaders.py"


def _toolchain_missing() -> str:
    """Why tools/compile_shaders.py cannot run here ("" when it can)."""
    if shutil.which("spirv-cross") is None:
        return "spirv-cross is not installed (apt-get install spirv-cross)"
    if shutil.which("naga") is None:
        if importlib.util.find_spec("wasmtime") is None:
            return "neither a naga CLI nor the wasmtime package is installed"
        spec = importlib.util.spec_from_file_location("compile_shaders", TOOL)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        if not any(mod.cache_dir().glob("*.tgz")) and shutil.which("npm") is None:
            return "naga's WASM build is not cached and npm is not installed to fetch it"
    return ""


def _tool():
    reason = _toolchain_missing()
    if reason:
        pytest.skip(f"shader toolchain unavailable: {reason}")
    spec = importlib.util.spec_from_file_location("compile_shaders", TOOL)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_generated_shaders_are_up_to_date():
    _tool()
    r = subprocess.run([sys.executable, str(TOOL), "--check"], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr


def test_every_source_has_every_format():
    sources = sorted(p.stem for p in (ROOT / "shaders").glob("*.wgsl"))
    assert sources == kernel_names()
    for name in sources:
        for rel in (f"spv/{name}.spv", f"glsl/{name}.comp"):
            assert (SHADER_DIR / rel).is_file(), rel
        assert (wgsl_dir() / f"{name}.wgsl").read_bytes() == (ROOT / "shaders" / f"{name}.wgsl").read_bytes()
        info = kernel_info(name)  # bindings 0..n and a Params struct of 4-byte scalars
        assert info.n_buffers >= 1 and info.fields


def test_gles_is_the_glsl_with_its_version_line_replaced():
    for name in kernel_names():
        glsl, gles = glsl_source(name), glsl_source(name, es=True)
        assert glsl.startswith("#version 430\n") and gles.startswith("#version 310 es\n")
        assert gles.split("\n", 1)[1] == glsl.split("\n", 1)[1]


def test_gles_derivation_matches_spirv_cross():
    """spirv-cross's GLSL ES 310 translation of every kernel is its GLSL 430 translation with the
    gles backend's version-line swap (so gles/ need not be generated)."""
    tool = _tool()
    for name in kernel_names():
        spv = (SHADER_DIR / "spv" / f"{name}.spv").read_bytes()
        glsl = tool.spirv_cross(spv, ["--version", "430", "--no-es"])
        gles = tool.spirv_cross(spv, ["--version", "310", "--es"])
        assert gles_from_glsl(glsl) == gles, name


def test_errors_name_file_and_line(tmp_path):
    tool = _tool()
    bad = tmp_path / "bad.wgsl"
    bad.write_text("@group(0) @binding(0) var<storage, read_write> y: array<f32>;\n\n"
                   "@compute @workgroup_size(64)\n"
                   "fn main(@builtin(global_invocation_id) g: vec3<u32>) {\n"
                   "    y[g.x] = undefined_name * 2.0;\n"
                   "}\n")
    with pytest.raises(tool.ShaderError, match=r"bad\.wgsl:5: .*undefined_name"):
        tool.compile_one(tool.naga(), bad)
