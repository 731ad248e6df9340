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
- for a **streamed** request (``send(..., stream=True)``: the Message Batch results file, any stream the
  SDK reads itself) the same, over the whole body as it is read: its headers and every piece of its
  decoded body before the deadline, at most the cap in all (``httpx2.ReadTimeout`` or
  :class:`ReplyTooLarge` from the read that passes either). Inside :func:`download` the deadline and the
  cap are the download's (an absolute deadline, shared by every attempt of it), else
  ``request_timeout_s`` and ``max_reply_bytes``;
- follows a redirect (as the SDK asks) only within the request's origin (scheme, host, port): a
  redirect elsewhere is :class:`ForeignOrigin` before anything is sent there, so the headers the SDK
  put on the request (the API key) never leave the host they were meant for;
- for a 2xx answer to ``POST .../v1/messages``: the body must be a Messages API ``message`` (a JSON
  object with ``type: "message"``, a ``content`` list and a ``stop_reason``), else
  :class:`NotAMessage`, which the SDK retries (it is a ``RetryableError``) and, retries spent, raises.
  A body nested too deeply to parse (a ``RecursionError``) is one of these too, never an error the
  SDK would take for a failed connection.

Only public names of the SDK and of httpx2 are used: ``anthropic.DefaultAioHttpClient`` /
``DefaultAsyncHttpxClient``, ``anthropic.AnthropicError``, ``anthropic.RetryableError``,
``httpx2.AsyncClient.send``, ``httpx2.Response``, ``httpx2.Response.next_request``,
``httpx2.AsyncByteStream``, ``httpx2.URL.origin``.
"""

from __future__ import annotations

import email.utils
import json
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
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


class ForeignOrigin(anthropic.AnthropicError):
    """A request (or a redirect) to another origin than the one it was meant for: never sent, unretried."""


@dataclass(frozen=True)
class Guard:
    deadline_s: float  # total time of one attempt: connect, headers and the whole body
    max_reply_bytes: int = 32 * MIB
    max_retry_after_s: float = 60.0


@dataclass(frozen=True)
class Download:
    """The limits of one streamed download: ``max_bytes`` of decoded body in all, every attempt of it
    (headers and body) over by ``until`` (``anyio.current_time()``)."""

    max_bytes: int
    until: float


DOWNLOAD: ContextVar[Download | None] = ContextVar("runner_download", default=None)


@contextmanager
def download(max_bytes: int, seconds: float) -> Iterator[Download]:
    """The streamed requests made inside: at most ``max_bytes`` decoded, over within ``seconds`` from now
    (every attempt, the SDK's retries included: the deadline is absolute)."""
    limits = Download(max_bytes=max_bytes, until=anyio.current_time() + max(0.0, seconds))
    token = DOWNLOAD.set(limits)
    try:
        yield limits
    finally:
        DOWNLOAD.reset(token)


def same_origin(url: httpx2.URL | str, base: httpx2.URL | str) -> bool:
    """Whether ``url`` has ``base``'s origin: the same scheme, host and port (a default port counts as
    its number)."""
    return httpx2.URL(url).origin == httpx2.URL(base).origin


def _seconds(value: str, scale: float) -> float | None:
    """``value`` as seconds: a number of ``1 / scale`` seconds, or (``scale`` 1) an HTTP date; else None."""
    try:
        return float(value) / scale
    except ValueError:
        parsed = email.utils.parsedate_tz(value) if scale == 1.0 else None
        return None if parsed is None else email.utils.mktime_tz(parsed) - time.time()


def capped_retry_headers(headers: httpx2.Headers, cap_s: float) -> None:
    """Rewrite ``retry-after-ms`` and ``retry-after`` (seconds or an HTTP date) that ask for more than
    ``cap_s`` seconds, in place; smaller ones, and unreadable ones (the SDK ignores those), are kept."""
    for name, scale in (("retry-after-ms", 1000.0), ("retry-after", 1.0)):
        value = headers.get(name)
        if value is None:
            continue
        seconds = _seconds(value, scale)
        if seconds is not None and seconds > cap_s:
            headers[name] = f"{cap_s * scale:g}"


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


class _Capped(httpx2.AsyncByteStream):
    """A streamed response's decoded body, each piece read before ``until`` and ``cap`` bytes in all."""

    def __init__(
        self, response: httpx2.Response, request: httpx2.Request, cap: int, *, until: float, why: str
    ):
        self.response, self.request = response, request
        self.cap, self.until, self.why = cap, until, why

    async def __aiter__(self) -> AsyncIterator[bytes]:
        pieces = self.response.aiter_bytes()
        size = 0
        try:
            while True:
                try:
                    with anyio.fail_after(max(0.0, self.until - anyio.current_time())):
                        piece = await pieces.__anext__()
                except StopAsyncIteration:
                    return
                except TimeoutError:
                    raise httpx2.ReadTimeout(
                        f"the streamed body was not over within {self.why}", request=self.request
                    ) from None
                size += len(piece)
                if size > self.cap:
                    raise ReplyTooLarge(
                        f"the streamed body is over {self.cap:,} bytes (decoded); not read further"
                    )
                yield piece
        finally:
            await pieces.aclose()

    async def aclose(self) -> None:
        await self.response.aclose()


def _plain_headers(response: httpx2.Response, cap_s: float) -> httpx2.Headers:
    """The response's headers without those of the encoded body (it is handed on decoded), retry waits
    capped at ``cap_s``."""
    headers = httpx2.Headers([(k, v) for k, v in response.headers.multi_items() if k.lower() not in _DROPPED])
    capped_retry_headers(headers, cap_s)
    return headers


class _Guarded(httpx2.AsyncClient):
    guard: Guard

    async def send(self, request: httpx2.Request, *, stream: bool = False, **kwargs: Any) -> httpx2.Response:
        guard = self.guard
        limits = DOWNLOAD.get() if stream else None
        if limits is not None:
            cap, until = limits.max_bytes, limits.until
            why = "the download's deadline"
        else:
            cap, until = guard.max_reply_bytes, anyio.current_time() + guard.deadline_s
            why = f"request_timeout_s = {guard.deadline_s:g} s (a total deadline per attempt)"
        try:
            with anyio.fail_after(max(0.0, until - anyio.current_time())):
                response = await self._send_within_origin(request, **kwargs)
                if stream:
                    return httpx2.Response(
                        response.status_code,
                        headers=_plain_headers(response, guard.max_retry_after_s),
                        stream=_Capped(response, request, cap, until=until, why=why),
                        request=request,
                        extensions=dict(response.extensions),
                    )
                try:
                    body = await read_capped(response, cap)
                finally:
                    await response.aclose()
        except TimeoutError:
            raise httpx2.ReadTimeout(f"no whole reply within {why}", request=request) from None
        extensions = dict(response.extensions)
        if response.is_success and request.method == "POST" and request.url.path.endswith("/v1/messages"):
            extensions[PARSED] = check_message(body)
        out = httpx2.Response(
            response.status_code,
            headers=_plain_headers(response, guard.max_retry_after_s),
            content=body,
            request=request,
            extensions=extensions,
        )
        try:
            out.elapsed = response.elapsed
        except RuntimeError:  # a transport whose stream keeps no time
            pass
        return out

    async def _send_within_origin(self, request: httpx2.Request, **kwargs: Any) -> httpx2.Response:
        """The response, its body not read; redirects followed as the client would, each only after
        checking it stays on ``request``'s origin (else :class:`ForeignOrigin`, nothing sent there)."""
        follow = kwargs.pop("follow_redirects", self.follow_redirects)
        if not isinstance(follow, bool):  # httpx2.USE_CLIENT_DEFAULT
            follow = self.follow_redirects
        response = await super().send(request, stream=True, follow_redirects=False, **kwargs)
        hops = 0
        while follow and response.next_request is not None:
            target = response.next_request
            await response.aclose()
            if not same_origin(target.url, request.url):
                raise ForeignOrigin(
                    f"{request.method} {request.url.copy_with(query=None)}: the server redirected it to "
                    f"another origin ({target.url.copy_with(query=None)}); not followed, so the request's "
                    "headers (the API key) stay on the host they were meant for"
                )
            hops += 1
            if hops > self.max_redirects:
                raise httpx2.TooManyRedirects("Exceeded maximum allowed redirects.", request=target)
            response = await super().send(target, stream=True, follow_redirects=False, **kwargs)
        return response


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
