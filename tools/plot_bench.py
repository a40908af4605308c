#!/usr/bin/env python3
"""Plots of `splash bench switch` and `splash bench layouts` JSON (docs/gpu-switching.md).

    python3 tools/plot_bench.py --switch switch_t2.json --layouts layouts_t2.json --out docs/img --tag t2

Writes <tag>-switch-overhead.png (blocking vs SPLASH overhead per direction, log scale),
<tag>-switch-primitives.png (per-layer KV cost over context next to NCCL's time for the same bytes)
and <tag>-regime-map.png (throughput of each layout over input length per batch size, best starred).
Needs matplotlib (pip); the benchmarks themselves do not.
"""
import argparse
import json
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

COLORS = {"tp": "#1f77b4", "dp": "#ff7f0e", "cp": "#2ca02c", "dop": "#d62728"}


def switch_overhead(data, path, title):
    live = data["live"]
    dirs = [x["direction"] for x in live]
    block = [max(x["blocking_over_p50"], 1e-3) for x in live]
    splash = [max(x["splash_over_p50"], 1e-3) for x in live]
    fig, ax = plt.subplots(figsize=(10, 4))
    xs = range(len(dirs))
    ax.bar([x - 0.2 for x in xs], block, 0.4, label="blocking", color="#999999")
    ax.bar([x + 0.2 for x in xs], splash, 0.4, label="SPLASH (overlapped)", color="#d62728")
    ax.set_yscale("log")
    ax.set_xticks(list(xs), dirs, rotation=45)
    ax.set_ylabel("overhead over target-ready, p50 (ms)")
    ready = sorted({round(x["ready_p50"]) for x in live})
    ax.set_title(f"{title}: B={live[0]['batch']}, {live[0]['context']} cached tokens/request; "
                 f"ready step {ready[0]}-{ready[-1]} ms (values <= 0 drawn at 1e-3)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def switch_primitives(data, path, title):
    prims = [p for p in data["primitives"] if p["kv"] in ("all-gather", "all-to-all")]
    fig, ax = plt.subplots(figsize=(7, 4))
    for d in sorted({p["direction"] for p in prims}):
        pts = sorted((p["context"], p["kv_ms_per_layer"], p["nccl_kv_ms"]) for p in prims if p["direction"] == d)
        ax.plot([c for c, _, _ in pts], [m for _, m, _ in pts], marker="o", label=d)
    ref = sorted({(p["context"], p["nccl_kv_ms"]) for p in prims if p["direction"] == "dop->tp"})
    if ref:
        ax.plot([c for c, _ in ref], [m for _, m in ref], "k--", label="NCCL, same bytes (dop->tp)")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("cached tokens per request")
    ax.set_ylabel("KV move per layer (ms)")
    ax.set_title(f"{title}: KV switch cost per layer, B={prims[0]['batch']}")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def regime_map(data, path, title):
    sweep = [p for p in data["sweep"] if "error" not in p]
    batches = sorted({p["batch"] for p in sweep})
    fig, axes = plt.subplots(1, len(batches), figsize=(5 * len(batches), 4), squeeze=False)
    for ax, b in zip(axes[0], batches):
        for lay in ["tp", "dp", "cp", "dop"]:
            pts = sorted((p["input_len"], p["tokens_per_s"], p["best"]) for p in sweep
                         if p["batch"] == b and p["layout"] == lay)
            if not pts:
                continue
            ax.plot([x for x, _, _ in pts], [y for _, y, _ in pts], marker="o", color=COLORS[lay], label=lay)
            for x, y, best in pts:
                if best:
                    ax.plot([x], [y], marker="*", markersize=16, color=COLORS[lay])
        ax.set_xscale("log", base=2)
        ax.set_xlabel("input tokens per request")
        ax.set_ylabel("tokens/s")
        ax.set_title(f"B = {b}")
        ax.legend()
    fig.suptitle(f"{title}: fixed-layout throughput, {data['output_len']} output tokens (star: best)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--switch")
    ap.add_argument("--layouts")
    ap.add_argument("--out", default="docs/img")
    ap.add_argument("--tag", default="t2")
    ap.add_argument("--title", default="2 x H200")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    if a.switch:
        data = json.load(open(a.switch))
        if data.get("live"):
            switch_overhead(data, os.path.join(a.out, f"{a.tag}-switch-overhead.png"), a.title)
        if data.get("primitives"):
            switch_primitives(data, os.path.join(a.out, f"{a.tag}-switch-primitives.png"), a.title)
    if a.layouts:
        regime_map(json.load(open(a.layouts)), os.path.join(a.out, f"{a.tag}-regime-map.png"), a.title)


if __name__ == "__main__":
    main()
