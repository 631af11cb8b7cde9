"""A live volvox server for tests: uvicorn on a free localhost port in a thread of this process,
over a model loaded by the test (which compares the server's answers with that model's own)."""

import socket
import threading
import time

import uvicorn

from volvox.serve.app import create_app
from volvox.serve.metrics import parse_metrics


class LiveServer:
    """``create_app(model, ...)`` served on 127.0.0.1:<free port> until ``close()``."""

    def __init__(self, model, model_id: str, **app_options):
        self.model, self.model_id = model, model_id
        self.app = create_app(model, model_id, **app_options)
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        self.port = sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.server = uvicorn.Server(uvicorn.Config(self.app, log_level="warning", timeout_graceful_shutdown=5))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [sock]}, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("the test server did not start")
            time.sleep(0.02)

    def client(self, **kw):
        """An official OpenAI client pointed at this server (no retries: the tests see every status)."""
        import openai

        return openai.OpenAI(base_url=self.url + "/v1", api_key=kw.pop("api_key", "unused"), max_retries=0, **kw)

    def metrics(self) -> dict[str, float]:
        """/metrics, parsed: {name: value summed over labels}."""
        import httpx

        headers = {"Authorization": f"Bearer {self.app.api_key}"} if self.app.api_key else {}
        return parse_metrics(httpx.get(self.url + "/metrics", headers=headers).text)

    def wait_idle(self, timeout: float = 30.0) -> dict[str, float]:
        """/metrics once no sequence holds a slot and no request waits (AssertionError on timeout)."""
        deadline = time.monotonic() + timeout
        while True:
            m = self.metrics()
            if m["volvox_slots_in_use"] == 0 and m["volvox_queue_depth"] == 0:
                return m
            assert time.monotonic() < deadline, f"the server is still busy: {m}"
            time.sleep(0.05)

    def close(self) -> None:
        self.server.should_exit = True
        self.thread.join(30)
