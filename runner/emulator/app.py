"""The emulator's ASGI app: the Messages API as the real SDK sees it, served by starlette.

Routes: ``POST /v1/messages``, ``POST /v1/messages/count_tokens``, the Message Batches API under
``/v1/messages/batches`` (see :mod:`.batch_routes`), ``GET /_emulator/stats``, ``POST
/_emulator/reset`` (batches too). The SDK's ``client.beta.messages.create`` posts to the same path
(SDK 2.14 sends the betas only as an ``anthropic-beta`` header; a ``?beta=true`` query, as older
SDKs send, is accepted too).

Guarantees, in the order a messages request meets them:
1. An API key is required (401 ``authentication_error``): ``x-api-key``, or ``Authorization: Bearer``
   (how the ``anthropic`` 2.x SDK sends ``api_key``); an ``anthropic-version`` header too (400);
   then the request gets its number.
2. Latency, then a body over ``max_request_bytes`` is a 413 ``request_too_large``.
3. Strict validation (400 ``invalid_request_error``, every problem in one message; see
   :mod:`.validation`).
4. Over ``context_window_tokens``: 400 ``prompt is too long: N tokens > M maximum``, where
   N = ceil(len(json.dumps([system, messages, tools])) / 4) over the messages the API reads (from
   the last compaction block on, see :mod:`.compaction`; then, over their trigger, with the
   ``clear_tool_uses_20250919`` edits applied, see :mod:`runner.compaction.clearing`: the reply is
   answered from, and billed for, the edited messages, and a request with such an edit gets
   ``context_management.applied_edits``; count_tokens counts the edited messages and says the
   original count in ``context_management.original_input_tokens``).
5. Enforced rate limits (429), then one injected fault at most (see :mod:`.faults`).
6. A scripted ``hostile`` reply (see :func:`.faults.hostile_response`, sent as it is, streamed
   or not), else the reply (see :mod:`.replies`): a JSON body, or with ``stream: true`` the same
   message as server-sent events (``text/event-stream``, see :mod:`.streaming`), which a
   ``stream_error`` fault cuts with an ``error`` event. Counters live in :class:`.state.EmulatorState`.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any, cast

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from ..compaction.clearing import clear_edits
from ..compaction.summarizer import SYSTEM_PROMPT
from .batch_routes import BatchRoutes, betas_of
from .compaction import edited_view
from .config import EmulatorConfig
from .faults import (
    DroppedResponse,
    api_error,
    hostile_response,
    latency_for,
    new_request_id,
    over_the_limit,
    pick_fault,
    retry_headers,
    sleep_unless_disconnected,
)
from .replies import build_message, system_text
from .state import EmulatorState
from .streaming import Event, broken, message_events, sse
from .tokens import input_tokens, over_the_window
from .validation import validate

log = logging.getLogger("runner.emulator")


def api_key_of(request: Request) -> str | None:
    """The key from ``x-api-key``, or from ``Authorization: Bearer`` (how SDK 2.x sends ``api_key``)."""
    key = request.headers.get("x-api-key")
    if key:
        return key
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    return token.strip() or None if scheme.lower() == "bearer" else None


async def frames(events: Iterator[Event]) -> AsyncIterator[bytes]:
    """The events as the bytes of server-sent events, made as they are sent."""
    for event in events:
        yield sse(event)


def _injected_error(
    config: EmulatorConfig, fault: str | None, admitted: dict[str, str]
) -> tuple[int, str, dict[str, str] | None] | None:
    """The status, message and headers of the error an injected ``fault`` answers with, or None for a
    fault that is not an error response (``admitted``: the rate-limit headers of the admission)."""
    if fault == "rate_limit":
        headers = {**admitted, **retry_headers(config.retry_after_s, config.retry_after_ms)}
        return 429, "Number of request tokens has exceeded your rate limit (injected).", headers
    if fault == "overloaded":
        return 529, "Overloaded", None
    if fault == "server_error":
        return 500, "Internal server error", None
    return None


class Api:
    """The request handlers, bound to one :class:`EmulatorState`."""

    def __init__(self, state: EmulatorState):
        self.state = state

    def fail(self, status: int, message: str, headers: dict[str, str] | None = None) -> Response:
        self.state.count(str(status))
        return api_error(status, message, headers)

    def preflight(self, request: Request) -> Response | None:
        key, expected = api_key_of(request), self.state.config.api_key
        if not key or (expected is not None and key != expected):
            return self.fail(401, "invalid x-api-key" if key else "x-api-key header is required")
        if not request.headers.get("anthropic-version"):
            return self.fail(400, "anthropic-version: header is required")
        return None

    def _body(self, request: Request, raw: bytes, count_tokens: bool) -> dict[str, Any] | Response:
        config = self.state.config
        if len(raw) > config.max_request_bytes:
            return self.fail(
                413, f"Request exceeds the maximum allowed number of bytes ({config.max_request_bytes})."
            )
        try:
            body = json.loads(raw)
        except ValueError as e:
            return self.fail(400, f"There was an error parsing the body: {e}")
        if not count_tokens:
            self.state.record(body)
        problems = validate(
            body,
            betas=betas_of(request),
            count_tokens=count_tokens,
            min_trigger=config.compaction_min_trigger,
        )
        if problems:
            return self.fail(400, "; ".join(problems))
        return cast(dict[str, Any], body)  # validate() found a JSON object

    async def messages(self, request: Request) -> Response:
        refused = self.preflight(request)
        if refused is not None:
            return refused
        n = self.state.begin()
        arrived = time.monotonic()
        try:
            return await self._messages(request, n)
        finally:
            self.state.end()
            if getattr(request.state, "summary", False):
                self.state.summary_answered(arrived, time.monotonic())

    async def _messages(self, request: Request, n: int) -> Response:
        state, config = self.state, self.state.config
        raw = await request.body()
        delay = latency_for(config, n)
        if delay and not await sleep_unless_disconnected(request, delay):
            state.count("disconnected")
            return Response(status_code=499)
        body = self._body(request, raw, count_tokens=False)
        if isinstance(body, Response):
            return body
        request.state.summary = system_text(body.get("system")) == SYSTEM_PROMPT
        if body.get("stream"):
            state.streamed()
        view, applied = edited_view(body)
        total = input_tokens(body.get("system"), view, body.get("tools") or [])
        too_long = over_the_window(total, config.context_window_tokens)
        if too_long:
            return self.fail(400, too_long)
        admission = state.window.admit(config, total)
        if not admission.admitted:
            return self.fail(429, over_the_limit(config, admission), admission.headers)
        fault = pick_fault(config, n)
        injected = _injected_error(config, fault, admission.headers)
        if injected is not None:
            return self.fail(*injected)
        if fault == "drop":
            state.count("dropped")
            return DroppedResponse()
        if fault == "slow" and not await sleep_unless_disconnected(request, config.slow_s):
            state.count("slow")
            return Response(status_code=499)
        scripted = (
            config.script[state.script_position] if state.script_position < len(config.script) else None
        )
        if scripted is not None and scripted.hostile is not None:
            state.script_position += 1
            state.count("hostile")
            return hostile_response(request, scripted.hostile, body["model"])
        try:
            message, billed = await build_message(state, body, view, total, applied=applied)
        except Exception:  # an emulator bug: say so loudly, answer like the API would
            log.exception("the emulator failed to build a reply")
            state.count("internal_error")
            return api_error(500, "Internal server error (emulator bug; see its log)")
        headers = {"request-id": new_request_id(), **admission.headers}
        if not body.get("stream"):
            state.bill(billed)
            state.count("slow" if fault == "slow" else "ok")
            return JSONResponse(message, headers=headers)
        return self._stream(message, billed, fault, headers=headers)

    def _stream(
        self,
        message: dict[str, Any],
        billed: list[dict[str, Any]],
        fault: str | None,
        *,
        headers: dict[str, str],
    ) -> Response:
        """The reply as server-sent events; a ``stream_error`` fault cuts it with an error event, unbilled."""
        state, config = self.state, self.state.config
        events = message_events(message, config.stream_chunk_chars)
        if fault == "stream_error":
            state.count("stream_error")
            events = broken(events, config.stream_error_type)
        else:
            state.bill(billed)
            state.count("slow" if fault == "slow" else "ok")
        return StreamingResponse(
            frames(events), media_type="text/event-stream", headers={**headers, "cache-control": "no-cache"}
        )

    async def count_tokens(self, request: Request) -> Response:
        refused = self.preflight(request)
        if refused is not None:
            return refused
        body = self._body(request, await request.body(), count_tokens=True)
        if isinstance(body, Response):
            return body
        self.state.count_tokens_requests += 1
        view, applied = edited_view(body)
        tokens = input_tokens(body.get("system"), view, body.get("tools") or [])
        counted: dict[str, Any] = {"input_tokens": tokens}
        if clear_edits(body.get("context_management")):
            cleared = sum(edit["cleared_input_tokens"] for edit in applied)
            counted["context_management"] = {"original_input_tokens": tokens + cleared}
        return JSONResponse(counted, headers={"request-id": new_request_id()})

    async def stats(self, request: Request) -> Response:
        return JSONResponse(self.state.snapshot())

    async def reset(self, request: Request) -> Response:
        self.state.reset()
        return JSONResponse(self.state.snapshot())


async def _not_found(request: Request, exc: Exception) -> Response:
    return api_error(404, f"Not found: {request.method} {request.url.path}")


async def _not_allowed(request: Request, exc: Exception) -> Response:
    return api_error(405, f"Method {request.method} not allowed for {request.url.path}")


def create_app(state: EmulatorState) -> Starlette:
    """The ASGI app serving ``state`` (its config is read on every request)."""
    api = Api(state)
    routes = [
        Route("/v1/messages", api.messages, methods=["POST"]),
        Route("/v1/messages/count_tokens", api.count_tokens, methods=["POST"]),
        *BatchRoutes(state, preflight=api.preflight, fail=api.fail).routes(),
        Route("/_emulator/stats", api.stats, methods=["GET"]),
        Route("/_emulator/reset", api.reset, methods=["POST"]),
    ]
    return Starlette(routes=routes, exception_handlers={404: _not_found, 405: _not_allowed})
