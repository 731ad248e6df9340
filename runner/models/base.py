"""The small interface every model backend implements."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from ..config import MOST_TOOL_CALLS_PER_REPLY
from ..pricing import USAGE_KEYS, Usage, api_count
from .wire import WireCounts

# The anthropic-beta header that server-side compaction (``context_management``) needs: sent by the
# anthropic backend, required by the emulator.
COMPACTION_BETA = "compact-2026-01-12"
# the anthropic-beta header of context editing (``clear_tool_uses_20250919``) and the memory tool
CONTEXT_MANAGEMENT_BETA = "context-management-2025-06-27"
MEMORY_BETA = CONTEXT_MANAGEMENT_BETA  # the memory tool (memory_20250818)
COMPACT_EDIT = "compact_20260112"
MEMORY_TOOL_TYPE = "memory_20250818"

MAX_USAGE_TOKENS = 10**8  # no single call bills this many tokens of one kind: a larger count is a lie
MAX_TOOL_INPUT_BYTES = 1 << 20  # a tool call whose input serializes larger gets an error result, is not run
# a reply with more content blocks fails its call: 1,024 more than the most tool calls a job may run from
# one reply (those past its limits.max_tool_calls_per_reply are answered "not run"); 250,000 of them took
# 1.2 GB and a 91 MB transcript
MAX_REPLY_BLOCKS = MOST_TOOL_CALLS_PER_REPLY + 1024


class InvalidReply(ValueError):
    """A server's reply that cannot be true or cannot be acted on (a usage count that is negative, not
    an integer or absurdly large; an unknown ``stop_reason``): the call fails with this, naming the
    field and the value, and nothing of the reply is kept, billed or added to any total."""


def _token_count(where: str, value: Any) -> int:
    """``value`` as a usage count: a non-negative integer below :data:`MAX_USAGE_TOKENS` (``null`` or
    missing is 0, as the API omits zero counts); anything else is :class:`InvalidReply`."""
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < MAX_USAGE_TOKENS:
        raise InvalidReply(
            f"{where} = {value!r}: not a token count (a non-negative integer below {MAX_USAGE_TOKENS:,})"
        )
    return int(value)


def usage_from_api(usage: Any) -> Usage:
    """From an SDK ``usage`` object or dict; sums ``iterations`` when present (server compaction).

    The one place a server's token counts enter the runner: every count (of the top level and of
    each iteration) must be a non-negative integer below :data:`MAX_USAGE_TOKENS`, else
    :class:`InvalidReply` names the field and its value."""
    data = usage if isinstance(usage, dict) else (usage.model_dump() if usage is not None else {})
    if not isinstance(data, dict):
        raise InvalidReply(f"usage = {_short(data)}: not an object")
    top = Usage(**{k: _token_count(f"usage.{k}", api_count(data, k)) for k in USAGE_KEYS})
    iterations = data.get("iterations")
    if iterations is None:
        return top
    if not isinstance(iterations, list):
        raise InvalidReply(f"usage.iterations = {_short(iterations)}: not a list")
    if not iterations:
        return top
    total = Usage()
    for i, it in enumerate(iterations):
        if not isinstance(it, dict):
            raise InvalidReply(f"usage.iterations[{i}] = {_short(it)}: not an object")
        total.add(
            Usage(**{k: _token_count(f"usage.iterations[{i}].{k}", api_count(it, k)) for k in USAGE_KEYS})
        )
    for k in USAGE_KEYS:
        _token_count(f"usage.iterations: total {k}", getattr(total, k))
    return total


def applied_edits_from_api(context_management: Any) -> list[dict[str, Any]]:
    """A reply's ``context_management.applied_edits`` (what the API's context editing cleared before the
    model read the request), each ``{"type", "cleared_tool_uses", "cleared_input_tokens", ...}`` with its
    counts checked like usage counts (:class:`InvalidReply` otherwise); none when the reply has none."""
    if context_management is None:
        return []
    if not isinstance(context_management, dict):
        raise InvalidReply(f"context_management = {_short(context_management)}: not an object")
    edits = context_management.get("applied_edits")
    if edits is None:
        return []
    if not isinstance(edits, list):
        raise InvalidReply(f"context_management.applied_edits = {_short(edits)}: not a list")
    out = []
    for i, edit in enumerate(edits):
        if not isinstance(edit, dict) or not isinstance(edit.get("type"), str):
            raise InvalidReply(f"context_management.applied_edits[{i}] = {_short(edit)}: not an edit")
        where = f"context_management.applied_edits[{i}]"
        out.append(
            {
                "type": edit["type"][:100],
                **{k: _token_count(f"{where}.{k}", v) for k, v in edit.items() if k.startswith("cleared_")},
            }
        )
    return out


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


@dataclass
class Reply:
    """One model response, as plain JSON blocks, and how its call went: what it met on the wire
    (``wire``: attempts, 429/529/5xx answers, batch resends) and the Message Batch that answered it
    (``batch``: its id; None for a live answer). Its caller counts them (the model layer keeps no
    job's numbers)."""

    content: list[dict[str, Any]]
    stop_reason: str
    usage: Usage = field(default_factory=Usage)
    estimated: bool = False  # usage was estimated, not reported by an API
    # tool_use ids whose input was over MAX_TOOL_INPUT_BYTES (replaced by {}): the session answers each
    # with an error result instead of running it
    refused_calls: dict[str, str] = field(default_factory=dict)
    # the API's context editing before the model read the request (``context_management.applied_edits``)
    applied_edits: list[dict[str, Any]] = field(default_factory=list)
    wire: WireCounts = field(default_factory=WireCounts)
    batch: str | None = None  # the Message Batch that answered the call (delivery = "batch")

    def message(self) -> dict[str, Any]:
        return {"role": "assistant", "content": self.content}

    @property
    def compacted(self) -> bool:
        """The API compacted the context server-side in this reply (it carries a compaction block)."""
        return any(b.get("type") == "compaction" for b in self.content)

    @property
    def cleared_input_tokens(self) -> int:
        """The input tokens the API's context editing took out of this call's request."""
        return sum(int(e.get("cleared_input_tokens", 0)) for e in self.applied_edits)


@dataclass
class Request:
    """Everything a model call needs; ``messages`` are already compacted."""

    model: str
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    max_tokens: int
    system: str | None = None
    context_management: dict[str, Any] | None = None
    max_retries: int | None = None  # per-job override of the backend's retry count
    cache_points: tuple[int, ...] = ()  # messages after which a prompt-cache breakpoint pays off
    cache: bool = True  # False for one-off prompts (summaries): a cache write would cost 25% more for nothing
    tool_choice: dict[str, Any] | None = None  # {"type": "none"}: the tools are listed, none may be called
    delivery: Literal["live", "batch"] | None = None  # the job's limits.delivery (None: the run's)
    cache_ttl: Literal["5m", "1h"] = "5m"  # the prompt cache's TTL at its breakpoints ("1h": writes cost 2x)
    # the job and the turn the call is asked for (a Message Batch's custom_id names them); None: no job's
    caller: tuple[str, int] | None = None


class BackendUnusable(Exception):
    """The backend cannot serve this batch at all (bad key, no permission, nothing listening at the base
    URL): the message is one line naming the base URL and the error. Stops the whole batch."""


class PromptTooLong(Exception):
    """The API refused the request as longer than the model's context window."""


class Model(Protocol):
    """A backend: given a request, return a reply. Raise :class:`PromptTooLong` for an overlong
    prompt; any other exception fails the job that made the call (after the backend's own retries)."""

    name: str
    server_compaction: bool  # the backend can send and answer the API's context_management edit

    async def create(self, request: Request) -> Reply: ...

    async def aclose(self) -> None: ...
