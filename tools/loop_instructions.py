"""The innermost loops of kernel functions in built tier modules, from their disassembly: how many
instructions each hot loop runs per iteration, tier by tier (evidence of SIMD code that does not
depend on an emulator's speed, e.g. for arm64 tiers built and tested under QEMU).

    python tools/loop_instructions.py DIR [--objdump aarch64-linux-gnu-objdump] [--functions b32_rows_q4_1_1 ...]

DIR holds the tier modules (tier_<name>*.so, e.g. an installed volvox/_kernels). For each kernel
function (a Cython cdef function, its symbol ending in _<name>) and tier, prints the innermost loops
(a backward branch within the function and the instructions from its target to it, holding no
other loop), largest first, with how many of their instructions touch SIMD registers (v / q / z /
ymm / zmm / xmm).
"""

from __future__ import annotations

import argparse
import glob
import os
import re
import subprocess

FUNCTIONS = ("b32_rows_q4_1_1", "b32_rows_q8_0_4", "gemm_q4_K", "gemm_q6_K", "sgemm", "qgemm",
             "dwconv_f32", "qdwconv", "attention_f32")
HEADER = re.compile(r"^([0-9a-f]+) <(.+)>:$")
INSN = re.compile(r"^\s*([0-9a-f]+):\s+(\S+)\s*(.*)$")
BRANCH = re.compile(r"^(b(\.\w+)?|cbn?z|tbn?z|j\w+)$")
SIMD_REG = re.compile(r"\b([vqz]\d+|[xyz]mm\d+)\b")


def disassemble(objdump: str, path: str) -> dict[str, list[tuple[int, str, str]]]:
    """Function symbol -> [(address, mnemonic, operands)]."""
    out = subprocess.run([objdump, "-d", "--no-show-raw-insn", path], capture_output=True, text=True,
                         check=True).stdout
    funcs: dict[str, list[tuple[int, str, str]]] = {}
    current = None
    for line in out.splitlines():
        m = HEADER.match(line)
        if m:
            current = funcs.setdefault(m.group(2), [])
            continue
        m = INSN.match(line)
        if m and current is not None:
            current.append((int(m.group(1), 16), m.group(2), m.group(3)))
    return funcs


def innermost_loops(insns: list[tuple[int, str, str]]) -> list[tuple[int, int]]:
    """(instructions, SIMD instructions) of each innermost loop, largest first."""
    if not insns:
        return []
    lo, hi = insns[0][0], insns[-1][0]
    loops = []
    for addr, op, args in insns:
        if not BRANCH.match(op):
            continue
        target = re.search(r"\b([0-9a-f]+)\s*<", args) or re.search(r"^([0-9a-f]+)\b", args.split(",")[-1].strip())
        if not target:
            continue
        t = int(target.group(1), 16)
        if lo <= t <= addr <= hi:
            loops.append((t, addr))
    inner = [(t, b) for t, b in loops if not any((t2, b2) != (t, b) and t <= t2 and b2 <= b for t2, b2 in loops)]
    result = []
    for t, b in set(inner):
        body = [i for i in insns if t <= i[0] <= b]
        result.append((len(body), sum(1 for _, op, args in body if SIMD_REG.search(args))))
    return sorted(result, reverse=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir", help="directory of the tier modules (tier_<name>*.so)")
    ap.add_argument("--objdump", default="objdump")
    ap.add_argument("--functions", nargs="+", default=list(FUNCTIONS))
    ap.add_argument("--loops", type=int, default=3, help="innermost loops shown per function (largest first)")
    a = ap.parse_args()
    tiers = {}
    for path in sorted(glob.glob(os.path.join(a.dir, "tier_*.so"))):
        name = os.path.basename(path).split(".")[0].removeprefix("tier_")
        tiers[name] = disassemble(a.objdump, path)
    print(f"{'function':<18} {'tier':<8} innermost loops: instructions (SIMD-register instructions)")
    for fn in a.functions:
        for tier, funcs in tiers.items():
            syms = [s for s in funcs if s.endswith(f"_{fn}") and "tier_" in s]
            if not syms:
                continue
            loops = innermost_loops(funcs[min(syms, key=len)])[:a.loops]
            shown = ", ".join(f"{n} ({v})" for n, v in loops) or "no loop"
            print(f"{fn:<18} {tier:<8} {shown}")


if __name__ == "__main__":
    main()
