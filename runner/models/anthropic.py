"""The real backend: ``AsyncAnthropic`` from the official SDK.

- Honours ``ANTHROPIC_API_KEY`` and ``ANTHROPIC_BASE_URL`` (an Anthropic-compatible local server,
  such as ``runner emulate``, works too).
- Retries are the SDK's own (429, 529, 5xx, dropped connections; ``retry-after`` honoured), with the
  job's ``max_retries``. A "prompt is too long" answer is never retried: it becomes
  :class:`PromptTooLong`, which the session answers with reactive compaction.
- Prompt caching: ``cache_control`` breakpoints on the last tool definition, the system prompt, the
  newest message and the newest message compaction will not rewrite (the request's ``cache_points``):
  the four the API allows. Each turn reads the prefix an earlier turn wrote, even when compaction has
  just rewritten the messages after that point.
- Server-side compaction: a request with ``context_management`` goes to the beta endpoint with the
  compaction beta; the reply's usage is the sum over ``usage.iterations``.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from typing import Any

import anthropic
import httpx2  # the SDK's HTTP library: its raw response type

from ..messages import one_line
from .base import COMPACTION_BETA, BackendUnusable, PromptTooLong, Reply, Request, Usage
from .wire import CURRENT, count_response, on_request

EPHEMERAL = {"type": "ephemeral"}


def is_prompt_too_long(error: Exception) -> bool:
    """The API's answer to an over-long prompt: 413, or 400 ``invalid_request_error`` saying so."""
    if isinstance(error, anthropic.ContentTooLargeError):
        return True
    if isinstance(error, anthropic.BadRequestError):
        message = (error.api_message or str(error)).lower()
        return "prompt is too long" in message or "prompt_too_long" in message
    return False


def _cacheable(block: dict[str, Any]) -> bool:
    return block.get("type") in ("text", "tool_result", "tool_use", "image", "document", "compaction") and not (
        block.get("type") == "text" and not block.get("text"))


def _with_breakpoint(message: dict[str, Any]) -> dict[str, Any]:
    content = message["content"]
    if isinstance(content, str):
        if not content:
            return message
        content = [{"type": "text", "text": content}]
    content = list(content)
    for i in range(len(content) - 1, -1, -1):
        if _cacheable(content[i]):
            content[i] = {**content[i], "cache_control": EPHEMERAL}
            break
    return {**message, "content": content}


def with_cache_breakpoint(messages: list[dict[str, Any]], points: tuple[int, ...] = ()) -> list[dict[str, Any]]:
    """A copy of ``messages`` with a ``cache_control`` breakpoint on the newest message and on each
    message index in ``points`` (the history itself is never changed)."""
    if not messages:
        return messages
    marked = {len(messages) - 1, *(p for p in points if 0 <= p < len(messages))}
    out = list(messages)
    for i in marked:
        out[i] = _with_breakpoint(out[i])
    return out


def _http_client(**kwargs: Any) -> Any:
    """The SDK's aiohttp transport when aiohttp is installed (it carries hundreds of concurrent requests
    on a fraction of the CPU), else its default httpx transport."""
    try:
        import aiohttp  # noqa: F401
    except ImportError:
        return anthropic.DefaultAsyncHttpxClient(**kwargs)
    return anthropic.DefaultAioHttpClient(**kwargs)


def reply_of(data: dict[str, Any]) -> Reply:
    """A Messages API reply body as a :class:`Reply`: each content block as the API sent it, without
    null fields (as ``model_dump(exclude_none=True)`` of the SDK's block would give)."""
    content = [{k: v for k, v in block.items() if v is not None} for block in data.get("content") or []]
    return Reply(content=content, stop_reason=data.get("stop_reason") or "end_turn",
                 usage=Usage.from_api(data.get("usage") or {}))


class AnthropicModel:
    """The SDK behind the :class:`Model` interface; ``max_retries`` is applied per request.

    ``shards`` clients, each with its own connection pool, take the calls in turn: the HTTP pool's
    bookkeeping costs time in proportion to its size for every request, so hundreds of concurrent
    jobs are served faster by several small pools than by one large one.
    """

    name = "anthropic"
    server_compaction = True

    def __init__(self, *, api_key: str | None = None, base_url: str | None = None, max_retries: int = 4,
                 timeout: float = 600.0, http_client: Any = None,
                 on_rate_limited: Callable[[], None] | None = None, shards: int = 1):
        kwargs: dict[str, Any] = {"max_retries": max_retries, "timeout": timeout}
        if api_key is not None:
            kwargs["api_key"] = api_key
        if base_url is not None:
            kwargs["base_url"] = base_url
        if http_client is not None:
            shards = 1
        self.clients = []
        self._connected = False  # a call has succeeded: later connection failures are retried as usual

        async def watch(response: Any) -> None:  # sees every attempt, including the SDK's retries
            count_response(response.status_code)
            if response.status_code in (429, 529) and on_rate_limited is not None:
                on_rate_limited()

        tls = httpx2.create_ssl_context() if http_client is None else None  # one for every shard: each costs ~20 ms
        for _ in range(max(1, shards)):
            client = http_client
            if client is None:
                client = _http_client(event_hooks={"request": [on_request], "response": [watch]}, verify=tls)
            self.clients.append(anthropic.AsyncAnthropic(**kwargs, **({"http_client": client} if client else {})))
        self.client = self.clients[0]
        self._turn = itertools.count()
        self._with_retries: dict[tuple[int, int], Any] = {}

    async def create(self, request: Request) -> Reply:
        shard = next(self._turn) % len(self.clients)
        client = self.clients[shard]
        if request.max_retries is not None:  # one copy per (shard, retries), not one per call
            key = (shard, request.max_retries)
            if key not in self._with_retries:
                self._with_retries[key] = client.with_options(max_retries=request.max_retries)
            client = self._with_retries[key]
        kwargs: dict[str, Any] = {
            "model": request.model,
            "max_tokens": request.max_tokens,
            "messages": (with_cache_breakpoint(request.messages, request.cache_points[:1]) if request.cache
                         else request.messages),
        }
        if request.tools:  # a breakpoint after the last tool caches the tool definitions with the system prompt
            kwargs["tools"] = ([*request.tools[:-1], {**request.tools[-1], "cache_control": EPHEMERAL}]
                               if request.cache else request.tools)
        if request.tool_choice is not None:
            kwargs["tool_choice"] = request.tool_choice
        if request.system:
            kwargs["system"] = [{"type": "text", "text": request.system,
                                 **({"cache_control": EPHEMERAL} if request.cache else {})}]
        path, options = "/v1/messages", {}
        if request.context_management:
            kwargs["context_management"] = request.context_management
            path, options = "/v1/messages?beta=true", {"headers": {"anthropic-beta": COMPACTION_BETA}}
        # the body serialized once by the C encoder: the SDK's retries, timeouts and error types, without
        # its per-request walk over the parameters, its deep copy of them, or its pydantic reply models
        body = json.dumps(kwargs, separators=(",", ":")).encode()
        counts = CURRENT.get()
        if counts is not None:
            counts.calls += 1
        try:
            response = await client.post(path, cast_to=httpx2.Response, content=body,
                                         options=options)  # type: ignore[call-overload]  # a plain RequestOptions dict
        except (anthropic.AuthenticationError, anthropic.PermissionDeniedError) as e:
            raise BackendUnusable(f"{self.client.base_url}: {e.status_code} {type(e).__name__}: "
                                  f"{one_line(e.api_message or str(e), 200)}") from e
        except anthropic.APIStatusError as e:
            if is_prompt_too_long(e):
                raise PromptTooLong(e.api_message or str(e)) from e
            raise
        except anthropic.APITimeoutError:
            raise
        except anthropic.APIConnectionError as e:
            if self._connected:
                raise
            cause = e.__cause__ or e
            raise BackendUnusable(f"{self.client.base_url}: cannot connect ({type(cause).__name__}: "
                                  f"{one_line(str(cause) or str(e), 200)})") from e
        self._connected = True
        return reply_of(response.json())

    async def aclose(self) -> None:
        for client in self.clients:
            await client.close()
