#!/usr/bin/env python3
"""Where a decode step's GPU time goes: reads Nsight Compute's CSV (gpu__time_duration.sum per kernel,
e.g. from `ncu --csv --metrics gpu__time_duration.sum --log-file F splash bench e2e ...`), finds the
decode step as the period of the kernel-name sequence at the end of the run (every decode step
launches the same kernels), and prints each kernel's count, time and share within one step, averaged
over the last --steps steps.

  python3 bench/kernel_profile.py ncu.log --steps 4
"""
import argparse
import collections
import csv
import sys


def kernels(path):
    rows = []
    with open(path, errors="replace") as f:
        lines = [l for l in f if l.startswith('"')]
    for r in csv.DictReader(lines):
        if r.get("Metric Name") != "gpu__time_duration.sum":
            continue
        scale = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3, "s": 1e6, "second": 1e6}.get(r["Metric Unit"])
        if scale is None:
            sys.exit(f"unknown unit {r['Metric Unit']}")
        rows.append((r["Kernel Name"], float(r["Metric Value"].replace(",", "")) * scale))
    return rows


def step_period(names, lo=8):
    """The shortest p >= lo with the last p names equal to the p before them."""
    for p in range(lo, len(names) // 2 + 1):
        if names[-p:] == names[-2 * p:-p]:
            return p
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("csv")
    ap.add_argument("--steps", type=int, default=3, help="decode steps to average (at most those found)")
    a = ap.parse_args()
    rows = kernels(a.csv)
    if not rows:
        sys.exit(f"{a.csv}: no gpu__time_duration rows")
    names = [n for n, _ in rows]
    p = step_period(names)
    if p is None:
        sys.exit(f"{a.csv}: no repeating decode step among {len(rows)} kernels")
    steps = 1
    while steps < a.steps and len(names) >= (steps + 2) * p and names[-(steps + 2) * p:-(steps + 1) * p] == names[-p:]:
        steps += 1
    window = rows[-steps * p:]
    per = collections.OrderedDict()
    for n, us in window:
        c, t = per.get(n, (0, 0.0))
        per[n] = (c + 1, t + us)
    total = sum(t for _, t in per.values()) / steps
    print(f"decode step: {p} kernels, {total:.1f} us of kernel time (mean of {steps} steps; "
          f"{len(rows)} kernels profiled)")
    print(f"{'kernel':70s} {'n/step':>6s} {'us/step':>9s} {'us each':>8s} {'share':>6s}")
    for n, (c, t) in sorted(per.items(), key=lambda kv: -kv[1][1]):
        short = n if len(n) <= 70 else n[:67] + "..."
        print(f"{short:70s} {c / steps:6.0f} {t / steps:9.1f} {t / c:8.2f} {100 * t / steps / total:5.1f}%")


if __name__ == "__main__":
    main()
