"""Benchmark 3: what one long session costs under each compaction strategy.

One long survey job (the offline policy, served by the emulator over real HTTP to the real SDK)
over a workspace made of several standard-library packages, run once per strategy, side by side.
Every row is the runner's session, so every row offers the ``memory`` tool (every runner job has it)
and the policy takes its memory survey; every row's summaries are made by the job's model (the seeds'
and the peers' choice, and the only one server-side compaction has); and every row runs at the table's
window, :data:`WINDOW` (12,500 tokens: the 50,000 characters of the runner's default
``context_char_limit`` and of the seeds, the emulator counting 4 characters a token), except where a
strategy cannot: server-side compaction's trigger is at least 50,000 tokens, so it runs at
:data:`WIDE_WINDOW`, with ours at that window beside it. ``vs ours`` compares a row with ours at the
same window.

- ``none``: no compaction at all (the emulator's window is raised so it can finish);
- ``ours``: the client pipeline with every limit at its default (the headline row);
  ``ours, tuned``: token-aware (12,500 tokens), compacting down to half the limit (a tuned row);
- ``seed 000``: revision 000 of the seed lesson (the Vietnamese lesson with code, "Context Compact")
  as written: its own thresholds (50,000 chars), no ``cache_control`` anywhere; ``seed 000 + our
  caching`` is the same pipeline with our request's cache breakpoints (last tool, system prompt, newest
  message), the ablation that shows what caching alone buys;
- ``seed 001 @ 50k chars``: revision 001 (the English README, "s08: Context Compact") as written,
  THRESHOLD 50,000 chars, no ``cache_control``;
- ``mask``: observation masking only: every tool result older than the newest three is replaced by
  a placeholder, nothing else (it has no window);
- at :data:`WIDE_WINDOW`: ``server`` (the API's server-side compaction, ``compact_20260112`` at its
  50,000-token minimum trigger), ``ours @ 50k tokens`` (``context_token_limit=50000``) and ``seed 001 @
  200k chars`` (THRESHOLD 200,000 chars).

The seed pipelines are ``bench/seeds_pipeline.py`` (each function as its lesson writes it), driven
from the runner's own ``Session`` by :class:`SeedStrategy`, the way each lesson's agent loop calls
them: the pipeline before every model call, ``compact_history`` after a tool batch that called
``compact``, ``reactive_compact`` on "prompt is too long". Two things sit between a seed and the API,
both here: the request carries ``merge_adjacent(history)``, because both seeds put their snip marker
(a user message) right after a user message, and the API combines consecutive same-role turns
(the emulator, stricter, rejects them); and a summary is our Summarizer's request to the job's model
(the emulator answers it with the deterministic summary), since the lessons do not give their prompt.

Reports billed tokens (input, output, cache writes, cache reads), summary tokens, cost in USD,
turns, completeness (files the report names, and of them the files whose facts are right: each row's
lines, size and top-level definitions checked against :func:`ground_truth`, computed from the files
themselves) and re-reads (a file read again after its content was compacted away: information the
strategy lost). A strategy that has not finished after ``MAX_TURNS`` turns is stopped and reported
as not finishing.

For the rows in ``BREAKDOWN`` the cost is taken apart by source (output, input, cache writes and
reads, summaries), from the requests the emulator recorded: each cache write by what became of it
(read back by a later call, sent again but not read, rewritten by a compaction first, the last
call's), and the tokens sent split into what an earlier call had sent unchanged and the fresh rest
(new, or rewritten by a compaction). The Targets line says what bounds ours against ``seed 000``.

:data:`OURS_PLAIN` and :func:`run_all` are for the peers' tables (``bench/peers.py``,
``bench/peers_openhands.py``), which run ours beside their contestants: ours on the plain survey
(the ``memory`` tool left out of every request) where a peer cannot be offered memory.

    python bench/cost.py            # full size; writes bench/results/cost.json and BENCHMARKS.md
    python bench/cost.py --smoke    # one small package, a few seconds, writes nothing
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import hashlib
import json
import math
import os
import re
import shutil
import sys
import sysconfig
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import RESULTS, load_note, repeat_note, replace_section, write_result  # noqa: E402
from seeds_pipeline import Seed000, Seed001, Summarize  # noqa: E402

from runner.agent.runjob import Services
from runner.agent.session import Session  # noqa: E402
from runner.billing import cache_segments  # noqa: E402
from runner.compaction.compactor import CompactionState, Compactor  # noqa: E402
from runner.compaction.summarizer import Summarizer  # noqa: E402
from runner.config import Limits  # noqa: E402
from runner.emulator.config import EmulatorConfig  # noqa: E402
from runner.emulator.server import running_emulator  # noqa: E402
from runner.jobs import JobSpec  # noqa: E402
from runner.messages import Message, blocks, merge_adjacent  # noqa: E402
from runner.models.anthropic import AnthropicModel  # noqa: E402
from runner.models.base import Reply, Request  # noqa: E402
from runner.offline.memory_survey import OUTLINE, report_rows  # noqa: E402
from runner.offline.policy import reread_count  # noqa: E402
from runner.pricing import Usage, cost_usd  # noqa: E402
from runner.rundir.store import JobStore, read_jsonl  # noqa: E402

MODEL = "claude-sonnet-5-5"
# every row's summaries are made by the job's model: the seeds' and the peers' choice, and the only one the
# API's server-side compaction has (the runner's own default summary model is claude-haiku-5-5)
SUMMARY_MODEL = MODEL
FULL_PACKAGES = ("asyncio", "email", "importlib", "json", "http", "concurrent", "logging", "unittest")
SMOKE_PACKAGES = ("json",)
MAX_TURNS = 600  # about four times what a strategy that finishes needs here
PROMPT = (
    "Survey this workspace: every file, lines per extension, largest files, TODO/FIXME lines, "
    "and for each file its top-level definitions and first docstring line."
)
SYSTEM = "You are a careful code surveyor."
# the window every row runs at: the runner's default context_char_limit and the seeds' 50,000 characters,
# which the emulator counts as 12,500 tokens (4 characters a token); WIDE_WINDOW where a strategy cannot run
# at it (the API's compact_20260112 trigger is at least 50,000 tokens)
WINDOW = "12,500 tokens"
WIDE_WINDOW = "50,000 tokens"
WINDOW_TOKENS, WIDE_WINDOW_TOKENS = 12_500, 50_000
# what every table's result depends on, in one sentence (said under each closed-loop table)
DEPENDS = (
    "What this table depends on: the offline stand-in's choices, not a model's (how many files it reads "
    "a turn, the notes and memory files it writes, the summary it builds without a model, what it re-reads "
    "once a result is gone, and that it takes a preview it cannot tell from a whole result for the whole "
    "file), so the tokens are those of this one deterministic policy; a model would write other replies, "
    "and the ratios could change with them."
)


@dataclasses.dataclass(frozen=True)
class Strategy:
    """One row: per-job limits, and for a seed row, the pipeline that replaces our Compactor."""

    limits: dict[str, Any]
    summary_model: str = SUMMARY_MODEL
    seed: Callable[[Path, Summarize], Seed000 | Seed001] | None = None
    cache: bool = True  # False: no cache_control in any request, as the seeds write them
    text: str = ""
    window: str = WINDOW  # "" for a strategy that has none (no compaction, masking)
    memory: bool = True  # False: the memory tool left out of every request (the policy's plain survey)


SEED_LIMITS = {"cache_aware": False}  # our breakpoint after the settled prefix needs our window
STRATEGIES: dict[str, Strategy] = {
    "none": Strategy({"compaction": "off"}, text="compaction off", window=""),
    # the headline: every limit at its default (context_char_limit=50,000 characters)
    "ours": Strategy({}, text="every limit at its default (context_char_limit=50000)"),
    # tuned: token-aware (12,500 tokens: the seeds' 50,000 chars), compacting deeper, to half the limit, so
    # the cache is rewritten half as often
    "ours, tuned": Strategy(
        {"context_token_limit": WINDOW_TOKENS, "compact_target_ratio": 0.5},
        text="tuned: context_token_limit=12500, compact_target_ratio=0.5, the rest defaults",
    ),
    "seed 000": Strategy(
        SEED_LIMITS,
        seed=lambda d, s: Seed000(d, s),
        cache=False,
        text="revision 000 as written: 50,000 chars, no cache_control",
    ),
    "seed 000 + our caching": Strategy(
        SEED_LIMITS,
        seed=lambda d, s: Seed000(d, s),
        cache=True,
        text="revision 000 as written, with our request's cache breakpoints (last "
        "tool, system prompt, newest message)",
    ),
    "seed 001 @ 50k chars": Strategy(
        SEED_LIMITS,
        seed=lambda d, s: Seed001(d, 50_000, s),
        cache=False,
        text="revision 001 as written, THRESHOLD 50,000 chars, no cache_control",
    ),
    "mask": Strategy(
        {"compaction": "mask"}, text="compaction=mask (every seen result but the newest 3)", window=""
    ),
    # the API's server-side compaction cannot trigger under 50,000 tokens: it, and ours beside it, there
    "ours @ 50k tokens": Strategy(
        {"context_token_limit": WIDE_WINDOW_TOKENS, "context_char_limit": 4 * WIDE_WINDOW_TOKENS},
        text="context_token_limit=50000 (context_char_limit=200000, so the token limit is the one that "
        "binds), the rest defaults",
        window=WIDE_WINDOW,
    ),
    "server": Strategy(
        {"compaction": "server", "server_trigger_tokens": WIDE_WINDOW_TOKENS},
        text="compaction=server, server_trigger_tokens=50000 (the API's minimum)",
        window=WIDE_WINDOW,
    ),
    "seed 001 @ 200k chars": Strategy(
        SEED_LIMITS,
        seed=lambda d, s: Seed001(d, 200_000, s),
        cache=False,
        text="revision 001 as written, THRESHOLD 200,000 chars, no cache_control",
        window=WIDE_WINDOW,
    ),
}
# ours at each window: the row every other row at that window is compared with
OURS_AT = {WINDOW: "ours", WIDE_WINDOW: "ours @ 50k tokens", "": "ours"}
# ours on the plain survey (no memory tool offered), for a peer's table whose agent has no memory tool
OURS_PLAIN = {
    "ours, plain survey": Strategy(
        {}, text="every limit at its default, the memory tool left out of every request", memory=False
    ),
}
# what ours must beat 2x (each against ours at its window)
ANCHORS = ("server", "mask", "seed 000", "seed 001 @ 50k chars", "seed 001 @ 200k chars")


def ours_for(row: dict[str, Any], rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The row of ours that ``row`` is compared with: ours at ``row``'s window, on ``row``'s survey."""
    plain = [r for r in rows if r.get("survey") == "plain" and r["strategy"].startswith("ours")]
    if row.get("survey") == "plain" and plain:
        return plain[0]
    name = OURS_AT.get(row.get("window", WINDOW), "ours")
    return next((r for r in rows if r["strategy"] == name), None)


class NoCacheModel:
    """A model whose requests carry no ``cache_control`` at all (the seeds send none)."""

    def __init__(self, inner: Any):
        self.inner = inner
        self.name = inner.name
        self.server_compaction = inner.server_compaction

    async def create(self, request: Request) -> Reply:
        return await self.inner.create(dataclasses.replace(request, cache=False))

    async def aclose(self) -> None:
        await self.inner.aclose()


class PlainSurveyModel(NoCacheModel):
    """A model whose requests offer no ``memory`` tool, so the policy takes its plain survey (its facts in
    notes in its replies): ours on the survey a peer without a memory tool runs. Nothing else changes."""

    async def create(self, request: Request) -> Reply:
        tools = [t for t in request.tools if t.get("name") != "memory"]
        return await self.inner.create(dataclasses.replace(request, tools=tools))


class SeedStrategy:
    """Runs a seed pipeline in place of our Compactor, called where the seed's agent loop calls it.

    The seed keeps its own message list: each call takes the messages the session added since the
    last one (a copy: the seeds rewrite blocks in place), runs the seed's function on the whole list in
    a worker thread (its summaries call back into the event loop for the model), and leaves the
    session's window empty again. Guarantees: the seed's functions run unchanged and in the lesson's
    order; the request is the seed's list with same-role neighbours merged."""

    def __init__(self, make: Callable[[Path, Summarize], Seed000 | Seed001], summarizer: Summarizer):
        self.make = make
        self.summarizer = summarizer
        self.seed: Seed000 | Seed001 | None = None
        self.history: list[Message] = []

    def _take(self, state: CompactionState, writer: JobStore) -> Seed000 | Seed001:
        if self.seed is None:
            self.seed = self.make(
                writer.dir, lambda messages: anyio.from_thread.run(self._summarize, state, messages)
            )
        self.history += [copy.deepcopy(e.message) for e in state.window.entries]
        state.window.replace([])
        return self.seed

    async def _summarize(self, state: CompactionState, messages: list[Message]) -> str:
        summary = await self.summarizer.summarize(messages, state.active_request)
        state.summarized(summary)  # the job's spend charges it
        state.record.count("summary")
        return summary.text

    async def prepare(self, state: CompactionState, writer: JobStore) -> list[Message]:
        seed = self._take(state, writer)
        self.history = await anyio.to_thread.run_sync(seed.prepare, self.history, state.active_request)
        return merge_adjacent(self.history)

    async def compact(self, state: CompactionState, writer: JobStore) -> None:
        seed = self._take(state, writer)
        if isinstance(seed, Seed000):
            self.history = await anyio.to_thread.run_sync(
                seed.compact_history, self.history, state.active_request
            )
        else:
            self.history = await anyio.to_thread.run_sync(seed.compact_history, self.history)

    async def reactive(self, state: CompactionState, writer: JobStore) -> bool:
        seed = self._take(state, writer)
        if isinstance(seed, Seed000):
            self.history = await anyio.to_thread.run_sync(
                seed.reactive_compact, self.history, state.active_request
            )
        else:
            self.history = await anyio.to_thread.run_sync(seed.reactive_compact, self.history)
        return True

    def record(self, state: CompactionState, reply: Reply, writer: JobStore) -> None:
        """After a call, as the Compactor does: the token estimate calibrated, what was sent seen."""
        if reply.compacted:  # pragma: no cover - client only
            raise RuntimeError("a seed pipeline never asks for server-side compaction")
        if reply.usage.context_tokens:
            state.calibrate(reply.usage.context_tokens, state.window.total + state.overhead_chars)
        state.window.mark_seen()


# the rows whose cost is taken apart
BREAKDOWN = ("ours", "ours, tuned", "seed 000", "seed 000 + our caching", "mask")


def prefix_tokens(request: dict[str, Any], total: int) -> tuple[list[str], list[int], list[bool]]:
    """Each block boundary of ``request`` in the API's cache order (tools, system, message blocks): the
    hash of the prefix that ends there, its tokens as the emulator counts them (4 characters a token, at
    most the request's ``total``), and whether a ``cache_control`` breakpoint is there."""
    digest = hashlib.sha256(str(request.get("model")).encode())
    hashes, tokens, marks, chars = [], [], [], 0
    for text, cc in cache_segments(request.get("system"), request.get("tools") or [], request["messages"]):
        digest.update(text.encode("utf-8", "surrogatepass") + b"\x00")
        hashes.append(digest.hexdigest())
        chars += len(text)
        tokens.append(min(total, math.ceil(chars / 4)))
        marks.append(bool(cc))
    return hashes, tokens, marks


def call_usages(events: Path) -> list[Usage]:
    """Each model call's own usage (the ``model_call`` lines carry the job's running total)."""
    out, before = [], Usage()
    for line in events.read_text().splitlines():
        event = json.loads(line)
        if event.get("stage") != "model_call" or not event.get("usage"):
            continue
        now = Usage(**event["usage"])
        out.append(Usage(**{k: getattr(now, k) - getattr(before, k) for k in now.to_json()}))
        before = now
    return out


BREAKDOWN_KEYS = (
    "resent",
    "read",
    "fresh",
    "fresh_again",
    "rewritten",
    "write_read",
    "write_rewritten",
    "write_last",
    "write_unread",
)


def cache_breakdown(
    requests: list[dict[str, Any]], usages: list[Usage], min_cacheable: int = 1024
) -> dict[str, int] | None:
    """Where one job's input tokens went, call by call (``requests`` as posted, ``usages`` as billed):

    - ``resent``: tokens of the longest prefix an earlier call sent unchanged (the most a cache could
      read back), ``read`` of all tokens were read; ``fresh``: the rest (new since, or rewritten),
      ``rewritten`` of it before the newest two messages (the reply and its results, new since the
      call before): what a compaction changed in what had been sent; ``fresh_again`` of it a later
      call sent again (worth a cache write; the rest is cheapest as plain input);
    - each cache write, by what became of it, following the cache entry each read came from:
      ``write_read`` (a later call read it back), ``write_unread`` (a later call sent it unchanged
      but read a shorter prefix: no breakpoint near enough), ``write_rewritten`` (no later call sent
      it again: a compaction rewrote it) and ``write_last`` (the job's last call wrote it).

    None when the requests and the calls do not pair up (a retried call)."""
    if len(requests) != len(usages):
        return None
    prefixes = [prefix_tokens(r, u.context_tokens) for r, u in zip(requests, usages, strict=True)]
    ends = [dict(zip(h, t, strict=True)) for h, t, _ in prefixes]  # prefix hash -> its tokens
    owner: dict[str, int] = {}  # cache entry (prefix hash) -> the call that wrote it
    read_end = [0] * len(usages)  # how far into its prefix a later call read a call's entries
    sent: set[str] = set()  # every prefix an earlier call sent
    out = dict.fromkeys(BREAKDOWN_KEYS, 0)
    for i, (usage, (hashes, tokens, marks)) in enumerate(zip(usages, prefixes, strict=True)):
        read = usage.cache_read_input_tokens
        common = max((t for h, t in zip(hashes, tokens, strict=True) if h in sent), default=0)
        sent.update(hashes)
        out["resent"] += common
        out["read"] += read
        out["fresh"] += usage.context_tokens - common
        later = max(
            (max((ends[i].get(h, 0) for h in prefixes[j][0]), default=0) for j in range(i + 1, len(usages))),
            default=0,
        )
        out["fresh_again"] += max(0, later - common)
        # the reply and its results, new since the call before: fresh beyond them was rewritten
        tail = sum(len(blocks(m)) for m in requests[i]["messages"][-2:])
        new = usage.context_tokens - (tokens[-tail - 1] if 0 < tail < len(tokens) else 0)
        out["rewritten"] += max(0, usage.context_tokens - common - new)
        if read:
            source = next(
                (owner[h] for h, t in zip(hashes, tokens, strict=True) if t == read and h in owner), None
            )
            if source is not None:
                read_end[source] = max(read_end[source], read)
        for h, t, mark in zip(hashes, tokens, marks, strict=True):
            if mark and t >= min_cacheable and h not in owner:
                owner[h] = i
    for i, usage in enumerate(usages):
        written = usage.cache_creation_input_tokens
        if not written:
            continue
        start, stop = usage.cache_read_input_tokens, usage.cache_read_input_tokens + written
        sent_again = max(
            (max((ends[i].get(h, 0) for h in prefixes[j][0]), default=0) for j in range(i + 1, len(usages))),
            default=0,
        )
        got = max(0, min(read_end[i], stop) - start)
        again = max(got, min(sent_again, stop) - start)
        out["write_read"] += got
        out["write_unread"] += again - got
        out["write_last" if i == len(usages) - 1 else "write_rewritten"] += written - again
    return out


WORKSPACE_MTIME = 1_700_000_000  # the first file's modification time in every bench workspace


def make_workspace(root: Path, packages: tuple[str, ...]) -> Path:
    """The standard library's ``packages`` copied under ``root/workspace``, each file's modification
    time set by its sorted path (``glob`` lists newest first): the copy's order is the same on every
    machine, where the installed files' own times, which ``copytree`` keeps, are not."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    workspace = root / "workspace"
    for package in packages:
        shutil.copytree(
            stdlib / package,
            workspace / package,
            ignore=shutil.ignore_patterns("__pycache__", "test", "tests"),
        )
    for i, path in enumerate(sorted(p for p in workspace.rglob("*") if p.is_file())):
        os.utime(path, (WORKSPACE_MTIME + i, WORKSPACE_MTIME + i))
    return workspace


def job_name(strategy: str) -> str:
    return f"survey-{re.sub(r'[^a-z0-9]+', '-', strategy)}"


# --- the report's facts, checked against the files -------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Reported:
    """What a report says of one file: its kind, lines, size (in ``unit``) and top-level definitions
    (None where the report does not say)."""

    kind: str
    lines: int | None = None
    size: int | None = None
    unit: str = "chars"
    defs: int | None = None


def ground_truth(workspace: Path) -> dict[str, dict[str, int]]:
    """Each file's facts, computed from the file itself (no tool's output is used): its lines and
    characters as text (UTF-8, errors replaced; a last line without a newline counts), its bytes, and its
    top-level definitions (lines that start ``class``, ``def`` or ``async def``)."""
    out = {}
    for p in workspace.rglob("*"):
        if p.is_file():
            data = p.read_bytes()
            text = data.decode("utf-8", errors="replace")
            out[str(p.relative_to(workspace))] = {
                "lines": text.count("\n") + (1 if text and not text.endswith("\n") else 0),
                "chars": len(text),
                "bytes": len(data),
                "defs": len(OUTLINE.findall(text)),
            }
    return out


MEMORY_ROW = re.compile(r"^\| (.+?) \| (\d+) \| (\d+) (chars|bytes) \| (\d*) \|", re.M)
EVERY_FILE_ROW = re.compile(r"^\| (.+?) \| (\d+) \| (\d*) \| .* \|$", re.M)


def survey_rows(report: str, job_dir: Path) -> dict[str, Reported]:
    """Each file the report names, with what it says of it: the memory survey's report as ``report_rows``
    reads it (its own table, or the facts files it points at) with each row's unit and definitions, else
    the plain survey's (``policy.report``: its "Every file" table, path, lines and definitions; sizes only
    for its largest files, so they are not checked)."""
    rows = report_rows(report, job_dir)
    table = report.split("## Every file", 1)[1] if "## Every file" in report else ""
    if rows:
        out: dict[str, Reported] = {}
        for path, row in rows.items():
            if row[1] == "text":
                bytes_ = len(row) > 6 and row[6] == "bytes"
                defs = row[4] if len(row) > 4 and isinstance(row[4], int) else None
                out[path] = Reported("text", int(row[2]), int(row[3]), "bytes" if bytes_ else "chars", defs)
            elif row[1] in ("binary", "image"):
                out[path] = Reported(str(row[1]), None, int(row[2]), "bytes")
            else:
                out[path] = Reported(str(row[1]))
        for path, lines, size, unit, defs in MEMORY_ROW.findall(table):  # report_rows keeps no unit
            path = path.replace("\\|", "|")
            if path in out:
                out[path] = Reported("text", int(lines), int(size), unit, int(defs) if defs else None)
        return out
    return {
        path: Reported("text", int(lines), None, "chars", int(defs) if defs else None)
        for path, lines, defs in EVERY_FILE_ROW.findall(table)
        if path != "file"
    }


def fact_right(said: Reported, truth: dict[str, int]) -> bool:
    """Whether every fact the report gives of a file is the file's (a fact it does not give is not held
    against it; a file it reports as binary, an image or unreadable is wrong: every file here is text)."""
    if said.kind != "text":
        return False
    return (
        said.lines == truth["lines"]
        and (said.size is None or said.size == truth[said.unit])
        and (said.defs is None or said.defs == truth["defs"])
    )


def correct_rows(rows: dict[str, Reported], truth: dict[str, dict[str, int]]) -> int:
    """Rows whose every fact is the file's."""
    return sum(1 for path, said in rows.items() if path in truth and fact_right(said, truth[path]))


def definition(text: str, window: str, survey: str, summary_model: str) -> str:
    """What a row is, in the words its rerun is checked by (a row defined otherwise is not compared)."""
    return f"{text}; window {window or 'none'}; the {survey} survey; summaries on {summary_model}"


def rerun_note(name: str, rows: list[dict[str, Any]], redefined: tuple[str, ...] = (), **kwargs: Any) -> str:
    """``common.repeat_note`` over the rows the previous saved run defined the same way; the others named.
    A saved row that records no definition (runs before issue 39) is compared by its name, unless the name
    is in ``redefined`` (the same name for another configuration since)."""
    try:
        old = {r["strategy"]: r for r in json.loads((RESULTS / f"{name}.json").read_text()).get("rows", [])}
    except (OSError, ValueError):
        old = {}

    def same_definition(r: dict[str, Any]) -> bool:
        was = old.get(r["strategy"], {})
        if "definition" not in was:
            return r["strategy"] not in redefined
        return bool(was["definition"] == r["definition"])

    same = [r for r in rows if r["strategy"] in old and same_definition(r)]
    other = [r["strategy"] for r in rows if r["strategy"] in old and r not in same]
    note = repeat_note(name, same, **kwargs)
    if other:
        note += (
            " Not compared, defined otherwise in the previous saved run (or defined there without saying "
            f"how): {', '.join(other)}."
        )
    return note


def files_cell(r: dict[str, Any]) -> str:
    """Files named (of them right) / files in the workspace."""
    return f"{r['files_in_report']} ({r['files_correct']}) / {r['files_in_workspace']}"


async def run_strategy(
    name: str, strategy: Strategy, workspace: Path, out: Path, base_url: str
) -> dict[str, Any]:
    limits = Limits(**{"max_turns": MAX_TURNS, "timeout_s": 3_600, **strategy.limits})
    spec = JobSpec(
        name=job_name(name),
        source=Path("bench/cost.py"),
        prompt=PROMPT,
        workspace=workspace,
        model=MODEL,
        system=SYSTEM,
        tools=("read", "glob", "grep"),
        limits=limits,
    )
    http = AnthropicModel(base_url=base_url, api_key="bench-key", max_retries=2)
    model: Any = http if strategy.memory else PlainSurveyModel(http)
    model = model if strategy.cache else NoCacheModel(model)
    summarizer = Summarizer(http, strategy.summary_model, requests_per_minute=10_000)
    compactor: Any = SeedStrategy(strategy.seed, summarizer) if strategy.seed else Compactor(summarizer)
    store = JobStore(out / spec.name)
    await store.open()
    started = time.perf_counter()
    result = await Session(
        spec,
        services=Services(model=model, compactor=compactor, summary_model=strategy.summary_model),
        store=store,
    ).run()
    wall = time.perf_counter() - started
    await http.aclose()
    transcript, _ = read_jsonl(store.dir / "transcript.jsonl")
    final = (store.dir / "final.md").read_text() if (store.dir / "final.md").exists() else ""
    usage, summ = result.usage, result.summarizer_usage
    truth = ground_truth(workspace)
    rows = survey_rows(final, store.dir) if result.status == "succeeded" else {}
    survey = "memory" if strategy.memory else "plain"
    return {
        "strategy": name,
        "definition": definition(strategy.text, strategy.window, survey, strategy.summary_model),
        "window": strategy.window,
        "survey": survey,
        "status": result.status,
        "error": result.error,
        "turns": result.turns,
        "input_tokens": usage.input_tokens,
        "output_tokens": usage.output_tokens,
        "cache_creation_input_tokens": usage.cache_creation_input_tokens,
        "cache_read_input_tokens": usage.cache_read_input_tokens,
        "summary_model": strategy.summary_model,
        "summarizer_tokens": summ.input_tokens
        + summ.output_tokens
        + summ.cache_creation_input_tokens
        + summ.cache_read_input_tokens,
        "cost_usd": round(cost_usd(MODEL, usage) + cost_usd(strategy.summary_model, summ), 4),
        "summarizer_usage": summ.to_json(),
        "rereads": reread_count(transcript),
        "compactions": result.compactions,
        "files_in_report": len(rows),
        "files_correct": correct_rows(rows, truth),
        "files_in_workspace": len(truth),
        "wall_s": round(wall, 1),
    }


async def run_all(
    packages: tuple[str, ...], strategies: list[str], known: dict[str, Strategy] | None = None
) -> list[dict[str, Any]]:
    """Each of ``strategies`` (names in ``known``, :data:`STRATEGIES` by default) on one workspace, one
    after another, each with the emulator reset."""
    known = STRATEGIES if known is None else known
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        workspace = make_workspace(Path(tmp), packages)
        config = EmulatorConfig(context_window_tokens=5_000_000, record_requests=True, max_recorded=100_000)
        with running_emulator(config) as emulator:
            for name in strategies:
                emulator.reset()
                row = await run_strategy(name, known[name], workspace, Path(tmp) / "runs", emulator.base_url)
                if name in BREAKDOWN:  # the job's own requests (a summary request offers no tools)
                    requests = [r for r in emulator.state.snapshot()["recorded_requests"] if r.get("tools")]
                    events = Path(tmp) / "runs" / job_name(name) / "events.jsonl"
                    row["breakdown"] = cache_breakdown(
                        requests, call_usages(events), config.min_cacheable_tokens
                    )
                rows.append(row)
                print(
                    f"  {name}: {row['status']}, {row['turns']} turns, ${row['cost_usd']}, "
                    f"{files_cell(row)} files, {row['rereads']} re-reads, {row['wall_s']} s",
                    flush=True,
                )
    return rows


def finished(row: dict[str, Any]) -> bool:
    return row["status"] == "succeeded"


def status_cell(r: dict[str, Any]) -> str:
    if finished(r):
        return str(r["status"])
    if r["status"] == "max_turns":
        return f"**did not finish** ({r['status']}: stopped at {r['turns']} turns)"
    return f"**{r['status']}**"


def ratio_cell(r: dict[str, Any], ours: dict[str, Any] | None) -> str:
    """The row's cost over ours' (at its window, on its survey); none for a run stopped early (it cost what
    it cost up to then) or when ours did not finish."""
    if not ours or not finished(ours) or not ours["cost_usd"] or not finished(r):
        return "-"
    return f"{r['cost_usd'] / ours['cost_usd']:.2f}x"


def table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| strategy | window | status | turns | input | output | cache write | cache read | summaries "
        "| cost $ | vs ours (same window) | files in report (correct) | re-reads |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['strategy']} | {r.get('window') or 'none'} | {status_cell(r)} | {r['turns']} | "
            f"{r['input_tokens']:,} | {r['output_tokens']:,} | {r['cache_creation_input_tokens']:,} | "
            f"{r['cache_read_input_tokens']:,} | {r['summarizer_tokens']:,} | {r['cost_usd']:.4f} | "
            f"{ratio_cell(r, ours_for(r, rows))} | {files_cell(r)} | {r['rereads']} |"
        )
    return "\n".join(lines)


def parts_usd(row: dict[str, Any]) -> dict[str, float]:
    """A row's cost by source: the job's output, input, cache writes and reads, and its summaries."""

    def usd(**tokens: int) -> float:
        return cost_usd(MODEL, Usage(**tokens))

    return {
        "output": usd(output_tokens=row["output_tokens"]),
        "input": usd(input_tokens=row["input_tokens"]),
        "write": usd(cache_creation_input_tokens=row["cache_creation_input_tokens"]),
        "read": usd(cache_read_input_tokens=row["cache_read_input_tokens"]),
        "summaries": cost_usd(row["summary_model"], Usage(**row.get("summarizer_usage", {}))),
    }


def share(part: float, whole: float) -> str:
    return f"{part / whole:.0%}" if whole else "-"


def breakdown_table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| strategy | output $ | input $ | cache writes $ | writes read back / sent again unread / rewritten "
        "/ last call | cache reads $ | summaries $ | cost $ | tokens sent | resent unchanged | read "
        "from cache | fresh | of which rewritten |",
        "|---|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        b = r.get("breakdown")
        if not b:
            continue
        usd = parts_usd(r)
        written = r["cache_creation_input_tokens"]
        split = (
            " / ".join(
                share(b[k], written) for k in ("write_read", "write_unread", "write_rewritten", "write_last")
            )
            if written
            else "-"
        )
        summaries = sum(r.get("summarizer_usage", {}).values())
        lines.append(
            f"| {r['strategy']} | {usd['output']:.4f} ({share(usd['output'], r['cost_usd'])}) | "
            f"{usd['input']:.4f} | {usd['write']:.4f} ({share(usd['write'], r['cost_usd'])}) | {split} | "
            f"{usd['read']:.4f} | {usd['summaries']:.4f} ({summaries:,} tokens on "
            f"{r['summary_model']}) | {r['cost_usd']:.4f} | {b['resent'] + b['fresh']:,} | {b['resent']:,} | "
            f"{b['read']:,} | {b['fresh']:,} | {b['rewritten']:,} |"
        )
    return "\n".join(lines)


def floor_usd(row: dict[str, Any]) -> float:
    """What a row would cost with its own requests and perfect caching: every fresh token a later call
    sends again written once, the other fresh tokens sent as plain input, every resent token read
    back; output and summaries as they are."""
    b = row["breakdown"]
    usd = parts_usd(row)
    return (
        usd["output"]
        + usd["summaries"]
        + cost_usd(
            MODEL,
            Usage(
                input_tokens=b["fresh"] - b["fresh_again"],
                cache_creation_input_tokens=b["fresh_again"],
                cache_read_input_tokens=b["resent"],
            ),
        )
    )


def breakdown_text(rows: list[dict[str, Any]]) -> str:
    """Where ours' cost goes, against seed 000 and mask (computed from the rows, never typed in)."""
    by = {r["strategy"]: r for r in rows if r.get("breakdown")}
    ours = by.get("ours")
    if ours is None:
        return ""
    b, usd = ours["breakdown"], parts_usd(ours)
    written = ours["cache_creation_input_tokens"] or 1
    counts = {str(k): v for k, v in (ours.get("compactions") or {}).items()}
    text = [
        f"Where ours' ${ours['cost_usd']:.4f} goes: cache writes ${usd['write']:.4f} "
        f"({share(usd['write'], ours['cost_usd'])}), output ${usd['output']:.4f} "
        f"({share(usd['output'], ours['cost_usd'])}: {ours['output_tokens']:,} tokens of the policy's notes, "
        f"tool calls and the final report, which any model writes too), summaries ${usd['summaries']:.4f} "
        f"({counts.get('compact_history', 0)} history compactions on {ours['summary_model']}, "
        f"{sum(ours.get('summarizer_usage', {}).values()):,} tokens), cache reads ${usd['read']:.4f}, input "
        f"${usd['input']:.4f}. Of the {ours['cache_creation_input_tokens']:,} tokens written to the cache, "
        f"{share(b['write_read'], written)} were read back by a later call, "
        f"{share(b['write_rewritten'], written)} were rewritten before any call read them (a compaction "
        "changed the prefix they sat in: micro_compact turning a seen result into a placeholder, or a "
        "summary replacing the history, makes everything after it new again), "
        f"{share(b['write_unread'], written)} were sent again unchanged but not read (no breakpoint near "
        f"enough), {share(b['write_last'], written)} were the last call's. Its calls sent "
        f"{b['resent'] + b['fresh']:,} tokens: {b['resent']:,} of a prefix an earlier call had sent "
        f"unchanged ({b['read']:,} read from the cache), {b['fresh']:,} fresh, of which "
        f"{b['rewritten']:,} were rewritten by a compaction and the rest new (each call's reply and its "
        "results; the API bills every fresh token before the last breakpoint as a write). Its input "
        f"(${usd['input']:.4f}, {ours['input_tokens']:,} tokens) is "
        + (
            "what comes after the settled message on calls whose next call surely rewrites it: sent "
            "uncached, since a write would cost 1.25x and never be read."
            if ours["input_tokens"] > 0.05 * (b["resent"] + b["fresh"])
            else "what follows the newest breakpoint: the client pipeline writes every call's newest "
            "message, since whether the next call rewrites it depends on results not yet known."
        ),
    ]
    seed = by.get("seed 000")
    if seed:
        sb, su = seed["breakdown"], parts_usd(seed)
        text.append(
            f"seed 000 sends {sb['resent'] + sb['fresh']:,} tokens uncached (${su['input']:.4f}), "
            f"{sb['resent']:,} of them resent unchanged, and its summaries run on {seed['summary_model']} "
            f"(${su['summaries']:.4f}); output ${su['output']:.4f} ({seed['output_tokens']:,} tokens)."
        )
    mask = by.get("mask")
    if mask:
        mb = mask["breakdown"]
        text.append(
            f"mask rewrites the result that leaves the newest three on every call, so what follows it goes "
            f"uncached ({mask['input_tokens']:,} input tokens, of {mb['resent'] + mb['fresh']:,} sent); "
            f"{share(mb['write_rewritten'], mask['cache_creation_input_tokens'] or 1)} of its "
            f"{mask['cache_creation_input_tokens']:,} written tokens are never read back."
        )
    text.append(
        f"With its own requests and perfect caching (every fresh token a later call sends again written "
        f"once, the rest sent as plain input, every resent token read back) ours would cost "
        f"${floor_usd(ours):.4f}; its output alone is ${usd['output']:.4f}."
    )
    return " ".join(text)


def strategies_text(names: list[str], known: dict[str, Strategy] | None = None) -> str:
    known = STRATEGIES if known is None else known
    return "Strategies: " + "; ".join(f"`{name}` = {known[name].text}" for name in names) + "."


def complete(r: dict[str, Any]) -> bool:
    """Finished, with every file of the workspace in the report and every fact of it right."""
    return finished(r) and r["files_correct"] == r["files_in_workspace"]


def findings(rows: list[dict[str, Any]]) -> str:
    """The targets, checked against the table (computed, never typed in), each row against ours at its
    window."""
    by = {r["strategy"]: r for r in rows}
    ours = by["ours"]

    def mark(ok: bool) -> str:
        return "met" if ok else "MISSED"

    parts = []
    for name in ("none", *ANCHORS):
        r = by.get(name)
        mine = ours_for(r, rows) if r else None
        if r is None or mine is None:
            continue
        against = "" if mine is ours else f" (against `{mine['strategy']}`, at its {r['window']})"
        if not finished(r):
            parts.append(
                f"`{name}` did not finish (excluded from the cost target; it stopped at {r['turns']} "
                f"turns with {r['files_correct']} of {r['files_in_workspace']} files right)"
            )
            continue
        if not finished(mine):
            parts.append(f"`{mine['strategy']}` did not finish, so no ratio with `{name}`")
            continue
        ratio = r["cost_usd"] / mine["cost_usd"]
        wrong = (
            ""
            if complete(r)
            else f"; its report right for {r['files_correct']} of {r['files_in_workspace']} files"
        )
        parts.append(
            f"{ratio:.2f}x cheaper than `{name}`{against} ({mark(ratio >= 2)}"
            + ("" if ratio >= 2 else f", short by {2 - ratio:.2f}x")
            + wrong
            + ")"
        )
    fewest = min(r["rereads"] for r in rows if finished(r))
    ablation = by.get("seed 000 + our caching"), by.get("seed 000")
    extra = ""
    if ablation[0] and ablation[1]:
        same = ablation[0]["turns"] == ablation[1]["turns"]
        change = 1 - ablation[0]["cost_usd"] / ablation[1]["cost_usd"]
        extra = (
            f" Caching alone takes revision 000 from ${ablation[1]['cost_usd']:.2f} to "
            f"${ablation[0]['cost_usd']:.2f} ({abs(change):.0%} {'less' if change >= 0 else 'more'}"
            + (f", over the same {ablation[0]['turns']} turns" if same else "")
            + ")"
            + ("" if finished(ablation[0]) else ", and does not make it finish")
            + "."
        )
    return (
        "Targets: ours >= 2x cheaper than no compaction and than every anchor strategy that completes, with "
        "a complete report (every file, every fact right) and no more re-reads. Measured: ours is "
        + "; ".join(parts)
        + ". "
        f"Report: {ours['files_correct']} of {ours['files_in_workspace']} files right "
        f"({mark(complete(ours))}). "
        f"Re-reads: ours {ours['rereads']}, fewest of any strategy that finished {fewest} "
        f"({mark(ours['rereads'] <= fewest)})." + extra + bound_text(by)
    )


def bound_text(by: dict[str, dict[str, Any]]) -> str:
    """What bounds ours against seed 000: the parts of its cost no compaction or breakpoint lowers."""
    ours, seed = by.get("ours"), by.get("seed 000")
    if not ours or not seed or not ours.get("breakdown") or not finished(seed):
        return ""
    b, usd = ours["breakdown"], parts_usd(ours)
    new = b["fresh"] - b["rewritten"]
    floor = (
        usd["output"]
        + usd["summaries"]
        + cost_usd(
            MODEL,
            Usage(cache_creation_input_tokens=new, cache_read_input_tokens=b["resent"] + b["rewritten"]),
        )
    )
    goal = seed["cost_usd"] / 2
    return (
        f" What bounds it: 2x cheaper than `seed 000` is ${goal:.4f}; ours' output alone is "
        f"${usd['output']:.4f} ({share(usd['output'], goal)} of that), and with its requests as they are "
        f"(the same replies and results each call) but nothing ever rewritten and every resent token read "
        f"from the cache (each call's {new:,} new tokens in all written once, its summaries as today) it "
        f"would cost ${floor:.4f}, {seed['cost_usd'] / floor:.2f}x cheaper than `seed 000`; with perfect "
        f"caching of the requests it makes now, ${floor_usd(ours):.4f} "
        f"({seed['cost_usd'] / floor_usd(ours):.2f}x)."
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--only", action="append", choices=sorted(STRATEGIES))
    args = parser.parse_args()
    packages = SMOKE_PACKAGES if args.smoke else FULL_PACKAGES
    strategies = args.only or list(STRATEGIES)
    print(load_note(), flush=True)
    rows = anyio.run(run_all, packages, strategies)
    print(table(rows))
    print(breakdown_table(rows))
    print(breakdown_text(rows))
    if not args.smoke and not args.only:
        print(findings(rows))
        # before this run's results replace the last; `ours` was the tuned row before issue 39
        rerun = rerun_note("cost", rows, redefined=("ours",))
        print(rerun)
        write_result(
            "cost",
            {
                "packages": packages,
                "model": MODEL,
                "summary_model": SUMMARY_MODEL,
                "max_turns": MAX_TURNS,
                "rows": rows,
            },
        )
        replace_section(
            "cost",
            (
                "## 3. Cost of a long session\n\n"
                f"One survey job over {', '.join(packages)} (copied from the standard library), the offline "
                f"policy served by the emulator to the real SDK; the job priced as {MODEL}, every row's "
                f"summaries too (the job's model: the seeds' and the peers' choice, and the only one "
                "server-side compaction has; the runner's own default summary model is claude-haiku-5-5); "
                "cache writes 1.25x input, cache reads 0.1x. Every row is the runner's session, so every "
                "row offers the `memory` tool (every runner job has it) and the policy takes its memory "
                f"survey. Window: every row runs at {WINDOW} (the 50,000 characters of the runner's "
                "default `context_char_limit` and of the seeds, as the emulator counts them, 4 characters "
                "a token), except the rows that cannot: server-side compaction triggers at no fewer than "
                f"50,000 tokens, so `server` runs at {WIDE_WINDOW}, with `ours @ 50k tokens` and `seed 001 "
                "@ 200k chars` beside it; `none` and `mask` have no window. `vs ours`: the row's cost over "
                f"ours' at the same window (`ours` at {WINDOW}, `ours @ 50k tokens` at {WIDE_WINDOW}). "
                f"A strategy still running after {MAX_TURNS} turns is stopped and reported as not "
                "finishing. Files in report (correct): files the final report names (of them, files "
                "whose every fact in the report, lines, size and top-level definitions, is the file's, "
                "computed from the files themselves) / files in the workspace. Re-reads: files read "
                "again because their content was compacted away. The seed rows run "
                "`bench/seeds_pipeline.py` (each lesson's functions as written) from the runner's "
                "session; the offline policy takes each revision's placeholder as a removed result, as "
                "a model would. "
                + DEPENDS
                + "\n\n"
                + strategies_text(strategies)
                + "\n\n"
                + table(rows)
                + "\n\n"
                + "Where the cost goes (cache writes by what became of them, following each read to the "
                "call that wrote it; tokens sent split into a prefix an earlier call sent unchanged and the "
                "rest):\n\n"
                + breakdown_table(rows)
                + "\n\n"
                + breakdown_text(rows)
                + "\n\n"
                + findings(rows)
                + "\n\n"
                + rerun
            ),
            "python bench/cost.py",
        )


if __name__ == "__main__":
    main()
