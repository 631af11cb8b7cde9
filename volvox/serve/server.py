"""``volvox serve``: load a model, build the app, run it under uvicorn until SIGTERM / Ctrl-C.

On SIGTERM or SIGINT uvicorn stops accepting connections, lets the requests in flight finish
(their sequences keep decoding; up to ``drain_seconds``), then the app's shutdown stops the
scheduler thread and the process exits 0.
"""

from __future__ import annotations

import sys

from volvox.errors import VolvoxError


def run(model_name: str, *, host: str = "127.0.0.1", port: int = 8080, threads: int | None = None,
        max_batch: int = 16, max_queue: int = 64, prefill_chunk: int = 128, api_key: str | None = None,
        alias: str | None = None, drain_seconds: float = 60.0, log_level: str = "info") -> None:
    """Serve ``model_name`` (any name ``volvox.load`` takes) on ``host:port`` until told to stop."""
    try:
        import uvicorn
    except ImportError:
        raise VolvoxError("volvox serve needs uvicorn and starlette: pip install 'volvox[serve]'") from None
    from volvox.loader import load
    from volvox.serve.app import create_app

    model = load(model_name, threads=threads)
    model_id = alias or model_name
    app = create_app(model, model_id, api_key=api_key, max_batch=max_batch, max_queue=max_queue,
                     prefill_chunk=prefill_chunk)
    where = {"0.0.0.0": "every IPv4 interface", "::": "every interface", "127.0.0.1": "localhost only",
             "localhost": "localhost only", "::1": "localhost only"}.get(host, host)
    print(f"volvox serve: {model_id} ({model.metadata.get('task')}) on http://{host}:{port} ({where}); "
          f"{max_batch} sequence slots, queue {max_queue}, API key {'required' if api_key else 'off'}",
          file=sys.stderr, flush=True)
    config = uvicorn.Config(app, host=host, port=port, log_level=log_level, timeout_graceful_shutdown=drain_seconds,
                            access_log=log_level == "debug")
    try:
        _draining_server_class()(config).run()
    finally:
        model.close()


def _draining_server_class():
    import uvicorn

    class DrainingServer(uvicorn.Server):
        """uvicorn's server, exiting with status 0 once a SIGTERM / SIGINT drain is done (uvicorn itself
        re-raises the signal after draining, so the process would end by it, status -15)."""

        def handle_exit(self, sig, frame) -> None:
            super().handle_exit(sig, frame)
            self._captured_signals.clear()

    return DrainingServer
