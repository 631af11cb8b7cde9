"""Run the operator test cases that ship inside the ``onnx`` wheel through volvox and write
docs/onnx_conformance.md: pass / wrong / error / refused per op, with totals.

    python tools/onnx_conformance.py            # regenerate docs/onnx_conformance.md
    python tools/onnx_conformance.py --only Gather Slice   # print the results of some ops

Each case (``onnx.backend.test.case.node.collect_testcases()``) is a model, its inputs and the
outputs onnx's reference computed. volvox imports the model from its bytes and runs it; the outputs
must have the expected dtype and shape and match within the case's rtol / atol (NaNs where NaNs
are). Outcomes:

- pass: every output matches;
- pass (statistical): a case drawing random values, checked by dtype, shape, seed reproducibility
  and (unseeded) its mean against onnx's reference evaluator over many runs (``_statistical``);
- as onnxruntime: an output differs from onnx's expected one but equals onnxruntime's on the same model
  and inputs (where the two references disagree, volvox follows the runtime its users compare with);
- refused: volvox raised UnsupportedError (an op, dtype, attribute or opset it does not run);
- error: volvox raised another volvox error (ShapeError, ...) on a valid model;
- wrong: an output differs, or something other than a volvox error was raised.

Cases run as shipped: an operand that decides an output's shape (a Reshape's shape, Slice's starts,
TopK's K, a NonZero's input ...) fed as a graph input stays one, and volvox plans the graph per value
of such inputs at run time (volvox/formats/onnx/value_plans.py). The tests (tests/formats/test_onnx_conformance.py) run
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
OUT_OF_SCOPE_OPS = {
    **dict.fromkeys(("Adagrad", "Adam", "Momentum", "Gradient"), "training op"),
    **dict.fromkeys(("SequenceAt", "SequenceConstruct", "SequenceEmpty", "SequenceErase", "SequenceInsert",
                     "SequenceLength", "SequenceMap", "SplitToSequence", "ConcatFromSequence"), "sequence op"),
    **dict.fromkeys(("Optional", "OptionalGetElement", "OptionalHasElement"), "optional op"),
    **dict.fromkeys(("StringConcat", "StringNormalizer", "StringSplit", "RegexFullMatch", "TfIdfVectorizer"),
                    "string / text op"),
    "ImageDecoder": "image file decoding",
}


VALUE_PLANNED = "planned per value of"
RANDOM_OPS = {"Bernoulli", "Multinomial", "RandomUniform", "RandomUniformLike", "RandomNormal", "RandomNormalLike"}
STATISTICAL_RUNS = 2000


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


def scope_reason(case) -> str | None:
    """Why the case lies outside the standard tensor operators volvox aims to run (None: in scope):
    an out-of-scope domain or op, or graph inputs / outputs of sequence, optional, map or string type."""
    from onnx import TensorProto

    for n in case.model.graph.node:
        if n.domain not in ("", "ai.onnx"):
            return f"domain {n.domain}"
        if n.op_type in OUT_OF_SCOPE_OPS:
            return OUT_OF_SCOPE_OPS[n.op_type]
    for vi in list(case.model.graph.input) + list(case.model.graph.output):
        kind = vi.type.WhichOneof("value")
        if kind in ("sequence_type", "optional_type", "map_type"):
            return f"{kind.split('_')[0]} values"
        if kind == "tensor_type" and vi.type.tensor_type.elem_type == TensorProto.STRING:
            return "string tensors"
    if _has_bfloat16_accumulation(case) and not _onnxruntime_implements(case):
        return "bfloat16 accumulation onnxruntime's CPU provider does not implement"
    return None


# ops that sum over an axis: volvox refuses them on bfloat16 (onnx's reference rounds each partial sum)
ACCUMULATING_OPS = {"Softmax", "LogSoftmax", "Attention", "MatMul", "Gemm", "ReduceSum", "ReduceMean",
                    "LayerNormalization", "RMSNormalization"}


def _has_bfloat16_accumulation(case) -> bool:
    """Whether a graph input or output is bfloat16 and one of its nodes is an accumulating op."""
    from onnx import TensorProto

    values = list(case.model.graph.input) + list(case.model.graph.output)
    bf16 = any(vi.type.WhichOneof("value") == "tensor_type" and vi.type.tensor_type.elem_type == TensorProto.BFLOAT16
               for vi in values)
    return bf16 and any(n.op_type in ACCUMULATING_OPS for n in case.model.graph.node)


def _onnxruntime_implements(case) -> bool:
    """Whether onnxruntime's CPU provider builds a session for the case's model (the issue's scope: the
    operators it implements for these types)."""
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.log_severity_level = 4
    try:
        onnxruntime.InferenceSession(case.model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    except Exception:  # onnxruntime's NOT_IMPLEMENTED / type errors: it has no kernel for these types
        return False
    return True


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
    """(outcome, detail) of one case: pass / refused / error / wrong (see the module doc); every data set
    runs through one loaded model, as shipped (operands fed as inputs stay inputs)."""
    from volvox.errors import UnsupportedError, VolvoxError
    from volvox.formats.onnx import load_onnx

    as_runtime = False
    names = [vi.name for vi in case.model.graph.input if vi.name not in {t.name for t in case.model.graph.initializer}]
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"{case.name}.onnx"
        path.write_bytes(case.model.SerializeToString())
        net = None
        try:
            for inputs, outputs in case.data_sets:
                inputs, outputs = [_array(v) for v in inputs], [_array(v) for v in outputs]
                if any(v is None for v in inputs + outputs):
                    return "refused", "sequence or optional values"
                feeds = dict(zip(names, inputs))
                try:
                    net = net or load_onnx(path)
                    result = net.run({k: np.asarray(v) for k, v in feeds.items()})
                    got = [np.asarray(result[name]) for name in net.graph.outputs]
                except UnsupportedError as e:
                    return "refused", str(e).split(": ", 1)[-1]
                except VolvoxError as e:
                    return "error", f"{type(e).__name__}: {str(e).split(': ', 1)[-1]}"
                except Exception as e:  # noqa: BLE001  a crash counts as a wrong answer
                    return "wrong", f"{type(e).__name__}: {e}"
                if len(got) != len(outputs):
                    return "wrong", f"{len(got)} outputs, expected {len(outputs)}"
                differ = [(k, why) for k, (g, w) in enumerate(zip(got, outputs))
                          if (why := _compare(g, w, case.rtol, case.atol))]
                if RANDOM_OPS & set(case_ops(case)):  # a draw that happens to equal the expected one proves little
                    return _statistical(case, net, feeds, got, outputs)
                if differ:
                    k, why = differ[0]
                    if _equals_onnxruntime(case.model, feeds, got, case):
                        as_runtime = True
                        continue
                    return "wrong", f"output {k}: {why}"
        finally:
            if net is not None:
                net.close()
    if as_runtime:
        return "as onnxruntime", "onnx's reference and onnxruntime disagree; volvox equals onnxruntime"
    planned = getattr(net, "value_inputs", ())
    return "pass", (VALUE_PLANNED + ": " + ", ".join(planned)) if planned else ""


def _statistical(case, net, feeds: dict, got: list, outputs: list) -> tuple[str, str]:
    """The outcome of a case drawing random values whose expected outputs are one unseeded draw: dtype
    and shape as expected; a seeded graph gives the same values on every run and the values onnx's
    reference evaluator draws for that seed; an unseeded one, over STATISTICAL_RUNS runs, has each
    element's mean within 5 standard errors of the reference evaluator's over as many of its own runs,
    and, when the reference draws whole numbers (Bernoulli's 0 / 1, class indices), whole numbers
    within the range its runs took."""
    from onnx.reference import ReferenceEvaluator

    for k, (g, w) in enumerate(zip(got, outputs)):
        if g.dtype != w.dtype or g.shape != w.shape:
            return "wrong", f"output {k}: got {g.dtype}{list(g.shape)}, expected {w.dtype}{list(w.shape)}"
    reference = ReferenceEvaluator(case.model)
    if any(a.name == "seed" for n in case.model.graph.node for a in n.attribute):
        again = list(net.run(feeds).values())
        theirs = reference.run(None, feeds)
        if not all(np.array_equal(g, a) and np.array_equal(g, t) for g, a, t in zip(got, again, theirs)):
            return "wrong", "a seeded draw differs between runs or from onnx's reference evaluator's"
        return "pass (statistical)", "seeded: every run and onnx's reference evaluator draw the same values"
    ours = [np.stack(draw).astype(np.float64) for draw in zip(*(net.run(feeds).values() for _ in range(STATISTICAL_RUNS)))]
    theirs = [np.stack(draw).astype(np.float64) for draw in zip(*(reference.run(None, feeds) for _ in range(STATISTICAL_RUNS)))]
    for k, (a, b) in enumerate(zip(ours, theirs)):
        error = np.sqrt((a.var(axis=0) + b.var(axis=0)) / STATISTICAL_RUNS)
        if np.any(np.abs(a.mean(axis=0) - b.mean(axis=0)) > 5 * error + 1e-9):
            return "wrong", f"output {k}: the mean of {STATISTICAL_RUNS} draws differs from onnx's reference evaluator's"
        if np.array_equal(b, np.round(b)) and not (np.array_equal(a, np.round(a)) and b.min() <= a.min() <= a.max() <= b.max()):
            return "wrong", f"output {k}: discrete draws outside the values onnx's reference evaluator's took"
    return "pass (statistical)", f"means of {STATISTICAL_RUNS} draws equal onnx's reference evaluator's"


def _equals_onnxruntime(model, feeds: dict, got: list, case) -> bool:
    """Whether onnxruntime (when installed and able to run the model) gives ``got``."""
    try:
        import onnxruntime as ort

        session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        theirs = session.run(None, {k: np.asarray(v) for k, v in feeds.items()})
    except Exception:  # noqa: BLE001  no onnxruntime, or it cannot run this model: no evidence
        return False
    return len(theirs) == len(got) and all(_compare(g, t, case.rtol, case.atol) is None for g, t in zip(got, theirs))


OUTCOMES = ("pass", "pass (statistical)", "as onnxruntime", "refused", "error", "wrong")


def _counts(counter: collections.Counter) -> str:
    """A table row's cells: the count of each outcome."""
    return " | ".join(str(counter[o]) for o in OUTCOMES)


def write_doc(results: list[tuple]) -> str:
    """The markdown page of (case, op, why out of scope or None, outcome, detail) rows."""
    per_op: dict[tuple, collections.Counter] = collections.defaultdict(collections.Counter)
    for _, op, outside, outcome, _ in results:
        per_op[op, outside or ""][outcome] += 1
    totals = collections.Counter(outcome for *_, outcome, _ in results)
    inside_totals = collections.Counter(outcome for _, _, outside, outcome, _ in results if not outside)
    lines = [
        "# ONNX conformance",
        "",
        "Generated by `python tools/onnx_conformance.py`: every node test case shipped in the `onnx` wheel",
        "(`onnx.backend.test.case.node`), imported and run by volvox, its outputs compared with the expected",
        "ones (the case's rtol / atol; dtype and shape equal). **pass**: equal; **pass (statistical)**: a case",
        "drawing random values (Bernoulli, RandomUniform / RandomNormal (Like), Multinomial), whose expected",
        "output is one unseeded draw: dtype and shape as expected, and a seeded graph draws the same values",
        "on every run and the values onnx's reference evaluator draws for that seed (volvox draws from NumPy's",
        "`RandomState(seed)` per run, as that evaluator does); an unseeded one, over 2000 runs, has each element's",
        "mean within 5 standard errors of the evaluator's own 2000 runs (discrete draws: whole numbers",
        "within the range the evaluator's runs took);",
        "**as onnxruntime**: different from onnx's expected output but equal to onnxruntime's (the two",
        "references disagree); **refused**: a clear",
        "`UnsupportedError` naming op, opset and node; **error**: another volvox error; **wrong**: a different",
        "answer or a crash. Cases run as shipped: operands that fix a shape (a Reshape's shape, Slice bounds,",
        "TopK's K ...) that a case feeds as graph inputs stay inputs.",
        "",
        "How volvox runs what a shape plan made at import cannot hold:",
        "",
        "- Shape-fixing operands (a Reshape's shape, Slice bounds, TopK's K, Expand's shape, Tile's repeats,",
        "  pads, Resize's sizes / scales, ConstantOfShape, Range, OneHot's depth ...) and the inputs of ops",
        "  whose output shape depends on the values (NonZero, Compress, Unique, NonMaxSuppression) are",
        "  folded at import when constant. When they are computed at run time, the model is planned per",
        "  value of them (`ValuePlannedModel`, `volvox/formats/onnx/value_plans.py`): each run reads a graph",
        "  input's value from the feeds or runs the graph's prefix that computes the tensor, imports the",
        "  graph with those values held as constants and caches the compiled plan per value signature",
        "  (new values re-plan, seen ones reuse their plan); the remaining inputs run",
        "  the plan, their symbolic dims bound per run as in any model. The last section lists the cases",
        "  so planned and their inputs.",
        "- Control flow is straight-line graph: If with a constant condition keeps its branch; a run-time",
        "  condition runs both branches and picks each output with `where` when they agree in shape and",
        "  dtype. Loop (a trip count and condition that fold, fed as inputs too: planned per value) and Scan",
        "  are unrolled at import.",
        "- ONNX's narrow types (bfloat16, the float8s, float8e8m0, int4 / uint4, int2 / uint2, float4e2m1)",
        "  are read (packed sub-byte initializers included), cast and (de)quantized exactly as the onnx",
        "  package's reference does, through `ml_dtypes`. Per-element ops on bfloat16 compute in float32 and",
        "  round each output once (bit for bit onnx's reference); ops that accumulate (reductions, Softmax,",
        "  norms) refuse bfloat16: onnx's reference rounds every partial sum to bfloat16, which volvox does not",
        "  copy. The 10 bfloat16 Attention cases show it: with its Softmax in float32, onnx's own reference",
        "  evaluator gives volvox's outputs bit for bit, but the expected outputs differ from them by 1",
        "  bfloat16 ulp (beyond the cases' rtol 1e-3). onnxruntime's CPU provider cannot run these graphs (no",
        "  bfloat16 Add / Mul / Expand kernels), so they fall outside the operators-as-onnxruntime-implements-",
        "  them scope below and are listed as out of scope, still refused. Other narrow types are refused by",
        "  the other ops.",
        "- Random ops (Bernoulli, RandomUniform / RandomNormal (Like), Multinomial, training Dropout) draw from",
        "  a NumPy `RandomState` per run, seeded by the node's seed when it has one (onnx's reference evaluator's",
        "  scheme: seeded Dropout equals the expected outputs bit for bit).",
        "- Models older than opset 7 are converted to opset 7 by the onnx package's version converter.",
        "",
        "Out of scope (refused by design; the reason is in the per-op table): training ops, sequence /",
        "optional / string ops, cases whose graph inputs or outputs are sequences, optionals or string",
        "tensors (Identity, If and Loop over sequences, Equal of strings), the `ai.onnx.ml` and preview domains,",
        "and graphs with a bfloat16 input or output and an accumulating op that onnxruntime's CPU provider",
        "cannot build a session for (it implements no bfloat16 kernel they need).",
        "",
        "| | cases | pass | pass (statistical) | as onnxruntime | refused | error | wrong |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
        f"| all | {len(results)} | {_counts(totals)} |",
        f"| in scope | {sum(inside_totals.values())} | {_counts(inside_totals)} |",
        "",
        "## Per op",
        "",
        "| op | in scope | cases | pass | pass (statistical) | as onnxruntime | refused | error | wrong |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for op, outside in sorted(per_op):
        c = per_op[op, outside]
        lines.append(f"| {op} | {'no: ' + outside if outside else 'yes'} | {sum(c.values())} | {_counts(c)} |")
    lines += ["", "## Cases other than an exact pass", "", "| case | outcome | why |", "| --- | --- | --- |"]
    for name, _, _, outcome, detail in sorted(results):
        if outcome != "pass":
            lines.append(f"| {name} | {outcome} | {detail.replace('|', '/').replace(chr(10), ' ')[:200]} |")
    planned = [(name, detail.split(": ", 1)[1]) for name, _, _, outcome, detail in sorted(results)
               if detail.startswith(VALUE_PLANNED)]
    lines += ["", "## Cases planned per run-time value", "",
              f"{len(planned)} cases feed as graph inputs operands volvox fixes at import (shapes, axes, counts,",
              "data-dependent ops' inputs, a loop's trip count, weights of ops that take only constant ones);",
              "volvox ran each as shipped, planning the graph per value of these tensors (graph inputs, or",
              "tensors the graph computes from them):", "",
              "| case | tensors whose values fix the plan |", "| --- | --- |"]
    lines += [f"| {name} | {inputs} |" for name, inputs in planned]
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
        results.append((case.name, op, scope_reason(case), outcome, detail))
        if args.only:
            print(f"{case.name}: {outcome} {detail}")
    if not args.only:
        DOC.write_text(write_doc(results))
        counts = collections.Counter(r[3] for r in results)
        print(f"{DOC}: {len(results)} cases, " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
