"""The admin and observability routes (/version, /get_model_info, /get_server_info, /flush_cache),
--log-format json with its per-request line, and the queue-time and latency histograms."""
import json
import re
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import requests

from conftest import API_KEY, MODEL, ROOT, Server, text_model_dir

LONG = {"max_new_tokens": 2000, "ignore_eos": True, "temperature": 0}


@pytest.fixture(scope="module")
def json_server():
    """A text server started with flags the tests look for, logging JSON."""
    s = Server(text_model_dir(), "--served-model-name", "tiny-admin", "--max-running-requests", "7",
               "--chunked-prefill-size", "256", "--log-format", "json", api_key=API_KEY, name="admin")
    yield s
    assert s.stop() == 0, s.log_tail()


def log_lines(server):
    server.log.flush()
    return Path(server.log.name).read_text(errors="replace").splitlines()


def wait_for_line(server, pred, timeout=10):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = [line for line in log_lines(server) if pred(line)]
        if found:
            return found[0]
        time.sleep(0.05)
    raise AssertionError(f"no such log line:\n{server.log_tail()}")


def test_version_is_the_projects(json_server):
    project = re.search(r"project\(splash[^)]*VERSION ([0-9.]+)", (ROOT / "CMakeLists.txt").read_text()).group(1)
    r = json_server.get("/version")
    assert r.status_code == 200 and r.json() == {"version": project}


def test_model_info(json_server, ids_server):
    info = json_server.get("/get_model_info").json()
    assert info["is_generation"] is True
    assert info["served_model_name"] == "tiny-admin"
    assert info["model_path"] == info["tokenizer_path"] and Path(info["model_path"]).is_dir()
    assert info["context_length"] == 4096 and info["vocab_size"] > 0 and info["model_type"] == "deepseek_v3"
    assert info["architectures"] == ["DeepseekV3ForCausalLM"]
    # Without a tokenizer there is no tokenizer path.
    assert ids_server.get("/get_model_info").json()["tokenizer_path"] is None


def test_server_info_shows_flags_and_live_state(json_server):
    info = json_server.get("/get_server_info").json()
    assert info["max_running_requests"] == 7 and info["chunked_prefill_size"] == 256
    assert info["ranks"] == 2 and info["attn_layout"] == "dop" and info["log_format"] == "json"
    assert info["port"] == json_server.port and info["api_key"] == "<redacted>"
    assert info["version"] == json_server.get("/version").json()["version"]
    (idle,) = info["internal_states"]
    assert idle["num_requests_running"] == 0 and idle["kv_pages_usage"] == 0
    # The flag as given (auto unless SPLASH_SERVER_ARGS names one) and the cache's element as it runs.
    assert info["kv_cache_dtype"] in ("auto", "bf16", "bfloat16", "fp8_e4m3", "fp8")
    assert idle["kv_cache_dtype"] in ("f32", "bf16", "fp8_e4m3")
    assert [p["rank"] for p in idle["kv_pages"]] == [0, 1] and idle["attention_layout"] == "dop"

    with ThreadPoolExecutor(1) as pool:
        done = pool.submit(json_server.post, "/generate",
                           {"input_ids": [5, 6, 7], "rid": "admin-live", "sampling_params": LONG})
        deadline = time.monotonic() + 10
        while True:
            (live,) = json_server.get("/get_server_info").json()["internal_states"]
            if live["num_requests_running"] == 1:
                break
            assert time.monotonic() < deadline, live
            time.sleep(0.02)
        assert live["kv_pages_usage"] > 0 and sum(p["used"] for p in live["kv_pages"]) > 0
        assert json_server.post("/abort_request", {"rid": "admin-live"}).json()["aborted"] is True
        assert done.result().status_code == 200
    json_server.wait_drained()


def test_flush_cache_and_pause_show_at_once(json_server):
    """An admin call's answer comes after /get_server_info shows its effect (a CI run once read the state of
    before a flush). Repeated, since a stale read is a race."""
    def state():
        return json_server.get("/get_server_info").json()["internal_states"][0]
    json_server.wait_drained()
    for i in range(8):
        r = json_server.post("/generate", {"input_ids": [9, 10 + i, 11] * 70, "sampling_params": {"max_new_tokens": 2}})
        assert r.status_code == 200, r.text
        json_server.wait_drained()
        assert sum(p["cached"] for p in state()["kv_pages"]) > 0, state()  # the prompt stays cached
        r = json_server.post("/flush_cache")
        assert r.status_code == 200 and r.json()["success"] is True and r.json()["pages_freed"] > 0, r.text
        assert all(p["cached"] == 0 and p["free"] == p["capacity"] for p in state()["kv_pages"]), state()
        assert json_server.post("/pause_generation", {"mode": "in_place"}).status_code == 200
        assert state()["generation_paused"] is True
        assert json_server.post("/continue_generation").status_code == 200
        assert state()["generation_paused"] is False


def test_health_generate(json_server):
    """SGLang's probe: open like /health; idle, it makes one token itself; busy, it waits for any new token
    instead of queueing; paused, 503."""
    def probe():
        return requests.get(json_server.url + "/health_generate", timeout=30)  # no API key
    json_server.wait_drained()
    before = json_server.metrics()
    r = probe()
    assert r.status_code == 200 and r.json() == {"status": "ok"}, r.text
    after = json_server.wait_drained()
    assert after["splash_generation_tokens_total"] == before["splash_generation_tokens_total"] + 1
    assert after["splash_prompt_tokens_total"] == before["splash_prompt_tokens_total"] + 1

    with ThreadPoolExecutor(1) as pool:
        running = pool.submit(json_server.post, "/generate", {"input_ids": [5, 6, 7], "sampling_params": {
            "max_new_tokens": 400, "ignore_eos": True}})
        while json_server.metrics()["splash_num_requests_running"] < 1:
            time.sleep(0.02)
        prompts = json_server.metrics()["splash_prompt_tokens_total"]
        assert probe().status_code == 200
        assert json_server.metrics()["splash_prompt_tokens_total"] == prompts  # no probe request was added
        assert json_server.post("/pause_generation", {"mode": "in_place"}).status_code == 200
        r = probe()
        assert r.status_code == 503 and "paused" in r.json()["error"]["message"], r.text
        assert json_server.post("/continue_generation").status_code == 200
        assert running.result(timeout=60).status_code == 200
    json_server.wait_drained()


def test_json_log_lines_and_finished_request(json_server):
    r = json_server.post("/generate", {"input_ids": [5, 6, 7], "rid": "admin-log",
                                       "sampling_params": {"max_new_tokens": 4, "ignore_eos": True}})
    assert r.status_code == 200
    line = wait_for_line(json_server, lambda l: '"admin-log"' in l and "request finished" in l)
    entry = json.loads(line)
    assert entry["level"] == "info" and entry["message"] == "request finished"
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", entry["timestamp"])
    assert entry["finish_reason"] == "length"
    assert entry["prompt_tokens"] == 3 and entry["completion_tokens"] == 4
    assert 0 <= entry["queue_time_s"] <= entry["ttft_s"] <= entry["e2e_latency_s"]
    for raw in log_lines(json_server):  # the start-up lines too
        assert isinstance(json.loads(raw), dict), raw


def test_text_log_has_the_finished_line(ids_server):
    r = ids_server.post("/generate", {"input_ids": [5, 6], "rid": "admin-text-log",
                                      "sampling_params": {"max_new_tokens": 2, "ignore_eos": True}})
    assert r.status_code == 200
    line = wait_for_line(ids_server, lambda l: "request_id=admin-text-log " in l)
    assert "[info] request finished" in line and "finish_reason=length" in line
    assert "prompt_tokens=2" in line and "completion_tokens=2" in line and "e2e_latency_s=" in line


def test_latency_histograms_count_finished_requests(json_server):
    def counts():
        m = json_server.metrics()
        return (m["splash_request_queue_time_seconds_count"], m["splash_e2e_request_latency_seconds_count"],
                sum(v for k, v in m.items() if k.startswith("splash_requests_finished_total")))

    json_server.wait_drained()
    before = counts()
    assert before[0] == before[1] == before[2]
    with ThreadPoolExecutor(3) as pool:
        results = list(pool.map(lambda i: json_server.post(
            "/generate", {"input_ids": [5 + i], "sampling_params": {"max_new_tokens": 3}}), range(3)))
    assert all(r.status_code == 200 for r in results)
    json_server.wait_drained()
    after = counts()
    assert [a - b for a, b in zip(after, before)] == [3, 3, 3]
    m = json_server.metrics()
    assert m['splash_e2e_request_latency_seconds_bucket{le="+Inf"}'] == after[1]


def test_fp8_kv_cache_is_reported_and_serves(ids_server):
    """--kv-cache-dtype fp8_e4m3: server_args and the live state say so, the startup log gives its bytes per
    token, and a request decodes from the FP8 cache."""
    s = Server(MODEL, "--kv-cache-dtype", "fp8_e4m3", name="admin_fp8")
    try:
        info = s.get("/get_server_info").json()
        assert info["kv_cache_dtype"] == "fp8_e4m3"
        assert info["internal_states"][0]["kv_cache_dtype"] == "fp8_e4m3"
        r = s.post("/generate", {"input_ids": [5, 6, 7, 8], "sampling_params": {"max_new_tokens": 6, "temperature": 0,
                                                                               "ignore_eos": True}})
        assert r.status_code == 200 and len(r.json()["output_ids"]) == 6, r.text
        assert re.search(r"KV cache: fp8_e4m3 \(84 B per token and layer\)", s.log_tail(20000)), s.log_tail()
        # The capacity in pages is the flag's (--kv-pages), whatever the element.
        assert [p["capacity"] for p in info["internal_states"][0]["kv_pages"]] == \
            [p["capacity"] for p in ids_server.get("/get_server_info").json()["internal_states"][0]["kv_pages"]]
    finally:
        assert s.stop() == 0, s.log_tail()
