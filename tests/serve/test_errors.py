"""Faults meet users here: malformed requests get OpenAI-shaped 4xx errors naming the problem, a full
queue gets a 503, a failing sequence fails only its own request, the API key guards every route
but /health and /, and the server keeps serving after each."""

import threading

import httpx
import openai
import pytest

import volvox.serve.scheduler as scheduler_module


def error_of(response: httpx.Response) -> dict:
    """The ``error`` object of an OpenAI-shaped error body (AssertionError if it is not one)."""
    body = response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}, body
    return body["error"]


def still_serves(server, lm):
    r = server.client().completions.create(model="tiny", prompt="ok", max_tokens=4, temperature=0)
    assert r.choices[0].text == lm.generate("ok", max_new_tokens=4)


@pytest.fixture
def server(serve, tiny_lm):
    return serve(tiny_lm, "tiny")


@pytest.mark.parametrize("body, status, param, words", [
    (b"{not json", 400, None, "not valid JSON"),
    (b"[1, 2]", 400, None, "must be a JSON object"),
    (b'{"model": "gpt-4", "prompt": "x"}', 404, "model", "'gpt-4' does not exist"),
    (b'{"model": "tiny", "prompt": "x", "max_tokens": -5}', 400, "max_tokens", "must be >= 1"),
    (b'{"model": "tiny", "prompt": "x", "temperature": "hot"}', 400, "temperature", "must be a number"),
    (b'{"model": "tiny", "prompt": "x", "n": 2}', 400, "n", "'n' must be 1"),
    (b'{"model": "tiny"}', 400, "prompt", "'prompt' must be"),
    (b'{"model": "tiny", "prompt": "x", "stop": [1]}', 400, "stop", "'stop' must be"),
])
def test_malformed_completion_requests(server, tiny_lm, body, status, param, words):
    r = httpx.post(server.url + "/v1/completions", content=body, headers={"Content-Type": "application/json"})
    assert r.status_code == status
    error = error_of(r)
    assert error["param"] == param and words in error["message"]
    still_serves(server, tiny_lm)


def test_chat_errors_through_the_openai_client(server, tiny_lm):
    client = server.client()
    with pytest.raises(openai.NotFoundError) as e:
        client.chat.completions.create(model="nope", messages=[{"role": "user", "content": "hi"}])
    assert e.value.body["code"] == "model_not_found"
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model="tiny", messages=[{"role": "wizard", "content": "hi"}])
    assert e.value.body["param"] == "messages[0]"
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hi"}], max_tokens=-1)
    assert e.value.body["param"] == "max_tokens"
    still_serves(server, tiny_lm)


def test_over_long_prompt_names_the_limits(server, tiny_lm):
    prompt = list(range(10, 250))  # 240 token ids; the context is 256
    with pytest.raises(openai.BadRequestError) as e:
        server.client().completions.create(model="tiny", prompt=prompt, max_tokens=20)
    error = e.value.body
    assert error["code"] == "context_length_exceeded"
    assert "256 tokens" in error["message"] and "240 prompt tokens" in error["message"] and "20" in error["message"]
    r = server.client().completions.create(model="tiny", prompt=prompt, max_tokens=16, temperature=0)  # fits exactly
    assert r.choices[0].text == tiny_lm.generate(prompt, max_new_tokens=16)


def test_unknown_route_and_method(server):
    assert error_of(httpx.get(server.url + "/v1/nothing-here"))["type"] == "not_found_error"
    r = httpx.get(server.url + "/v1/completions")
    assert r.status_code == 405 and "GET" in error_of(r)["message"]


def test_full_queue_gets_503_and_the_server_recovers(serve, tiny_lm):
    """The scheduler is held busy (a job that waits), so requests stay queued: with --max-queue 1 the
    second one is refused with a 503; the queued one is answered once the scheduler is free."""
    server = serve(tiny_lm, "tiny", max_batch=1, max_queue=1)
    release = threading.Event()
    server.app.state.scheduler.run_job(release.wait)
    queued = {}
    waiter = threading.Thread(target=lambda: queued.setdefault("r", httpx.post(
        server.url + "/v1/completions", json={"model": "tiny", "prompt": "q", "max_tokens": 6, "temperature": 0},
        timeout=30)))
    waiter.start()
    while server.metrics()["volvox_queue_depth"] < 1:
        pass
    r = httpx.post(server.url + "/v1/completions", json={"model": "tiny", "prompt": "x", "max_tokens": 6})
    assert r.status_code == 503 and r.headers["retry-after"] == "1"
    assert error_of(r)["code"] == "queue_full" and "--max-queue 1" in error_of(r)["message"]
    release.set()
    waiter.join()
    assert queued["r"].json()["choices"][0]["text"] == tiny_lm.generate("q", max_new_tokens=6)
    server.wait_idle()
    still_serves(server, tiny_lm)


def test_failing_sequence_fails_only_its_request(serve, tiny_lm, monkeypatch):
    """A sampler that raises on its 5th token (seed 666 only): that request gets a 500 with an error
    body (or an error event, streamed); requests decoded in the same steps are unharmed."""
    class FaultySampler(scheduler_module.Sampler):
        def __call__(self, logits, history):
            self.calls = getattr(self, "calls", 0) + 1
            if self.params.seed == 666 and self.calls == 5:
                raise RuntimeError("injected fault")
            return super().__call__(logits, history)

    monkeypatch.setattr(scheduler_module, "Sampler", FaultySampler)
    server = serve(tiny_lm, "tiny")
    client = server.client()
    want = tiny_lm.generate("healthy", max_new_tokens=40)
    results = {}

    def healthy(i):
        results[i] = client.completions.create(model="tiny", prompt="healthy", max_tokens=40, temperature=0).choices[0].text

    threads = [threading.Thread(target=healthy, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    r = httpx.post(server.url + "/v1/completions", json={"model": "tiny", "prompt": "x", "max_tokens": 40, "seed": 666})
    with httpx.stream("POST", server.url + "/v1/completions",
                      json={"model": "tiny", "prompt": "x", "max_tokens": 40, "seed": 666, "stream": True}) as s:
        events = [line for line in s.iter_lines() if line.startswith("data: ")]
    for t in threads:
        t.join()
    assert r.status_code == 500 and "injected fault" in error_of(r)["message"]
    assert '"error"' in events[-1] and "injected fault" in events[-1]
    assert results == {0: want, 1: want, 2: want}
    m = server.wait_idle()
    assert m["volvox_failed_sequences_total"] == 2 and m["volvox_kv_caches_alive"] == 0
    still_serves(server, tiny_lm)


def test_api_key_on_every_route_but_health_and_page(serve, tiny_lm):
    server = serve(tiny_lm, "tiny", api_key="s3cret")
    for path in ("/v1/models", "/metrics"):
        r = httpx.get(server.url + path)
        assert r.status_code == 401 and error_of(r)["type"] == "authentication_error"
        assert httpx.get(server.url + path, headers={"Authorization": "Bearer wrong"}).status_code == 401
    r = httpx.post(server.url + "/v1/completions", json={"model": "tiny", "prompt": "x"})
    assert r.status_code == 401
    assert httpx.get(server.url + "/health").status_code == 200
    assert httpx.get(server.url + "/").status_code == 200  # the static page; its API calls send the key
    with pytest.raises(openai.AuthenticationError):
        server.client(api_key="wrong").models.list()
    assert [m.id for m in server.client(api_key="s3cret").models.list()] == ["tiny"]
