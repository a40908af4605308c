"""What SGLang and vLLM clients send beyond the OpenAI API, BOS from tokenizer_config.json, --tokenizer,
the byte bound on text prompts and text_offset, through the official openai client where it applies.

One server: the fixture checkpoint (no tokenizer of its own) with `--tokenizer` naming a directory that
holds the fixture tokenizer and a tokenizer_config.json asking for a BOS.
"""
import json
import subprocess
import tempfile
from pathlib import Path

import openai
import pytest

from conftest import API_KEY, BINARY, FIXTURES, MODEL, Server

NAME = "tiny-mla"
BOS, EOS, USER, ASSISTANT = 0, 1, 2, 3  # the fixture tokenizer's special tokens
CONTEXT = 4096
GREEDY = {"temperature": 0}


def tokenizer_dir():
    d = Path(tempfile.mkdtemp(prefix="splash_tokenizer_"))
    (d / "tokenizer.json").symlink_to(FIXTURES / "tokenizer" / "tokenizer.json")
    (d / "tokenizer_config.json").write_text(json.dumps(
        {"add_bos_token": True, "bos_token": "<｜begin▁of▁sentence｜>", "eos_token": "<｜end▁of▁sentence｜>"}))
    return d


@pytest.fixture(scope="module")
def server():
    s = Server(MODEL, "--tokenizer", str(tokenizer_dir()), "--served-model-name", NAME, api_key=API_KEY, name="extras")
    yield s
    assert s.stop() == 0, s.log_tail()


@pytest.fixture(scope="module")
def client(server):
    c = openai.OpenAI(base_url=server.url + "/v1", api_key=API_KEY, max_retries=0, timeout=60)
    yield c
    c.close()


def complete(client, prompt="The sea is", max_tokens=16, **extra):
    """One greedy completion that ignores EOS, with its token ids."""
    body = {"return_token_ids": True, "ignore_eos": True, **extra}
    return client.completions.create(model=NAME, prompt=prompt, max_tokens=max_tokens, temperature=0,
                                     extra_body=body).choices[0]


def test_bos_prepended_once(server, client):
    plain = server.post("/tokenize", {"text": "The sea is"}).json()["tokens"]
    assert plain[0] != BOS
    assert server.post("/tokenize", {"text": "The sea is", "add_special_tokens": True}).json()["tokens"] == [BOS] + plain
    assert complete(client, max_tokens=1).prompt_token_ids == [BOS] + plain
    # A prompt that brings its own BOS, and the chat template's BOS, are not doubled.
    assert complete(client, "<｜begin▁of▁sentence｜>The sea is", max_tokens=1).prompt_token_ids == [BOS] + plain
    chat = client.chat.completions.create(model=NAME, messages=[{"role": "user", "content": "Hi"}], max_tokens=1,
                                          extra_body={"return_token_ids": True}).choices[0]
    assert chat.prompt_token_ids[:2] == [BOS, USER] and chat.prompt_token_ids[-1] == ASSISTANT
    r = server.post("/generate", {"text": "The sea is", "sampling_params": {"max_new_tokens": 1}}).json()
    assert r["meta_info"]["prompt_tokens"] == len(plain) + 1


def test_prompt_too_long_for_the_context_is_refused_before_tokenizing(client):
    # No fixture token covers more than 29 bytes of text: more than 4096 x 29 bytes cannot fit.
    huge = "a" * (CONTEXT * 29 + 1)
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model=NAME, prompt=huge, max_tokens=1)
    assert e.value.body["code"] == "context_length_exceeded" and e.value.body["param"] == "prompt"
    assert "bytes" in e.value.body["message"]
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=NAME, messages=[{"role": "user", "content": huge}], max_tokens=1)
    assert e.value.body["code"] == "context_length_exceeded" and "bytes" in e.value.body["message"]


def test_min_tokens_suppresses_stop_tokens_and_strings(client):
    base = complete(client)
    stop_id = base.token_ids[2]
    first = base.token_ids.index(stop_id)
    assert complete(client, stop_token_ids=[stop_id]).token_ids == base.token_ids[:first + 1]
    held = complete(client, stop_token_ids=[stop_id], min_tokens=8)
    assert len(held.token_ids) >= 8 and stop_id not in held.token_ids[:8]
    assert held.token_ids[:first] == base.token_ids[:first]

    stop = base.text[:3]
    assert complete(client, stop=[stop]).text == ""
    late = complete(client, stop=[stop], min_tokens=6)
    assert len(late.token_ids) >= 6 and late.text.startswith(base.text[:3])


def test_penalties_and_logit_bias(server, client):
    """OpenAI's logit_bias and penalties through the openai client, and SGLang's names on /generate."""
    base = complete(client, max_tokens=24)
    forced, first = base.token_ids[3], base.token_ids[0]
    assert complete(client, logit_bias={str(forced): 100}).token_ids == [forced] * 16
    assert first not in complete(client, logit_bias={str(first): -100}).token_ids
    # The greedy continuation repeats tokens; penalties on what was generated change it, deterministically.
    assert len(set(base.token_ids)) < len(base.token_ids)
    penalized = complete(client, max_tokens=24, frequency_penalty=2, presence_penalty=2, repetition_penalty=2)
    assert penalized.token_ids != base.token_ids
    assert complete(client, max_tokens=24, frequency_penalty=2, presence_penalty=2,
                    repetition_penalty=2).token_ids == penalized.token_ids
    r = server.post("/generate", {"input_ids": base.prompt_token_ids, "sampling_params": {
        "max_new_tokens": 24, "ignore_eos": True, **GREEDY, "frequency_penalty": 2, "presence_penalty": 2,
        "repetition_penalty": 2}})
    assert r.status_code == 200 and r.json()["output_ids"] == penalized.token_ids, r.text


def test_include_stop_str_in_output(client):
    base = complete(client, max_tokens=24)
    stop = base.text[4:7]
    cut = base.text[:base.text.index(stop)]
    assert complete(client, max_tokens=24, stop=[stop]).text == cut
    kept = complete(client, max_tokens=24, stop=[stop], include_stop_str_in_output=True)
    assert kept.text == cut + stop and kept.finish_reason == "stop"


def test_skip_special_tokens(server, client):
    # At a high temperature special tokens come up among 512 draws (this seed draws some).
    kw = dict(model=NAME, prompt="The sea is", max_tokens=64, n=8, temperature=50, seed=3)
    body = {"return_token_ids": True, "ignore_eos": True}
    skipped = client.completions.create(**kw, extra_body=body).choices
    kept = client.completions.create(**kw, extra_body={**body, "skip_special_tokens": False}).choices
    assert any(t in (BOS, EOS, USER, ASSISTANT) for c in kept for t in c.token_ids)
    for s, k in zip(skipped, kept):
        assert s.token_ids == k.token_ids
        detok = server.post("/detokenize", {"tokens": k.token_ids, "skip_special_tokens": False}).json()["text"]
        assert k.text == detok
        assert s.text == server.post("/detokenize", {"tokens": s.token_ids, "skip_special_tokens": True}).json()["text"]
    assert any("<｜" in c.text for c in kept) and not any("<｜" in c.text for c in skipped)


def test_spaces_between_special_tokens_is_accepted(client):
    for v in (True, False):
        complete(client, max_tokens=1, spaces_between_special_tokens=v)
    with pytest.raises(openai.BadRequestError) as e:
        complete(client, max_tokens=1, spaces_between_special_tokens="yes")
    assert e.value.body["param"] == "spaces_between_special_tokens"


def chat_prompt(client, messages, **extra):
    return client.chat.completions.create(model=NAME, messages=messages, max_tokens=1,
                                          extra_body={"return_token_ids": True, **extra}).choices[0].prompt_token_ids


def test_chat_template_options(server, client):
    user = [{"role": "user", "content": "Hi"}]
    with_prompt = chat_prompt(client, user)
    assert with_prompt[-1] == ASSISTANT
    assert chat_prompt(client, user, add_generation_prompt=False) == with_prompt[:-1]
    assert chat_prompt(client, user, chat_template_kwargs={"add_generation_prompt": False}) == with_prompt[:-1]
    assert chat_prompt(client, user, chat_template_kwargs={"enable_thinking": False}) == with_prompt  # not read by V3's template

    partial = user + [{"role": "assistant", "content": "The sea"}]
    opened = chat_prompt(client, partial, add_generation_prompt=False, continue_final_message=True)
    tail = server.post("/tokenize", {"text": "The sea"}).json()["tokens"]
    assert opened == with_prompt + tail  # no end of sentence, no new assistant turn
    for bad in ({"continue_final_message": True},  # with the default add_generation_prompt
                {"chat_template_kwargs": ["enable_thinking"]},
                {"chat_template_kwargs": {"add_generation_prompt": "no"}}):
        with pytest.raises(openai.BadRequestError):
            chat_prompt(client, partial, **bad)
    with pytest.raises(openai.BadRequestError):
        chat_prompt(client, user, add_generation_prompt=False, continue_final_message=True)  # last is the user's


def test_sglang_sampling_extras(server):
    def gen(**sp):
        r = server.post("/generate", {"text": "The sea is", "sampling_params": {"max_new_tokens": 16, "ignore_eos": True,
                                                                                **GREEDY, **sp}})
        assert r.status_code == 200, r.text
        return r.json()
    base = gen()
    stop = base["text"][4:7]
    kept = gen(stop=[stop], no_stop_trim=True)
    assert kept["text"] == base["text"][:base["text"].index(stop)] + stop
    assert kept["meta_info"]["finish_reason"] == {"type": "stop", "matched": stop}
    stop_id = base["output_ids"][1]
    assert len(gen(stop_token_ids=[stop_id], min_new_tokens=10)["output_ids"]) >= 10
    gen(skip_special_tokens=False, spaces_between_special_tokens=False)


def test_text_offset_in_characters_and_equal_when_streamed(server, client):
    # This seed's output holds multi-byte characters whole (and a special token) among its first tokens.
    kw = dict(model=NAME, prompt="héllo wörld 🌊", max_tokens=24, temperature=1, seed=26, logprobs=1,
              extra_body={"ignore_eos": True, "skip_special_tokens": False, "return_token_ids": True})
    full = client.completions.create(**kw).choices[0]
    streamed = []
    for chunk in client.completions.create(**kw, stream=True):
        if chunk.choices and chunk.choices[0].logprobs:
            streamed += chunk.choices[0].logprobs.text_offset
    assert streamed == full.logprobs.text_offset
    # Each offset counts the characters the earlier tokens started (checked where they end whole).
    multibyte = 0
    for i, offset in enumerate(full.logprobs.text_offset):
        before = server.post("/detokenize", {"tokens": full.token_ids[:i]}).json()["text"]
        if "\ufffd" not in before:
            assert offset == len(before), i
            multibyte += len(before) != len(before.encode())
    assert multibyte > 0


def test_generate_command_takes_tokenizer(server, tmp_path):
    result = tmp_path / "out.jsonl"
    out = subprocess.run([str(BINARY), "generate", "--model", str(MODEL), "--tokenizer", str(tokenizer_dir()),
                          "--kv-pages", "64", "--prompt", "The sea is", "--max-tokens", "2", "--output", str(result)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    line = json.loads(result.read_text())
    with_bos = server.post("/tokenize", {"text": "The sea is", "add_special_tokens": True}).json()["count"]
    assert isinstance(line["text"], str) and line["prompt_tokens"] == with_bos
    empty = tmp_path / "empty"
    empty.mkdir()
    bad = subprocess.run([str(BINARY), "generate", "--model", str(MODEL), "--tokenizer", str(empty), "--prompt", "x"],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode != 0 and str(empty) in bad.stdout + bad.stderr
