"""The real backend: ``AsyncAnthropic`` from the official SDK.

- Honours ``ANTHROPIC_API_KEY`` and ``ANTHROPIC_BASE_URL`` (an Anthropic-compatible local server,
  such as ``runner emulate``, works too).
- Retries are the SDK's own (429, 529, 5xx, dropped connections, a 2xx whose body is not a message;
  ``retry-after`` honoured up to ``max_retry_after_s``), with the job's ``max_retries``. A "prompt is
  too long" answer is never retried: it becomes :class:`PromptTooLong`, which the session answers with
  reactive compaction. What each call met (its attempts, their 429/529/5xx answers) is counted for that
  call alone (:mod:`.wire`) and goes with its reply (``Reply.wire``), or with its exception.
- Every number and name of a reply is checked before the runner acts on it (see :mod:`.guard` for the
  HTTP side: a total deadline per attempt, a cap on the decoded body): usage counts in
  :func:`~runner.models.base.usage_from_api`, the ``stop_reason`` against the API's list, at most
  :data:`~runner.models.base.MAX_REPLY_BLOCKS` content blocks, a text block within the reply cap, a
  tool call's input within :data:`MAX_TOOL_INPUT_BYTES` (else it is answered with an error result, not
  run). A failed check is :class:`InvalidReply`: the call fails, nothing is billed. A reply
  nested too deeply to parse or serialize (a ``RecursionError``) is a malformed reply of its call
  (:class:`~.guard.NotAMessage` from the guard, else :class:`InvalidReply`), never
  :class:`BackendUnusable`, even as a batch's first reply.
- Prompt caching: ``cache_control`` breakpoints on the system prompt (which caches the tool
  definitions before it; on the last tool when there is no system prompt) and on the messages the
  request's ``cache_points`` name (the newest message compaction will not rewrite, the longest prefix
  an earlier call cached that is unchanged, and the newest message unless the next call rewrites what
  comes after the settled one), or on the newest message when none is named: at most the four the API
  allows. Each turn reads the prefix an earlier turn wrote, even when compaction has just rewritten the
  messages after that point.
- Server-side compaction and context editing: a request with ``context_management`` goes to the beta
  endpoint with each edit's beta (``compact_20260112``: the compaction beta; the clearing edits: the
  context-management beta); the reply's usage is the sum over ``usage.iterations``, and what the
  API's context editing cleared (``context_management.applied_edits``) is the reply's ``applied_edits``.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from typing import Any

import anthropic
import httpx2  # the SDK's HTTP library: its raw response type

from ..messages import one_line
from .base import (
    COMPACT_EDIT,
    COMPACTION_BETA,
    CONTEXT_MANAGEMENT_BETA,
    MAX_REPLY_BLOCKS,
    MAX_TOOL_INPUT_BYTES,
    MEMORY_BETA,
    MEMORY_TOOL_TYPE,
    BackendUnusable,
    InvalidReply,
    PromptTooLong,
    Reply,
    Request,
    applied_edits_from_api,
    usage_from_api,
)
from .guard import MIB, PARSED, Guard, guarded_client
from .wire import attach, count_response, counting, on_request

EPHEMERAL = {"type": "ephemeral"}
EPHEMERAL_1H = {"type": "ephemeral", "ttl": "1h"}  # a write costs 2x input instead of 1.25x
CACHEABLE_TYPES = ("text", "tool_result", "tool_use", "image", "document", "compaction")
# every stop_reason the Messages API documents; the session has a meaning for each (session.py)
STOP_REASONS = frozenset(
    {
        "end_turn",
        "max_tokens",
        "stop_sequence",
        "tool_use",
        "pause_turn",
        "refusal",
        "compaction",
        "model_context_window_exceeded",
    }
)


def is_prompt_too_long(error: Exception) -> bool:
    """The API's answer to an over-long prompt: 413, or 400 ``invalid_request_error`` saying so."""
    if isinstance(error, anthropic.ContentTooLargeError):
        return True
    if isinstance(error, anthropic.BadRequestError):
        message = (error.api_message or str(error)).lower()
        return "prompt is too long" in message or "prompt_too_long" in message
    return False


def _cacheable(block: dict[str, Any]) -> bool:
    kind = block.get("type")
    return kind in CACHEABLE_TYPES and not (kind == "text" and not block.get("text"))


def _with_breakpoint(message: dict[str, Any], marker: dict[str, Any] = EPHEMERAL) -> dict[str, Any]:
    content = message["content"]
    if isinstance(content, str):
        if not content:
            return message
        content = [{"type": "text", "text": content}]
    content = list(content)
    for i in range(len(content) - 1, -1, -1):
        if _cacheable(content[i]):
            content[i] = {**content[i], "cache_control": marker}
            break
    return {**message, "content": content}


def with_cache_breakpoint(
    messages: list[dict[str, Any]],
    points: tuple[int, ...] = (),
    *,
    newest: bool = True,
    marker: dict[str, Any] = EPHEMERAL,
) -> list[dict[str, Any]]:
    """A copy of ``messages`` with a ``cache_control`` breakpoint (``marker``) on each message index
    in ``points`` and (``newest``) on the newest message (the history itself is never changed)."""
    if not messages:
        return messages
    marked = {*((len(messages) - 1,) if newest else ()), *(p for p in points if 0 <= p < len(messages))}
    out = list(messages)
    for i in marked:
        out[i] = _with_breakpoint(out[i], marker)
    return out


def reply_of(data: dict[str, Any], max_text_bytes: int = 32 * MIB) -> Reply:
    """A Messages API reply body as a :class:`Reply`: each content block as the API sent it, without
    null fields (as ``model_dump(exclude_none=True)`` of the SDK's block would give).

    :class:`InvalidReply` for a reply the runner must not act on: an unknown or missing ``stop_reason``
    (its tool calls would otherwise be dropped unseen), a block that is not an object, text over
    ``max_text_bytes``, usage counts that cannot be true. A tool call whose input serializes over
    :data:`MAX_TOOL_INPUT_BYTES` keeps its place with ``{}`` for an input, and is named in
    ``refused_calls`` (the session answers it with an error result)."""
    if not isinstance(data, dict) or not isinstance(data.get("content"), list):
        raise InvalidReply(f"the reply is not a message with a content list: {one_line(repr(data), 120)}")
    stop_reason = data.get("stop_reason")
    if stop_reason not in STOP_REASONS:
        raise InvalidReply(
            f"stop_reason = {one_line(repr(stop_reason), 80)}: not one the Messages API "
            f"documents ({', '.join(sorted(STOP_REASONS))}); the reply is not acted on"
        )
    if len(data["content"]) > MAX_REPLY_BLOCKS:
        raise InvalidReply(
            f"content: {len(data['content']):,} blocks, over the {MAX_REPLY_BLOCKS:,} a reply may hold; "
            "the reply is not acted on"
        )
    content, refused = [], {}
    text_bytes = 0
    for i, block in enumerate(data["content"]):
        if not isinstance(block, dict):
            raise InvalidReply(f"content[{i}] = {one_line(repr(block), 80)}: not an object")
        block = {k: v for k, v in block.items() if v is not None}
        if isinstance(block.get("text"), str):
            text_bytes += len(block["text"].encode("utf-8", "surrogatepass"))
            if text_bytes > max_text_bytes:
                raise InvalidReply(
                    f"content[{i}].text: the reply's text is over max_reply_bytes = {max_text_bytes:,} bytes"
                )
        if block.get("type") == "tool_use":
            size = len(json.dumps(block.get("input"), ensure_ascii=False).encode("utf-8", "surrogatepass"))
            if size > MAX_TOOL_INPUT_BYTES:
                refused[str(block.get("id", ""))] = (
                    f"not run: this call's input is {size:,} bytes, over the limit of "
                    f"{MAX_TOOL_INPUT_BYTES:,} bytes for one tool call; send a smaller one"
                )
                block = {**block, "input": {}}
        content.append(block)
    return Reply(
        content=content,
        stop_reason=stop_reason,
        usage=usage_from_api(data.get("usage") or {}),
        refused_calls=refused,
        applied_edits=applied_edits_from_api(data.get("context_management")),
    )


class ReplyTimedOut(Exception):
    """Every attempt of a call ran past ``request_timeout_s`` (a total deadline per attempt)."""


def _timed_out(error: Exception, guard: Guard) -> ReplyTimedOut:
    cause = error.__cause__
    if isinstance(cause, httpx2.ReadTimeout) and "request_timeout_s" in str(cause):
        return ReplyTimedOut(one_line(str(cause)))
    return ReplyTimedOut(
        f"no reply within request_timeout_s = {guard.deadline_s:g} s ({one_line(str(error))})"
    )


def message_breakpoints(request: Request) -> list[dict[str, Any]]:
    """The request's messages with its ``cache_points`` marked, at most three (the system prompt's is
    the fourth); the newest message is marked when no point is named, or when it is one of them."""
    newest = len(request.messages) - 1
    points = tuple(p for p in request.cache_points if p != newest)
    mark_newest = not request.cache_points or newest in request.cache_points
    return with_cache_breakpoint(
        request.messages,
        points[-(2 if mark_newest else 3) :],
        newest=mark_newest,
        marker=cache_marker(request),
    )


def cache_marker(request: Request) -> dict[str, Any]:
    """The ``cache_control`` of ``request``'s breakpoints: the 5-minute TTL, or the 1-hour one when
    its calls come far apart (``cache_ttl = "1h"``: a job whose calls go by batch)."""
    return EPHEMERAL_1H if request.cache_ttl == "1h" else EPHEMERAL


def request_params(request: Request) -> tuple[dict[str, Any], tuple[str, ...]]:
    """The body posted for ``request`` (live, or as a Message Batch's request) and the betas it needs."""
    params: dict[str, Any] = {
        "model": request.model,
        "max_tokens": request.max_tokens,
        "messages": message_breakpoints(request) if request.cache else request.messages,
    }
    if request.tools:  # the system prompt's breakpoint caches the tools with it (tools come first)
        params["tools"] = (
            [*request.tools[:-1], {**request.tools[-1], "cache_control": cache_marker(request)}]
            if request.cache and not request.system
            else request.tools
        )
    if request.tool_choice is not None:
        params["tool_choice"] = request.tool_choice
    if request.system:
        params["system"] = [
            {
                "type": "text",
                "text": request.system,
                **({"cache_control": cache_marker(request)} if request.cache else {}),
            }
        ]
    betas = [MEMORY_BETA] if any(t.get("type") == MEMORY_TOOL_TYPE for t in request.tools or ()) else []
    if request.context_management:
        params["context_management"] = request.context_management
        for edit in request.context_management.get("edits") or ():
            beta = COMPACTION_BETA if edit.get("type") == COMPACT_EDIT else CONTEXT_MANAGEMENT_BETA
            if beta not in betas:
                betas.insert(0, beta)
    return params, tuple(betas)


class AnthropicModel:
    """The SDK behind the :class:`Model` interface; ``max_retries`` is applied per request.

    ``shards`` clients, each with its own connection pool, take the calls in turn: the HTTP pool's
    bookkeeping costs time in proportion to its size for every request, so hundreds of concurrent
    jobs are served faster by several small pools than by one large one.
    """

    name = "anthropic"
    server_compaction = True

    def __init__(
        self,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        max_retries: int = 4,
        timeout: float = 600.0,
        on_rate_limited: Callable[[], None] | None = None,
        shards: int = 1,
        max_reply_bytes: int = 32 * MIB,
        max_retry_after_s: float = 60.0,
    ):
        kwargs: dict[str, Any] = {"max_retries": max_retries, "timeout": timeout}
        if api_key is not None:
            kwargs["api_key"] = api_key
        if base_url is not None:
            kwargs["base_url"] = base_url
        self.clients = []
        self._connected = False  # a call has succeeded: later connection failures are retried as usual
        self.guard = Guard(
            deadline_s=timeout, max_reply_bytes=max_reply_bytes, max_retry_after_s=max_retry_after_s
        )

        async def watch(response: Any) -> None:  # sees every attempt, including the SDK's retries
            count_response(response.status_code)
            if response.status_code in (429, 529) and on_rate_limited is not None:
                on_rate_limited()

        tls = httpx2.create_ssl_context()  # one for every shard: each costs ~20 ms
        for _ in range(max(1, shards)):
            client = guarded_client(
                self.guard, event_hooks={"request": [on_request], "response": [watch]}, verify=tls
            )
            self.clients.append(anthropic.AsyncAnthropic(**kwargs, http_client=client))
        self.client = self.clients[0]
        self._turn = itertools.count()
        self._with_retries: dict[tuple[int, int], Any] = {}

    async def create(self, request: Request) -> Reply:
        """``request`` answered, with what its call met on the wire (``Reply.wire``; the exception
        carries them when the call fails, see :func:`~.wire.counts_of`)."""
        with counting() as tally:
            try:
                reply = await self._create(request)
            except BaseException as e:
                attach(e, tally.counts())
                raise
        reply.wire = tally.counts()
        return reply

    async def _create(self, request: Request) -> Reply:
        shard = next(self._turn) % len(self.clients)
        client = self.clients[shard]
        if request.max_retries is not None:  # one copy per (shard, retries), not one per call
            key = (shard, request.max_retries)
            if key not in self._with_retries:
                self._with_retries[key] = client.with_options(max_retries=request.max_retries)
            client = self._with_retries[key]
        kwargs, betas = request_params(request)
        path, options = "/v1/messages", {}
        # the memory tool and server-side compaction are betas: the beta endpoint, with their header
        if betas:
            path, options = "/v1/messages?beta=true", {"headers": {"anthropic-beta": ",".join(betas)}}
        # the body serialized once by the C encoder: the SDK's retries, timeouts and error types, without
        # its per-request walk over the parameters, its deep copy of them, or its pydantic reply models
        body = json.dumps(kwargs, separators=(",", ":")).encode()
        try:
            response = await client.post(path, cast_to=httpx2.Response, content=body, options=options)  # type: ignore[call-overload]  # a plain RequestOptions dict
        except (anthropic.AuthenticationError, anthropic.PermissionDeniedError) as e:
            raise BackendUnusable(
                f"{self.client.base_url}: {e.status_code} {type(e).__name__}: "
                f"{one_line(e.api_message or str(e), 200)}"
            ) from e
        except anthropic.APIStatusError as e:
            if is_prompt_too_long(e):
                raise PromptTooLong(e.api_message or str(e)) from e
            raise
        except anthropic.APITimeoutError as e:
            raise _timed_out(e, self.guard) from e
        except anthropic.APIConnectionError as e:
            cause = e.__cause__ or e
            if isinstance(cause, RecursionError):  # something of this reply nested too deeply
                raise InvalidReply(
                    f"the reply is nested too deeply to read ({one_line(str(cause), 200)})"
                ) from e
            if self._connected:
                raise
            raise BackendUnusable(
                f"{self.client.base_url}: cannot connect ({type(cause).__name__}: "
                f"{one_line(str(cause) or str(e), 200)})"
            ) from e
        self._connected = True
        data = response.extensions.get(PARSED)  # the guard parsed and checked it
        try:
            return reply_of(data if data is not None else response.json(), self.guard.max_reply_bytes)
        except RecursionError:  # parsed just under the limit, serialized (its tool inputs) just over it
            raise InvalidReply(
                "the reply is nested too deeply to read (Python's recursion limit); not acted on"
            ) from None

    async def aclose(self) -> None:
        for client in self.clients:
            await client.close()
