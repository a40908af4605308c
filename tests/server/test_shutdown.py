"""SIGTERM/SIGINT: stop accepting, finish or abort what runs, exit 0."""
import signal
import threading
import time

import requests

from conftest import MODEL, Server


def test_sigterm_when_idle_exits_zero():
    s = Server(MODEL, name="idle")
    assert s.post("/generate", {"input_ids": [5], "sampling_params": {"max_new_tokens": 2}}).status_code == 200
    t0 = time.monotonic()
    assert s.stop(signal.SIGTERM) == 0, s.log_tail()
    assert time.monotonic() - t0 < 10
    assert "server stopped" in s.log_tail()


def test_sigterm_lets_short_requests_finish_and_aborts_long_ones():
    s = Server(MODEL, "--shutdown-timeout", "0.5", name="drain")
    results = {}

    def run(name, tokens):
        # Closing the response closes its connection: an idle keep-alive connection would hold the
        # server's exit for its keep-alive timeout (5 s).
        with s.post("/generate", {"input_ids": [5, 6], "sampling_params": {
                "max_new_tokens": tokens, "temperature": 0, "ignore_eos": True}}, timeout=30) as r:
            results[name] = r.json()

    long = threading.Thread(target=run, args=("long", 2000))
    long.start()
    deadline = time.monotonic() + 10
    while s.metrics()["splash_num_requests_running"] < 1 and time.monotonic() < deadline:
        time.sleep(0.02)
    short = threading.Thread(target=run, args=("short", 8))
    short.start()
    time.sleep(0.2)
    s.proc.send_signal(signal.SIGTERM)
    time.sleep(0.3)
    # Draining: new requests are refused, health says so.
    assert requests.get(s.url + "/health", timeout=5).status_code == 503
    assert s.post("/generate", {"input_ids": [5]}).status_code == 503
    assert s.proc.wait(20) == 0, s.log_tail()
    long.join(5)
    short.join(5)
    assert results["short"]["meta_info"]["finish_reason"]["type"] == "length"
    assert results["long"]["meta_info"]["finish_reason"]["type"] == "abort"


def test_second_sigint_aborts_at_once():
    s = Server(MODEL, "--shutdown-timeout", "60", name="sigint")
    result = {}

    def run():
        with s.post("/v1/completions", {"prompt": [5], "max_tokens": 2000, "temperature": 0, "ignore_eos": True,
                                        "stream": True}, timeout=30) as r:
            result["text"] = r.text

    t = threading.Thread(target=run)
    t.start()
    deadline = time.monotonic() + 10
    while s.metrics()["splash_num_requests_running"] < 1 and time.monotonic() < deadline:
        time.sleep(0.02)
    s.proc.send_signal(signal.SIGINT)
    time.sleep(0.3)
    s.proc.send_signal(signal.SIGINT)
    t0 = time.monotonic()
    assert s.proc.wait(15) == 0, s.log_tail()
    assert time.monotonic() - t0 < 3
    t.join(5)
    body = result["text"]
    assert '"finish_reason":"abort"' in body and body.endswith("data: [DONE]\n\n")
