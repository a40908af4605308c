"""Random and mutated bodies against every POST endpoint: never a 5xx, never a crash, no page leak.

Bounded: FUZZ_REQUESTS bodies or FUZZ_SECONDS of sending, whichever ends first, each request with a
short client timeout (a request still generating when it expires is abandoned, which exercises
the disconnect path too). The seed is fixed so a failure reproduces; FUZZ_SEED overrides it.
"""
import json
import os
import random
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests

from conftest import Server, text_model_dir

FUZZ_REQUESTS = int(os.environ.get("FUZZ_REQUESTS", 3000))
FUZZ_SECONDS = float(os.environ.get("FUZZ_SECONDS", 45))
SEED = int(os.environ.get("FUZZ_SEED", 20261122))

VALID = {
    "/v1/completions": {"model": "fuzz", "prompt": "The sea", "max_tokens": 4, "temperature": 0.7, "top_p": 0.9,
                        "top_k": 5, "min_p": 0.05, "seed": 3, "stop": ["\n"], "n": 2, "logprobs": 2,
                        "stream": False, "ignore_eos": True, "return_token_ids": True, "stop_token_ids": [1]},
    "/v1/chat/completions": {"model": "fuzz", "messages": [{"role": "system", "content": "Be brief."},
                                                           {"role": "user", "content": [{"type": "text", "text": "hi"}]}],
                             "max_tokens": 4, "logprobs": True, "top_logprobs": 2, "stream": True,
                             "stream_options": {"include_usage": True}, "seed": 1, "n": 1},
    "/generate": {"input_ids": [[5, 6, 7], [8]], "sampling_params": {"max_new_tokens": 4, "temperature": 0, "stop": "x",
                                                                     "ignore_eos": True},
                  "return_logprob": True, "top_logprobs_num": 2, "rid": ["f-a", "f-b"], "stream": False},
    "/abort_request": {"rid": "f-a"},
    "/tokenize": {"text": "héllo 🌊", "add_special_tokens": True},
    "/detokenize": {"tokens": [5, 6, 300]},
}
STRINGS = ["", "x", "hi there", "<｜User｜>", "<｜end▁of▁sentence｜>", "\ud800", "🌊" * 3, "a" * 300, "null", "0",
           "fuzz", "tiny", "\x00", "\\", "\"", "tp", "stop", "text"]
INTS = [0, 1, -1, 2, 3, 7, 16, 20, 21, 128, 129, 511, 512, 4096, 5000, 2**31 - 1, 2**31, -2**31 - 1, 2**63 - 1,
        2**64, -2**63]
FLOATS = [0.0, 0.5, 1.0, -0.5, 2.0, 1e308, -1e-300, 1e-7, 3.5]


def rand_value(rng, depth=0):
    kind = rng.randrange(8 if depth < 3 else 5)
    if kind == 0:
        return None
    if kind == 1:
        return rng.random() < 0.5
    if kind == 2:
        return rng.choice(INTS)
    if kind == 3:
        return rng.choice(FLOATS)
    if kind == 4:
        return rng.choice(STRINGS)
    if kind == 5:
        return [rand_value(rng, depth + 1) for _ in range(rng.randrange(4))]
    if kind == 6:
        return [rng.randrange(-2, 600) for _ in range(rng.randrange(6))]
    return {rng.choice(STRINGS + ["max_tokens", "role", "content", "type"]): rand_value(rng, depth + 1)
            for _ in range(rng.randrange(3))}


def mutate(rng, obj, depth=0):
    """A copy of a JSON value with a few random changes somewhere inside."""
    if isinstance(obj, dict):
        obj = dict(obj)
        for _ in range(rng.randrange(1, 3)):
            op = rng.randrange(5)
            keys = list(obj)
            if op == 0 and keys:
                del obj[rng.choice(keys)]
            elif op == 1:
                obj[rng.choice(STRINGS + ["max_new_tokens", "bogus"])] = rand_value(rng)
            elif op in (2, 3) and keys:
                k = rng.choice(keys)
                obj[k] = mutate(rng, obj[k], depth + 1) if op == 2 and depth < 3 else rand_value(rng)
            elif keys:
                obj[rng.choice(keys)] = None
        return obj
    if isinstance(obj, list) and obj and rng.random() < 0.7:
        obj = list(obj)
        i = rng.randrange(len(obj))
        obj[i] = mutate(rng, obj[i], depth + 1) if depth < 3 else rand_value(rng)
        return obj
    return rand_value(rng)


def mangle(rng, raw):
    """Byte-level damage: truncation, flipped or inserted bytes."""
    raw = bytearray(raw)
    op = rng.randrange(4)
    if op == 0 and raw:
        del raw[rng.randrange(len(raw)):]
    elif op == 1 and raw:
        raw[rng.randrange(len(raw))] = rng.randrange(256)
    elif op == 2:
        pos = rng.randrange(len(raw) + 1)
        raw[pos:pos] = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 8)))
    else:
        raw = bytearray(rng.choice([b"", b"{", b"}", b"[]", b"null", b'{"a":', b"\xff\xfe", b'"\\u0000"']))
    return bytes(raw)


def make_body(rng):
    path = rng.choice(list(VALID))
    r = rng.random()
    if r < 0.15:
        body = VALID[path]
    elif r < 0.75:
        body = mutate(rng, VALID[path])
    elif r < 0.85:
        body = rand_value(rng)
    else:
        return path, mangle(rng, json.dumps(VALID[path]).encode())
    if isinstance(body, dict) and body.get("model") is not None and rng.random() < 0.8:
        body["model"] = "fuzz"
    return path, json.dumps(body).encode()


@pytest.fixture(scope="module")
def fuzz_server():
    s = Server(text_model_dir(), "--served-model-name", "fuzz", "--max-running-requests", "64", name="fuzz")
    yield s
    assert s.stop() == 0, s.log_tail()


def send(server, path, raw):
    try:
        with requests.post(server.url + path, data=raw, timeout=(5, 2),
                           headers={"Content-Type": "application/json"}, stream=True) as r:
            body = b"".join(r.iter_content(1 << 16))
            return r.status_code, body
    except (requests.Timeout, requests.ConnectionError) as e:
        if server.proc.poll() is not None:
            raise AssertionError(f"server died on {path} {raw[:200]!r}:\n{server.log_tail()}") from e
        return "timeout", b""


def test_fuzz_post_endpoints(fuzz_server):
    rng = random.Random(SEED)
    cases = [make_body(rng) for _ in range(FUZZ_REQUESTS)]
    deadline = time.monotonic() + FUZZ_SECONDS
    statuses, failures = Counter(), []

    def one(case):
        if time.monotonic() > deadline:
            return None
        path, raw = case
        status, body = send(fuzz_server, path, raw)
        if status != "timeout" and status >= 500:
            failures.append((path, raw[:300], status, body[:300]))
        elif status != "timeout" and status >= 400:
            err = json.loads(body)["error"]
            assert set(err) == {"message", "type", "param", "code"}, (path, raw, body)
        return path, status

    with ThreadPoolExecutor(8) as pool:
        for res in pool.map(one, cases):
            if res:
                statuses[res] += 1
    sent = sum(statuses.values())
    print(f"\nfuzz: {sent} requests (seed {SEED}); by endpoint and status: {dict(sorted(statuses.items(), key=str))}")
    assert not failures, failures[:5]
    assert sent >= min(FUZZ_REQUESTS, 500)
    assert fuzz_server.proc.poll() is None
    fuzz_server.wait_drained(timeout=30)
    assert fuzz_server.get("/health").status_code == 200
    # ignore_eos: a sampled end-of-sequence token would end it after one token and say nothing of the server.
    ok = fuzz_server.post("/generate", {"input_ids": [5], "sampling_params": {"max_new_tokens": 2, "ignore_eos": True}})
    assert ok.status_code == 200 and len(ok.json()["output_ids"]) == 2, ok.text
