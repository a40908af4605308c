"""The RL weight cycle: /update_weights_from_disk (greedy outputs become those of a server started on the
new checkpoint, in layouts with projection replicas and without, across forced switches and with a switch
in transit; nothing cached under the old weights is found again; another architecture is refused and the
old weights serve on), and /release_memory_occupation + /resume_memory_occupation."""
import concurrent.futures as cf
import json
import shutil
import struct
import tempfile
import time
from pathlib import Path

import pytest

from conftest import MODEL, Server

PROMPTS = [[5, 6, 7, 8], list(range(40, 80)), [300, 2, 9, 44, 17]]
GREEDY = {"max_new_tokens": 16, "temperature": 0, "ignore_eos": True}


def perturbed_checkpoint():
    """The fixture with every q_b_proj negated (the sign bits of its BF16 values): the same architecture,
    other outputs. Q-B is part of the projection replicas of DP and CP, so a stale replica would show."""
    d = Path(tempfile.mkdtemp(prefix="splash_weights_b_"))
    shutil.copy(MODEL / "config.json", d / "config.json")
    data = bytearray((MODEL / "model.safetensors").read_bytes())
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    flipped = 0
    for name, t in header.items():
        if name.endswith("q_b_proj.weight"):
            assert t["dtype"] == "BF16"
            begin, end = t["data_offsets"]
            for i in range(8 + n + begin + 1, 8 + n + end, 2):  # little endian: the high byte holds the sign
                data[i] ^= 0x80
            flipped += 1
    assert flipped > 0
    (d / "model.safetensors").write_bytes(bytes(data))
    return d


def other_architecture():
    """The fixture's weights under a config with one layer less."""
    d = Path(tempfile.mkdtemp(prefix="splash_weights_c_"))
    cfg = json.loads((MODEL / "config.json").read_text())
    cfg["num_hidden_layers"] -= 1
    (d / "config.json").write_text(json.dumps(cfg))
    (d / "model.safetensors").symlink_to(MODEL / "model.safetensors")
    return d


@pytest.fixture(scope="module")
def checkpoint_b():
    return perturbed_checkpoint()


def start(model, layout, name):
    # Roomy: DP and CP hold the projection replicas in pool pages too.
    return Server(model, "--page-size", "8", layout=layout, name=name, kv_pages=2048)


@pytest.fixture(scope="module")
def want(checkpoint_b):
    """want(key, layout): the greedy outputs of a fresh server started on checkpoint key ("a" or "b") in
    that layout, made on first use. The reference runs the layout under test because on the GPU the bf16
    greedy tokens of this low-margin fixture depend on a layout's arithmetic (on the CPU every layout
    agrees); outputs() flushes the prefix cache and sends one request at a time, so both sides prefill and
    decode the same batches."""
    made = {}

    def get(key, layout):
        if (key, layout) not in made:
            s = start(MODEL if key == "a" else checkpoint_b, layout, f"weights_ref_{key}_{layout}")
            try:
                made[key, layout] = outputs(s)
            finally:
                assert s.stop() == 0, s.log_tail()
        return made[key, layout]

    return get


def generate(server, ids):
    r = server.post("/generate", {"input_ids": ids, "sampling_params": GREEDY})
    assert r.status_code == 200, r.text
    return r.json()


def outputs(server):
    assert server.post("/flush_cache").status_code == 200
    return [generate(server, p)["output_ids"] for p in PROMPTS]


def update(server, model, **kw):
    r = server.post("/update_weights_from_disk", {"model_path": str(model), **kw}, timeout=120)
    assert r.status_code == 200 and r.json()["success"] is True, r.text
    return r.json()


def switch(server, layout):
    r = server.post("/layout", {"layout": layout})
    assert r.status_code == 200 and r.json()["layout"] == layout, r.text


def start_running(server, pool, body):
    """Sends the /generate request on the pool and returns its future once it runs."""
    running = pool.submit(server.post, "/generate", body)
    deadline = time.monotonic() + 20
    while server.metrics()["splash_num_requests_running"] < 1:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    return running


def weight_version(server):
    return server.get("/get_server_info").json()["weight_version"]


def free_pages(server):
    return [p["free"] for p in server.get("/get_server_info").json()["internal_states"][0]["kv_pages"]]


@pytest.mark.parametrize("layout", ["dp", "dop"])
def test_update_gives_the_new_checkpoints_outputs_across_switches(layout, checkpoint_b, want):
    s = start(MODEL, layout, f"weights_{layout}")
    try:
        assert weight_version(s) == "default"
        assert want("a", layout) != want("b", layout)
        assert outputs(s) == want("a", layout)
        assert update(s, checkpoint_b)["message"].endswith("weight version 1")
        assert outputs(s) == want("b", layout)
        assert weight_version(s) == "1"
        assert generate(s, PROMPTS[0])["meta_info"]["weight_version"] == "1"
        # A switch after the update moves the new weights: into TP from DP drops the replicas, from DOP
        # keeps the shards; the way back into a replicated layout gathers the new shards.
        switch(s, "tp")
        assert outputs(s) == want("b", "tp")
        update(s, MODEL, weight_version="back-to-a")
        assert outputs(s) == want("a", "tp")
        switch(s, "cp")
        assert outputs(s) == want("a", "cp")
        assert weight_version(s) == "back-to-a"
        r = s.post("/v1/completions", {"prompt": PROMPTS[0], "max_tokens": 2})
        assert r.json()["weight_version"] == "back-to-a"
        assert s.post("/flush_cache").status_code == 200
        m = s.wait_drained()
        assert sum(v for k, v in m.items() if k.startswith("splash_kv_pages_cached")) == 0
    finally:
        assert s.stop() == 0, s.log_tail()


def test_update_with_a_switch_in_transit(checkpoint_b, want):
    s = start(MODEL, "tp", "weights_transit")
    try:
        assert s.post("/pause_generation", {"mode": "abort"}).status_code == 200
        r = s.post("/layout", {"layout": "dp"})
        assert r.status_code == 200, r.text
        update(s, checkpoint_b)  # the switch's transfers run first, then the weights load in DP
        assert s.get("/layout").json()["layout"] == "dp"
        assert s.post("/continue_generation").status_code == 200
        assert outputs(s) == want("b", "dp")
    finally:
        assert s.stop() == 0, s.log_tail()


@pytest.fixture(scope="module")
def server():
    s = start(MODEL, "dp", "weights")
    yield s
    assert s.stop() == 0, s.log_tail()


def test_no_prefix_cached_under_the_old_weights_is_reused(server, checkpoint_b, want):
    prompt = list(range(100, 160))
    generate(server, prompt)
    assert generate(server, prompt)["meta_info"]["cached_tokens"] > 0
    # A request keeps running through the update (paused in place): the blocks it uses are dropped too.
    body = {"input_ids": list(range(200, 260)), "sampling_params": {**GREEDY, "max_new_tokens": 400}}
    with cf.ThreadPoolExecutor(1) as pool:
        running = start_running(server, pool, body)
        assert server.post("/pause_generation", {"mode": "in_place"}).status_code == 200
        update(server, checkpoint_b)
        assert server.post("/continue_generation").status_code == 200
        assert generate(server, prompt)["meta_info"]["cached_tokens"] == 0
        assert generate(server, body["input_ids"])["meta_info"]["cached_tokens"] == 0
        done = running.result(timeout=60).json()
        assert done["meta_info"]["completion_tokens"] == 400
    assert generate(server, prompt)["meta_info"]["cached_tokens"] > 0  # cached again, under the new weights
    assert outputs(server) == want("b", "dp")
    update(server, MODEL)
    assert outputs(server) == want("a", "dp")


def test_another_architecture_is_refused_and_the_old_weights_serve_on(server, want):
    before = weight_version(server)
    r = server.post("/update_weights_from_disk", {"model_path": str(other_architecture())})
    assert r.status_code == 400 and r.json()["success"] is False
    assert "num_hidden_layers 3 (now 4)" in r.json()["message"], r.text
    r = server.post("/update_weights_from_disk", {"model_path": "/nonexistent/checkpoint"})
    assert r.status_code == 400 and r.json()["success"] is False, r.text
    assert server.post("/update_weights_from_disk", {}).status_code == 400
    assert weight_version(server) == before
    assert outputs(server) == want("a", "dp")


def test_release_and_resume_memory(server, want):
    server.wait_drained()
    server.post("/flush_cache")
    start_free = free_pages(server)
    # Only an idle server releases: a running request makes it refuse.
    body = {"input_ids": [7, 8, 9], "sampling_params": {**GREEDY, "max_new_tokens": 1500}}
    with cf.ThreadPoolExecutor(1) as pool:
        running = start_running(server, pool, body)
        r = server.post("/release_memory_occupation")
        assert r.status_code == 409 and r.json()["success"] is False and "idle" in r.json()["message"], r.text
        assert server.post("/pause_generation", {"mode": "abort"}).status_code == 200
        assert running.result(timeout=20).json()["meta_info"]["finish_reason"]["type"] == "abort"
    assert server.post("/continue_generation").status_code == 200

    r = server.post("/release_memory_occupation", {"tags": ["weights", "kv_cache"]})
    assert r.status_code == 200 and r.json()["success"] is True, r.text
    assert server.get("/get_server_info").json()["internal_states"][0]["memory_released"] is True
    r = server.post("/generate", {"input_ids": PROMPTS[0], "sampling_params": GREEDY})
    assert r.status_code == 503 and "resume_memory_occupation" in r.text, r.text
    assert server.post("/layout", {"layout": "tp"}).status_code == 409
    r = server.post("/update_weights_from_disk", {"model_path": str(MODEL)})
    assert r.status_code == 409 and r.json()["success"] is False, r.text
    assert server.post("/release_memory_occupation").status_code == 409  # already released
    assert server.post("/release_memory_occupation", {"tags": ["weights"]}).status_code == 400

    r = server.post("/resume_memory_occupation")
    assert r.status_code == 200 and r.json()["success"] is True, r.text
    assert server.post("/resume_memory_occupation").status_code == 409  # not released
    assert server.get("/get_server_info").json()["internal_states"][0]["memory_released"] is False
    assert outputs(server) == want("a", "dp")
    server.wait_drained()
    server.post("/flush_cache")
    assert free_pages(server) == start_free
