"""The operator test cases shipped inside the onnx wheel (model + inputs + expected outputs, written by
the ONNX project), each imported and run by volvox: it must give the expected outputs or refuse with
UnsupportedError; a different answer, a crash or another error fails. Refusals are reported as
skips naming the reason. tools/onnx_conformance.py runs the same function and writes
docs/onnx_conformance.md."""

import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("onnx")
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
import onnx_conformance  # noqa: E402

CASES = {case.name: case for case in onnx_conformance.collect()}


@pytest.mark.parametrize("name", sorted(CASES))
def test_onnx_node_case(name):
    case = CASES[name]
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        outcome, detail = onnx_conformance.run_case(case)
    assert outcome in ("pass", "pass (statistical)", "as onnxruntime", "refused"), f"{name}: {outcome}: {detail}"
    if outcome == "refused":
        pytest.skip(f"refused: {detail}")


def test_the_conformance_page_has_no_wrong_answers():
    page = (Path(__file__).resolve().parents[2] / "docs" / "onnx_conformance.md").read_text()
    rows = [line for line in page.splitlines() if line.startswith("| test_")]
    assert rows and not [line for line in rows if "| wrong |" in line or "| error |" in line]
