"""Continuous batching: concurrent requests share decode steps and each gets exactly its own answer;
a long prompt is prefilled in chunks between the others' decode steps; a client that goes away
frees its slot and KV cache."""

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

import volvox.serve.scheduler as scheduler_module
from volvox.serve.metrics import Metrics
from volvox.tasks.sampling import SamplingParams

PROMPTS = [f"request {i}: " + "the " * (i % 5) + chr(ord("a") + i) for i in range(16)]


@pytest.mark.parametrize("packed", [True, False], ids=["packed", "per-sequence"])
def test_16_concurrent_clients_get_their_sequential_answers(serve, tiny_lm, monkeypatch, packed):
    """Both ways the scheduler may run a decode step (StepCosts picks by measured speed) give each
    request exactly its own sequential answer."""
    monkeypatch.setattr(scheduler_module.StepCosts, "packed_is_faster", lambda self, n: packed)
    want = [tiny_lm.generate(p, max_new_tokens=20 + i) for i, p in enumerate(PROMPTS)]  # one at a time
    assert len(set(want)) > 8  # different prompts, different answers: a mix-up would show
    server = serve(tiny_lm, "tiny", max_batch=16)
    client = server.client()

    def ask(i):
        if i % 2:
            stream = client.completions.create(model="tiny", prompt=PROMPTS[i], max_tokens=20 + i, temperature=0,
                                               stream=True)
            return "".join(c.choices[0].text for c in stream)
        return client.completions.create(model="tiny", prompt=PROMPTS[i], max_tokens=20 + i,
                                         temperature=0).choices[0].text

    with ThreadPoolExecutor(16) as pool:
        got = list(pool.map(ask, range(16)))
    assert got == want
    m = server.wait_idle()
    assert m["volvox_decode_rows_total"] / m["volvox_decode_steps_total"] > 2  # steps were shared
    assert (m["volvox_packed_decode_steps_total"] > 0) == packed
    assert m["volvox_kv_caches_alive"] == 0


def test_long_prompt_is_prefilled_between_decode_steps(tiny_lm, monkeypatch):
    """With 16-token prefill chunks a 200-token prompt takes 13 scheduler turns, and a request already
    decoding gets a token at each of them: it is not stalled until the long prompt is in. (The
    scheduler itself, without HTTP: its samplers log who drew a token, in the scheduler's order.)"""
    draws = []  # the seed of each sampler call: 1 the short request, 2 the long one

    class LoggingSampler(scheduler_module.Sampler):
        def __call__(self, logits, history):
            draws.append(self.params.seed)
            if draws.count(1) == 4 and len(draws) == 4:  # the short request is decoding: the long one arrives
                scheduler.submit(request(long_prompt, 1, seed=2))
                draws.append("long submitted")
            return super().__call__(logits, history)

    monkeypatch.setattr(scheduler_module, "Sampler", LoggingSampler)
    texts, finished = {1: "", 2: ""}, threading.Semaphore(0)

    def request(ids, max_new, seed):
        def emit(kind, payload):
            if kind == "piece":
                texts[seed] += payload
            elif kind == "done":
                finished.release()
        return scheduler_module.GenerationRequest(ids, max_new, SamplingParams(seed=seed), [], emit)

    long_prompt = list(range(3, 203))  # 200 token ids
    scheduler = scheduler_module.Scheduler(tiny_lm, Metrics("tiny"), prefill_chunk=16)
    scheduler.start()
    try:
        scheduler.submit(request(tiny_lm.tokenizer.encode("hi"), 60, seed=1))
        assert finished.acquire(timeout=60) and finished.acquire(timeout=60)
    finally:
        scheduler.stop()
    during = draws[draws.index("long submitted"):draws.index(2)]
    assert during.count(1) >= 12, f"the short request drew {during.count(1)} tokens during the long prefill"
    assert texts[1] == tiny_lm.generate("hi", max_new_tokens=60)
    assert texts[2] == tiny_lm.generate(long_prompt, max_new_tokens=1)


def test_disconnected_stream_frees_its_slot(serve, tiny_lm, monkeypatch):
    """A client leaves after the first event. Each token is slowed to 20 ms (a sampler that sleeps), so
    the sequence cannot simply run to its end first: it must be retired as cancelled."""
    tiny_lm.generate("x", max_new_tokens=200)
    assert tiny_lm.last_stats.new_tokens == 200  # left alone, it would generate all 200

    class SlowSampler(scheduler_module.Sampler):
        def __call__(self, logits, history):
            time.sleep(0.02)
            return super().__call__(logits, history)

    monkeypatch.setattr(scheduler_module, "Sampler", SlowSampler)
    server = serve(tiny_lm, "tiny", max_batch=2)
    with httpx.Client(timeout=30) as http:
        with http.stream("POST", server.url + "/v1/completions",
                         json={"model": "tiny", "prompt": "x", "max_tokens": 200, "temperature": 0, "stream": True}) as r:
            lines = r.iter_lines()  # held: dropping the iterator would close the connection
            assert next(lines).startswith("data: ")
            assert server.metrics()["volvox_slots_in_use"] == 1
        # the response is closed after one event: the client went away mid-stream
    m = server.wait_idle()
    assert m["volvox_kv_caches_alive"] == 0
    assert m["volvox_cancelled_sequences_total"] == 1
    assert m["volvox_generated_tokens_total"] < 100  # it stopped early, not after finishing
    r = server.client().completions.create(model="tiny", prompt="x", max_tokens=5, temperature=0)  # slot reusable
    assert r.choices[0].text == tiny_lm.generate("x", max_new_tokens=5)


def test_step_costs_pick_the_faster_way():
    costs = scheduler_module.StepCosts()
    assert not costs.packed_is_faster(4)  # first, the single-token step is measured
    costs.record(4, packed=False, seconds=0.040)  # 10 ms a token, one sequence at a time
    assert costs.packed_is_faster(4)  # then a packed step of this size
    costs.record(4, packed=True, seconds=0.020)
    assert costs.packed_is_faster(4)  # 20 ms < 4 x 10 ms
    costs.record(8, packed=True, seconds=0.200)
    assert not costs.packed_is_faster(8)  # 200 ms > 8 x 10 ms
    for _ in range(costs.EXPLORE_EVERY):
        costs.record(8, packed=False, seconds=0.080)
    assert costs.packed_is_faster(8)  # re-measured once stale


def test_a_client_leaving_a_whole_request_frees_its_slot(serve, tiny_lm, monkeypatch):
    """A non-streamed request whose client gives up (a read timeout closes the connection) is retired
    too: the server notices within its disconnect poll."""
    class SlowSampler(scheduler_module.Sampler):
        def __call__(self, logits, history):
            time.sleep(0.02)
            return super().__call__(logits, history)

    monkeypatch.setattr(scheduler_module, "Sampler", SlowSampler)
    server = serve(tiny_lm, "tiny")
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(server.url + "/v1/completions", json={"model": "tiny", "prompt": "x", "max_tokens": 200,
                                                         "temperature": 0}, timeout=0.5)
    m = server.wait_idle(timeout=10)
    assert m["volvox_cancelled_sequences_total"] == 1 and m["volvox_kv_caches_alive"] == 0, str(m)
    assert m["volvox_generated_tokens_total"] < 150
