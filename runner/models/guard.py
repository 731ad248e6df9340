"""What a server may make the HTTP client do: the limits on one attempt of a model call.

The SDK sends every attempt (its retries included) through the ``httpx2.AsyncClient`` we give it; a
subclass of its default client (:func:`guarded_client`) overrides the public ``send`` so that each
attempt:

- ends at a **total deadline** (``request_timeout_s``), whatever the server does: headers, then a body
  dripping a byte a second, all count. Past it the attempt is an ``httpx2.ReadTimeout``, which the SDK
  turns into ``APITimeoutError`` and retries like any timeout (up to ``max_retries``);
- reads at most ``max_reply_bytes`` of **decoded** body: httpx2 decodes gzip/deflate in bounded pieces,
  and the read stops at the cap, so a gzip bomb never decodes past it. Over the cap the call fails at
  once with :class:`ReplyTooLarge` (not retried: the same server would send the same reply);
- never waits longer than ``max_retry_after_s`` because of ``retry-after`` / ``retry-after-ms``: a
  larger value is rewritten to the cap before the SDK reads it;
- for a 2xx answer to ``POST .../v1/messages``: the body must be a Messages API ``message`` (a JSON
  object with ``type: "message"``, a ``content`` list and a ``stop_reason``), else
  :class:`NotAMessage`, which the SDK retries (it is a ``RetryableError``) and, retries spent, raises.
  A body nested too deeply to parse (a ``RecursionError``) is one of these too, never an error the
  SDK would take for a failed connection.

Only public names of the SDK and of httpx2 are used: ``anthropic.DefaultAioHttpClient`` /
``DefaultAsyncHttpxClient``, ``anthropic.AnthropicError``, ``anthropic.RetryableError``,
``httpx2.AsyncClient.send``, ``httpx2.Response``.
"""

from __future__ import annotations

import email.utils
import json
import time
from dataclasses import dataclass
from typing import Any

import anthropic
import anyio
import httpx2

from ..messages import one_line

MIB = 1 << 20
PARSED = "runner.parsed_json"  # the response extension holding the body already parsed by the check


class ReplyTooLarge(anthropic.AnthropicError):
    """The reply's decoded body passed ``max_reply_bytes``: the call fails, unretried."""


class NotAMessage(anthropic.RetryableError):
    """A 2xx answer to a messages request whose body is not a message: retried, then the call fails."""


@dataclass(frozen=True)
class Guard:
    deadline_s: float  # total time of one attempt: connect, headers and the whole body
    max_reply_bytes: int = 32 * MIB
    max_retry_after_s: float = 60.0


def _seconds(value: str) -> float | None:
    try:
        return float(value)
    except ValueError:
        parsed = email.utils.parsedate_tz(value)
        return None if parsed is None else email.utils.mktime_tz(parsed) - time.time()


def capped_retry_headers(headers: httpx2.Headers, cap_s: float) -> None:
    """Rewrite ``retry-after-ms`` and ``retry-after`` (seconds or an HTTP date) that ask for more than
    ``cap_s`` seconds, in place; smaller ones, and unreadable ones (the SDK ignores those), are kept."""
    for name, scale in (("retry-after-ms", 1000.0), ("retry-after", 1.0)):
        value = headers.get(name)
        if value is None:
            continue
        seconds = _seconds(value) if scale == 1.0 else _number(value, scale)
        if seconds is not None and seconds > cap_s:
            headers[name] = f"{cap_s * scale:g}"


def _number(value: str, scale: float) -> float | None:
    try:
        return float(value) / scale
    except ValueError:
        return None


async def read_capped(response: httpx2.Response, cap: int) -> bytes:
    """The decoded body of a streamed ``response``, or :class:`ReplyTooLarge` as soon as it passes ``cap``."""
    chunks: list[bytes] = []
    size = 0
    async for chunk in response.aiter_bytes():
        size += len(chunk)
        if size > cap:
            encoding = response.headers.get("content-encoding")
            raise ReplyTooLarge(
                f"the reply's body is over max_reply_bytes = {cap:,} bytes (decoded"
                f"{f', content-encoding {encoding}' if encoding else ''}); not read further"
            )
        chunks.append(chunk)
    return b"".join(chunks)


def check_message(body: bytes) -> dict[str, Any]:
    """The body of a 2xx messages answer, parsed; :class:`NotAMessage` when it is not a message."""
    try:
        data = json.loads(body)
    except ValueError as e:
        raise NotAMessage(
            f"the server answered 2xx with a body that is not JSON ({e}): "
            f"{one_line(body[:200].decode('utf-8', 'replace'), 200)}"
        ) from None
    except RecursionError:  # a malformed reply of this call, not a connection that failed
        raise NotAMessage(
            "the server answered 2xx with a body nested too deeply to parse (Python's recursion limit): "
            f"{one_line(body[:200].decode('utf-8', 'replace'), 200)}"
        ) from None
    if (
        not isinstance(data, dict)
        or data.get("type") != "message"
        or not isinstance(data.get("content"), list)
        or not isinstance(data.get("stop_reason"), str)
    ):
        raise NotAMessage(
            f'the server answered 2xx with a body that is not a message (need type "message", '
            f"a content list and a stop_reason): {one_line(body[:300].decode('utf-8', 'replace'), 300)}"
        )
    return data


_DROPPED = {"content-encoding", "content-length", "transfer-encoding"}


class _Guarded(httpx2.AsyncClient):
    guard: Guard

    async def send(self, request: httpx2.Request, *, stream: bool = False, **kwargs: Any) -> httpx2.Response:
        if stream:  # a streamed (SSE) call reads its own body; the runner makes none
            return await super().send(request, stream=True, **kwargs)
        guard = self.guard
        try:
            with anyio.fail_after(guard.deadline_s):
                response = await super().send(request, stream=True, **kwargs)
                try:
                    body = await read_capped(response, guard.max_reply_bytes)
                finally:
                    await response.aclose()
        except TimeoutError:
            raise httpx2.ReadTimeout(
                f"no whole reply within request_timeout_s = {guard.deadline_s:g} s "
                "(a total deadline per attempt)",
                request=request,
            ) from None
        extensions = dict(response.extensions)
        if response.is_success and request.method == "POST" and request.url.path.endswith("/v1/messages"):
            extensions[PARSED] = check_message(body)
        headers = httpx2.Headers(
            [(k, v) for k, v in response.headers.multi_items() if k.lower() not in _DROPPED]
        )
        capped_retry_headers(headers, guard.max_retry_after_s)
        out = httpx2.Response(
            response.status_code, headers=headers, content=body, request=request, extensions=extensions
        )
        try:
            out.elapsed = response.elapsed
        except RuntimeError:  # a transport whose stream keeps no time
            pass
        return out


class _GuardedHttpx(_Guarded, anthropic.DefaultAsyncHttpxClient):
    pass


def guarded_client(guard: Guard, **kwargs: Any) -> httpx2.AsyncClient:
    """The SDK's aiohttp client when aiohttp is installed (it carries hundreds of concurrent requests on
    a fraction of the CPU), else its default httpx client; either with ``guard`` on every attempt."""
    try:
        import aiohttp  # noqa: F401
    except ImportError:
        client: _Guarded = _GuardedHttpx(**kwargs)
    else:
        client = _GuardedAio(**kwargs)
    client.guard = guard
    return client


class _GuardedAio(_Guarded, anthropic.DefaultAioHttpClient):
    pass
