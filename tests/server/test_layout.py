"""POST /layout: switches forced while requests run change no greedy output and show in /layout and
/metrics; a switch that does not fit is refused (409) and serving goes on; bad bodies are 400,
"auto" hands the layout back to the transition-aware scheduler of a server started with
--attn-layout auto (409 on one started with a fixed layout), and a forced layout pins it until then."""
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests

from conftest import API_KEY, MODEL, Server

GREEDY = {"temperature": 0, "ignore_eos": True}
PAGE_SIZE = 16
# With f32 weights on the CPU backend one layer's full Q-B, KV-B and O (8 heads) take 540672 bytes,
# 106 pages of 16 tokens x 80 latent floats: DP and CP hold 4 x 106 = 424 pages of replicas per rank.
ROOMY_PAGES = 1024  # replicas plus every request of the tests
SMALL_PAGES = 320   # the prompts fit (the 600-token one takes 4 x 38 pages), the replicas do not
ORDER = ["dp", "cp", "dop", "tp"]  # from the start layout dop: every kind of weight and KV move


@pytest.fixture(scope="module")
def roomy():
    s = Server(MODEL, "--page-size", str(PAGE_SIZE), name="layout", kv_pages=ROOMY_PAGES, api_key=API_KEY)
    yield s
    assert s.stop() == 0, s.log_tail()


@pytest.fixture(scope="module")
def small():
    s = Server(MODEL, "--page-size", str(PAGE_SIZE), name="layout_small", kv_pages=SMALL_PAGES)
    yield s
    assert s.stop() == 0, s.log_tail()


def generate(server, ids, max_new_tokens=24, rid=None):
    body = {"input_ids": ids, "sampling_params": {"max_new_tokens": max_new_tokens, **GREEDY}}
    if rid:
        body["rid"] = rid
    r = server.post("/generate", body, timeout=120)
    assert r.status_code == 200, r.text
    return r.json()


def wait_until(cond, what, timeout=20):
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


def switches_done(server):
    return [(h["from"], h["to"]) for h in server.get("/layout").json()["switches"] if "refused" not in h]


def test_forced_switches_under_load_keep_greedy_outputs(roomy, reference):
    # A long request keeps the engine stepping through every switch (an idle engine's switch would
    # wait for the next request), and is aborted once the last switch has been carried.
    bg_ids, bg_greedy = reference[1]
    bg = {}
    bg_thread = threading.Thread(target=lambda: bg.update(out=generate(roomy, bg_ids, 3000, rid="layout-bg")))
    bg_thread.start()
    wait_until(lambda: any("layout-bg" in o for o in roomy.get("/layout").json()["owners"]), "the long request")

    with ThreadPoolExecutor(8) as pool:
        jobs = [pool.submit(generate, roomy, reference[i % len(reference)][0]) for i in range(16)]
        wait_until(lambda: roomy.get("/layout").json()["running"] >= 4, "the concurrent requests")
        previous = "dop"
        for n, target in enumerate(ORDER, 1):
            r = roomy.post("/layout", {"layout": target})
            assert r.status_code == 200, r.text
            out = r.json()
            assert out["layout"] == target and out["previous"] == previous, out
            sw = out["switch"]
            assert (sw["from"], sw["to"]) == (previous, target) and sw["step"] >= 0, sw
            assert sw["weights"] and sw["kv"] and sw["weight_bytes"] >= 0 and sw["kv_bytes"] >= 0, sw
            assert sw["kv"] == "keep" or sw["kv_bytes"] > 0, sw  # running histories moved
            assert roomy.get("/layout").json()["layout"] == target
            # The next switch after the step that carries this one, so each lands mid-generation.
            wait_until(lambda: len(switches_done(roomy)) == n, f"the switch to {target}")
            previous = target
        outputs = [j.result()["output_ids"] for j in jobs]
    assert outputs == [reference[i % len(reference)][1] for i in range(16)]

    assert roomy.post("/abort_request", {"rid": "layout-bg"}).json()["aborted"] is True
    bg_thread.join(60)
    assert bg["out"]["output_ids"][:24] == bg_greedy  # the long request crossed every switch too
    roomy.wait_drained()

    layout = roomy.get("/layout").json()
    assert layout["layout"] == "tp"
    history = layout["switches"]
    assert [(h["from"], h["to"]) for h in history] == list(zip(["dop"] + ORDER, ORDER))
    assert all("refused" not in h and h["seconds"] > 0 for h in history), history
    m = roomy.metrics()
    for h in history:
        assert m[f'splash_layout_switches_total{{from="{h["from"]}",to="{h["to"]}",reason="forced"}}'] == 1
    assert sum(v for k, v in m.items() if k.startswith("splash_layout_switches_total")) == 4
    assert sum(v for k, v in m.items() if k.startswith("splash_layout_switch_refusals_total")) == 0
    assert m['splash_attention_layout{layout="tp"}'] == 1


def test_same_layout_is_a_noop(roomy):
    current = roomy.get("/layout").json()
    r = roomy.post("/layout", {"layout": current["layout"]})
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["layout"] == out["previous"] == current["layout"] and out["switch"] is None and out["note"]
    assert roomy.get("/layout").json()["switches"] == current["switches"]


@pytest.mark.parametrize("body", [b"{not json", b"[1]", {}, {"layout": None}, {"layout": 3}, {"layout": "TP"},
                                  {"layout": "ep"}, {"layout": "tp", "force": True}])
def test_bad_bodies(roomy, body):
    r = roomy.post("/layout", body)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["type"] == "invalid_request_error" and err["message"]


def test_auto_needs_a_scheduler(roomy):
    r = roomy.post("/layout", {"layout": "auto"})
    assert r.status_code == 409, r.text
    err = r.json()["error"]
    assert err["type"] == "no_scheduler" and "--attn-layout auto" in err["message"], err
    assert roomy.get("/layout").json()["policy"]["name"] == "fixed"


def test_auto_server_follows_the_scheduler_and_forced_layouts_pin(reference):
    # Started in auto (a quick calibration at start-up picks the cost model's rates).
    s = Server(MODEL, "--page-size", str(PAGE_SIZE), name="layout_auto", kv_pages=ROOMY_PAGES, layout="auto")
    try:
        outputs = [generate(s, ids)["output_ids"] for ids, _ in reference]
        assert outputs == [greedy for _, greedy in reference]
        state = s.get("/layout").json()
        policy = state["policy"]
        assert policy["name"] == "auto" and not policy["pinned"], policy
        forecast = policy["forecast"]
        assert set(forecast["layouts"]) == {"tp", "dp", "cp", "dop"}
        assert all(v["predicted_step_ms"] > 0 for v in forecast["layouts"].values()), forecast
        assert forecast["decision"], forecast
        assert all(h["reason"] == "faster" for h in state["switches"]), state["switches"]
        m = s.metrics()
        assert all(m[f'splash_layout_predicted_step_seconds{{layout="{l}"}}'] > 0 for l in ("tp", "dp", "cp", "dop"))

        target = "cp" if state["layout"] != "cp" else "tp"
        r = s.post("/layout", {"layout": target})
        assert r.status_code == 200, r.text
        wait_until(lambda: s.get("/layout").json()["layout"] == target, "the forced layout")
        assert s.get("/layout").json()["policy"]["pinned"]
        assert [generate(s, ids)["output_ids"] for ids, _ in reference] == outputs
        state = s.get("/layout").json()
        assert state["layout"] == target and state["switches"][-1]["reason"] == "forced"

        r = s.post("/layout", {"layout": "auto"})
        assert r.status_code == 200, r.text
        assert r.json()["policy"] == "auto"
        assert not s.get("/layout").json()["policy"]["pinned"]
        assert [generate(s, ids)["output_ids"] for ids, _ in reference] == outputs
    finally:
        assert s.stop() == 0, s.log_tail()


def test_api_key(roomy):
    r = requests.post(roomy.url + "/layout", json={"layout": "tp"}, timeout=10)
    assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key"
    assert requests.get(roomy.url + "/layout", timeout=10).status_code == 401


def test_refused_switch_keeps_serving(small, reference):
    with ThreadPoolExecutor(8) as pool:
        jobs = [pool.submit(generate, small, reference[i % len(reference)][0]) for i in range(12)]
        wait_until(lambda: small.get("/layout").json()["running"] > 0, "a running request")
        r = small.post("/layout", {"layout": "dp"})
        outputs = [j.result()["output_ids"] for j in jobs]
    assert r.status_code == 409, r.text
    err = r.json()["error"]
    assert err["type"] == "switch_refused" and "projection replica" in err["message"], err
    assert outputs == [reference[i % len(reference)][1] for i in range(12)]

    small.wait_drained()
    layout = small.get("/layout").json()
    assert layout["layout"] == "dop"
    assert layout["switches"] == [{"step": layout["switches"][0]["step"], "from": "dop", "to": "dp",
                                   "reason": "forced", "refused": err["message"]}]
    m = small.metrics()
    assert m['splash_layout_switch_refusals_total{from="dop",to="dp",reason="forced"}'] == 1
    assert sum(v for k, v in m.items() if k.startswith("splash_layout_switches_total")) == 0
    assert generate(small, reference[0][0])["output_ids"] == reference[0][1]
