"""TFLite import against the TFLite interpreter (ai-edge-litert) on the same files and inputs:
the int8 MLTK person detector bit-exact in every tensor, BlazeFace (float16 weights) within 1e-4,
and broken files failing with clear volvox errors."""

import struct

import numpy as np
import pytest

import volvox
from volvox.tasks.image import preprocess
from volvox.formats.flatbuffers import root
from volvox.formats.tflite import TFLiteError, read_tflite
from volvox.model import Model

from vision_helpers import SAMPLES, model_file, sample_image

litert = pytest.importorskip("ai_edge_litert.interpreter")


def interpreter(path, delegates=True):
    """The TFLite interpreter; delegates=False runs TFLite's builtin kernels (no XNNPACK)."""
    kind = litert.OpResolverType.AUTO if delegates else litert.OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES
    it = litert.Interpreter(model_path=path, experimental_op_resolver_type=kind, experimental_preserve_all_tensors=True)
    it.allocate_tensors()
    return it


def invoke(it, x):
    it.set_tensor(it.get_input_details()[0]["index"], x)
    it.invoke()
    return it


@pytest.fixture(scope="module")
def vww():
    return model_file("mltk-person-detection")


@pytest.fixture(scope="module")
def blazeface():
    return model_file("blazeface-short-range")


@pytest.mark.parametrize("name", SAMPLES)
def test_int8_person_detector_is_bit_exact_in_every_tensor(vww, name):
    graph, weights, meta = read_tflite(vww)
    every = [o for n in graph.nodes for o in n.outputs.values()]
    graph.outputs = every
    x = preprocess(sample_image(name), volvox.hub.load_recipe("mltk-person-detection")["metadata"]["preprocess"]).tensor
    for reference in (False, True):
        ours = Model(graph, weights, meta, vww, reference=reference, optimize=False).run({graph.inputs[0].name: x})
        it = invoke(interpreter(vww, delegates=False), x)
        compared = 0
        for td in it.get_tensor_details():
            if td["name"] in ours:
                np.testing.assert_array_equal(ours[td["name"]], it.get_tensor(td["index"]), err_msg=td["name"])
                compared += 1
        assert compared == len(every) == 33


def test_person_detector_classify_matches_interpreter_top1(vww):
    model = volvox.load("mltk-person-detection")
    for name in SAMPLES:
        img = sample_image(name)
        x = preprocess(img, model.metadata["preprocess"]).tensor
        exact, xnnpack = (invoke(interpreter(vww, d), x) for d in (False, True))
        want = exact.get_tensor(exact.get_output_details()[0]["index"])[0]
        top = model.classify(img, top_k=2)
        assert top[0].index == int(np.argmax(want)) and top[0].score == float(want.max())
        # XNNPACK requantizes in float (rounding may differ by one step): same top-1 all the same
        assert top[0].index == int(np.argmax(xnnpack.get_tensor(xnnpack.get_output_details()[0]["index"])))
    assert model.classify(sample_image("astronaut"))[0].label == "person"
    assert model.classify(sample_image("coffee"))[0].label == "non_person"


@pytest.mark.parametrize("delegates", [False, True])
def test_blazeface_raw_tensors_match_interpreter(blazeface, delegates):
    model = volvox.load("blazeface-short-range")
    for name in SAMPLES:
        x = preprocess(sample_image(name), model.metadata["preprocess"]).tensor
        ours = model.run({"input": x})
        it = invoke(interpreter(blazeface, delegates), x)
        for od in it.get_output_details():
            want = it.get_tensor(od["index"])
            np.testing.assert_allclose(ours[od["name"]], want, rtol=1e-4, atol=1e-4 * np.abs(want).max())


def _patched(src, tmp_path, name, edit):
    data = bytearray(open(src, "rb").read())
    edit(data)
    path = tmp_path / name
    path.write_bytes(bytes(data))
    return path


def test_truncated_file_is_a_clear_error(vww, tmp_path):
    path = _patched(vww, tmp_path, "cut.tflite", lambda d: d.__delitem__(slice(len(d) // 2, None)))
    with pytest.raises(TFLiteError, match="cut.tflite.*outside|cut.tflite.*past"):
        volvox.load(path)


def test_not_tflite_is_refused(tmp_path):
    path = tmp_path / "x.tflite"
    path.write_bytes(b"\x00" * 64)
    with pytest.raises(volvox.UnsupportedError, match="x.tflite"):
        volvox.load(path)


def test_unknown_op_names_op_and_node(vww, tmp_path):
    def edit(d):
        model = root(bytes(d), "m", TFLiteError)
        code = model.tables(1, "operator_codes")[0]
        for field in (0, 3):  # deprecated_builtin_code (int8), builtin_code (int32)
            at = code._field(field)
            if at:
                struct.pack_into("<b" if field == 0 else "<i", d, at, 113)
    path = _patched(vww, tmp_path, "unknown.tflite", edit)
    with pytest.raises(volvox.UnsupportedError, match=r"operator \d+ \(builtin op 113 v\d+\): op builtin op 113 is not supported"):
        read_tflite(path)


def test_wrong_image_is_a_clear_error():
    model = volvox.load("mltk-person-detection")
    from volvox.tasks.image import ImageError
    with pytest.raises(ImageError, match="uint8"):
        model.classify(np.zeros((8, 8, 3), np.float32))
    with pytest.raises(ImageError, match="no such image"):
        model.classify("/nonexistent/cat.png")
    with pytest.raises(ImageError, match="shape"):
        model.classify(np.zeros((8, 8, 5), np.uint8))
