"""Fault injection and enforced rate limits, and the API's error responses and message bodies.

Guarantees:
- Every decision is reproducible: a fault fires on request ``n`` when ``n`` is in its schedule or
  ``Random((seed, kind, n)).random() < rate``, independent of timing and concurrency.
- ``stream_error`` comes last in :data:`FAULT_ORDER`: on a streamed request the stream starts and
  is cut by an ``error`` event (see :mod:`.streaming`); on another request it is no fault. Every
  other fault is an HTTP status (or a dropped connection) before any stream starts.
- Rate limits are a sliding-window log over ``window_s`` seconds: a request is admitted only if the
  requests already admitted in the window are fewer than ``rpm`` and their input tokens plus its own
  are at most ``input_tokens_per_minute``. A refused request is not logged; its ``retry-after`` is
  the time until enough of the window expires for it to fit (an integer, at least 1, as the API
  sends it; ``retry-after-ms`` too when configured).
- Errors have the API's shape ``{"type": "error", "error": {"type", "message"}, "request_id"}`` and
  ``x-should-retry: true`` on 429, 500 and 529.
- A dropped connection (:class:`DroppedResponse`) sends the headers and part of the body, then the
  server closes the connection; latency and slow answers (:func:`sleep_unless_disconnected`) end
  early when the client leaves.
- A hostile reply (:func:`hostile_response`, a scripted reply's ``hostile``) is made as it is sent:
  a gzip bomb or a huge body costs the emulator only what the client reads of it.
"""

from __future__ import annotations

import json
import math
import random
import time
import uuid
import zlib
from collections import deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import anyio
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.types import Receive, Scope, Send

from .config import EmulatorConfig, Fault, Hostile

FAULT_ORDER = ("rate_limit", "overloaded", "server_error", "drop", "slow", "stream_error")
ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    404: "not_found_error",
    405: "invalid_request_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    529: "overloaded_error",
}
RETRYABLE = {429, 500, 529}


def chance(seed: int, kind: str, n: int) -> float:
    """A reproducible number in [0, 1) for decision ``kind`` about request (or batch) ``n``."""
    return random.Random(f"{seed}:{kind}:{n}").random()


def fires(fault: Fault, seed: int, kind: str, n: int) -> bool:
    return n in fault.schedule or (fault.rate > 0 and chance(seed, kind, n) < fault.rate)


def pick_fault(config: EmulatorConfig, n: int) -> str | None:
    """The first fault of :data:`FAULT_ORDER` that fires on request ``n``, or None."""
    for kind in FAULT_ORDER:
        if fires(getattr(config.faults, kind), config.seed, kind, n):
            return kind
    return None


def latency_for(config: EmulatorConfig, n: int) -> float:
    jitter = config.latency.jitter_s * chance(config.seed, "latency", n) if config.latency.jitter_s else 0.0
    return config.latency.seconds + jitter


def new_request_id() -> str:
    return "req_emu_" + uuid.uuid4().hex[:24]


def retry_headers(seconds: float, with_ms: bool) -> dict[str, str]:
    headers = {"retry-after": str(max(1, math.ceil(seconds)))}
    if with_ms:
        headers["retry-after-ms"] = str(max(1, math.ceil(seconds * 1000)))
    return headers


def api_error(status: int, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    """An error response exactly as the API shapes it."""
    request_id = new_request_id()
    body = {
        "type": "error",
        "error": {"type": ERROR_TYPES.get(status, "api_error"), "message": message},
        "request_id": request_id,
    }
    out = {"request-id": request_id, **(headers or {})}
    if status in RETRYABLE:
        out["x-should-retry"] = "true"
    return JSONResponse(body, status_code=status, headers=out)


def _rfc3339(seconds_from_now: float) -> str:
    moment = datetime.now(UTC) + timedelta(seconds=max(0.0, seconds_from_now))
    return moment.isoformat(timespec="seconds").replace("+00:00", "Z")


@dataclass
class Admission:
    """The rate limiter's answer: admitted or not, when to retry, and the headers to send."""

    admitted: bool
    retry_after_s: float = 0.0
    limited_by: str = ""
    headers: dict[str, str] = field(default_factory=dict)


class SlidingWindow:
    """The log of admitted requests: (monotonic time, input tokens). ``admit`` runs on the app's one
    event loop; ``count`` only reads."""

    def __init__(self, clock: Callable[[], float] = time.monotonic):
        self.clock = clock
        self.log: deque[tuple[float, int]] = deque()

    def _expire(self, now: float, window_s: float) -> None:
        while self.log and now - self.log[0][0] >= window_s:
            self.log.popleft()

    def count(self, window_s: float) -> int:
        """Requests admitted in the last ``window_s`` seconds; safe to call from another thread."""
        now = self.clock()
        return sum(1 for t, _ in list(self.log) if now - t < window_s)

    def admit(self, config: EmulatorConfig, tokens: int) -> Admission:
        """Check the configured limits for a request of ``tokens`` input tokens; log it if admitted."""
        now, window = self.clock(), config.window_s
        self._expire(now, window)
        rpm, itpm = config.rpm, config.input_tokens_per_minute
        used_tokens = sum(t for _, t in self.log)
        wait, limited_by = 0.0, ""
        if rpm is not None and len(self.log) >= rpm:
            wait, limited_by = self.log[len(self.log) - rpm][0] + window - now, "requests"
        if itpm is not None and used_tokens + tokens > itpm:
            if tokens > itpm:
                token_wait = window  # never fits; the API still answers 429
            else:
                freed, token_wait = 0, 0.0
                for t, n in self.log:
                    freed += n
                    if used_tokens - freed + tokens <= itpm:
                        token_wait = t + window - now
                        break
            if token_wait > wait:
                wait, limited_by = token_wait, "input_tokens"
        admitted = not limited_by
        if admitted:
            self.log.append((now, tokens))
            used_tokens += tokens
        headers: dict[str, str] = {}
        reset_in = (self.log[0][0] + window - now) if self.log else 0.0
        if rpm is not None:
            headers.update(
                {
                    "anthropic-ratelimit-requests-limit": str(rpm),
                    "anthropic-ratelimit-requests-remaining": str(max(0, rpm - len(self.log))),
                    "anthropic-ratelimit-requests-reset": _rfc3339(reset_in),
                }
            )
        if itpm is not None:
            headers.update(
                {
                    "anthropic-ratelimit-input-tokens-limit": str(itpm),
                    "anthropic-ratelimit-input-tokens-remaining": str(max(0, itpm - used_tokens)),
                    "anthropic-ratelimit-input-tokens-reset": _rfc3339(reset_in),
                }
            )
        if not admitted:
            headers.update(retry_headers(wait, config.retry_after_ms))
        return Admission(admitted, max(0.0, wait), limited_by, headers)


def over_the_limit(config: EmulatorConfig, admission: Admission) -> str:
    """The 429 message for a request the enforced limits refused, in the API's words."""
    limit = config.rpm if admission.limited_by == "requests" else config.input_tokens_per_minute
    return (
        f"This request would exceed the rate limit for your organization of {limit} "
        f"{admission.limited_by.replace('_', ' ')} per {config.window_s:g} seconds. "
        "Please wait before trying again (see the retry-after header)."
    )


class DroppedResponse(Response):
    """Sends the headers and part of the body, then returns without finishing: uvicorn closes the
    connection, and the client sees the body cut short."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"application/json"), (b"content-length", b"4096")],
            }
        )
        await send({"type": "http.response.body", "body": b'{"id": "msg_emu_', "more_body": True})


DROP_LOG_MESSAGE = "ASGI callable returned without completing response."


async def sleep_unless_disconnected(request: Request, seconds: float) -> bool:
    """Sleep; False as soon as the client disconnects. Call only after the body was read."""
    disconnected = False
    async with anyio.create_task_group() as tg:

        async def watch() -> None:
            nonlocal disconnected
            while (await request.receive())["type"] != "http.disconnect":
                pass
            disconnected = True
            tg.cancel_scope.cancel()

        tg.start_soon(watch)
        await anyio.sleep(seconds)
        tg.cancel_scope.cancel()
    return not disconnected


_PIECE = 1 << 20


def message_body(
    model: str, content: list[dict[str, Any]], stop_reason: str, usage: dict[str, Any]
) -> dict[str, Any]:
    """A ``message`` response body as the API shapes it."""
    return {
        "id": "msg_emu_" + uuid.uuid4().hex[:24],
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": usage,
    }


def _text_message(model: str, marker: str) -> tuple[bytes, bytes]:
    """The bytes of a one-text-block message before and after its text, which is ``marker``'s place."""
    usage = {"input_tokens": 10, "output_tokens": 10}
    body = json.dumps(message_body(model, [{"type": "text", "text": marker}], "end_turn", usage)).encode()
    head, _, tail = body.partition(marker.encode())
    return head, tail


async def _text_body(request: Request, head: bytes, size: int, tail: bytes) -> AsyncIterator[bytes]:
    yield head
    for start in range(0, size, _PIECE):
        if await request.is_disconnected():  # the client gave up: make no more of it
            return
        yield b"a" * min(_PIECE, size - start)
    yield tail


async def _gzipped(pieces: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    squeeze = zlib.compressobj(9, zlib.DEFLATED, 31)  # 31: a gzip stream
    async for piece in pieces:
        out = squeeze.compress(piece)
        if out:
            yield out
    yield squeeze.flush()


async def drip(data: bytes, interval_s: float) -> AsyncIterator[bytes]:
    """``data`` one byte every ``interval_s`` seconds."""
    for i in range(len(data)):
        yield data[i : i + 1]
        await anyio.sleep(interval_s)


def hostile_response(request: Request, hostile: Hostile, model: str) -> Response:
    """A 200 that no honest server sends (see :class:`.config.Hostile`)."""
    headers = {"request-id": new_request_id()}
    if hostile.kind == "error_body":
        return JSONResponse(
            {
                "type": "error",
                "error": {"type": "api_error", "message": "Internal server error (sent with status 200)"},
                "request_id": headers["request-id"],
            },
            headers=headers,
        )
    head, tail = _text_message(model, "@@TEXT@@")
    if hostile.kind == "drip":
        return StreamingResponse(
            drip(head + b"dripped" + tail, hostile.interval_s),
            media_type="application/json",
            headers={**headers, "content-length": str(len(head) + 7 + len(tail))},
        )
    if hostile.kind == "huge_text":
        return StreamingResponse(
            _text_body(request, head, hostile.bytes, tail),
            media_type="application/json",
            headers={**headers, "content-length": str(len(head) + hostile.bytes + len(tail))},
        )
    return StreamingResponse(
        _gzipped(_text_body(request, head, hostile.bytes, tail)),
        media_type="application/json",
        headers={**headers, "content-encoding": "gzip"},
    )
