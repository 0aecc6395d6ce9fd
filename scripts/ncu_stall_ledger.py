#!/usr/bin/env python3
"""Per-instruction stall samples of a kernel, from Nsight Compute's source page:

    ncu --section SourceCounters --section WarpStateStats -o REP ...
    ncu -i REP.ncu-rep --page source --csv --print-source sass > source.csv
    scripts/ncu_stall_ledger.py source.csv [--top N]

For each kernel in the page: the SASS instructions with the most warp-stall samples (with the
page's per-reason columns, where it has them) until they cover 90% of the samples or N rows, and
the samples summed per opcode. Column names are matched loosely, so pages of other ncu versions
still parse; a page without a samples column is reported, not guessed at.
"""
import argparse
import collections
import csv
import re
import sys

SAMPLES = re.compile(r"warp stall sampling \(all samples\)", re.I)
NOT_ISSUED = re.compile(r"warp stall sampling \(not-issued samples\)", re.I)


def number(cell):
    try:
        return float(cell.replace(",", ""))
    except ValueError:
        return 0.0


def kernels(rows):
    """Yields (label, header, data rows) per table; a table starts at a row with the samples column."""
    label, header, data = "kernel", None, []
    for row in rows:
        if any(SAMPLES.search(c) for c in row):
            if header:
                yield label, header, data
            header, data = row, []
        elif header and len(row) == len(header):
            data.append(row)
        elif row and any(c.strip() for c in row):
            if header:
                yield label, header, data
                header, data = None, []
            label = " ".join(c.strip() for c in row if c.strip())[:160]
    if header:
        yield label, header, data


def ledger(label, header, data, top):
    col = {name: i for i, name in enumerate(header)}
    s_col = next(i for i, n in enumerate(header) if SAMPLES.search(n))
    ni_col = next((i for i, n in enumerate(header) if NOT_ISSUED.search(n)), None)
    src_col = next((i for i, n in enumerate(header) if n.strip().lower() == "source"), None)
    addr_col = next((i for i, n in enumerate(header) if "address" in n.lower()), None)
    reason_cols = [i for i, n in enumerate(header)
                   if i not in (s_col, ni_col) and re.search(r"stall|stalled", n, re.I)]
    total = sum(number(r[s_col]) for r in data)
    print(f"== {label}: {len(data)} instructions, {total:.0f} stall samples")
    if total <= 0:
        print("   (no samples: was SourceCounters collected?)")
        return
    ranked = sorted(data, key=lambda r: -number(r[s_col]))
    covered = 0.0
    for r in ranked[:top]:
        n = number(r[s_col])
        covered += n
        reasons = sorted(((number(r[i]), header[i]) for i in reason_cols if number(r[i]) > 0), reverse=True)[:3]
        why = ", ".join(f"{name.strip()} {v:.0f}" for v, name in reasons)
        ni = f" not-issued {number(r[ni_col]):.0f}" if ni_col is not None else ""
        where = r[addr_col].strip() if addr_col is not None else ""
        text = r[src_col].strip() if src_col is not None else ""
        print(f"   {100 * n / total:5.1f}% {n:8.0f}{ni}  {where:>6}  {text[:70]:<70}  {why}")
        if covered >= 0.9 * total:
            break
    per_op = collections.Counter()
    for r in data:
        text = r[src_col].strip() if src_col is not None else "?"
        op = re.sub(r"^@!?U?P\w+\s+", "", text).split(" ")[0].split(".")[0] or "?"
        per_op[op] += number(r[s_col])
    print("   per opcode: " + ", ".join(f"{op} {100 * n / total:.1f}%" for op, n in per_op.most_common(12)))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("csv")
    ap.add_argument("--top", type=int, default=40)
    a = ap.parse_args()
    with open(a.csv, newline="") as f:
        tables = list(kernels(csv.reader(f)))
    if not tables:
        print(f"{a.csv}: no table with a 'Warp Stall Sampling (All Samples)' column")
        return 1
    for label, header, data in tables:
        ledger(label, header, data, a.top)
    return 0


if __name__ == "__main__":
    sys.exit(main())
