"""Token-id generation through /generate and /v1/completions against the fixture's reference."""
import json
from concurrent.futures import ThreadPoolExecutor

import requests

GREEDY = {"temperature": 0, "ignore_eos": True}


def sse_events(resp):
    """The JSON payloads of an SSE response, up to [DONE] (which must come)."""
    events = []
    for line in resp.iter_lines(decode_unicode=True):
        if not line or line.startswith(":"):
            continue
        assert line.startswith("data: "), line
        payload = line[len("data: "):]
        if payload == "[DONE]":
            return events
        events.append(json.loads(payload))
    raise AssertionError("stream ended without [DONE]")


def test_generate_matches_reference_greedy(ids_server, reference):
    for ids, greedy in reference:
        r = ids_server.post("/generate", {"input_ids": ids, "sampling_params": {"max_new_tokens": 24, **GREEDY}})
        assert r.status_code == 200, r.text
        out = r.json()
        assert out["output_ids"] == greedy
        meta = out["meta_info"]
        assert meta["prompt_tokens"] == len(ids) and meta["completion_tokens"] == 24
        assert meta["finish_reason"] == {"type": "length", "length": 24}


def test_generate_batch_and_logprobs(ids_server, reference):
    (ids0, greedy0), (ids1, greedy1) = reference[0], reference[1]
    r = ids_server.post("/generate", {"input_ids": [ids0, ids1], "rid": ["a-0", "a-1"], "return_logprob": True,
                                      "top_logprobs_num": 3, "sampling_params": {"max_new_tokens": 24, **GREEDY}})
    assert r.status_code == 200, r.text
    outs = r.json()
    assert [o["output_ids"] for o in outs] == [greedy0, greedy1]
    assert [o["meta_info"]["id"] for o in outs] == ["a-0", "a-1"]
    for o in outs:
        lps = o["meta_info"]["output_token_logprobs"]
        tops = o["meta_info"]["output_top_logprobs"]
        assert [e[1] for e in lps] == o["output_ids"]
        assert all(e[0] <= 0 and e[2] is None for e in lps)
        assert len(tops) == 24 and all(len(t) == 3 for t in tops)
        # Greedy: the sampled token is the best alternative.
        assert all(t[0][1] == e[1] and abs(t[0][0] - e[0]) < 1e-6 for t, e in zip(tops, lps))


def test_generate_streaming(ids_server, reference):
    ids, greedy = reference[2]
    with ids_server.post("/generate", {"input_ids": ids, "stream": True,
                                       "sampling_params": {"max_new_tokens": 24, **GREEDY}}, stream=True) as r:
        assert r.status_code == 200
        events = sse_events(r)
    assert len(events) >= 2
    assert events[-1]["output_ids"] == greedy  # cumulative, like SGLang's
    assert events[-1]["meta_info"]["finish_reason"]["type"] == "length"


def test_completions_match_reference(ids_server, reference):
    ids, greedy = reference[3]
    body = {"prompt": ids, "max_tokens": 24, "return_token_ids": True, **GREEDY}
    r = ids_server.post("/v1/completions", body)
    assert r.status_code == 200, r.text
    c = r.json()
    assert c["object"] == "text_completion" and c["id"].startswith("cmpl-")
    assert c["choices"][0]["token_ids"] == greedy
    assert c["choices"][0]["finish_reason"] == "length"
    assert c["usage"] == {"prompt_tokens": len(ids), "completion_tokens": 24, "total_tokens": len(ids) + 24,
                          "prompt_tokens_details": {"cached_tokens": 0}}

    with ids_server.post("/v1/completions", {**body, "stream": True, "stream_options": {"include_usage": True}},
                         stream=True) as r:
        assert r.status_code == 200
        assert r.headers["Content-Type"].startswith("text/event-stream")
        events = sse_events(r)
    tokens = [t for e in events for ch in e["choices"] for t in ch["token_ids"]]
    assert tokens == greedy
    assert events[-1]["choices"] == [] and events[-1]["usage"]["completion_tokens"] == 24
    assert [ch["finish_reason"] for e in events for ch in e["choices"]][-1] == "length"


def test_completions_batch_of_prompts(ids_server, reference):
    r = ids_server.post("/v1/completions", {"prompt": [reference[0][0], reference[1][0]], "max_tokens": 24,
                                            "return_token_ids": True, **GREEDY})
    assert r.status_code == 200, r.text
    choices = r.json()["choices"]
    assert [c["index"] for c in choices] == [0, 1]
    assert [c["token_ids"] for c in choices] == [reference[0][1], reference[1][1]]
    assert r.json()["usage"]["prompt_tokens"] == len(reference[0][0]) + len(reference[1][0])


def test_n_choices_are_seeded_samples(ids_server, reference):
    ids = reference[1][0]
    body = {"prompt": ids, "max_tokens": 12, "temperature": 1.0, "n": 3, "seed": 7, "return_token_ids": True}
    a = ids_server.post("/v1/completions", body).json()
    b = ids_server.post("/v1/completions", body).json()
    tokens = [c["token_ids"] for c in a["choices"]]
    assert len(tokens) == 3 and tokens == [c["token_ids"] for c in b["choices"]]
    assert len({tuple(t) for t in tokens}) > 1  # different seeds, different samples
    # Choice j is the request with seed 7 + j.
    single = ids_server.post("/v1/completions", {**body, "n": 1, "seed": 9}).json()
    assert single["choices"][0]["token_ids"] == tokens[2]
    assert a["usage"]["prompt_tokens"] == len(ids) and a["usage"]["completion_tokens"] == 36


def test_generate_n_samples_in_input_order(ids_server, reference):
    (ids0, _), (ids1, _) = reference[0], reference[1]
    sp = {"max_new_tokens": 10, "temperature": 1.0, "seed": 11, "ignore_eos": True}

    def generate(body):
        r = ids_server.post("/generate", body)
        assert r.status_code == 200, r.text
        return r.json()
    outs = generate({"input_ids": [ids0, ids1], "rid": "grp", "sampling_params": {**sp, "n": 3}})
    assert [o["meta_info"]["id"] for o in outs] == [f"grp-{i}-{j}" for i in range(2) for j in range(3)]
    # Sample j of input i is input i alone with seed 11 + j.
    for i, ids in enumerate([ids0, ids1]):
        for j in range(3):
            one = generate({"input_ids": ids, "sampling_params": {**sp, "seed": 11 + j}})
            assert outs[3 * i + j]["output_ids"] == one["output_ids"], (i, j)
    assert len({tuple(o["output_ids"]) for o in outs[:3]}) > 1  # different seeds, different samples
    single = generate({"input_ids": ids0, "rid": "one", "sampling_params": {**sp, "n": 2}})
    assert isinstance(single, list) and [o["meta_info"]["id"] for o in single] == ["one-0", "one-1"]
    r = ids_server.post("/generate", {"input_ids": [ids0, ids1], "sampling_params": [{**sp, "n": 2}, {**sp, "n": 3}]})
    assert r.status_code == 400 and r.json()["error"]["param"] == "sampling_params.n", r.text
    r = ids_server.post("/generate", {"input_ids": ids0, "sampling_params": {**sp, "n": 0}})
    assert r.status_code == 400, r.text


def test_completions_logprobs_shape(ids_server, reference):
    ids, greedy = reference[1]
    r = ids_server.post("/v1/completions", {"prompt": ids, "max_tokens": 6, "logprobs": 2, **GREEDY})
    lp = r.json()["choices"][0]["logprobs"]
    assert set(lp) == {"tokens", "token_logprobs", "top_logprobs", "text_offset"}
    assert lp["tokens"] == [f"token_id:{t}" for t in greedy[:6]]  # no tokenizer: vLLM's spelling
    assert all(x <= 0 for x in lp["token_logprobs"])
    assert all(len(t) == 2 and max(t, key=t.get) == tok for t, tok in zip(lp["top_logprobs"], lp["tokens"]))
    assert lp["text_offset"] == sorted(lp["text_offset"])


def test_concurrent_requests_all_finish(ids_server, reference):
    """16 at once, streaming and not: batching must not change any greedy output."""
    def one(i):
        ids, greedy = reference[i % 4]
        body = {"prompt": ids, "max_tokens": 24, "return_token_ids": True, **GREEDY}
        if i % 2:
            with ids_server.post("/v1/completions", {**body, "stream": True}, stream=True) as r:
                assert r.status_code == 200
                got = [t for e in sse_events(r) for ch in e["choices"] for t in ch["token_ids"]]
        else:
            r = ids_server.post("/v1/completions", body)
            assert r.status_code == 200, r.text
            got = r.json()["choices"][0]["token_ids"]
        return got == greedy

    with ThreadPoolExecutor(16) as pool:
        assert all(pool.map(one, range(16)))
    ids_server.wait_drained()


def test_models_and_layout(ids_server):
    models = ids_server.get("/v1/models").json()
    assert models["object"] == "list" and models["data"][0]["max_model_len"] == 4096
    layout = ids_server.get("/layout").json()
    assert layout["layout"] == "dop" and layout["ranks"] == 2 and len(layout["owners"]) == 2
    assert all(p["capacity"] == 128 for p in layout["kv_pages"])
    metrics = ids_server.get("/metrics").text
    for name in ("splash_num_requests_running", "splash_num_requests_waiting", 'splash_kv_pages_used{rank="1"}',
                 'splash_kv_pages_free{rank="0"}', "splash_prompt_tokens_total", "splash_generation_tokens_total",
                 "splash_time_to_first_token_seconds_bucket", "splash_inter_token_latency_seconds_count",
                 "splash_num_preemptions_total", 'splash_attention_layout{layout="dop"} 1',
                 'splash_layout_switches_total{from="tp",to="dop",reason="forced"} 0', "splash_layout_switch_seconds_sum",
                 'splash_layout_switch_refusals_total{from="dop",to="cp",reason="forced"} 0'):
        assert name in metrics, name


def test_tokenize_needs_a_tokenizer(ids_server):
    r = ids_server.post("/tokenize", {"text": "hello"})
    assert r.status_code == 400 and r.json()["error"]["code"] == "no_tokenizer"
