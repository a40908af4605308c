"""Aborts and client disconnects free the request's pages; the server keeps serving."""
import threading
import time

import pytest
import requests

LONG = {"temperature": 0, "ignore_eos": True, "max_new_tokens": 2000}


def wait_for_owner(server, rid, timeout=10):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if any(rid in owned for owned in server.get("/layout").json()["owners"]):
            return
        time.sleep(0.02)
    raise AssertionError(f"{rid} never ran")


def aborted_count(server):
    return server.metrics()['splash_requests_finished_total{reason="abort"}']


def test_abort_request_by_rid(ids_server):
    result = {}
    t = threading.Thread(target=lambda: result.update(
        r=ids_server.post("/generate", {"input_ids": [5, 6, 7], "rid": "abort-me", "sampling_params": LONG})))
    t.start()
    wait_for_owner(ids_server, "abort-me")
    assert ids_server.kv_used() > 0
    # An rid is unique while its request lives.
    dup = ids_server.post("/generate", {"input_ids": [5], "rid": "abort-me"})
    assert dup.status_code == 400 and dup.json()["error"]["param"] == "rid"
    assert ids_server.post("/abort_request", {"rid": "abort-me"}).json() == {"rid": "abort-me", "aborted": True}
    t.join(30)
    out = result["r"].json()
    assert out["meta_info"]["finish_reason"]["type"] == "abort"
    assert 0 < out["meta_info"]["completion_tokens"] < 2000
    # Its answer came after the state dropped it: no polling needed.
    owned = ids_server.get("/layout").json()["owners"]
    assert all("abort-me" not in o for o in owned), owned
    ids_server.wait_drained()
    assert ids_server.post("/abort_request", {"rid": "abort-me"}).json()["aborted"] is False


def test_streaming_client_disconnect_aborts(ids_server):
    before = aborted_count(ids_server)
    r = ids_server.post("/v1/completions", {"prompt": [5, 6, 7], "max_tokens": 2000, "temperature": 0,
                                            "ignore_eos": True, "stream": True}, stream=True)
    lines = r.iter_lines()
    for _ in range(3):
        next(lines)
    assert ids_server.kv_used() > 0
    r.close()
    ids_server.wait_drained(timeout=10)
    assert aborted_count(ids_server) == before + 1


def test_non_streaming_client_disconnect_aborts(ids_server):
    before = aborted_count(ids_server)
    with pytest.raises((requests.Timeout, requests.ConnectionError)):  # requests reports a body read timeout as either
        ids_server.post("/v1/completions", {"prompt": [5, 6, 7], "max_tokens": 2000, "temperature": 0,
                                            "ignore_eos": True}, timeout=0.3)
    ids_server.wait_drained(timeout=10)
    assert aborted_count(ids_server) == before + 1


def test_abort_all(ids_server):
    results = []
    threads = [threading.Thread(target=lambda i=i: results.append(ids_server.post(
        "/generate", {"input_ids": [5 + i], "rid": f"all-{i}", "sampling_params": {**LONG, "max_new_tokens": 1000}})))
        for i in range(3)]
    for t in threads:
        t.start()
    for i in range(3):
        wait_for_owner(ids_server, f"all-{i}")
    assert ids_server.post("/abort_request", {"abort_all": True}).status_code == 200
    for t in threads:
        t.join(30)
    assert [r.json()["meta_info"]["finish_reason"]["type"] for r in results] == ["abort"] * 3
    ids_server.wait_drained()
