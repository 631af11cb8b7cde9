"""The OpenAI-compatible ASGI app (Starlette): routes, streaming, API key, request counting.

Bodies are read as raw JSON and checked by ``volvox.serve.protocol`` so that every malformed
request gets an OpenAI-shaped 4xx naming the field at fault. Generation goes through the
``Scheduler`` (continuous batching); other tasks (embeddings, classify, detect) run as jobs on
the scheduler's thread, which alone touches the model.

Routes: ``GET /`` (the chat page), ``/health``, ``/metrics``, ``/v1/models``;
``POST /v1/completions``, ``/v1/chat/completions`` (language models), ``/v1/embeddings``
(encoders), ``/v1/classify``, ``/v1/detect`` (vision models; the image as base64),
``/v1/audio/transcriptions`` (speech models; the audio file as a multipart upload, as OpenAI's).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hmac
import io
import json
from pathlib import Path

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

from volvox.errors import VolvoxError
from volvox.serve import protocol
from volvox.serve.metrics import Metrics
from volvox.serve.protocol import APIError, Completion, invalid
from volvox.serve.scheduler import GenerationRequest, QueueFullError, Scheduler, SchedulerStoppedError

CHAT_PAGE = Path(__file__).resolve().parent / "static" / "chat.html"
PUBLIC_PATHS = ("/", "/health")  # no API key: the liveness probe, and the static page (its calls carry the key)
DISCONNECT_POLL = 0.5  # seconds between checks that a non-streaming client is still there


def create_app(model, model_id: str, *, api_key: str | None = None, max_batch: int = 16, max_queue: int = 64,
               prefill_chunk: int = 128) -> "_Guard":
    """The server app (an ASGI callable) for ``model`` (already loaded), answering to the name
    ``model_id``; its ``state`` holds the scheduler and the metrics."""
    metrics = Metrics(model_id)
    scheduler = Scheduler(model, metrics, max_batch=max_batch, max_queue=max_queue, prefill_chunk=prefill_chunk)
    api = _Routes(model, model_id, scheduler, metrics)

    @contextlib.asynccontextmanager
    async def lifespan(app):
        scheduler.start()
        try:
            yield
        finally:
            await asyncio.get_running_loop().run_in_executor(None, scheduler.stop)

    routes = [Route("/", api.chat_page), Route("/health", api.health), Route("/metrics", api.prometheus),
              Route("/v1/models", api.models)]
    if hasattr(model, "generate"):
        routes += [Route("/v1/completions", api.completions, methods=["POST"]),
                   Route("/v1/chat/completions", api.chat_completions, methods=["POST"])]
    for method, path, handler in (("embed", "/v1/embeddings", api.embeddings),
                                  ("classify", "/v1/classify", api.classify), ("detect", "/v1/detect", api.detect),
                                  ("transcribe", "/v1/audio/transcriptions", api.transcriptions)):
        if hasattr(model, method):
            routes.append(Route(path, handler, methods=["POST"]))
    app = Starlette(routes=routes, lifespan=lifespan,
                    exception_handlers={APIError: _api_error, HTTPException: _http_error, Exception: _server_error})
    app.state.scheduler, app.state.metrics = scheduler, metrics
    known = {route.path for route in routes}
    return _Guard(app, api_key, metrics, known)


# ---------------------------------------------------------------------------------- errors

async def _api_error(request: Request, error: APIError) -> Response:
    headers = {"Retry-After": "1"} if error.status in (429, 503) else None
    return JSONResponse(error.body(), status_code=error.status, headers=headers)


async def _http_error(request: Request, error: HTTPException) -> Response:
    if error.status_code == 404:
        return await _api_error(request, APIError(404, f"no route {request.url.path}", type="not_found_error"))
    if error.status_code == 405:
        return await _api_error(request, APIError(405, f"{request.method} is not allowed on {request.url.path}"))
    return await _api_error(request, APIError(error.status_code, str(error.detail)))


async def _server_error(request: Request, error: Exception) -> Response:
    return await _api_error(request, APIError(500, f"internal error: {type(error).__name__}: {error}",
                                              type="server_error"))


class _Guard:
    """ASGI middleware: checks the API key (``Authorization: Bearer KEY``) on every route but
    PUBLIC_PATHS, and counts each HTTP request by route and status for /metrics."""

    def __init__(self, app: Starlette, api_key: str | None, metrics: Metrics, known_paths: set[str]):
        self.app, self.api_key, self.metrics, self.known_paths = app, api_key, metrics, known_paths
        self.state = app.state

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        route = scope["path"] if scope["path"] in self.known_paths else "other"
        status = 500

        async def send_counted(message):
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            if self.api_key is not None and scope["path"] not in PUBLIC_PATHS and not self._authorized(scope):
                error = APIError(401, "missing or wrong API key: send the header 'Authorization: Bearer <key>'",
                                 type="authentication_error", code="invalid_api_key")
                return await JSONResponse(error.body(), status_code=401)(scope, receive, send_counted)
            await self.app(scope, receive, send_counted)
        finally:
            self.metrics.request_done(route, status)

    def _authorized(self, scope) -> bool:
        header = dict(scope["headers"]).get(b"authorization", b"").decode("latin-1")
        scheme, _, key = header.partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(key.strip().encode(), self.api_key.encode())


# ---------------------------------------------------------------------------------- routes

async def _json_body(request: Request) -> dict:
    """The request's JSON object; a 400 when it is not one."""
    raw = await request.body()
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as e:
        raise APIError(400, f"the request body is not valid JSON: {e}", code="invalid_json") from None
    if not isinstance(body, dict):
        raise APIError(400, f"the request body must be a JSON object, got {type(body).__name__}", code="invalid_json")
    return body


class _Routes:
    """The route handlers over one model, its scheduler and metrics."""

    def __init__(self, model, model_id: str, scheduler: Scheduler, metrics: Metrics):
        self.model, self.model_id, self.scheduler, self.metrics = model, model_id, scheduler, metrics

    def _check_model(self, body: dict) -> None:
        name = body.get("model")
        if name is not None and name != self.model_id:
            raise APIError(404, f"the model {name!r} does not exist: this server serves {self.model_id!r}",
                           param="model", code="model_not_found")

    async def chat_page(self, request: Request) -> Response:
        return FileResponse(CHAT_PAGE, media_type="text/html; charset=utf-8")

    async def health(self, request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def prometheus(self, request: Request) -> Response:
        return PlainTextResponse(self.metrics.render(), media_type="text/plain; version=0.0.4")

    async def models(self, request: Request) -> Response:
        return JSONResponse({"object": "list", "data": [
            {"id": self.model_id, "object": "model", "created": 0, "owned_by": "volvox",
             "task": self.model.metadata.get("task")}]})

    # ---- generation

    async def completions(self, request: Request) -> Response:
        body = await _json_body(request)
        self._check_model(body)
        completion = protocol.parse_completion(body)
        if isinstance(completion.prompt, str):
            ids = self.model.tokenizer.encode(completion.prompt)
        else:
            ids = completion.prompt
            vocab = self.model.config.vocab_size
            if min(ids) < 0 or max(ids) >= vocab:
                raise invalid("prompt", f"token ids must be in [0, {vocab}), got {min(ids)}..{max(ids)}")
        if not ids:
            if self.model.tokenizer.bos_id is None:
                raise invalid("prompt", "the prompt is empty and the model has no BOS token to start from")
            ids = [self.model.tokenizer.bos_id]
        return await self._generate(request, completion, ids, chat=False)

    async def chat_completions(self, request: Request) -> Response:
        body = await _json_body(request)
        self._check_model(body)
        completion, messages = protocol.parse_chat(body)
        try:
            prompt = self.model.tokenizer.apply_chat_template(messages, add_generation_prompt=True)
        except VolvoxError as e:
            raise invalid("messages", f"the model's chat template rejected the messages: {e}") from None
        ids = self.model.tokenizer.encode(prompt, add_bos=False)
        return await self._generate(request, completion, ids, chat=True)

    async def _generate(self, request: Request, completion: Completion, ids: list[int], chat: bool) -> Response:
        context = self.model.config.context_length
        max_new = completion.max_tokens if completion.max_tokens is not None else context - len(ids)
        if completion.max_tokens is None and max_new < 1:
            raise APIError(400, f"this model's context is {context} tokens and the prompt has {len(ids)}: "
                           "no room left for a reply; shorten the prompt",
                           param="messages" if chat else "prompt", code="context_length_exceeded")
        if len(ids) + max_new > context:
            raise APIError(400, f"this model's context is {context} tokens, but the request needs "
                           f"{len(ids) + max_new} ({len(ids)} prompt tokens + max_tokens {max_new}); "
                           "shorten the prompt or lower max_tokens",
                           param="messages" if chat else "prompt", code="context_length_exceeded")
        loop = asyncio.get_running_loop()
        events: asyncio.Queue = asyncio.Queue()

        def emit(kind: str, payload) -> None:  # from the scheduler thread
            try:
                loop.call_soon_threadsafe(events.put_nowait, (kind, payload))
            except RuntimeError:  # the event loop is gone: nobody is listening any more
                job.cancelled = True

        job = GenerationRequest(ids, max_new, completion.params, completion.stops, emit)
        try:
            self.scheduler.submit(job)
        except QueueFullError as e:
            raise APIError(503, f"server busy: {e}; retry later", type="server_busy", code="queue_full") from None
        except SchedulerStoppedError as e:
            raise APIError(503, str(e), type="server_busy", code="shutting_down") from None
        rid = protocol.new_id("chatcmpl" if chat else "cmpl")
        if completion.stream:
            return StreamingResponse(self._stream(job, events, rid, chat, completion.include_usage),
                                     media_type="text/event-stream", headers={"Cache-Control": "no-cache"})
        try:
            pieces, next_check = [], loop.time() + DISCONNECT_POLL
            while True:
                try:
                    kind, payload = await asyncio.wait_for(events.get(), DISCONNECT_POLL)
                except asyncio.TimeoutError:
                    kind = None
                if loop.time() >= next_check:  # every DISCONNECT_POLL seconds, however fast pieces come
                    if await request.is_disconnected():
                        return Response(status_code=499)
                    next_check = loop.time() + DISCONNECT_POLL
                if kind is None:
                    continue
                if kind == "piece":
                    pieces.append(payload)
                elif kind == "error":
                    raise APIError(500, payload, type="server_error", code="generation_failed")
                else:
                    finish, *counts = payload
                    make = protocol.chat_response if chat else protocol.completion_response
                    return JSONResponse(make(rid, self.model_id, "".join(pieces), finish, counts))
        finally:
            job.cancelled = True  # a no-op once it finished; frees the slot when the client left

    async def _stream(self, job: GenerationRequest, events: asyncio.Queue, rid: str, chat: bool,
                      include_usage: bool):
        """Server-sent events: one chunk per piece, a last chunk with the finish reason, ``[DONE]``."""
        def sse(data: dict) -> str:
            return f"data: {json.dumps(data, ensure_ascii=False)}\n\n"

        try:
            if chat:
                yield sse(protocol.chat_chunk(rid, self.model_id, {"role": "assistant", "content": ""}, None))
            while True:
                kind, payload = await events.get()
                if kind == "piece":
                    yield sse(protocol.chat_chunk(rid, self.model_id, {"content": payload}, None) if chat
                              else protocol.completion_chunk(rid, self.model_id, payload, None))
                elif kind == "error":
                    yield sse(APIError(500, payload, type="server_error", code="generation_failed").body())
                    return
                else:
                    finish, *counts = payload
                    yield sse(protocol.chat_chunk(rid, self.model_id, {}, finish) if chat
                              else protocol.completion_chunk(rid, self.model_id, "", finish))
                    if include_usage:
                        last = protocol.chat_chunk(rid, self.model_id, {}, None) if chat else \
                            protocol.completion_chunk(rid, self.model_id, "", None)
                        yield sse({**last, "choices": [], "usage": protocol.usage(*counts)})
                    yield "data: [DONE]\n\n"
                    return
        finally:
            job.cancelled = True  # the client went away (or we are done): retire the sequence

    # ---- other tasks

    async def _run(self, job):
        try:
            return await asyncio.wrap_future(self.scheduler.run_job(job))
        except SchedulerStoppedError as e:
            raise APIError(503, str(e), type="server_busy", code="shutting_down") from None
        except VolvoxError as e:
            raise APIError(400, str(e)) from None

    async def embeddings(self, request: Request) -> Response:
        body = await _json_body(request)
        self._check_model(body)
        texts = body.get("input")
        texts = [texts] if isinstance(texts, str) else texts
        if not isinstance(texts, list) or not texts or not all(isinstance(t, str) for t in texts):
            raise invalid("input", "'input' must be a string or a non-empty list of strings")
        fmt = body.get("encoding_format", "float")
        if fmt not in ("float", "base64"):
            raise invalid("encoding_format", f"'encoding_format' must be float or base64, got {fmt!r}")
        rows = await self._run(lambda: self.model.embed(texts))  # (n, dim) float32
        n_tokens = sum(len(self.model.tokenizer.encode(t, max_length=self.model.config.context_length))
                       for t in texts)
        data = [{"object": "embedding", "index": i,
                 "embedding": base64.b64encode(row.tobytes()).decode() if fmt == "base64" else row.tolist()}
                for i, row in enumerate(rows)]
        return JSONResponse({"object": "list", "data": data, "model": self.model_id,
                             "usage": {"prompt_tokens": n_tokens, "total_tokens": n_tokens}})

    def _image(self, body: dict):
        from PIL import Image, UnidentifiedImageError

        data = body.get("image")
        if not isinstance(data, str):
            raise invalid("image", "'image' must be a base64-encoded image file (PNG, JPEG, ...)")
        try:
            return Image.open(io.BytesIO(base64.b64decode(data.split(",", 1)[-1], validate=True)))
        except (ValueError, UnidentifiedImageError) as e:
            raise invalid("image", f"'image' is not a base64-encoded image file: {e}") from None

    async def classify(self, request: Request) -> Response:
        body = await _json_body(request)
        self._check_model(body)
        top_k = protocol.integer_field(body, "top_k", lo=1) or 5
        image = self._image(body)
        labels = await self._run(lambda: self.model.classify(image, top_k=top_k))
        return JSONResponse({"model": self.model_id, "labels": [vars(label) for label in labels]})

    async def detect(self, request: Request) -> Response:
        body = await _json_body(request)
        self._check_model(body)
        image = self._image(body)
        found = await self._run(lambda: self.model.detect(image))
        return JSONResponse({"model": self.model_id, "detections": [vars(d) for d in found]})

    async def transcriptions(self, request: Request) -> Response:
        """OpenAI's audio transcription: a multipart form with the audio ``file`` (WAV, FLAC ...),
        optional ``model``, ``language``, ``temperature`` and ``response_format`` (json or text)."""
        try:
            form = await request.form()
        except Exception as e:  # a malformed multipart body (python-multipart's errors have no common base)
            raise APIError(400, f"the body must be a multipart form with an audio 'file': {e}") from None
        self._check_model(form)
        upload = form.get("file")
        if upload is None or isinstance(upload, str):
            raise invalid("file", "'file' must be an uploaded audio file (WAV, FLAC, ...)")
        fmt = form.get("response_format", "json")
        if fmt not in ("json", "text"):
            raise invalid("response_format", f"'response_format' must be json or text, got {fmt!r}")
        try:
            temperature = float(form.get("temperature") or 0.0)
        except ValueError:
            raise invalid("temperature", "'temperature' must be a number") from None
        if not 0.0 <= temperature <= 2.0:
            raise invalid("temperature", f"'temperature' must be in [0, 2], got {temperature}")
        data = await upload.read()
        language = form.get("language") or None
        text = await self._run(lambda: self.model.transcribe(data, language=language, temperature=temperature))
        return PlainTextResponse(text) if fmt == "text" else JSONResponse({"text": text})
