"""Text endpoints through the official openai client (the fixture model with the fixture tokenizer)."""
import openai
import pytest
import requests

from conftest import API_KEY

MODEL = "tiny-mla"
MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Tell me about the sea."}]


@pytest.fixture(scope="module")
def client(text_server):
    c = openai.OpenAI(base_url=text_server.url + "/v1", api_key=API_KEY, max_retries=0, timeout=60)
    yield c
    c.close()  # an idle pooled connection would hold the server's exit for its keep-alive timeout


def test_models(client):
    assert [m.id for m in client.models.list().data] == [MODEL]
    assert client.models.retrieve(MODEL).id == MODEL


def test_chat_streamed_equals_non_streamed(client):
    kw = dict(model=MODEL, messages=MESSAGES, max_tokens=24, temperature=0)
    full = client.chat.completions.create(**kw)
    choice = full.choices[0]
    assert choice.message.role == "assistant" and isinstance(choice.message.content, str)
    assert choice.finish_reason in ("stop", "length")
    assert full.usage.completion_tokens <= 24 and full.usage.total_tokens == full.usage.prompt_tokens + full.usage.completion_tokens

    chunks = list(client.chat.completions.create(**kw, stream=True, stream_options={"include_usage": True}))
    assert chunks[0].choices[0].delta.role == "assistant"
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert streamed == choice.message.content
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == choice.finish_reason
    assert chunks[-1].usage.completion_tokens == full.usage.completion_tokens


def test_completion_text_streamed_equals_non_streamed(client):
    kw = dict(model=MODEL, prompt="The sea is", max_tokens=24, temperature=0, extra_body={"ignore_eos": True})
    full = client.completions.create(**kw).choices[0].text
    streamed = "".join(c.choices[0].text for c in client.completions.create(**kw, stream=True))
    assert streamed == full and len(full) > 0


def test_chat_logprobs(client):
    r = client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=8, temperature=0, logprobs=True,
                                       top_logprobs=3, extra_body={"ignore_eos": True})
    content = r.choices[0].logprobs.content
    assert len(content) == 8
    for entry in content:
        assert entry.logprob <= 0 and len(entry.top_logprobs) == 3
        assert entry.top_logprobs[0].token == entry.token  # greedy picks the best
        assert entry.bytes and all(0 <= b < 256 for b in entry.bytes)


def test_chat_n_choices(client):
    r = client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=8, temperature=1.0, n=3, seed=1)
    assert [c.index for c in r.choices] == [0, 1, 2]


def test_stop_string(client):
    kw = dict(model=MODEL, prompt="Once upon a time", max_tokens=32, temperature=0, extra_body={"ignore_eos": True})
    text = client.completions.create(**kw).choices[0].text
    assert len(text) >= 8
    stop = text[4:7]
    r = client.completions.create(**kw, stop=[stop, "\u0000never"]).choices[0]
    assert r.text == text[:text.index(stop)] and r.finish_reason == "stop"


def test_sglang_generate_text(text_server):
    r = text_server.post("/generate", {"text": "The sea is", "sampling_params": {"max_new_tokens": 8, "temperature": 0,
                                                                                "ignore_eos": True}})
    out = r.json()
    assert r.status_code == 200 and len(out["output_ids"]) == 8
    detok = text_server.post("/detokenize", {"tokens": out["output_ids"], "skip_special_tokens": True}).json()["text"]
    assert detok == out["text"]


def test_tokenize_round_trip(text_server):
    toks = text_server.post("/tokenize", {"text": "héllo wörld 🌊"}).json()
    assert toks["count"] == len(toks["tokens"]) > 0
    assert text_server.post("/detokenize", {"tokens": toks["tokens"]}).json()["text"] == "héllo wörld 🌊"


def test_client_errors(text_server, client):
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="other", messages=MESSAGES, max_tokens=4)
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=4, extra_body={"bogus": 1})
    assert e.value.body["param"] == "bogus"
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model=MODEL, messages=[{"role": "tool", "content": "x"}], max_tokens=4)
    with openai.OpenAI(base_url=text_server.url + "/v1", api_key="wrong", max_retries=0) as bad:
        with pytest.raises(openai.AuthenticationError):
            bad.models.list()
    assert requests.post(text_server.url + "/generate", json={"text": "x"}).status_code == 401
    assert requests.get(text_server.url + "/health").status_code == 200  # open without a key
