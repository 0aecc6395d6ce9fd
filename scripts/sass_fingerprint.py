#!/usr/bin/env python3
"""One line per kernel of a CUDA object: a hash of its SASS instructions (addresses dropped), the
instruction count and the kernel's name. Two objects whose kernels print the same hashes run the
same code, so a refactor can be shown not to change a kernel that was measured.

    scripts/sass_fingerprint.py build-cuda/.../sm90_mxfp4_decode_gemm.cu.o [--cuobjdump PATH]

The disassembler is `cuobjdump` from PATH (or MOE_EP_CUOBJDUMP, or --cuobjdump); a machine
without one can use the copy in Triton's wheel (triton/backends/nvidia/bin/cuobjdump).
"""
import argparse
import hashlib
import os
import re
import subprocess
import sys


def kernels(sass):
    """{mangled name: [(address, instruction text)]} of cuobjdump --dump-sass output."""
    fns, cur = {}, None
    for line in sass.splitlines():
        m = re.search(r"Function : (\S+)", line)
        if m:
            cur = m.group(1)
            fns[cur] = []
            continue
        m = re.match(r"\s+/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;", line)
        if cur and m:
            fns[cur].append((int(m.group(1), 16), m.group(2)))
    return fns


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("object")
    ap.add_argument("--cuobjdump", default=os.environ.get("MOE_EP_CUOBJDUMP", "cuobjdump"))
    a = ap.parse_args()
    out = subprocess.run([a.cuobjdump, "--dump-sass", a.object], capture_output=True, text=True)
    if out.returncode != 0:
        sys.stderr.write(out.stderr)
        return out.returncode
    for name, code in sorted(kernels(out.stdout).items()):
        print(hashlib.md5("\n".join(t for _, t in code).encode()).hexdigest(), f"{len(code):6d}", name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
