"""Continuous batching: concurrent requests share decode steps and each gets exactly its own answer;
a long prompt is prefilled in chunks between the others' decode steps; a client that goes away
frees its slot and KV cache."""

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

import volvox.serve.scheduler as scheduler_module

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


def test_long_prompt_is_prefilled_between_decode_steps(serve, tiny_lm):
    """With 16-token prefill chunks a 200-token prompt takes 13 scheduler turns, and a request already
    decoding gets a token at each of them: it is not stalled until the long prompt is in."""
    want = tiny_lm.generate("hi", max_new_tokens=80)
    assert tiny_lm.last_stats.new_tokens == 80  # no early end-of-generation: tokens to count below
    server = serve(tiny_lm, "tiny", prefill_chunk=16)
    client = server.client()
    short_times, long_first = [], []

    def long_request():
        r = client.completions.create(model="tiny", prompt="the " * 200, max_tokens=1, temperature=0, stream=True)
        for _ in r:
            long_first.append(time.monotonic())

    stream = client.completions.create(model="tiny", prompt="hi", max_tokens=80, temperature=0, stream=True)
    text = ""
    for i, chunk in enumerate(stream):
        short_times.append(time.monotonic())
        text += chunk.choices[0].text
        if i == 3:
            sent = time.monotonic()
            worker = threading.Thread(target=long_request)
            worker.start()
    worker.join()
    assert text == want
    during = [t for t in short_times if sent < t < long_first[0]]
    assert len(during) >= 8, f"only {len(during)} tokens of the short request while the long prompt was prefilled"
    assert server.wait_idle()["volvox_prompt_tokens_total"] >= 200


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
