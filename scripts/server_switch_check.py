"""The server under concurrent load while every one of the 12 layout switches runs, on any backend.

    python3 scripts/server_switch_check.py BINARY MODEL_DIR [serve args ...]

Starts `splash serve MODEL_DIR --attn-layout tp [serve args]` twice on loopback: once without switches
(the baseline), once with --switch walking all 12 directions (tp->dp->cp->dop->tp->cp->dp->dop->cp->tp->
dop->dp->tp) while waves of 8 concurrent greedy requests of the reference prompts run. Fails (exit 1)
unless every request answers 200, every scheduled switch ran (none refused), the KV pages drain to zero,
and every prompt whose reference greedy margin (reference.json) is at least --greedy-margin gives the
reference's greedy tokens (transformers'); prompts nearer a tie are reported, not judged (the rule of
`splash check`). Agreement with the baseline is reported. Only the standard library: it runs on the
device machine as is.
"""
import argparse
import json
import os
import socket
import struct
import subprocess
import sys
import tempfile
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor

WALK = "step=4:dp,step=8:cp,step=12:dop,step=16:tp,step=20:cp,step=24:dp,step=28:dop,step=32:cp,step=36:tp,step=40:dop,step=44:dp,step=48:tp"


def read_prompts(model_dir):
    """[(input_ids, greedy, min_margin)] of the reference prompts (safetensors read by hand: no numpy)."""
    data = open(os.path.join(model_dir, "reference.safetensors"), "rb").read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    margins = json.load(open(os.path.join(model_dir, "reference.json")))["prompts"]
    def ints(name):
        b, e = header[name]["data_offsets"]
        return list(struct.unpack(f"<{(e - b) // 8}q", data[8 + n + b:8 + n + e]))

    return [(ints(f"p{k}.input_ids"), ints(f"p{k}.greedy"), m["greedy_min_margin"]) for k, m in enumerate(margins)]


class Server:
    def __init__(self, binary, model_dir, args, name):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.log = tempfile.NamedTemporaryFile(prefix=f"splash_{name}_", suffix=".log", delete=False)
        cmd = [binary, "serve", "--model", model_dir, "--host", "127.0.0.1", "--port", str(self.port), *args]
        print("$", " ".join(cmd), flush=True)
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                sys.exit(f"server exited with {self.proc.returncode}:\n{self.tail()}")
            try:
                if self.get("/health", raw=True) == 200:
                    return
            except OSError:
                pass
            time.sleep(0.2)
        sys.exit(f"server not healthy after 180 s:\n{self.tail()}")

    def tail(self):
        self.log.flush()
        return open(self.log.name, errors="replace").read()[-3000:]

    def get(self, path, raw=False):
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=10) as r:
            return r.status if raw else r.read().decode()

    def generate(self, ids, tokens):
        body = json.dumps({"input_ids": ids, "sampling_params": {"max_new_tokens": tokens, "temperature": 0,
                                                                 "ignore_eos": True}}).encode()
        req = urllib.request.Request(f"http://127.0.0.1:{self.port}/generate", body,
                                     {"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=300) as r:
            return r.status, json.loads(r.read())["output_ids"]

    def kv_used(self):
        used = 0.0
        for line in self.get("/metrics").splitlines():
            if line.startswith("splash_kv_pages_used"):
                used += float(line.rsplit(" ", 1)[1])
        return used

    def stop(self):
        self.proc.terminate()
        return self.proc.wait(60)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("binary")
    ap.add_argument("model")
    ap.add_argument("--greedy-margin", type=float, default=0.05)
    a, serve_args = ap.parse_known_args()
    prompts = read_prompts(a.model)[:4]
    ok = True

    base = Server(a.binary, a.model, ["--attn-layout", "tp", *serve_args], "baseline")
    baseline = [base.generate(ids, len(greedy))[1] for ids, greedy, _ in prompts]
    base.stop()

    s = Server(a.binary, a.model, ["--attn-layout", "tp", "--switch", WALK, *serve_args], "walk")
    results = []
    for wave in range(8):  # waves until the engine has passed every scheduled step with requests mid-flight
        if wave >= 2 and len(json.loads(s.get("/layout"))["switches"]) == 12:
            break
        with ThreadPoolExecutor(8) as pool:
            results += list(pool.map(lambda i: (i % len(prompts), s.generate(prompts[i % len(prompts)][0],
                                                                              len(prompts[i % len(prompts)][1]))),
                                     range(8)))
    deadline = time.monotonic() + 30
    while s.kv_used() > 0 and time.monotonic() < deadline:
        time.sleep(0.1)
    layout = json.loads(s.get("/layout"))
    leaked = s.kv_used()
    rc = s.stop()

    history = layout["switches"]
    refused = [h for h in history if "refused" in h]
    print(f"switches run {len(history) - len(refused)} of {len(history)} scheduled; final layout {layout['layout']}")
    if len(history) != 12 or refused:
        ok = False
        print("FAIL: not every scheduled switch ran:", history)
    if leaked:
        ok = False
        print(f"FAIL: {leaked} KV pages still used after the requests finished")
    if rc != 0:
        ok = False
        print(f"FAIL: the server exited with {rc}:\n{s.tail()}")
    as_ref = as_base = judged = 0
    for k, (status, out) in results:
        greedy, margin = prompts[k][1], prompts[k][2]
        match = out == greedy
        as_ref += match
        as_base += out == baseline[k]
        if margin >= a.greedy_margin:
            judged += 1
            if not match:
                ok = False
                first = next((i for i, (x, y) in enumerate(zip(out, greedy)) if x != y), len(out))
                print(f"FAIL: p{k} (reference margin {margin:.2e}) differs from the reference greedy at token {first}")
        if status != 200:
            ok = False
            print(f"FAIL: p{k} answered {status}")
    print(f"{judged}/{len(results)} requests judged (reference margin >= {a.greedy_margin}); {as_ref}/{len(results)} "
          f"gave the reference's greedy tokens, {as_base}/{len(results)} the baseline server's; {'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
