"""Fuzz the TFLite, ONNX and PyTorch state-dict readers: mutate the tiny valid seeds that
tools/make_bad_files.py writes (byte flips, truncations, u32 overwrites of offsets and lengths,
hostile attribute values, pickles that name forbidden globals) and check that only volvox errors
ever escape. The seeds themselves are checked against the reference runtimes first."""

import importlib.util
import struct
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from volvox.errors import VolvoxError
from volvox.formats.onnx import read_onnx
from volvox.formats.tflite import read_tflite
from volvox.formats.torch_state_dict import read_state_dict
from volvox.model import Model

from test_parsers_fuzz import INTERESTING, mutated

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data"
FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _tool():
    spec = importlib.util.spec_from_file_location("make_bad_files", ROOT / "tools" / "make_bad_files.py")
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    return tool


TOOL = _tool()
TFLITE_SEED, TFLITE_AT = TOOL.build_tflite()
ONNX_SEED = TOOL.build_onnx()
PTH_SEED = TOOL.build_state_dict()
RNG = np.random.default_rng(0)


def _written(data: bytes, suffix: str, fn):
    """``fn(path)`` on ``data`` written to a temporary file; a VolvoxError must name the file."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"fuzz{suffix}"
        path.write_bytes(data)
        try:
            return fn(path)
        except VolvoxError as e:
            assert str(path) in str(e), e
            return None


def _import_and_run(reader):
    """Import with ``reader``; when that succeeds, compile and run once on zeros (small shapes only)."""
    def fn(path):
        graph, weights, meta = reader(path)
        model = Model(graph, weights, meta, str(path))
        feeds = {}
        for spec in graph.inputs:
            shape = [d if isinstance(d, int) else 1 for d in spec.shape]
            if int(np.prod(shape)) > 1 << 16:
                return
            feeds[spec.name] = np.zeros(shape, spec.dtype)
        model.run(feeds)
    return fn


# ------------------------------------------------------------------ the seeds are real models

def test_tflite_seed_matches_the_tflite_interpreter():
    litert = pytest.importorskip("ai_edge_litert.interpreter")
    path = str(DATA / "tiny.tflite")
    it = litert.Interpreter(model_path=path)
    it.allocate_tensors()
    x = RNG.standard_normal((1, 4, 4, 2)).astype(np.float32)
    it.set_tensor(it.get_input_details()[0]["index"], x)
    it.invoke()
    want = it.get_tensor(it.get_output_details()[0]["index"])
    graph, weights, meta = read_tflite(path)
    got = Model(graph, weights, meta, path).run({graph.inputs[0].name: x})["probs"]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_onnx_seed_matches_onnxruntime():
    ort = pytest.importorskip("onnxruntime")
    path = str(DATA / "tiny.onnx")
    x = RNG.standard_normal((1, 2, 4, 4)).astype(np.float32)
    (want,) = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, {"x": x})
    graph, weights, meta = read_onnx(path)
    got = Model(graph, weights, meta, path).run({"x": x})["probs"]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_state_dict_seed_matches_torch_load():
    torch = pytest.importorskip("torch")
    want = torch.load(DATA / "tiny.pth", weights_only=True)
    got = read_state_dict(DATA / "tiny.pth")
    assert list(got) == list(want)
    for name, tensor in want.items():
        np.testing.assert_array_equal(got[name], tensor.numpy(), err_msg=name)


# ------------------------------------------------------------------ TFLite

TFL_U32 = TFLITE_AT["uoffset"] + TFLITE_AT["length"] + TFLITE_AT["soffset"]


@FUZZ
@given(mutated(TFLITE_SEED, [], TFL_U32, keep=8))
def test_tflite_mutations_raise_only_volvox_errors(data):
    _written(data, ".tflite", _import_and_run(read_tflite))


@FUZZ
@given(st.lists(st.tuples(st.sampled_from(TFL_U32), INTERESTING), min_size=1, max_size=3))
def test_tflite_hostile_offsets_and_lengths(edits):
    data = bytearray(TFLITE_SEED)
    for at, value in edits:
        struct.pack_into("<I", data, at, value % 2**32)
    _written(bytes(data), ".tflite", _import_and_run(read_tflite))


# ------------------------------------------------------------------ ONNX

small_int = st.one_of(st.integers(-3, 6), st.sampled_from([2**31, 2**62, -2**63, 2**63 - 1]))


@st.composite
def onnx_semantic_edits(draw) -> bytes:
    """The seed model with hostile attribute values, reshape targets, input dims or extra nodes."""
    ints = lambda n: draw(st.lists(small_int, min_size=0, max_size=n))  # noqa: E731
    nodes = [TOOL._onnx_node("Conv", ["x", "conv.w", "conv.b"], ["c"], "conv", TOOL._onnx_ints("pads", ints(5)),
                             TOOL._onnx_ints("strides", ints(3)), TOOL._onnx_ints("group", ints(1))),
             TOOL._onnx_node("Relu", ["c"], ["r"], "relu"),
             TOOL._onnx_node("MaxPool", ["r"], ["p"], "pool", TOOL._onnx_ints("kernel_shape", ints(3)),
                             TOOL._onnx_ints("strides", ints(3))),
             TOOL._onnx_node("Reshape", ["p", "shape"], ["f"], "flatten"),
             TOOL._onnx_node(draw(st.sampled_from(["MatMul", "Add", "Concat", "Transpose", "Softmax", "Slice"])),
                             ["f", "fc.w"], ["probs"], "fc", TOOL._onnx_ints("perm", ints(3)),
                             TOOL.pb((1, "axis"), (3, draw(small_int) % 2**64), (20, 2)))]
    inits = [("conv.w", TOOL.ONNX_CONV_W), ("conv.b", TOOL.ONNX_CONV_B),
             ("shape", np.array(draw(st.lists(st.integers(-2, 40), min_size=0, max_size=3)), np.int64)),
             ("fc.w", TOOL.ONNX_FC_W)]
    dims = draw(st.lists(st.one_of(st.integers(0, 9), st.sampled_from([2**31, 2**40])), min_size=0, max_size=5))
    graph = TOOL.pb(*[(1, n) for n in nodes], *[(5, TOOL._onnx_tensor(n, a)) for n, a in inits],
                    (11, TOOL._onnx_value("x", dims)), (12, TOOL._onnx_value("probs", [1, 5])))
    return TOOL.pb((1, 7), (7, graph), (8, TOOL.pb((1, ""), (2, 13))))


@FUZZ
@given(mutated(ONNX_SEED, [], [], keep=0))
def test_onnx_mutations_raise_only_volvox_errors(data):
    _written(data, ".onnx", _import_and_run(read_onnx))


@pytest.mark.parametrize("where", ["graph name", "node name", "metadata key"])
def test_onnx_string_field_as_a_huge_varint_is_a_volvox_error(tmp_path, where):
    """A fuzzer find: a string field written as a varint of 2**40 made bytes(n) allocate a TiB
    (MemoryError) instead of reporting the malformed file."""
    huge = 2**40
    node = TOOL.pb((3, huge)) if where == "node name" else TOOL.pb((3, "n"))
    graph = TOOL.pb((1, node), (2, huge)) if where == "graph name" else TOOL.pb((1, node))
    props = (14, TOOL.pb((1, huge), (2, "v"))) if where == "metadata key" else (14, TOOL.pb((1, "k"), (2, "v")))
    path = tmp_path / "m.onnx"
    path.write_bytes(TOOL.pb((1, 7), (8, TOOL.pb((1, ""), (2, 13))), props, (7, graph)))
    with pytest.raises(VolvoxError):
        read_onnx(path)


@FUZZ
@given(onnx_semantic_edits())
def test_onnx_hostile_attributes_raise_only_volvox_errors(data):
    _written(data, ".onnx", _import_and_run(read_onnx))


# ------------------------------------------------------------------ PyTorch state dict

PICKLE_SEED = TOOL.state_dict_pickle()
OPCODES = [b"(", b")", b"]", b"}", b"t", b"R", b"Q", b"u", b"s", b"a", b"e", b"N", b"\x88", b"\x89", b"0", b"2",
           b"h\x00", b"q\x00", b"K\x05", b"J\xff\xff\xff\x7f", b"X\x00\x00\x00\x80", b"B\xff\xff\xff\xff",
           TOOL.pkl_global("torch", "FloatStorage"), TOOL.pkl_global("torch._utils", "_rebuild_tensor_v2"),
           TOOL.pkl_global("collections", "OrderedDict")]


@st.composite
def pickle_edits(draw) -> bytes:
    """data.pkl with opcodes spliced in, bytes flipped, or cut."""
    data = bytearray(PICKLE_SEED)
    for _ in range(draw(st.integers(1, 4))):
        at = draw(st.integers(2, len(data)))
        kind = draw(st.sampled_from(["insert", "flip", "cut"]))
        if kind == "insert":
            data[at:at] = draw(st.sampled_from(OPCODES))
        elif kind == "flip" and at < len(data):
            data[at] ^= 1 << draw(st.integers(0, 7))
        else:
            del data[at:at + draw(st.integers(1, 8))]
    return bytes(data)


@FUZZ
@given(pickle_edits())
def test_state_dict_pickle_edits_raise_only_volvox_errors(pkl):
    _written(TOOL.build_state_dict(pkl), ".pth", read_state_dict)


@FUZZ
@given(mutated(PTH_SEED, [], [], keep=0))
def test_state_dict_zip_mutations_raise_only_volvox_errors(data):
    _written(data, ".pth", read_state_dict)


@settings(max_examples=60, deadline=None)
@given(st.sampled_from([("os", "system"), ("posix", "system"), ("subprocess", "check_call"), ("builtins", "exec"),
                        ("builtins", "eval"), ("builtins", "getattr"), ("builtins", "__import__"),
                        ("shutil", "rmtree"), ("torch", "load"), ("numpy", "load"), ("torch._utils", "os"),
                        ("collections", "os"), ("torch", "FloatStorage.__init__")]),
       st.sampled_from(["value", "key", "storage", "rebuild"]))
def test_forbidden_globals_are_refused_never_run(tmp_path_factory, target, where):
    sentinel = tmp_path_factory.mktemp("pwn") / "ran"
    call = TOOL.pkl_global(*target) + b"(" + TOOL._pkl_str(f"touch {sentinel}") + b"tR"
    entries = {"value": TOOL._pkl_str("x") + call,
               "key": call + TOOL._pkl_str("x"),
               "storage": TOOL._pkl_str("x") + TOOL.pkl_global("torch._utils", "_rebuild_tensor_v2") + b"(" + call
               + b"J\x00\x00\x00\x00(J\x01\x00\x00\x00t(J\x01\x00\x00\x00ttR",
               "rebuild": TOOL._pkl_str("x") + TOOL.pkl_global("torch._utils", "_rebuild_tensor_v2")
               + b"(" + call + b"tR"}[where]
    path = tmp_path_factory.mktemp("sd") / "evil.pth"
    path.write_bytes(TOOL.build_state_dict(TOOL.state_dict_pickle(entries)))
    with pytest.raises(VolvoxError, match=f"evil.pth: refuses to unpickle {target[0]}"):
        read_state_dict(path)
    assert not sentinel.exists()


def test_stride_zero_tensor_cannot_allocate_past_its_storage(tmp_path):
    # size (2**40,) over a one-element storage with stride 0: refused before any copy is made
    entry = TOOL._pkl_str("big") + TOOL.pkl_global("torch._utils", "_rebuild_tensor_v2") + b"((" \
        + TOOL._pkl_str("storage") + TOOL.pkl_global("torch", "FloatStorage") + TOOL._pkl_str("0") \
        + TOOL._pkl_str("cpu") + b"J\x01\x00\x00\x00tQJ\x00\x00\x00\x00(\x8a\x06\x00\x00\x00\x00\x00\x01t" \
        + b"(J\x00\x00\x00\x00t\x89tR"
    path = tmp_path / "bomb.pth"
    path.write_bytes(TOOL.build_state_dict(TOOL.state_dict_pickle(entry), {"0": b"\0" * 4}))
    with pytest.raises(VolvoxError, match="bomb.pth.*more elements than its storage"):
        read_state_dict(path)


def test_zip_bomb_member_is_refused_before_inflating(tmp_path):
    import io
    import zipfile
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("archive/data.pkl", TOOL.state_dict_pickle())
        zf.writestr("archive/data/0", b"\0" * (1 << 22))  # 4 MiB of zeros deflates to a few KiB
    path = tmp_path / "bomb.pth"
    path.write_bytes(out.getvalue())
    with pytest.raises(VolvoxError, match="bomb.pth.*declares 4194304 bytes"):
        read_state_dict(path)
