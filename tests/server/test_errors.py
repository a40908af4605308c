"""Bad input gets a 4xx with an OpenAI-style error body, and the server keeps serving."""
import pytest

LONG_PROMPT = [5] * 3000      # inside the 4096-token context, beyond one rank's 2048-token KV capacity
TOO_LONG_PROMPT = [5] * 5000  # beyond the context

CASES = [
    # (endpoint, body, status, param, code)
    ("/v1/completions", b"{not json", 400, None, None),
    ("/v1/completions", b"[1, 2]", 400, None, None),
    ("/v1/completions", b"[" * 100000, 400, None, None),
    ("/v1/completions", {"prompt": [5], "max_tokens": "ten"}, 400, "max_tokens", None),
    ("/v1/completions", {"prompt": [5], "temperature": "hot"}, 400, "temperature", None),
    ("/v1/completions", {"prompt": [5], "top_p": 2}, 400, "top_p", None),
    ("/v1/completions", {"prompt": [5], "max_tokens": -1}, 400, "max_tokens", None),
    ("/v1/completions", {"prompt": [5], "n": 0}, 400, "n", None),
    ("/v1/completions", {"prompt": [5], "stream": "yes"}, 400, "stream", None),
    ("/v1/completions", {"prompt": [5], "logprobs": 21}, 400, "logprobs", None),
    ("/v1/completions", {"prompt": {"a": 1}}, 400, "prompt", None),
    ("/v1/completions", {"prompt": []}, 400, "prompt", None),
    ("/v1/completions", {"prompt": [5, 512]}, 400, "prompt", None),
    ("/v1/completions", {"prompt": [5, -1]}, 400, "prompt", None),
    ("/v1/completions", {"prompt": [5], "frobnicate": 1}, 400, "frobnicate", "unknown_parameter"),
    ("/v1/completions", {"prompt": [5], "echo": True}, 400, "echo", "unsupported_parameter"),
    ("/v1/completions", {"prompt": [5], "presence_penalty": 3}, 400, "presence_penalty", None),
    ("/v1/completions", {"prompt": [5], "repetition_penalty": 0}, 400, "repetition_penalty", None),
    ("/v1/completions", {"prompt": [5], "logit_bias": {"x": 1}}, 400, "logit_bias", None),
    ("/v1/completions", {"prompt": [5], "logit_bias": {"5": 101}}, 400, "logit_bias", None),
    ("/v1/completions", {"prompt": [5], "logit_bias": {"512": 1}}, 400, None, None),  # past the vocabulary
    ("/generate", {"input_ids": [5], "sampling_params": {"frequency_penalty": -2.5}}, 400, "frequency_penalty", None),
    ("/v1/completions", {"prompt": [5], "stream_options": {"include_usage": True}}, 400, "stream_options", None),
    ("/v1/completions", {"prompt": [5], "max_tokens": 5000}, 400, "max_tokens", "context_length_exceeded"),
    ("/v1/completions", {"prompt": TOO_LONG_PROMPT, "max_tokens": 1}, 400, "prompt", "context_length_exceeded"),
    ("/v1/completions", {"prompt": LONG_PROMPT, "max_tokens": 8}, 400, None, None),
    ("/v1/completions", {"prompt": [5], "model": "gpt-4"}, 404, "model", "model_not_found"),
    ("/v1/completions", {"prompt": "text needs a tokenizer"}, 400, "prompt", None),
    ("/v1/completions", {"prompt": [5], "stop": "x"}, 400, "stop", None),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]}, 400, "messages", None),
    ("/v1/chat/completions", {"messages": "hi"}, 400, "messages", None),
    ("/generate", {"input_ids": [5], "text": "x"}, 400, None, None),
    ("/generate", {}, 400, None, None),
    ("/generate", {"input_ids": [5], "sampling_params": {"max_tokens": 3}}, 400, "sampling_params.max_tokens",
     "unknown_parameter"),
    ("/generate", {"input_ids": [5], "sampling_params": {"max_new_tokens": 0}}, 400, "max_new_tokens", None),
    ("/generate", {"input_ids": [5], "sampling_params": {"max_new_tokens": 5000}}, 400, "max_new_tokens",
     "context_length_exceeded"),
    ("/generate", {"input_ids": LONG_PROMPT, "sampling_params": {"max_new_tokens": 8}}, 400, None, None),
    ("/generate", {"input_ids": [[5], [6]], "sampling_params": [{}]}, 400, "sampling_params", None),
    ("/generate", {"input_ids": [5], "rid": 7}, 400, "rid", None),
    ("/abort_request", {}, 400, "rid", None),
    ("/detokenize", {"tokens": ["a"]}, 400, "tokens", None),
]


@pytest.mark.parametrize("path,body,status,param,code", CASES,
                         ids=[f"{c[0]}:{str(c[1])[:40]}" for c in CASES])
def test_bad_input(ids_server, path, body, status, param, code):
    r = ids_server.post(path, body)
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"} and err["message"]
    assert err["type"] == "invalid_request_error"
    if param is not None:
        assert err["param"] == param, err
    if code is not None:
        assert err["code"] == code, err
    assert ids_server.get("/health").status_code == 200


def test_unknown_route_and_method(ids_server):
    r = ids_server.get("/v1/nothing")
    assert r.status_code == 404 and "error" in r.json()
    r = ids_server.get("/v1/completions")
    assert r.status_code == 405 and r.headers["Allow"] == "POST" and "error" in r.json()


def test_errors_leave_no_pages_behind(ids_server):
    for path, body, *_ in CASES:
        ids_server.post(path, body)
    ids_server.wait_drained()
    assert ids_server.post("/generate", {"input_ids": [5], "sampling_params": {"max_new_tokens": 2}}).status_code == 200
