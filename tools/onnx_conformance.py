"""Run the operator test cases that ship inside the ``onnx`` wheel through volvox and write
docs/onnx_conformance.md: pass / wrong / error / refused per op, with totals.

    python tools/onnx_conformance.py            # regenerate docs/onnx_conformance.md
    python tools/onnx_conformance.py --only Gather Slice   # print the results of some ops

Each case (``onnx.backend.test.case.node.collect_testcases()``) is a model, its inputs and the
outputs onnx's reference computed. volvox imports the model from its bytes and runs it; the outputs
must have the expected dtype and shape and match within the case's rtol / atol (NaNs where NaNs
are). Outcomes:

- pass: every output matches;
- as onnxruntime: an output differs from onnx's expected one but equals onnxruntime's on the same model
  and inputs (where the two references disagree, volvox follows the runtime its users compare with);
- refused: volvox raised UnsupportedError (an op, dtype, attribute or opset it does not run);
- error: volvox raised another volvox error (ShapeError, ...) on a valid model;
- wrong: an output differs, or something other than a volvox error was raised.

volvox fixes shapes at import, so an operand that decides an output's shape (a Reshape's shape,
Slice's starts, TopK's K) must be a constant; the cases feed some as graph inputs. Such an input
(named by ConstantRequired) is made an initializer holding the case's value and the case is run
again, as an exported model would hold it (so are the graph inputs such an operand is computed from).
The tests (tests/formats/test_onnx_conformance.py) run
the same function per case.
"""

from __future__ import annotations

import argparse
import collections
import sys
import tempfile
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "onnx_conformance.md"
# out of scope: training, sequence / optional / string ops, the ai.onnx.ml and preview domains
OUT_OF_SCOPE_DOMAINS = ("ai.onnx.ml", "ai.onnx.preview", "ai.onnx.preview.training")
OUT_OF_SCOPE_OPS = {"Adagrad", "Adam", "Momentum", "Gradient", "SequenceAt", "SequenceConstruct", "SequenceEmpty",
                    "SequenceErase", "SequenceInsert", "SequenceLength", "SequenceMap", "SplitToSequence",
                    "ConcatFromSequence", "Optional", "OptionalGetElement", "OptionalHasElement", "StringConcat",
                    "StringNormalizer", "StringSplit", "RegexFullMatch", "TfIdfVectorizer", "ImageDecoder"}


def collect() -> list:
    """The onnx wheel's node test cases."""
    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return [c for c in collect_testcases() if c.kind == "node"]


def case_ops(case) -> list[str]:
    """The op types of a case's graph (domain-qualified outside the default domain)."""
    return sorted({n.op_type if n.domain in ("", "ai.onnx") else f"{n.domain}.{n.op_type}" for n in case.model.graph.node})


def case_op(case, single: dict[str, str]) -> str:
    """The op a case tests: its single node's; a function-expanded case counts under its op's name
    (``single``: case name -> op of the one-node cases), marked "(expanded)"."""
    ops = case_ops(case)
    if len(case.model.graph.node) == 1:
        return ops[0]
    twin = case.name.split("_expanded")[0]
    return f"{single[twin]} (expanded)" if twin in single else "+".join(ops)


def in_scope(case) -> bool:
    """Whether the case's ops are within the standard CPU operators volvox aims to run."""
    for n in case.model.graph.node:
        if n.domain not in ("", "ai.onnx") or n.op_type in OUT_OF_SCOPE_OPS:
            return False
    return True


def _bake(model, name: str, value: np.ndarray):
    """``model`` with graph input ``name`` turned into an initializer holding ``value``."""
    from onnx import numpy_helper

    graph = model.graph
    keep = [vi for vi in graph.input if vi.name != name]
    del graph.input[:]
    graph.input.extend(keep)
    graph.initializer.append(numpy_helper.from_array(np.asarray(value), name))
    return model


def _array(value) -> np.ndarray | None:
    """A case's input or output as an array (TensorProtos converted), None for a sequence or optional."""
    from onnx import TensorProto, numpy_helper

    if isinstance(value, TensorProto):
        return numpy_helper.to_array(value)
    return np.asarray(value) if isinstance(value, (np.ndarray, np.generic)) else None


def _compare(got: np.ndarray, want, rtol: float, atol: float) -> str | None:
    """None when ``got`` matches ``want``, else what differs."""
    if not isinstance(want, np.ndarray):
        return f"expected a {type(want).__name__}"
    if got.dtype != want.dtype or got.shape != want.shape:
        return f"got {got.dtype}{list(got.shape)}, expected {want.dtype}{list(want.shape)}"
    if want.dtype.kind == "V" or want.dtype.name == "float8_e5m2":
        # ONNX's narrow types (ml_dtypes): integers (int4 ...) exact; floats (bfloat16, float8 ...) within
        # the case's tolerance, NaN where NaN
        integers = want.dtype.name.startswith(("int", "uint"))
        got, want = got.astype(np.float32), want.astype(np.float32)
        if integers:
            return None if np.array_equal(got, want) else "values differ"
    if want.dtype.kind in "fc":
        try:
            np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, equal_nan=True)
        except AssertionError as e:
            return str(e).strip().splitlines()[-1][:160] if str(e).strip() else "values differ"
        return None
    return None if np.array_equal(got, want) else "values differ"


def run_case(case) -> tuple[str, str]:
    """(outcome, detail) of one case: pass / refused / error / wrong (see the module doc)."""
    import copy

    from volvox.errors import UnsupportedError, VolvoxError
    from volvox.formats.onnx import ConstantRequired, read_onnx
    from volvox.model import Model

    baked: set[str] = set()
    as_runtime = False
    for inputs, outputs in case.data_sets:
        inputs, outputs = [_array(v) for v in inputs], [_array(v) for v in outputs]
        if any(v is None for v in inputs + outputs):
            return "refused", "sequence or optional values"
        model = copy.deepcopy(case.model)
        names = [vi.name for vi in model.graph.input if vi.name not in {t.name for t in model.graph.initializer}]
        feeds = dict(zip(names, inputs))
        for name in baked:
            _bake(model, name, feeds.pop(name))
        for _attempt in range(8):
            try:
                with tempfile.TemporaryDirectory() as tmp:
                    path = Path(tmp) / f"{case.name}.onnx"
                    path.write_bytes(model.SerializeToString())
                    graph, weights, metadata = read_onnx(path)
                    net = Model(graph, weights, metadata, str(path))
                    result = net.run({k: np.asarray(v) for k, v in feeds.items()})
                break
            except ConstantRequired as e:
                if not all(name in feeds for name in e.inputs):
                    return "refused", str(e).split(": ", 1)[-1]
                for name in e.inputs:
                    _bake(model, name, feeds.pop(name))
                    baked.add(name)
            except UnsupportedError as e:
                return "refused", str(e).split(": ", 1)[-1]
            except VolvoxError as e:
                return "error", f"{type(e).__name__}: {str(e).split(': ', 1)[-1]}"
            except Exception as e:  # noqa: BLE001  a crash counts as a wrong answer
                return "wrong", f"{type(e).__name__}: {e}"
        else:
            return "refused", "too many operands that must be constants"
        got = [np.asarray(result[name]) for name in graph.outputs]
        if len(got) != len(outputs):
            return "wrong", f"{len(got)} outputs, expected {len(outputs)}"
        differ = [(k, why) for k, (g, w) in enumerate(zip(got, outputs)) if (why := _compare(g, w, case.rtol, case.atol))]
        if differ:
            k, why = differ[0]
            if _equals_onnxruntime(model, feeds, got, case):
                as_runtime = True
                continue
            return "wrong", f"output {k}: {why}"
    if as_runtime:
        return "as onnxruntime", "onnx's reference and onnxruntime disagree; volvox equals onnxruntime"
    return "pass", "constant operands: " + ", ".join(sorted(baked)) if baked else ""


def _equals_onnxruntime(model, feeds: dict, got: list, case) -> bool:
    """Whether onnxruntime (when installed and able to run the model) gives ``got``."""
    try:
        import onnxruntime as ort

        session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        theirs = session.run(None, {k: np.asarray(v) for k, v in feeds.items()})
    except Exception:  # noqa: BLE001  no onnxruntime, or it cannot run this model: no evidence
        return False
    return len(theirs) == len(got) and all(_compare(g, t, case.rtol, case.atol) is None for g, t in zip(got, theirs))


def write_doc(results: list[tuple]) -> str:
    """The markdown page of (case, op, in scope, outcome, detail) rows."""
    per_op: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    scope: dict[str, bool] = {}
    for _, op, inside, outcome, _ in results:
        per_op[op][outcome] += 1
        scope[op] = inside
    totals = collections.Counter(outcome for *_, outcome, _ in results)
    inside_totals = collections.Counter(outcome for _, _, inside, outcome, _ in results if inside)
    lines = [
        "# ONNX conformance",
        "",
        "Generated by `python tools/onnx_conformance.py`: every node test case shipped in the `onnx` wheel",
        "(`onnx.backend.test.case.node`), imported and run by volvox, its outputs compared with the expected",
        "ones (the case's rtol / atol; dtype and shape equal). **pass**: equal; **as onnxruntime**: different",
        "from onnx's expected output but equal to onnxruntime's (the two references disagree); **refused**: a clear",
        "`UnsupportedError` naming op, opset and node; **error**: another volvox error; **wrong**: a different",
        "answer or a crash. Operands that fix a shape (a Reshape's shape, Slice bounds, TopK's K ...) are",
        "made constants when a case feeds them as inputs: volvox plans shapes at import.",
        "",
        "How volvox runs what a shape plan made at import cannot hold:",
        "",
        "- Ops whose output shape depends on the values (NonZero, Compress, Unique, NonMaxSuppression) run at",
        "  import on constant inputs (the importer folds them); an input computed at run time is refused,",
        "  naming it (`ConstantRequired`), and the cases feed such inputs as constants. Re-planning the graph",
        "  on each run's observed shape would cost every model a shape check per node for a few detection",
        "  heads; their boxes can run after the graph, in the task.",
        "- Control flow is straight-line graph: If with a constant condition keeps its branch; a run-time",
        "  condition runs both branches and picks each output with `where` when they agree in shape and",
        "  dtype. Loop (constant trip count, a condition that folds) and Scan are unrolled at import.",
        "- ONNX's narrow types (bfloat16, the float8s, float8e8m0, int4 / uint4, int2 / uint2, float4e2m1)",
        "  are read (packed sub-byte initializers included), cast and (de)quantized exactly as the onnx",
        "  package's reference does, through `ml_dtypes`; other ops refuse them.",
        "- Models older than opset 7 are converted to opset 7 by the onnx package's version converter.",
        "",
        "Out of scope (refused by design): training ops, sequence / optional / string ops, the `ai.onnx.ml`",
        "and preview domains.",
        "",
        "| | cases | pass | as onnxruntime | refused | error | wrong |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
        f"| all | {len(results)} | {totals['pass']} | {totals['as onnxruntime']} | {totals['refused']} | "
        f"{totals['error']} | {totals['wrong']} |",
        f"| in scope | {sum(inside_totals.values())} | {inside_totals['pass']} | {inside_totals['as onnxruntime']} | "
        f"{inside_totals['refused']} | {inside_totals['error']} | {inside_totals['wrong']} |",
        "",
        "## Per op",
        "",
        "| op | in scope | cases | pass | as onnxruntime | refused | error | wrong |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for op in sorted(per_op):
        c = per_op[op]
        lines.append(f"| {op} | {'yes' if scope[op] else 'no'} | {sum(c.values())} | {c['pass']} | "
                     f"{c['as onnxruntime']} | {c['refused']} | {c['error']} | {c['wrong']} |")
    lines += ["", "## Cases not passing", "", "| case | outcome | why |", "| --- | --- | --- |"]
    for name, _, _, outcome, detail in sorted(results):
        if outcome != "pass":
            lines.append(f"| {name} | {outcome} | {detail.replace('|', '/').replace(chr(10), ' ')[:200]} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    """Run every case and write the page (or print the cases of --only's ops)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="*", help="print the results of these ops' cases instead of writing the page")
    args = parser.parse_args()
    results = []
    cases = collect()
    single = {c.name: case_ops(c)[0] for c in cases if len(c.model.graph.node) == 1}
    for case in cases:
        op = case_op(case, single)
        if args.only and not any(o in args.only for o in case_ops(case)):
            continue
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with np.errstate(all="ignore"):
                outcome, detail = run_case(case)
        results.append((case.name, op, in_scope(case), outcome, detail))
        if args.only:
            print(f"{case.name}: {outcome} {detail}")
    if not args.only:
        DOC.write_text(write_doc(results))
        counts = collections.Counter(r[3] for r in results)
        print(f"{DOC}: {len(results)} cases, " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
