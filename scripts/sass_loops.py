#!/usr/bin/env python3
"""The loops of each kernel in a CUDA object, from its SASS: every backward branch closes a loop;
one line per loop with its address range, its instruction count (the loop's static body: exact
per iteration where the body has no forward branches), and how many of those are wgmma (QGMMA /
HGMMA), FFMA, LDS, LDGSTS, SYNCS and the e4m3 re-encoding's HMUL2 / F2FP. Only loops that hold
one of `--ops` (default: QGMMA, HGMMA, LDGSTS) print, so a mainloop's k step reads as one line:

    scripts/sass_loops.py build-cuda/.../sm90_mxfp4_rs_fp8_gemm.cu.o [--kernel REGEX] [--cuobjdump PATH]

With --csv, rows instead (bench/results/sass_k_step.csv): one per innermost loop that holds a
wgmma (no other loop closes inside it), a consumer warp's k step where the mainloop has no forward
branches inside (gpu,date,commit,kernel,wgmma_shape,k_step_instructions,wgmma,ffma,lds; the
kernel demangled by c++filt).

The disassembler is cuobjdump (with nvdisasm beside it or on PATH) from PATH, MOE_EP_CUOBJDUMP or
--cuobjdump; PyPI's nvidia-cuda-cuobjdump and nvidia-cuda-nvdisasm wheels carry both, so a
machine without a GPU can read the SASS of what it built.
"""
import argparse
import csv
import datetime
import os
import re
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sass_fingerprint import kernels  # noqa: E402  (the SASS listing parsed per kernel)

COUNTED = ("QGMMA", "HGMMA", "FFMA", "LDS", "LDGSTS", "SYNCS", "HMUL2", "F2FP")


def opcode(text):
    t = re.sub(r"^@!?U?P[T0-9]+\s+", "", text)
    return t.split()[0].split(".")[0] if t else ""


def back_edges(instrs):
    """(target, branch address) of each backward branch."""
    out = []
    for addr, text in instrs:
        m = re.search(r"\bBRA\s+(?:`\()?(0x[0-9a-f]+)", text)
        if m and int(m.group(1), 16) < addr:
            out.append((int(m.group(1), 16), addr))
    return out


def loops(instrs, ops):
    """(start, end, instruction count, {opcode: count}) of each loop holding one of ops."""
    out = []
    for lo, addr in back_edges(instrs):
        body = [opcode(t) for a, t in instrs if lo <= a <= addr]
        if not any(o in ops for o in body):
            continue
        out.append((lo, addr, len(body), {c: body.count(c) for c in COUNTED if body.count(c)}))
    return out


def short_name(mangled):
    out = subprocess.run(["c++filt", mangled], capture_output=True, text=True).stdout.strip() or mangled
    out = out.replace("moe_ep::cuda::", "")
    out = re.sub(r"^void ", "", out)
    return re.sub(r"\([^()]*\)$", "", out)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("object")
    ap.add_argument("--kernel", default="", help="only kernels whose mangled name matches this regex")
    ap.add_argument("--ops", default="QGMMA,HGMMA,LDGSTS", help="print loops holding one of these opcodes")
    ap.add_argument("--cuobjdump", default=os.environ.get("MOE_EP_CUOBJDUMP", "cuobjdump"))
    ap.add_argument("--csv", action="store_true", help="CSV rows: each innermost loop holding a wgmma")
    ap.add_argument("--commit", default="", help="the commit column of --csv")
    ap.add_argument("--header", action="store_true", help="with --csv: print the header line first")
    a = ap.parse_args()
    out = subprocess.run([a.cuobjdump, "--dump-sass", a.object], capture_output=True, text=True)
    if out.returncode != 0 or "Function :" not in out.stdout:
        sys.stderr.write(out.stderr or out.stdout)
        return 1
    ops = set(a.ops.split(","))
    writer = csv.writer(sys.stdout, lineterminator="\n") if a.csv else None
    if writer and a.header:
        writer.writerow(["gpu", "date", "commit", "kernel", "wgmma_shape", "k_step_instructions", "wgmma", "ffma", "lds"])
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
    for name, instrs in kernels(out.stdout).items():
        if a.kernel and not re.search(a.kernel, name):
            continue
        if writer:
            edges, kernel = back_edges(instrs), short_name(name)
            for lo, hi, n, c in loops(instrs, {"QGMMA", "HGMMA"}):
                if any(lo <= l2 and h2 < hi for l2, h2 in edges):
                    continue  # another loop closes inside it: not a k step
                shape = next((m.group(1) for addr, t in instrs if lo <= addr <= hi
                              for m in [re.search(r"[QH]GMMA\.(\d+x\d+x\d+)", t)] if m), "")
                writer.writerow(["sm_90a SASS", date, a.commit, kernel, shape, n,
                                 c.get("QGMMA", 0) + c.get("HGMMA", 0), c.get("FFMA", 0), c.get("LDS", 0)])
            continue
        print(name)
        for lo, hi, n, counts in loops(instrs, ops):
            detail = " ".join(f"{k}={v}" for k, v in counts.items())
            print(f"  loop {lo:#07x}..{hi:#07x}  {n:5d} instructions  {detail}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
