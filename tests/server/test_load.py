"""A bounded load test: 64 concurrent streaming clients, 256 requests; every one completes with
the reference greedy tokens. Prints requests/s and tokens/s (pytest -s shows them)."""
import json
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests

from conftest import MODEL, Server

CLIENTS, REQUESTS, MAX_TOKENS = 64, 256, 24


@pytest.fixture(scope="module")
def load_server():
    s = Server(MODEL, "--max-running-requests", "64", name="load", kv_pages=1024)
    yield s
    assert s.stop() == 0, s.log_tail()


def test_64_streaming_clients(load_server, reference):
    short = reference[:4]  # prompts of 1 to 64 tokens

    def one(i):
        ids, greedy = short[i % len(short)]
        body = {"prompt": ids, "max_tokens": MAX_TOKENS, "temperature": 0, "ignore_eos": True, "stream": True,
                "return_token_ids": True}
        tokens, done = [], False
        with requests.post(load_server.url + "/v1/completions", json=body, stream=True, timeout=120) as r:
            assert r.status_code == 200, r.text
            for line in r.iter_lines(decode_unicode=True):
                if line == "data: [DONE]":
                    done = True
                elif line.startswith("data: "):
                    tokens += [t for ch in json.loads(line[6:])["choices"] for t in ch["token_ids"]]
        return done and tokens == greedy

    t0 = time.monotonic()
    with ThreadPoolExecutor(CLIENTS) as pool:
        ok = list(pool.map(one, range(REQUESTS)))
    wall = time.monotonic() - t0
    assert all(ok), f"{ok.count(False)} of {REQUESTS} requests failed or differ from the reference"
    m = load_server.wait_drained()
    generated = m["splash_generation_tokens_total"]
    assert generated == REQUESTS * MAX_TOKENS
    print(f"\nload: {REQUESTS} requests from {CLIENTS} streaming clients in {wall:.2f} s: "
          f"{REQUESTS / wall:.1f} requests/s, {generated / wall:.0f} generated tokens/s, "
          f"{(generated + m['splash_prompt_tokens_total']) / wall:.0f} tokens/s in+out")
