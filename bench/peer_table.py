"""One table of SPLASH's attention kernels next to their peers at identical shapes.

    python3 bench/peer_table.py bench_attention.log peer.json [--markdown]

Reads splash_bench_attention's output (its decode and prefill tables) and bench/peer_mla.py's JSON, and
prints per point both times, both rates counted with the same formulas (decode FLOPs = 2 B H context
(W + C) with W = 576, C = 512; decode bytes = the latent cache read, B context W 2; prefill FLOPs =
2 H (192 + 128) (T (ctx - T) + T (T + 1) / 2) for T rows against ctx tokens), and the speed ratio SPLASH / peer (above 1: SPLASH is faster).
"""
import argparse
import json
import re

W, C = 576, 512


def splash_rows(log):
    """{("decode", H, B, ctx): ms} and {("prefill", T): ms} from splash_bench_attention's tables."""
    rows, section = {}, None
    for line in open(log):
        f = line.split()
        if line.startswith(("absorbed decode", "expanded prefill", "generic kernels")):  # the tables' titles
            section = "decode" if line.startswith("absorbed decode") else "prefill" if line.startswith(
                "expanded prefill") else None
        elif section == "decode" and len(f) >= 4 and f[0].isdigit() and re.fullmatch(r"[\d.]+", f[3]):
            rows[("decode", int(f[2]), int(f[0]), int(f[1]))] = float(f[3])
        elif section == "prefill" and len(f) >= 3 and f[0].isdigit() and f[1].isdigit() and re.fullmatch(r"[\d.]+", f[2]):
            rows[("prefill", int(f[0]), int(f[1]))] = float(f[2])  # rows, context, ms
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("splash_log")
    ap.add_argument("peer_json")
    ap.add_argument("--markdown", action="store_true", help="a markdown table for docs/perf.md")
    args = ap.parse_args()
    ours = splash_rows(args.splash_log)
    peers = json.load(open(args.peer_json))
    md = args.markdown
    head = ["form", "H", "B", "context", "SPLASH ms", "peer ms", "SPLASH TFLOP/s", "peer TFLOP/s", "SPLASH/peer", "peer"]
    print(("| " + " | ".join(head) + " |\n|" + "---|" * len(head)) if md else
          f"{'form':<8}{'H':>4}{'B':>5}{'context':>8}{'splash_ms':>11}{'peer_ms':>10}{'splash_TF':>10}{'peer_TF':>9}"
          f"{'ratio':>8}  peer")
    for p in peers:
        if "error" in p:
            print(f"peer failed: {p['error']}")
            continue
        if p["form"] == "decode":
            key = ("decode", p["H"], p["B"], p["context"])
            flops = 2.0 * p["B"] * p["H"] * p["context"] * (W + C)
            cells = ["decode", p["H"], p["B"], p["context"]]
        else:
            T, ctx = p["tokens"], p.get("context", p["tokens"])
            key = ("prefill", T, ctx)
            # Causal at the bottom right: row i of T attends to ctx - T + i + 1 tokens.
            flops = 2.0 * 128 * (192 + 128) * (T * (ctx - T) + T * (T + 1) / 2)
            cells = ["prefill", 128, 1, T if ctx == T else f"{T}/{ctx}"]  # rows/context when chunked
        mine, theirs = ours.get(key), p["ms"]
        rate = lambda ms: f"{flops / ms / 1e9:.0f}" if ms else "-"
        ratio = f"{theirs / mine:.2f}" if mine and theirs else "-"
        cells += [f"{mine:.3f}" if mine else "-", f"{theirs:.3f}" if theirs else "-", rate(mine), rate(theirs), ratio,
                  p["peer"]]
        if md:
            print("| " + " | ".join(str(c) for c in cells) + " |")
        else:
            print(f"{cells[0]:<8}{cells[1]:>4}{cells[2]:>5}{cells[3]:>8}{cells[4]:>11}{cells[5]:>10}{cells[6]:>10}"
                  f"{cells[7]:>9}{cells[8]:>8}  {cells[9]}")


if __name__ == "__main__":
    main()
