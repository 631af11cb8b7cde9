"""The official openai client against a live server: answers equal the model's own generate / chat
with the same settings, streamed or not, with OpenAI's usage counts."""

import pytest

from live_server import LiveServer

pytestmark = pytest.mark.slow  # SmolLM2-135M end to end

MESSAGES = [{"role": "system", "content": "You are a concise assistant."},
            {"role": "user", "content": "Name three primary colors."}]


@pytest.fixture(scope="module")
def server(smollm2):
    live = LiveServer(smollm2, "smollm2")
    yield live
    live.close()


def test_chat_equals_lm_chat(server, smollm2):
    want = smollm2.chat(MESSAGES, max_new_tokens=40)
    prompt_tokens = len(smollm2.tokenizer.encode(
        smollm2.tokenizer.apply_chat_template(MESSAGES, add_generation_prompt=True), add_bos=False))
    r = server.client().chat.completions.create(model="smollm2", messages=MESSAGES, max_tokens=40, temperature=0)
    assert r.choices[0].message.content == want
    assert r.choices[0].message.role == "assistant"
    assert r.choices[0].finish_reason == ("length" if smollm2.last_stats.finish_reason == "length" else "stop")
    assert r.usage.prompt_tokens == prompt_tokens
    assert r.usage.completion_tokens == smollm2.last_stats.new_tokens
    assert r.usage.total_tokens == prompt_tokens + smollm2.last_stats.new_tokens


def test_chat_stream_equals_lm_chat(server, smollm2):
    want = smollm2.chat(MESSAGES, max_new_tokens=40)
    stream = server.client().chat.completions.create(model="smollm2", messages=MESSAGES, max_tokens=40,
                                                     temperature=0, stream=True,
                                                     stream_options={"include_usage": True})
    chunks = list(stream)
    pieces = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]
    assert "".join(pieces) == want
    assert len(pieces) > 5  # streamed piece by piece, not in one block
    assert chunks[0].choices[0].delta.role == "assistant"
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert len(finishes) == 1
    assert chunks[-1].usage.completion_tokens == smollm2.last_stats.new_tokens


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_completion_equals_generate(server, smollm2, stream):
    prompt = "The capital of France is"
    want = smollm2.generate(prompt, max_new_tokens=24)
    r = server.client().completions.create(model="smollm2", prompt=prompt, max_tokens=24, temperature=0,
                                           stream=stream)
    text = "".join(c.choices[0].text for c in r) if stream else r.choices[0].text
    assert text == want
    if not stream:
        assert r.usage.prompt_tokens == len(smollm2.tokenizer.encode(prompt))
        assert r.usage.completion_tokens == smollm2.last_stats.new_tokens


def test_sampling_with_seed_equals_generate(server, smollm2):
    """temperature / top_p / seed mean what they mean in generate: the same draws, the same text."""
    prompt = "Once upon a time"
    want = smollm2.generate(prompt, max_new_tokens=24, temperature=0.8, top_p=0.9, seed=1234)
    r = server.client().completions.create(model="smollm2", prompt=prompt, max_tokens=24, temperature=0.8,
                                           top_p=0.9, seed=1234)
    assert r.choices[0].text == want
    other = smollm2.generate(prompt, max_new_tokens=24, temperature=0.8, top_p=0.9, seed=99)
    assert other != want  # the seed matters, so the equality above is not an accident of greedy decoding


def test_stop_strings_equal_generate(server, smollm2):
    prompt = "Count: 1, 2, 3,"
    want = smollm2.generate(prompt, max_new_tokens=30, stop=[" 6"])
    assert smollm2.last_stats.finish_reason == "stop"
    for stream in (False, True):
        r = server.client().completions.create(model="smollm2", prompt=prompt, max_tokens=30, temperature=0,
                                               stop=[" 6"], stream=stream)
        chunks = list(r) if stream else [r]
        assert "".join(c.choices[0].text for c in chunks) == want
        assert [c.choices[0].finish_reason for c in chunks if c.choices[0].finish_reason] == ["stop"]


def test_models_health_and_page(server):
    import httpx

    assert [m.id for m in server.client().models.list()] == ["smollm2"]
    assert httpx.get(server.url + "/health").json() == {"status": "ok"}
    page = httpx.get(server.url + "/")
    assert page.status_code == 200 and "text/html" in page.headers["content-type"]
    assert "/v1/chat/completions" in page.text and "<script" in page.text and "http" not in page.text.split("<body>")[1]
