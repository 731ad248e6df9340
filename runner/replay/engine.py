"""Replay a recorded history through a contestant, open loop, and judge what it sent and lost.

Before each recorded assistant message the contestant prepares the request that would be sent;
the request is priced as the API bills it, with prompt caching at the runner's breakpoints (a
5-minute TTL that never expires between calls: the replay has no clock); then the recorded
assistant message and the recorded results are appended, exactly, whatever the view was.

Guarantees:
- One rule for every contestant (:mod:`.facts`): each needed fact of turn t is *in context* when
  the prepared request holds it, else *recoverable* when a pointer in it leads to a text that holds
  it (:meth:`~.contestant.Contestant.targets`), else *lost*.
- A recoverable fact is paid for: at turn t the pointers' targets are taken smallest first until
  every recoverable fact of t is covered, each charged once as a recall (its tokens as fresh input,
  plus :data:`RECALL_OUTPUT_TOKENS` output tokens); ``effective_cost_usd`` is the cost plus those.
- A request over the window (``context_tokens``) is refused as the API would: the contestant makes
  room (:meth:`~.contestant.Contestant.reactive`) up to ``max_reactive_retries`` times; a request
  still over is counted in ``over_window`` and priced as sent (the open loop goes on).
- The request's tools are the recorded agent's (one definition a name it called) and the contestant's
  own (ours: recall) but one whose name the recorded agent's tools already have (names stay unique).
- ``--dump OUT`` writes turn t's request body to ``OUT/<name>/<t>.json``, ``<name>`` the history's
  name less ``.jsonl``, one directory a ``/``-separated part (:func:`dump_parts`): a part that is empty
  or starts with ``.`` (``.``, ``..``, ``.hidden``) has its leading dots as ``_`` (``..`` is ``__``), so
  every directory is made inside OUT; each is made or opened without following a symbolic link, and
  each body is written to a regular file of one link opened without following one (a planted link, a
  FIFO, a hard link or a directory in the way is a :class:`DumpError`, one line, never a write
  elsewhere). OUT itself is taken as named.
- Tokens are the emulator's count (:mod:`runner.billing`: 4 characters of JSON text each), the same
  for every contestant; output tokens are the recorded assistant message's.
"""

from __future__ import annotations

import math
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..billing import CHARS_PER_TOKEN, ApiCacheRules, PromptCache, estimate, input_tokens
from ..messages import Message
from ..models.anthropic import request_params
from ..models.base import Request
from ..pricing import PriceTable, Usage
from ..rundir.store import dumps
from .contestant import Contestant
from .facts import facts_in, message_facts, needed_facts, tool_input_text
from .history import History, HistoryError

RECALL_OUTPUT_TOKENS = 100
LAST_SHARE = 0.1  # the growth column: the cost per turn over the last 10% of turns


@dataclass(frozen=True)
class ReplayOptions:
    model: str
    summary_model: str
    prices: PriceTable
    context_tokens: int | None = None
    max_output_tokens: int = 8000
    max_reactive_retries: int = 1
    dump_dir: Path | None = None


@dataclass
class FileReport:
    """One history replayed by one contestant; the keys of ``runner replay --json``."""

    file: str
    strategy: str
    turns: int = 0
    requests: int = 0
    tokens_sent: int = 0  # input + cache write + cache read, of every call (summaries included)
    usage: Usage = field(default_factory=Usage)
    summary_usage: Usage = field(default_factory=Usage)
    cost_usd: float = 0.0
    recalls: int = 0
    recall_tokens: int = 0
    effective_cost_usd: float = 0.0
    needed: int = 0
    in_context: int = 0
    recoverable: int = 0
    lost: int = 0
    compactions: dict[str, int] = field(default_factory=dict)
    summaries: int = 0
    refused: int = 0  # requests over the window the contestant made room for
    over_window: int = 0  # requests sent over the window all the same
    turn_costs: list[float] = field(default_factory=list)
    skipped: dict[str, int] = field(default_factory=dict)
    lost_facts: list[tuple[int, str]] = field(default_factory=list)  # (turn, fact)

    @property
    def last_turns_cost(self) -> float:
        """The mean cost of a call over the last 10% of turns (at least one)."""
        n = max(1, math.ceil(len(self.turn_costs) * LAST_SHARE))
        tail = self.turn_costs[-n:]
        return sum(tail) / len(tail) if tail else 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "file": self.file,
            "strategy": self.strategy,
            "turns": self.turns,
            "requests": self.requests,
            "tokens_sent": self.tokens_sent,
            "usage": self.usage.to_json(),
            "summary_usage": self.summary_usage.to_json(),
            "cost_usd": round(self.cost_usd, 6),
            "recalls": self.recalls,
            "recall_tokens": self.recall_tokens,
            "effective_cost_usd": round(self.effective_cost_usd, 6),
            "needed": self.needed,
            "in_context": self.in_context,
            "recoverable": self.recoverable,
            "lost": self.lost,
            "compactions": dict(sorted(self.compactions.items())),
            "summaries": self.summaries,
            "refused": self.refused,
            "over_window": self.over_window,
            "last_turns_cost_usd": round(self.last_turns_cost, 6),
            "skipped": self.skipped,
        }


def recorded_tools(messages: list[Message]) -> list[dict[str, Any]]:
    """A definition of each tool the recorded agent called, by name, in first-call order (its real
    definitions are not in the history: each takes the inputs it was given)."""
    names: dict[str, None] = {}
    for message in messages:
        if message["role"] == "assistant":
            for block in message["content"]:
                if block["type"] == "tool_use":
                    names.setdefault(block["name"], None)
    return [
        {
            "name": name,
            "description": f"The recorded agent's {name} tool.",
            "input_schema": {"type": "object"},
        }
        for name in names
    ]


class _FactCache:
    """The facts of each message object, matched once (a view keeps most of its messages each turn)."""

    def __init__(self) -> None:
        self._by_id: dict[int, tuple[Message, set[str]]] = {}
        self._by_text: dict[str, set[str]] = {}

    def of_view(self, view: list[Message]) -> set[str]:
        found: set[str] = set()
        for message in view:
            entry = self._by_id.get(id(message))
            if entry is None or entry[0] is not message:
                entry = (message, message_facts(message))
                self._by_id[id(message)] = entry
            found |= entry[1]
        return found

    def of_text(self, key: str, text: str) -> set[str]:
        cached = self._by_text.get(key + "\0" + str(len(text)))
        if cached is None:
            cached = self._by_text[key + "\0" + str(len(text))] = facts_in(text)
        return cached


def _body(
    options: ReplayOptions,
    system: str,
    tools: list[dict[str, Any]],
    *,
    view: list[Message],
    points: tuple[int, ...],
) -> dict[str, Any]:
    request = Request(
        model=options.model,
        messages=view,
        tools=tools,
        max_tokens=options.max_output_tokens,
        system=system or None,
        cache_points=points,
    )
    params, _ = request_params(request)
    return params


async def replay(history: History, contestant: Contestant, options: ReplayOptions) -> FileReport:
    """``history`` through ``contestant`` (see the module's guarantees)."""
    report = FileReport(file=history.name, strategy=contestant.name, skipped=dict(history.skipped))
    needed = needed_facts(history.system, history.messages)
    tools = recorded_tools(history.messages)
    tools += [t for t in contestant.tools if t["name"] not in {r["name"] for r in tools}]
    cache = PromptCache(clock=lambda: 0.0)
    rules = ApiCacheRules()
    facts = _FactCache()
    prices = options.prices
    await contestant.start(history.system, tools)
    for index, message in enumerate(history.messages):
        if message["role"] != "assistant":
            continue
        report.turns += 1
        retries = 0
        while True:  # refused over the window: the contestant makes room, and the request is prepared again
            view = await contestant.prepare(history.messages[:index])
            body = _body(options, history.system, tools, view=view, points=contestant.cache_points())
            total = input_tokens(body.get("system"), body["messages"], body.get("tools") or [])
            over = options.context_tokens and total > options.context_tokens
            if not over or retries >= options.max_reactive_retries:
                break
            retries += 1
            report.refused += 1
            if not await contestant.reactive():
                break
        if options.context_tokens and total > options.context_tokens:
            report.over_window += 1
        read, creation, long = cache.account(
            options.model, body.get("system"), body.get("tools") or [], body["messages"], total, rules
        )
        usage = Usage(
            input_tokens=total - read - creation,
            output_tokens=estimate(message["content"]),
            cache_creation_input_tokens=creation,
            cache_read_input_tokens=read,
            cache_creation_1h_input_tokens=long,
        )
        await contestant.record(usage)
        report.requests += 1
        report.usage.add(usage)
        report.turn_costs.append(prices.cost(options.model, usage))
        if options.dump_dir is not None:
            _dump(options.dump_dir, dump_parts(history.name), report.turns, body)
        _judge(report, report.turns, needed.get(index, set()), view=view, contestant=contestant, facts=facts)
    report.summary_usage = contestant.summary_usage.model_copy()
    report.summaries = contestant.summaries
    report.compactions = {str(getattr(k, "value", k)): n for k, n in contestant.compactions.items()}
    report.tokens_sent = report.usage.context_tokens + report.summary_usage.context_tokens
    recall_usage = Usage(
        input_tokens=report.recall_tokens, output_tokens=RECALL_OUTPUT_TOKENS * report.recalls
    )
    report.cost_usd = prices.cost(options.model, report.usage) + prices.cost(
        options.summary_model, report.summary_usage
    )
    report.effective_cost_usd = report.cost_usd + prices.cost(options.model, recall_usage)
    return report


def _judge(
    report: FileReport,
    turn: int,
    needed: set[str],
    *,
    view: list[Message],
    contestant: Contestant,
    facts: _FactCache,
) -> None:
    if not needed:
        return
    report.needed += len(needed)
    present = facts.of_view(view)
    missing = needed - present
    report.in_context += len(needed) - len(missing)
    if not missing:
        return
    targets = sorted(contestant.targets(view).items(), key=lambda kv: (len(kv[1]), kv[0]))
    held = {key: facts.of_text(key, text) & missing for key, text in targets}
    recoverable = set().union(*held.values()) if held else set()
    report.recoverable += len(recoverable)
    lost = missing - recoverable
    report.lost += len(lost)
    report.lost_facts += [(turn, f) for f in sorted(lost)]
    uncovered = set(recoverable)
    for key, text in targets:  # smallest first, each once, until every recoverable fact is covered
        if not uncovered:
            break
        if held[key] & uncovered:
            uncovered -= held[key]
            report.recalls += 1
            report.recall_tokens += math.ceil(len(text) / CHARS_PER_TOKEN)


class DumpError(HistoryError):
    """A request that cannot be dumped where ``--dump`` says (reported as a bad history is: one line)."""


def dump_parts(name: str) -> list[str]:
    """The directories, one inside the other, of a history's dumped requests inside ``--dump``'s: its
    name less ``.jsonl`` split at separators, each part's leading dots as ``_`` (an empty part ``_``),
    so none is ``.``, ``..`` or hidden."""
    stem = name.removesuffix(".jsonl")
    for sep in {os.sep, os.altsep or os.sep} - {"/"}:
        stem = stem.replace(sep, "/")
    parts = []
    for part in stem.split("/"):
        rest = part.lstrip(".")
        parts.append("_" * (len(part) - len(rest)) + rest or "_")
    return parts


def _dump(out: Path, parts: list[str], turn: int, body: dict[str, Any]) -> None:
    """``body`` to ``out/<parts...>/<turn>.json`` (see the module's guarantees)."""
    where = out
    try:
        out.mkdir(parents=True, exist_ok=True)
        fd = os.open(out, os.O_RDONLY | os.O_DIRECTORY)
        try:
            for part in parts:
                where = where / part
                try:
                    os.mkdir(part, dir_fd=fd)
                except FileExistsError:
                    pass
                inner = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
                os.close(fd)
                fd = inner
            where = where / f"{turn}.json"
            _write_new(where, fd, dumps(body).encode("utf-8"))  # a lone surrogate escaped
        finally:
            os.close(fd)
    except OSError as e:
        raise DumpError(f"{where}: cannot dump a request there: {e.strerror or e}") from None


def _write_new(path: Path, directory: int, data: bytes) -> None:
    """``data`` as the whole of ``path.name`` in ``directory`` (a descriptor): a regular file of one
    link, made or opened without following a symbolic link or waiting on a FIFO."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK
    fd = os.open(path.name, flags, 0o666, dir_fd=directory)
    with os.fdopen(fd, "wb") as f:
        found = os.fstat(fd)
        if not stat.S_ISREG(found.st_mode) or found.st_nlink != 1:
            raise DumpError(f"{path}: cannot dump a request there: not a regular file of one link")
        f.truncate(0)
        f.write(data)


__all__ = [
    "DumpError",
    "FileReport",
    "ReplayOptions",
    "dump_parts",
    "recorded_tools",
    "replay",
    "tool_input_text",
]
