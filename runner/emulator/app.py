"""The emulator's ASGI app: the Messages API as the real SDK sees it, served by starlette.

Routes: ``POST /v1/messages``, ``POST /v1/messages/count_tokens``, ``GET /_emulator/stats``, ``POST
/_emulator/reset``. The SDK's ``client.beta.messages.create`` posts to the same path (SDK 2.14 sends
the betas only as an ``anthropic-beta`` header; a ``?beta=true`` query, as older SDKs send, is
accepted too).

Guarantees, in the order a messages request meets them:
1. An API key is required (401 ``authentication_error``): ``x-api-key``, or ``Authorization: Bearer``
   (how the ``anthropic`` 2.x SDK sends ``api_key``); an ``anthropic-version`` header too (400);
   then the request gets its number.
2. Latency, then a body over ``max_request_bytes`` is a 413 ``request_too_large``.
3. Strict validation (400 ``invalid_request_error``, every problem in one message):
   ``runner.messages.request_problems`` plus field types, unknown fields at the top level and in
   blocks, non-empty text, block types allowed per role, at most 4 ``cache_control`` breakpoints,
   tools with a name and an object ``input_schema``, ``context_management`` only with the
   ``compact-2026-01-12`` beta.
4. Over ``context_window_tokens``: 400 ``prompt is too long: N tokens > M maximum``, where
   N = ceil(len(json.dumps([system, messages, tools])) / 4) over the messages the API reads (from
   the last compaction block on).
5. Enforced rate limits (429), then one injected fault at most (see :mod:`.faults`).
6. The reply: the script, else a summary for the runner's Summarizer, else
   :func:`runner.models.policy.decide`; server-side compaction first when its trigger is passed
   (its optional ``instructions`` are accepted, but the deterministic summary cannot follow them).
   Usage has the API's fields; prompt caching is accounted (see :class:`PromptCache`).
Counters live in :class:`EmulatorState`, readable from any thread with ``snapshot()``.
"""

from __future__ import annotations

import copy
import hashlib
import json
import logging
import math
import threading
import time
import uuid
from collections import Counter, deque
from typing import Any

import anyio
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ..compactor.fallback import fallback_summary
from ..compactor.summarizer import SYSTEM_PROMPT
from ..messages import Message, blocks, merge_adjacent, request_problems, tool_results
from ..models.policy import decide, partial_report
from .config import EmulatorConfig
from .faults import SlidingWindow, api_error, latency_for, new_request_id, pick_fault, retry_headers

CHARS_PER_TOKEN = 4
USAGE_FIELDS = ("input_tokens", "output_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
COMPACTION_BETA = "compact-2026-01-12"
COMPACTED = "[Compacted]\n"
MAX_BREAKPOINTS = 4
log = logging.getLogger("runner.emulator")


def estimate(obj: Any) -> int:
    """Tokens of a JSON value: ceil(characters of its JSON text / 4), as the offline model counts."""
    return math.ceil(len(json.dumps(obj, ensure_ascii=False)) / CHARS_PER_TOKEN)


def input_tokens(system: Any, messages: list[Message], tools: list[dict[str, Any]]) -> int:
    return estimate([system, messages, tools])


# ---------------------------------------------------------------------------------------------
# State


class EmulatorState:
    """Counters, the rate-limit window, the prompt cache and the script position.

    Mutated only on the server's event loop; ``snapshot()`` may be called from any thread.
    ``outcomes`` keys: ok, 400, 401, 413, 429, 500, 529, dropped, slow (answered late, or the client
    gave up first), disconnected (the client left during the latency), internal_error (an emulator bug).
    """

    def __init__(self, config: EmulatorConfig):
        self.config = config
        self._lock = threading.Lock()
        self.reset()

    def reset(self) -> None:
        with self._lock:
            self.requests = 0
            self.outcomes: Counter[str] = Counter()
            self.concurrent = 0
            self.peak_concurrent = 0
            self.tokens = dict.fromkeys(USAGE_FIELDS, 0)
            self.compactions = 0
            self.summary_requests = 0
            self.count_tokens_requests = 0
            self.recorded: deque[dict[str, Any]] = deque(maxlen=self.config.max_recorded)
            self.script_position = 0
            self.window = SlidingWindow()
            self.cache = PromptCache()

    def begin(self) -> int:
        with self._lock:
            self.requests += 1
            self.concurrent += 1
            self.peak_concurrent = max(self.peak_concurrent, self.concurrent)
            return self.requests

    def end(self) -> None:
        with self._lock:
            self.concurrent -= 1

    def count(self, outcome: str) -> None:
        with self._lock:
            self.outcomes[outcome] += 1

    def bill(self, usages: list[dict[str, Any]]) -> None:
        with self._lock:
            for usage in usages:
                for name in USAGE_FIELDS:
                    self.tokens[name] += int(usage.get(name) or 0)

    def record(self, body: Any) -> None:
        if self.config.record_requests:
            with self._lock:
                if self.recorded.maxlen != self.config.max_recorded:
                    self.recorded = deque(self.recorded, maxlen=self.config.max_recorded)
                self.recorded.append(body)

    @property
    def requests_in_window(self) -> int:
        return self.window.count(self.config.window_s)

    def snapshot(self) -> dict[str, Any]:
        """The counters as JSON (what ``GET /_emulator/stats`` returns)."""
        with self._lock:
            return {
                "requests": self.requests,
                "outcomes": dict(self.outcomes),
                "concurrent": self.concurrent,
                "peak_concurrent": self.peak_concurrent,
                "requests_in_window": self.window.count(self.config.window_s),
                "window_s": self.config.window_s,
                "tokens": dict(self.tokens),
                "compactions": self.compactions,
                "summary_requests": self.summary_requests,
                "count_tokens_requests": self.count_tokens_requests,
                "cache_entries": len(self.cache.entries),
                "recorded_requests": list(self.recorded),
            }


# ---------------------------------------------------------------------------------------------
# Validation

_KINDS: dict[str, tuple[Any, str]] = {
    "str": (lambda v: isinstance(v, str), "a string"),
    "str?": (lambda v: v is None or isinstance(v, str), "a string or null"),
    "dict": (lambda v: isinstance(v, dict), "an object"),
    "dict?": (lambda v: v is None or isinstance(v, dict), "an object or null"),
    "list?": (lambda v: v is None or isinstance(v, list), "a list or null"),
    "bool": (lambda v: isinstance(v, bool), "a boolean"),
    "cc": (lambda v: v is None or (isinstance(v, dict) and v.get("type") == "ephemeral"
                                   and set(v) <= {"type", "ttl"} and v.get("ttl", "5m") in ("5m", "1h")),
           "{'type': 'ephemeral'} with an optional ttl of '5m' or '1h'"),
    "content": (lambda v: isinstance(v, str) or isinstance(v, list), "a string or a list of blocks"),
}
# block type -> (required fields, optional fields), each field -> kind
BLOCK_FIELDS: dict[str, tuple[dict[str, str], dict[str, str]]] = {
    "text": ({"text": "str"}, {"cache_control": "cc", "citations": "list?"}),
    "image": ({"source": "dict"}, {"cache_control": "cc"}),
    "document": ({"source": "dict"}, {"cache_control": "cc", "title": "str?", "context": "str?",
                                      "citations": "dict?"}),
    "tool_use": ({"id": "str", "name": "str", "input": "dict"},
                 {"cache_control": "cc", "caller": "dict", "toolset_name": "str?"}),
    "tool_result": ({"tool_use_id": "str"}, {"cache_control": "cc", "content": "content", "is_error": "bool",
                                             "toolset_name": "str?"}),
    "thinking": ({"thinking": "str", "signature": "str"}, {}),
    "redacted_thinking": ({"data": "str"}, {}),
    "compaction": ({}, {"content": "str?", "encrypted_content": "str?", "signature": "str?",
                        "tool_changes": "list?", "cache_control": "cc"}),
}
ROLE_OF_BLOCK = {"tool_use": "assistant", "thinking": "assistant", "redacted_thinking": "assistant",
                 "compaction": "assistant", "tool_result": "user", "image": "user", "document": "user"}
RESULT_ITEM_TYPES = ("text", "image", "document")
TOP_LEVEL = {"model", "messages", "max_tokens", "system", "tools", "tool_choice", "temperature", "top_p",
             "top_k", "stop_sequences", "stream", "metadata", "thinking", "service_tier", "output_config",
             "inference_geo"}
COUNT_TOKENS_TOP_LEVEL = {"model", "messages", "system", "tools", "tool_choice", "thinking", "output_config"}
BETA_TOP_LEVEL = {"context_management", "container", "mcp_servers"}
TOOL_KEYS = {"name", "description", "input_schema", "cache_control", "type", "strict", "input_examples",
             "defer_loading", "allowed_callers", "eager_input_streaming"}


class _Checker:
    """Collects problems; counts ``cache_control`` breakpoints."""

    def __init__(self) -> None:
        self.problems: list[str] = []
        self.breakpoints = 0

    def fields(self, path: str, obj: dict[str, Any], required: dict[str, str], optional: dict[str, str]) -> None:
        for name in required:
            if name not in obj:
                self.problems.append(f"{path}.{name}: Field required")
        for name, value in obj.items():
            if name == "type":
                continue
            kind = required.get(name) or optional.get(name)
            if kind is None:
                self.problems.append(f"{path}.{name}: Extra inputs are not permitted")
                continue
            ok, expected = _KINDS[kind]
            if not ok(value):
                self.problems.append(f"{path}.{name}: expected {expected}, got {json.dumps(value)[:60]}")
            if name == "cache_control" and value is not None:
                self.breakpoints += 1

    def block(self, path: str, block: Any, role: str | None, betas: set[str],
              allowed: tuple[str, ...] | None = None) -> None:
        if not isinstance(block, dict):
            self.problems.append(f"{path}: expected an object")
            return
        kind = block.get("type")
        if kind not in BLOCK_FIELDS or (allowed is not None and kind not in allowed):
            self.problems.append(f"{path}.type: unknown or unsupported block type {kind!r}")
            return
        if kind == "compaction" and COMPACTION_BETA not in betas:
            self.problems.append(f"{path}: compaction blocks need the anthropic-beta header {COMPACTION_BETA}")
        if role is not None and ROLE_OF_BLOCK.get(kind, role) != role:
            self.problems.append(f"{path}: {kind} blocks are not allowed in {role} messages")
        self.fields(path, block, *BLOCK_FIELDS[kind])
        if kind == "text" and allowed != RESULT_ITEM_TYPES and isinstance(block.get("text"), str) and not block["text"]:
            self.problems.append(f"{path}.text: text content blocks must be non-empty")
        if kind == "compaction" and block.get("content") == "":
            self.problems.append(f"{path}.content: compaction content must be non-empty or null")
        if kind == "tool_result" and isinstance(block.get("content"), list):
            for j, item in enumerate(block["content"]):
                self.block(f"{path}.content.{j}", item, None, betas, RESULT_ITEM_TYPES)

    def messages(self, messages: Any, betas: set[str]) -> None:
        if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
            self.problems.append("messages: expected a list of message objects")
            return
        self.problems += request_problems(messages)
        for i, message in enumerate(messages):
            extra = set(message) - {"role", "content"}
            self.problems += [f"messages.{i}.{k}: Extra inputs are not permitted" for k in sorted(extra)]
            content, role = message.get("content"), message.get("role")
            final_assistant = i == len(messages) - 1 and role == "assistant"
            if content == "" and not final_assistant:
                self.problems.append(f"messages.{i}.content: all messages must have non-empty content except "
                                     "for the optional final assistant message")
            if isinstance(content, list) and role in ("user", "assistant"):
                for j, block in enumerate(content):
                    self.block(f"messages.{i}.content.{j}", block, role, betas)

    def system(self, system: Any, betas: set[str]) -> None:
        if system is None or isinstance(system, str):
            return
        if not isinstance(system, list):
            self.problems.append("system: expected a string or a list of text blocks")
            return
        for j, block in enumerate(system):
            self.block(f"system.{j}", block, None, betas, ("text",))

    def tools(self, tools: Any) -> None:
        if tools is None:
            return
        if not isinstance(tools, list):
            self.problems.append("tools: expected a list")
            return
        names = []
        for i, tool in enumerate(tools):
            path = f"tools.{i}"
            if not isinstance(tool, dict):
                self.problems.append(f"{path}: expected an object")
                continue
            name = tool.get("name")
            if not isinstance(name, str) or not name or len(name) > 128 or not all(
                    c.isascii() and (c.isalnum() or c in "_-") for c in name):
                self.problems.append(f"{path}.name: expected a string matching ^[a-zA-Z0-9_-]{{1,128}}$")
            names.append(name)
            if tool.get("type") not in (None, "custom"):
                continue  # a server or versioned tool: the API defines its schema
            schema = tool.get("input_schema")
            if not isinstance(schema, dict) or schema.get("type") != "object":
                self.problems.append(f"{path}.input_schema: expected a JSON schema object with type 'object'")
            self.problems += [f"{path}.{k}: Extra inputs are not permitted" for k in sorted(set(tool) - TOOL_KEYS)]
            if tool.get("cache_control") is not None:
                self.breakpoints += 1
                if not _KINDS["cc"][0](tool["cache_control"]):
                    self.problems.append(f"{path}.cache_control: expected {_KINDS['cc'][1]}")
        if len(set(map(str, names))) != len(names):
            self.problems.append("tools: Tool names must be unique.")

    def context_management(self, value: Any, betas: set[str], min_trigger: int) -> None:
        if COMPACTION_BETA not in betas:
            self.problems.append(f"context_management: needs the anthropic-beta header {COMPACTION_BETA}")
        edits = value.get("edits") if isinstance(value, dict) else None
        if not isinstance(edits, list) or set(value) - {"edits"}:
            self.problems.append("context_management: expected {'edits': [...]}")
            return
        for i, edit in enumerate(edits):
            path = f"context_management.edits.{i}"
            if not isinstance(edit, dict) or edit.get("type") != "compact_20260112":
                self.problems.append(f"{path}.type: the emulator supports only compact_20260112")
                continue
            self.fields(path, edit, {}, {"trigger": "dict?", "instructions": "str?", "pause_after_compaction": "bool"})
            trigger = edit.get("trigger")
            if isinstance(trigger, dict):
                value_ = trigger.get("value")
                if trigger.get("type") != "input_tokens" or set(trigger) - {"type", "value"}:
                    self.problems.append(f"{path}.trigger: expected {{'type': 'input_tokens', 'value': int}}")
                elif not isinstance(value_, int) or isinstance(value_, bool) or value_ < min_trigger:
                    self.problems.append(f"{path}.trigger.value: must be an integer of at least {min_trigger}")


def validate(body: dict[str, Any], *, betas: set[str], count_tokens: bool, config: EmulatorConfig) -> list[str]:
    """Every problem of a request body (empty: valid). ``betas``: the ``anthropic-beta`` header's values."""
    c = _Checker()
    known = (COUNT_TOKENS_TOP_LEVEL if count_tokens else TOP_LEVEL) | BETA_TOP_LEVEL
    c.problems += [f"{k}: Extra inputs are not permitted" for k in sorted(set(body) - known)]
    model = body.get("model")
    if not isinstance(model, str) or not model:
        c.problems.append("model: Field required (a non-empty string)")
    if not count_tokens:
        max_tokens = body.get("max_tokens")
        if "max_tokens" not in body:
            c.problems.append("max_tokens: Field required")
        elif not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
            c.problems.append(f"max_tokens: expected a positive integer, got {json.dumps(max_tokens)[:40]}")
        if body.get("stream"):
            c.problems.append("stream: the emulator answers without streaming; send stream=false")
        temperature = body.get("temperature")
        if temperature is not None and (not isinstance(temperature, (int, float)) or not 0 <= temperature <= 1):
            c.problems.append("temperature: expected a number between 0 and 1")
        stops = body.get("stop_sequences")
        if stops is not None and (not isinstance(stops, list) or not all(isinstance(s, str) for s in stops)):
            c.problems.append("stop_sequences: expected a list of strings")
    if "messages" not in body:
        c.problems.append("messages: Field required")
    else:
        c.messages(body["messages"], betas)
    c.system(body.get("system"), betas)
    c.tools(body.get("tools"))
    choice = body.get("tool_choice")
    if choice is not None and (not isinstance(choice, dict) or choice.get("type") not in ("auto", "any", "tool", "none")
                               or (choice.get("type") == "tool" and not isinstance(choice.get("name"), str))):
        c.problems.append("tool_choice: expected {'type': 'auto' | 'any' | 'none'} or {'type': 'tool', 'name': ...}")
    if "context_management" in body:
        c.context_management(body["context_management"], betas, config.compaction_min_trigger)
    if c.breakpoints > MAX_BREAKPOINTS:
        c.problems.append(f"A maximum of {MAX_BREAKPOINTS} blocks with cache_control may be provided. "
                          f"Found {c.breakpoints}.")
    return c.problems


# ---------------------------------------------------------------------------------------------
# Prompt caching


def _without_cc(block: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in block.items() if k != "cache_control"}


def cache_segments(system: Any, tools: list[dict[str, Any]], messages: list[Message]) -> list[tuple[str, Any]]:
    """The request in cache order (tools, system, message blocks): (JSON text without
    cache_control, the block's cache_control or None)."""
    out: list[tuple[str, Any]] = []
    for tool in tools:
        out.append((json.dumps(["tool", _without_cc(tool)], sort_keys=True), tool.get("cache_control")))
    for block in [{"type": "text", "text": system}] if isinstance(system, str) else (system or []):
        out.append((json.dumps(["system", _without_cc(block)], sort_keys=True), block.get("cache_control")))
    for i, message in enumerate(messages):
        for block in blocks(message):
            nested = block.get("content") if isinstance(block.get("content"), list) else []
            cc = block.get("cache_control") or next(
                (item.get("cache_control") for item in nested if isinstance(item, dict) and item.get("cache_control")),
                None)
            out.append((json.dumps([i, message.get("role"), _without_cc(block)], sort_keys=True), cc))
    return out


class PromptCache:
    """Prefix hashes -> (expiry, tokens), per model.

    Guarantees: a prefix ends at a block; it is written at every ``cache_control`` breakpoint of at
    least ``min_cacheable_tokens``; a read is the longest live prefix ending at a breakpoint or up
    to ``cache_lookback_blocks`` blocks before one (a read refreshes the TTL). ``creation`` is the
    part of the last breakpoint's prefix not read; read + creation never exceed the request's total.
    """

    def __init__(self, clock=time.monotonic):
        self.entries: dict[str, tuple[float, int]] = {}
        self.clock = clock
        self._calls = 0

    def account(self, model: str, system: Any, tools: list[dict[str, Any]], messages: list[Message], total: int,
                config: EmulatorConfig) -> tuple[int, int]:
        """(cache_read_input_tokens, cache_creation_input_tokens) for one request; updates the cache."""
        now = self.clock()
        self._calls += 1
        if self._calls % 256 == 0:
            self.entries = {k: v for k, v in self.entries.items() if v[0] > now}
        segments = cache_segments(system, tools, messages)
        breakpoints = [k for k, (_, cc) in enumerate(segments) if cc]
        if not breakpoints:
            return 0, 0
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

        candidates = sorted({p for b in breakpoints for p in range(max(0, b - config.cache_lookback_blocks), b + 1)},
                            reverse=True)
        read = 0
        for p in candidates:
            if tokens[p] >= config.min_cacheable_tokens and live(p):
                read = tokens[p]
                self.entries[hashes[p]] = (now + config.cache_ttl_s, tokens[p])
                break
        last = breakpoints[-1]
        creation = tokens[last] - read if tokens[last] >= config.min_cacheable_tokens and not live(last) else 0
        for b in breakpoints:
            if tokens[b] >= config.min_cacheable_tokens and not live(b):
                ttl = 3600.0 if (segments[b][1] or {}).get("ttl") == "1h" else config.cache_ttl_s
                self.entries[hashes[b]] = (now + ttl, tokens[b])
        return read, max(0, creation)


# ---------------------------------------------------------------------------------------------
# Replies


def system_text(system: Any) -> str:
    if isinstance(system, str):
        return system
    return "".join(b.get("text", "") for b in system or [] if isinstance(b, dict))


def _last_compaction(messages: list[Message]) -> tuple[int, int] | None:
    for i in range(len(messages) - 1, -1, -1):
        if messages[i].get("role") != "assistant":
            continue
        content = blocks(messages[i])
        for j in range(len(content) - 1, -1, -1):
            if content[j].get("type") == "compaction" and content[j].get("content"):
                return i, j
    return None


def effective_view(messages: list[Message]) -> list[Message]:
    """What the API reads: everything from the last (non-null) compaction block on, that block as a
    user message ``[Compacted]\\n<content>``. Without a compaction block: ``messages`` itself."""
    found = _last_compaction(messages)
    if found is None:
        return messages
    i, j = found
    content = blocks(messages[i])
    view: list[Message] = [{"role": "user", "content": COMPACTED + content[j]["content"]}]
    rest = [b for b in content[j + 1:] if b.get("type") != "compaction"]
    if rest:
        view.append({"role": "assistant", "content": rest})
    return merge_adjacent(view + messages[i + 1:])


def summary_input(messages: list[Message]) -> list[Message]:
    """The whole request for a compaction summary, earlier compaction blocks as assistant text (so the
    fallback summary keeps their notes)."""
    out = []
    for message in messages:
        content = []
        for block in blocks(message):
            if block.get("type") == "compaction":
                if block.get("content"):
                    content.append({"type": "text", "text": COMPACTED + block["content"]})
            else:
                content.append(block)
        if content:
            out.append({**message, "content": content})
    return out


def compacted_view(summary: str, view: list[Message]) -> list[Message]:
    """After a compaction: the summary as a user message, then the last exchange (pair-safe)."""
    tail = view[-2:] if len(view) >= 2 and tool_results(view[-1]) else view[-1:]
    return merge_adjacent([{"role": "user", "content": COMPACTED + summary}, *tail])


def conversation_of(view: list[Message]) -> list[Message]:
    """The history a Summarizer request carries as JSON lines in ``<conversation>`` tags."""
    text = "\n".join(b.get("text", "") for m in view if m.get("role") == "user"
                     for b in blocks(m) if b.get("type") == "text")
    start = text.find("<conversation>\n")
    end = text.rfind("\n</conversation>")
    if start < 0 or end < start:
        return []
    out = []
    for line in text[start + len("<conversation>\n"):end].split("\n"):
        try:
            item = json.loads(line)
        except ValueError:
            continue  # a cut marker
        if isinstance(item, dict) and item.get("role") in ("user", "assistant"):
            out.append(item)
    return out


def without_cache_control(messages: list[Message]) -> list[Message]:
    """``messages`` without cache_control markers: the policy's answer (its tool_use ids included)
    must not depend on where a client put its breakpoints."""
    def clean(block: Any) -> Any:
        if not isinstance(block, dict):
            return block
        block = _without_cc(block)
        if isinstance(block.get("content"), list):
            block["content"] = [clean(item) for item in block["content"]]
        return block

    return [{**m, "content": [clean(b) for b in m["content"]]} if isinstance(m.get("content"), list) else m
            for m in messages]


def truncate(content: list[dict[str, Any]], max_tokens: int) -> tuple[list[dict[str, Any]], bool]:
    """Blocks that fit in ``max_tokens`` (a text block may be cut); True when something was cut."""
    if estimate(content) <= max_tokens:
        return content, False
    budget, out = max_tokens * CHARS_PER_TOKEN, []
    for block in content:
        size = len(json.dumps(block, ensure_ascii=False))
        if size <= budget:
            out.append(block)
            budget -= size
        elif block.get("type") == "text" and budget > 40:
            out.append({**block, "text": block["text"][: budget - 40]})
            break
        else:
            break
    return out, True


def answer(state: EmulatorState, body: dict[str, Any], view: list[Message]) -> tuple[list[dict[str, Any]], str]:
    """The reply's content and stop reason: the script, a Summarizer summary, or the policy."""
    config = state.config
    if state.script_position < len(config.script):
        scripted = config.script[state.script_position]
        state.script_position += 1
        return copy.deepcopy(scripted.content), scripted.stop_reason
    if system_text(body.get("system")) == SYSTEM_PROMPT:
        state.summary_requests += 1
        # a summary as long as the request's max_tokens allows (4 characters per token)
        budget = max(2_000, int(body.get("max_tokens", 0)) * 4 - 4_000)
        return [{"type": "text", "text": fallback_summary(conversation_of(view), budget)}], "end_turn"
    if (body.get("tool_choice") or {}).get("type") == "none":
        return [{"type": "text", "text": partial_report(without_cache_control(view))}], "end_turn"
    names = {t.get("name") for t in body.get("tools") or []}
    return decide(without_cache_control(view), names, config.batch_size)


SERVER_SUMMARY_CHARS = 40_000  # about 10,000 tokens: the server's summary of a long context


def compaction_edit(body: dict[str, Any]) -> dict[str, Any] | None:
    edits = (body.get("context_management") or {}).get("edits") or []
    return next((e for e in edits if e.get("type") == "compact_20260112"), None)


def build_message(state: EmulatorState, body: dict[str, Any], view: list[Message],
                  total: int) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The response body and the usages to bill (one per iteration)."""
    config = state.config
    model, system, tools = body["model"], body.get("system"), body.get("tools") or []
    edit = compaction_edit(body)
    prefix: list[dict[str, Any]] = []
    iterations: list[dict[str, Any]] = []
    trigger = ((edit or {}).get("trigger") or {}).get("value") or config.compaction_default_trigger
    if edit is not None and total > trigger:
        summary = fallback_summary(summary_input(body["messages"]), SERVER_SUMMARY_CHARS)
        prefix = [{"type": "compaction", "content": summary}]
        iterations.append({"type": "compaction", "input_tokens": total, "output_tokens": estimate(summary),
                           "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0})
        state.compactions += 1
        view = compacted_view(summary, view)
        total = input_tokens(system, view, tools)
        if edit.get("pause_after_compaction"):
            usage = {**dict.fromkeys(USAGE_FIELDS, 0), "iterations": iterations}
            return _message(model, prefix, "compaction", usage), iterations
    content, stop_reason = answer(state, body, view)
    if config.enforce_max_tokens:
        content, cut = truncate(content, body["max_tokens"])
        stop_reason = "max_tokens" if cut else stop_reason
    read, creation = state.cache.account(model, system, tools, view, total, config)
    usage: dict[str, Any] = {"input_tokens": total - read - creation, "output_tokens": estimate(content),
                             "cache_creation_input_tokens": creation, "cache_read_input_tokens": read}
    billed = [*iterations, {"type": "message", **usage}]
    if iterations:
        usage["iterations"] = billed
    return _message(model, prefix + content, stop_reason, {**usage, "service_tier": "standard"}), billed


def _message(model: str, content: list[dict[str, Any]], stop_reason: str, usage: dict[str, Any]) -> dict[str, Any]:
    return {"id": "msg_emu_" + uuid.uuid4().hex[:24], "type": "message", "role": "assistant", "model": model,
            "content": content, "stop_reason": stop_reason, "stop_sequence": None, "usage": usage}


# ---------------------------------------------------------------------------------------------
# HTTP


class DroppedResponse(Response):
    """Sends the headers and part of the body, then returns without finishing: uvicorn closes the
    connection, and the client sees the body cut short."""

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", b"4096")]})
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


def api_key_of(request: Request) -> str | None:
    """The key from ``x-api-key``, or from ``Authorization: Bearer`` (how SDK 2.x sends ``api_key``)."""
    key = request.headers.get("x-api-key")
    if key:
        return key
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    return token.strip() or None if scheme.lower() == "bearer" else None


def _betas(request: Request) -> set[str]:
    return {b.strip() for b in request.headers.get("anthropic-beta", "").split(",") if b.strip()}


class Api:
    """The request handlers, bound to one :class:`EmulatorState`."""

    def __init__(self, state: EmulatorState):
        self.state = state

    def fail(self, status: int, message: str, headers: dict[str, str] | None = None) -> Response:
        self.state.count(str(status))
        return api_error(status, message, headers)

    def _preflight(self, request: Request) -> Response | None:
        key, expected = api_key_of(request), self.state.config.api_key
        if not key or (expected is not None and key != expected):
            return self.fail(401, "invalid x-api-key" if key else "x-api-key header is required")
        if not request.headers.get("anthropic-version"):
            return self.fail(400, "anthropic-version: header is required")
        return None

    async def _body(self, request: Request, raw: bytes, count_tokens: bool) -> dict[str, Any] | Response:
        config = self.state.config
        if len(raw) > config.max_request_bytes:
            return self.fail(413, f"Request exceeds the maximum allowed number of bytes ({config.max_request_bytes}).")
        try:
            body = json.loads(raw)
        except ValueError as e:
            return self.fail(400, f"There was an error parsing the body: {e}")
        if not count_tokens:
            self.state.record(body)
        if not isinstance(body, dict):
            return self.fail(400, "The request body must be a JSON object.")
        problems = validate(body, betas=_betas(request), count_tokens=count_tokens, config=config)
        if problems:
            return self.fail(400, "; ".join(problems))
        return body

    async def messages(self, request: Request) -> Response:
        refused = self._preflight(request)
        if refused is not None:
            return refused
        n = self.state.begin()
        try:
            return await self._messages(request, n)
        finally:
            self.state.end()

    async def _messages(self, request: Request, n: int) -> Response:
        state, config = self.state, self.state.config
        raw = await request.body()
        delay = latency_for(config, n)
        if delay and not await sleep_unless_disconnected(request, delay):
            state.count("disconnected")
            return Response(status_code=499)
        body = await self._body(request, raw, count_tokens=False)
        if isinstance(body, Response):
            return body
        tools = body.get("tools") or []
        view = effective_view(body["messages"])
        total = input_tokens(body.get("system"), view, tools)
        if total > config.context_window_tokens:
            return self.fail(400, f"prompt is too long: {total} tokens > {config.context_window_tokens} maximum")
        admission = state.window.admit(config, total)
        if not admission.admitted:
            limit = config.rpm if admission.limited_by == "requests" else config.input_tokens_per_minute
            return self.fail(429, f"This request would exceed the rate limit for your organization of {limit} "
                                  f"{admission.limited_by.replace('_', ' ')} per {config.window_s:g} seconds. "
                                  "Please wait before trying again (see the retry-after header).", admission.headers)
        fault = pick_fault(config, n)
        if fault == "rate_limit":
            headers = {**admission.headers, **retry_headers(config.retry_after_s, config.retry_after_ms)}
            return self.fail(429, "Number of request tokens has exceeded your rate limit (injected).", headers)
        if fault == "overloaded":
            return self.fail(529, "Overloaded")
        if fault == "server_error":
            return self.fail(500, "Internal server error")
        if fault == "drop":
            state.count("dropped")
            return DroppedResponse()
        if fault == "slow" and not await sleep_unless_disconnected(request, config.slow_s):
            state.count("slow")
            return Response(status_code=499)
        try:
            message, billed = build_message(state, body, view, total)
        except Exception:  # an emulator bug: say so loudly, answer like the API would
            log.exception("the emulator failed to build a reply")
            state.count("internal_error")
            return api_error(500, "Internal server error (emulator bug; see its log)")
        state.bill(billed)
        state.count("slow" if fault == "slow" else "ok")
        return JSONResponse(message, headers={"request-id": new_request_id(), **admission.headers})

    async def count_tokens(self, request: Request) -> Response:
        refused = self._preflight(request)
        if refused is not None:
            return refused
        body = await self._body(request, await request.body(), count_tokens=True)
        if isinstance(body, Response):
            return body
        self.state.count_tokens_requests += 1
        view = effective_view(body["messages"])
        return JSONResponse({"input_tokens": input_tokens(body.get("system"), view, body.get("tools") or [])},
                            headers={"request-id": new_request_id()})

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
        Route("/_emulator/stats", api.stats, methods=["GET"]),
        Route("/_emulator/reset", api.reset, methods=["POST"]),
    ]
    return Starlette(routes=routes, exception_handlers={404: _not_found, 405: _not_allowed})
