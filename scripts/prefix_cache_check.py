#!/usr/bin/env python3
"""The prefix cache and sample groups on a real backend: `splash generate` runs one workload with the
cache on and with --disable-radix-cache, and this compares them.

The workload: groups of 8 seeded samples of one prompt (they fork from the first after its prefill), a
greedy group, and greedy multi-turn conversations that share a system prompt. Printed: prompt tokens
computed on each side (from generate's summary), cached tokens, and how many outputs are identical.
On the CPU backend (f32) every output must match; on a GPU (bf16) a request that runs in a different
batch may round differently, so the script reports the agreement and fails only below --min-agreement.
Whatever the backend, the greedy group's 8 samples must all give its leader's tokens.

usage: prefix_cache_check.py SPLASH MODEL_DIR [--min-agreement F] [splash generate flags...]
"""
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path


def workload(vocab):
    lines = []
    for g in range(3):  # groups of 8 samples, prompts that are not a whole number of pages
        prompt = [(7 * g + 3 * i + 1) % vocab for i in range(150 + 37 * g)]
        for s in range(8):
            lines.append({"input_ids": prompt, "max_tokens": 16, "temperature": 0.8, "seed": 100 * g + s,
                          "ignore_eos": True})
    # A greedy group: every sample must give the leader's tokens, which tests the forked pages on any
    # backend (the samples decode side by side in one batch, each on its own copy of the last page).
    greedy_prompt = [(9 * i + 4) % vocab for i in range(173)]
    for s in range(8):
        lines.append({"input_ids": greedy_prompt, "max_tokens": 24, "temperature": 0, "ignore_eos": True})
    system = [(5 * i + 2) % vocab for i in range(96)]
    for c in range(4):  # conversations: each turn resends the history
        history = list(system)
        for turn in range(3):
            history = history + [(11 * c + 13 * turn + k) % vocab for k in range(9)]
            lines.append({"input_ids": list(history), "max_tokens": 12, "temperature": 0, "ignore_eos": True})
    return lines


def run(splash, model, flags, inp, out):
    p = subprocess.run([splash, "generate", "--model", model, "--input", inp, "--output", out, *flags],
                       capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        sys.exit(f"splash generate {' '.join(flags)} failed ({p.returncode}):\n{p.stderr[-3000:]}")
    computed = int(re.search(r"prompt tokens (\d+)", p.stderr).group(1))
    rows = [json.loads(l) for l in Path(out).read_text().splitlines()]
    return computed, sorted(rows, key=lambda r: r["index"])


def main():
    args = sys.argv[1:]
    if len(args) < 2:
        sys.exit(__doc__)
    splash, model, flags = args[0], args[1], args[2:]
    min_agreement = 1.0
    if "--min-agreement" in flags:
        i = flags.index("--min-agreement")
        min_agreement = float(flags[i + 1])
        del flags[i:i + 2]
    vocab = json.loads((Path(model) / "config.json").read_text())["vocab_size"]
    with tempfile.TemporaryDirectory() as d:
        inp = Path(d) / "in.jsonl"
        lines = workload(vocab)
        inp.write_text("".join(json.dumps(l) + "\n" for l in lines))
        on_computed, on = run(splash, model, flags, str(inp), str(Path(d) / "on.jsonl"))
        off_computed, off = run(splash, model, flags + ["--disable-radix-cache"], str(inp), str(Path(d) / "off.jsonl"))
    same = sum(a["output_ids"] == b["output_ids"] for a, b in zip(on, off))
    cached = sum(r.get("cached_tokens", 0) for r in on)
    group_prompt = sum(len(l["input_ids"]) for l in lines[:32])
    print(f"prompt tokens computed: cache on {on_computed}, off {off_computed} "
          f"({off_computed / max(on_computed, 1):.2f}x fewer); cached {cached}")
    print(f"groups: 4 x 8 samples, {group_prompt} prompt tokens if each prefilled alone")
    agreement = same / len(on)
    print(f"identical outputs: {same}/{len(on)} ({agreement:.1%})")
    # By kind: a fork that read wrong KV would spoil its followers' outputs while the leaders agree.
    kinds = {"group leaders": [i for i in range(24) if i % 8 == 0], "group followers": [i for i in range(24) if i % 8],
             "greedy group": list(range(24, 32)), "conversation turns": list(range(32, len(on)))}
    for kind, idx in kinds.items():
        k = sum(on[i]["output_ids"] == off[i]["output_ids"] for i in idx)
        first = sum(on[i]["output_ids"][:1] == off[i]["output_ids"][:1] for i in idx)
        print(f"  {kind}: {k}/{len(idx)} identical, {first}/{len(idx)} same first token")
    greedy_same = sum(on[i]["output_ids"] == on[24]["output_ids"] for i in range(24, 32))
    print(f"greedy group, cache on: {greedy_same}/8 samples give the leader's tokens")
    ok = agreement >= min_agreement and on_computed < off_computed and greedy_same == 8
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
