"""Layout switches scheduled while requests run (--switch) change no greedy output, and /metrics
and /layout report them."""
from concurrent.futures import ThreadPoolExecutor

import pytest

from conftest import MODEL, Server

SCHEDULE = "step=8:tp,step=20:dp,step=32:cp,step=44:dop"


@pytest.fixture(scope="module")
def switching_server():
    s = Server(MODEL, "--switch", SCHEDULE, name="switching", kv_pages=512)
    yield s
    assert s.stop() == 0, s.log_tail()


def test_switches_under_load_keep_greedy_outputs(switching_server, reference):
    def one(i):
        ids, greedy = reference[i % 4]
        r = switching_server.post("/generate", {"input_ids": ids, "sampling_params": {
            "max_new_tokens": 24, "temperature": 0, "ignore_eos": True}})
        assert r.status_code == 200, r.text
        return r.json()["output_ids"] == greedy

    # Two waves of 8 take the engine past every scheduled step while requests are mid-flight.
    for _ in range(2):
        with ThreadPoolExecutor(8) as pool:
            assert all(pool.map(one, range(8)))
    switching_server.wait_drained()

    layout = switching_server.get("/layout").json()
    history = layout["switches"]
    assert [(h["from"], h["to"]) for h in history] == [("dop", "tp"), ("tp", "dp"), ("dp", "cp"), ("cp", "dop")]
    done = [h for h in history if "refused" not in h]
    assert done, history
    assert layout["layout"] == (done[-1]["to"] if done else "dop")
    m = switching_server.metrics()
    assert sum(v for k, v in m.items() if k.startswith("splash_layout_switches_total")) == len(done)
    assert m["splash_layout_switch_seconds_count"] == len(done)
    assert sum(v for k, v in m.items() if k.startswith("splash_layout_switch_refusals_total")) == len(history) - len(done)
    assert m[f'splash_attention_layout{{layout="{layout["layout"]}"}}'] == 1
