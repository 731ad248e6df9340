"""How the API bills a request: its tokens (4 characters of its JSON text each, as the emulator and
``runner replay`` count them) and prompt caching (which part is read from the cache, which is written).

Guarantees (of :class:`PromptCache`): a prefix ends at a block, in the API's cache order (tools,
system, message blocks); it is written at every ``cache_control`` breakpoint of at least
``min_cacheable_tokens``; a read is the longest live prefix ending at a breakpoint or up to
``cache_lookback_blocks`` blocks before one (a read refreshes the entry's own TTL). ``creation`` is
the part of the last breakpoint's prefix not read; read + creation never exceed the request's total.
The cache is per model.
- A breakpoint's TTL is ``cache_ttl_s`` (the API's 5 minutes), or :data:`LONG_TTL_FACTOR` times it
  for ``"ttl": "1h"`` (so an emulator that scales the 5-minute TTL scales the hour with it). The
  written tokens between two breakpoints are the later one's: ``creation_1h`` is the part of
  ``creation`` written by 1-hour breakpoints (priced 2x input, against 1.25x).
- A top-level ``cache_control`` (automatic caching) is one more breakpoint, on the last cacheable
  block (not a thinking, redacted_thinking or empty text block) in cache order; on a block that already has a
  breakpoint it is that breakpoint (:func:`with_automatic_breakpoint`).
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from .messages import Message, blocks

CHARS_PER_TOKEN = 4
LONG_TTL_FACTOR = 12  # "ttl": "1h" is twelve 5-minute TTLs


def estimate(obj: Any) -> int:
    """Tokens of a JSON value: ceil(characters of its JSON text / 4)."""
    return math.ceil(len(json.dumps(obj, ensure_ascii=False)) / CHARS_PER_TOKEN)


def input_tokens(system: Any, messages: list[Message], tools: list[dict[str, Any]]) -> int:
    """The input tokens of a request: the system prompt, the messages the API reads, the tools."""
    return estimate([system, messages, tools])


class CacheRules(Protocol):
    """The prompt cache's parameters (the emulator's config has them under these names)."""

    @property
    def cache_ttl_s(self) -> float: ...
    @property
    def min_cacheable_tokens(self) -> int: ...
    @property
    def cache_lookback_blocks(self) -> int: ...


@dataclass(frozen=True)
class ApiCacheRules:
    """The API's documented defaults: a 5-minute TTL, 1,024 tokens at least, 20 blocks looked back."""

    cache_ttl_s: float = 300.0
    min_cacheable_tokens: int = 1024
    cache_lookback_blocks: int = 20


def without_cache_control(block: dict[str, Any]) -> dict[str, Any]:
    """``block`` without its ``cache_control`` key (a copy)."""
    return {k: v for k, v in block.items() if k != "cache_control"}


def cache_segments(
    system: Any, tools: list[dict[str, Any]], messages: list[Message]
) -> list[tuple[str, Any]]:
    """The request in cache order (tools, system, message blocks): (JSON text without
    cache_control, the block's cache_control or None)."""
    out: list[tuple[str, Any]] = []
    system_blocks: list[dict[str, Any]] = (
        [{"type": "text", "text": system}] if isinstance(system, str) else system or []
    )
    for kind, items in (("tool", tools), ("system", system_blocks)):
        for block in items:
            text = json.dumps([kind, without_cache_control(block)], sort_keys=True)
            out.append((text, block.get("cache_control")))
    for i, message in enumerate(messages):
        for block in blocks(message):
            content = block.get("content")
            nested = content if isinstance(content, list) else []
            inner = [item.get("cache_control") for item in nested if isinstance(item, dict)]
            cc = block.get("cache_control") or next(filter(None, inner), None)
            text = json.dumps([i, message.get("role"), without_cache_control(block)], sort_keys=True)
            out.append((text, cc))
    return out


UNCACHEABLE = frozenset({"thinking", "redacted_thinking", "empty"})


def with_automatic_breakpoint(
    segments: list[tuple[str, Any]], kinds: list[str], cache_control: Any
) -> list[tuple[str, Any]]:
    """``segments`` with ``cache_control`` set on the last one whose block type (``kinds``, one a
    segment) is cacheable, unless that one has a breakpoint already; unchanged when it is None."""
    if not cache_control:
        return segments
    for k in range(len(segments) - 1, -1, -1):
        if kinds[k] not in UNCACHEABLE:
            text, cc = segments[k]
            return [*segments[:k], (text, cc or cache_control), *segments[k + 1 :]]
    return segments


def segment_kinds(system: Any, tools: list[dict[str, Any]], messages: list[Message]) -> list[str]:
    """The block type of each of :func:`cache_segments`' segments (``tool`` for a tool)."""
    system_blocks = [system] if isinstance(system, str) else system or []
    return (
        ["tool"] * len(tools)
        + ["text"] * len(system_blocks)
        + [_kind(block) for message in messages for block in blocks(message)]
    )


def _kind(block: dict[str, Any]) -> str:
    return "empty" if block.get("type") == "text" and not block.get("text") else str(block.get("type"))


def ttl_of(cache_control: Any, config: CacheRules) -> float:
    """Seconds a breakpoint's entry lives: ``"ttl": "1h"`` is :data:`LONG_TTL_FACTOR` 5-minute TTLs."""
    long = isinstance(cache_control, dict) and cache_control.get("ttl") == "1h"
    return config.cache_ttl_s * (LONG_TTL_FACTOR if long else 1)


class PromptCache:
    """Prefix hashes -> (expiry, tokens, TTL), per model (see the module's guarantees)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic):
        self.entries: dict[str, tuple[float, int, float]] = {}
        self.clock = clock
        self._calls = 0

    def account(
        self,
        model: str,
        system: Any,
        tools: list[dict[str, Any]],
        messages: list[Message],
        total: int,
        config: CacheRules,
        automatic: Any = None,
    ) -> tuple[int, int, int]:
        """(cache_read_input_tokens, cache_creation_input_tokens, the part of those written with the
        1-hour TTL) for one request; updates the cache. ``automatic``: the request's top-level
        ``cache_control``, if any."""
        now = self.clock()
        self._calls += 1
        if self._calls % 256 == 0:
            self.entries = {k: v for k, v in self.entries.items() if v[0] > now}
        segments = with_automatic_breakpoint(
            cache_segments(system, tools, messages), segment_kinds(system, tools, messages), automatic
        )
        breakpoints = [k for k, (_, cc) in enumerate(segments) if cc]
        if not breakpoints:
            return 0, 0, 0
        digest = hashlib.sha256(model.encode())
        hashes, tokens, chars = [], [], 0
        for text, _ in segments[: breakpoints[-1] + 1]:
            digest.update(text.encode("utf-8", "surrogatepass") + b"\x00")
            hashes.append(digest.hexdigest())
            chars += len(text)
            tokens.append(min(total, math.ceil(chars / CHARS_PER_TOKEN)))

        def live(k: int) -> bool:
            entry = self.entries.get(hashes[k])
            return entry is not None and entry[0] > now

        candidates = sorted(
            {p for b in breakpoints for p in range(max(0, b - config.cache_lookback_blocks), b + 1)},
            reverse=True,
        )
        read = 0
        for p in candidates:
            if tokens[p] >= config.min_cacheable_tokens and live(p):
                read = tokens[p]
                ttl = self.entries[hashes[p]][2]
                self.entries[hashes[p]] = (now + ttl, tokens[p], ttl)
                break
        last = breakpoints[-1]
        creation = (
            tokens[last] - read if tokens[last] >= config.min_cacheable_tokens and not live(last) else 0
        )
        long, below = 0, read
        for b in breakpoints:
            ttl = ttl_of(segments[b][1], config)
            if creation > 0 and ttl > config.cache_ttl_s:  # this breakpoint's share of what is written
                long += max(0, tokens[b] - below)
            below = max(below, tokens[b])
            if tokens[b] >= config.min_cacheable_tokens and not live(b):
                self.entries[hashes[b]] = (now + ttl, tokens[b], ttl)
        creation = max(0, creation)
        return read, creation, min(long, creation)
