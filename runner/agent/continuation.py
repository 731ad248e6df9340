"""Where a job that did not finish continues: its transcript cut back to the last complete turn.

Used by ``runner resume`` and by an executor whose worker died. The transcript is cut in whole lines
(a paused turn and its continuation are two lines and one message of the history), so the line
numbers ``context.jsonl`` refers to stay valid.

Guarantees:
- A half-written last line is dropped and reported; a transcript that does not start with the job's
  prompt is set aside (``transcript.unusable.jsonl``) and the job starts over; nothing is read or
  written outside ``job_dir``.
- Spend is never lost nor counted twice: every ``model_call`` line of ``events.jsonl`` carries the
  job's whole spend so far (:class:`~runner.rundir.docs.ModelCallEvent`), and the job continues from the
  line of its last kept reply (:func:`read_ledger`). What came after that reply (compactions, their
  summaries, calls whose replies were cut) is done again, so the cut takes it back too: its lines
  in ``events.jsonl`` (other kinds, such as ``worker_lost``, stay), its ``context.jsonl`` records
  and its summary files. A run written before these lines (no ``lines`` in its newest model call)
  is cut in its transcript only, and its spend comes from ``metrics.json``.
- A memory folder of any depth is compared and replaced (:mod:`runner.rundir.trees`: no recursion).
"""

from __future__ import annotations

import functools
import re
import shutil
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio

from ..messages import Message, merge_adjacent, request_problems, tool_results, tool_uses
from ..models.base import Reply
from ..rundir.docs import (
    BASELINE_MEMORIES,
    BATCH_FIELDS,
    CONTEXT,
    EVENTS,
    SUMMARIES,
    TRANSCRIPT,
    UNUSABLE_TRANSCRIPT,
    CompactionEvent,
    JobMetrics,
    LastCallEvent,
    ModelCallEvent,
    RetriesEvent,
    SummaryFailedEvent,
    event_lines,
    parse_event,
)
from ..rundir.store import dumps, read_jsonl, write_atomic_sync
from ..rundir.trees import remove_tree, walk
from ..tools.memory import MemoryTool
from ..tools.memory_files import MEMORY_DIR, WRITES

REDONE = (
    CompactionEvent,
    ModelCallEvent,
    RetriesEvent,
    LastCallEvent,
    SummaryFailedEvent,
)  # done again after a cut
_SUMMARY = re.compile(rf"^{SUMMARIES}/(\d+)\.md$")


def last_complete_turn(messages: list[Message]) -> list[Message]:
    """The longest prefix that ends after a complete turn: never on an assistant message whose tool
    calls are unanswered, never on a final answer the job did not get to record."""
    end = len(messages)
    while end > 0 and messages[end - 1].get("role") == "assistant":
        end -= 1
    prefix = messages[:end]
    while prefix and request_problems(prefix):
        prefix = prefix[:-1]
    return prefix


def raw_lines(raw: list[Message], merged: int) -> int:
    """How many transcript lines make up the first ``merged`` messages of ``merge_adjacent(raw)``."""
    groups = 0
    for i, message in enumerate(raw):
        if i == 0 or message.get("role") != raw[i - 1].get("role"):
            groups += 1
            if groups > merged:
                return i
    return len(raw)


@dataclass
class Continuation:
    """``history``: the transcript lines the job continues from (None: it starts over)."""

    history: list[Message] | None
    lines_before: int = 0  # transcript lines on disk before the cut
    warnings: list[str] = field(default_factory=list)
    replies_before: int = 0  # assistant lines on disk before the cut

    @property
    def turns_rerun(self) -> int:
        """Model replies on disk that the cut drops: the job makes those calls again."""
        return self.replies_before - sum(m.get("role") == "assistant" for m in self.history or [])

    @property
    def dropped(self) -> int:
        return self.lines_before - len(self.history or [])


def cut_transcript(job_dir: Path, prompt: str) -> Continuation:
    """Cut ``job_dir``'s transcript back to its last complete turn (rewritten so on disk)."""
    transcript, warnings = read_jsonl(job_dir / TRANSCRIPT)
    raw = [m for m in transcript if isinstance(m, dict)]
    replies = sum(m.get("role") == "assistant" for m in raw)
    history = raw[: raw_lines(raw, len(last_complete_turn(merge_adjacent(raw))))]
    if not history or history[0].get("content") != prompt:
        if transcript:
            (job_dir / TRANSCRIPT).replace(job_dir / UNUSABLE_TRANSCRIPT)
        return Continuation(None, len(transcript), warnings, replies)
    if len(history) != len(transcript) or warnings:
        write_atomic_sync(job_dir / TRANSCRIPT, "".join(dumps(m) + "\n" for m in history))
    cut_spend(job_dir, len(history))
    return Continuation(history, len(transcript), warnings, replies)


@dataclass
class Ledger:
    """What a job had spent when the reply it continues after was made, and the lines behind it."""

    last: ModelCallEvent | None  # the model_call line of its last kept reply (None: no call kept)
    calls: list[ModelCallEvent] = field(default_factory=list)  # every kept model_call line, in order
    # kept compaction lines, each with the transcript lines before the last reply made before it
    compactions: list[tuple[CompactionEvent, int | None]] = field(default_factory=list)


def _parsed(events: list[Any]) -> list[Any]:
    return [parse_event(e)[0] if isinstance(e, dict) else None for e in events]


def _last_kept(parsed: list[Any], lines: int) -> int | None:
    """Index of the model_call line of the last reply among the first ``lines`` transcript lines; -1
    when no call is kept; None when an older runner wrote the newest lines (no ledger to start from)."""
    for i in range(len(parsed) - 1, -1, -1):
        event = parsed[i]
        if isinstance(event, ModelCallEvent):
            if not event.ledger:
                return None
            if event.lines is not None and event.lines < lines:
                return i
    return -1


def model_call_line(record: JobMetrics, *, chars: int, reply: Reply, lines: int) -> dict[str, Any]:
    """The ``events.jsonl`` line of one answered model call, which :func:`read_ledger` reads back: the
    context it carried (characters of the messages, and tokens as the reply's usage counted them),
    and the job's whole spend so far (its cost, usage, summaries' usage, compaction counts, persisted
    bytes, wall time); ``lines``: the transcript lines before the call's reply."""
    doc = record.document()
    return {
        **ModelCallEvent(
            turn=record.turns,
            chars=chars,
            tokens=reply.usage.context_tokens,
            estimated=reply.estimated,
            cost_usd=doc["cost_usd"],
            batch=getattr(reply, "batch", None),  # models/batches.py BatchReply
        ).line(),
        "lines": lines,
        **{
            k: doc[k]
            for k in ("usage", "summarizer_usage", "compactions", "persisted_bytes", "wall_s", *BATCH_FIELDS)
            if k in doc
        },
    }


def read_ledger(job_dir: Path, lines: int) -> Ledger | None:
    """The job's spend when it continues from the first ``lines`` transcript lines, from the newest
    model_call line whose reply is among them; None for a run written before such lines."""
    events, _ = read_jsonl(job_dir / EVENTS)
    parsed = _parsed(events)
    end = _last_kept(parsed, lines)
    if end is None:
        return None
    ledger = Ledger(parsed[end] if end >= 0 else None)
    before: int | None = None
    for event in parsed[: end + 1]:
        if isinstance(event, ModelCallEvent):
            ledger.calls.append(event)
            before = event.lines
        elif isinstance(event, CompactionEvent):
            ledger.compactions.append((event, before))
    return ledger


def cut_spend(job_dir: Path, lines: int) -> None:
    """Take back what came after the last reply among the first ``lines`` transcript lines: its
    ``events.jsonl`` lines of work done again, its ``context.jsonl`` records (those naming ``lines``
    or more messages) and the summary files no kept line names. Nothing for an older run's files."""
    events, _ = read_jsonl(job_dir / EVENTS)
    parsed = _parsed(events)
    end = _last_kept(parsed, lines)
    if end is None:
        return
    kept = events[: end + 1] + [
        e for e, p in zip(events[end + 1 :], parsed[end + 1 :], strict=True) if not isinstance(p, REDONE)
    ]
    if len(kept) != len(events):
        write_atomic_sync(job_dir / EVENTS, event_lines(kept))
    records, _ = read_jsonl(job_dir / CONTEXT)
    fitting = [r for r in records if isinstance(r, dict) and isinstance(r.get("n"), int) and r["n"] < lines]
    if len(fitting) != len(records):
        write_atomic_sync(job_dir / CONTEXT, "".join(dumps(r) + "\n" for r in fitting))
    named = [
        int(m.group(1))
        for p in parsed[: end + 1]
        if isinstance(p, CompactionEvent)
        for path in p.paths
        if (m := _SUMMARY.match(path))
    ]
    newest = max(named, default=0)
    try:
        written = list((job_dir / SUMMARIES).iterdir())
    except OSError:
        return
    for path in written:  # summaries of compactions that are done again (they get the same names)
        m = re.fullmatch(r"(\d+)\.md", path.name)
        if m and int(m.group(1)) > newest and path.is_file() and not path.is_symlink():
            path.unlink()


def _tree(root: Path) -> dict[str, bytes]:
    """Every regular file under ``root`` (relative path -> bytes); {} when there is none."""
    out: dict[str, bytes] = {}
    if not root.is_dir() or root.is_symlink():
        return out
    for path, st in walk(root):  # any depth: no recursion
        if stat.S_ISREG(st.st_mode):
            out[str(path.relative_to(root))] = path.read_bytes()
    return out


def _swap_in(job_dir: Path, rebuilt: Path) -> None:
    live, old = job_dir / MEMORY_DIR, job_dir / f".{MEMORY_DIR}.old"
    remove_tree(old, ignore_errors=True)
    if live.exists() or live.is_symlink():
        live.rename(old)
    (rebuilt / MEMORY_DIR).rename(live) if (rebuilt / MEMORY_DIR).exists() else live.mkdir()
    remove_tree(old, ignore_errors=True)


async def rebuild_memory(job_dir: Path, history: list[Message]) -> bool:
    """Bring the job's ``memories/`` back to what its kept history made of it: a call whose reply the
    cut dropped may have written there, and the job makes that call again. The kept history's memory
    writes are replayed, in order, into a fresh folder (holding the memory the job started with, an
    incremental job's ``BASELINE_MEMORIES``, or nothing); when each gives the result on record, that
    folder replaces ``memories/`` (if it differs). Otherwise (the folder was not made by these calls
    alone) ``memories/`` stays as it is. True when it was replaced."""
    writes: list[tuple[dict[str, Any], dict[str, Any]]] = []
    for i, message in enumerate(history[:-1]):
        results = {b.get("tool_use_id"): b for b in tool_results(history[i + 1])}
        for call in tool_uses(message):
            args = call.get("input")
            got = results.get(call.get("id"))
            if (
                call.get("name") == "memory"
                and isinstance(args, dict)
                and args.get("command") in WRITES
                and got is not None
                and not got.get("is_error")
            ):
                writes.append((call, got))
    scratch = job_dir / f".{MEMORY_DIR}.rebuild"
    await anyio.to_thread.run_sync(functools.partial(remove_tree, scratch, ignore_errors=True))
    try:
        await anyio.to_thread.run_sync(scratch.mkdir)
        start = job_dir / BASELINE_MEMORIES
        if await anyio.Path(start).is_dir() and not await anyio.Path(start).is_symlink():
            await anyio.to_thread.run_sync(
                functools.partial(shutil.copytree, start, scratch / MEMORY_DIR, symlinks=True)
            )
        tool = MemoryTool(str(scratch))
        for call, got in writes:
            again = await tool.run(str(call.get("id", "")), call["input"])
            if again.get("is_error") or again.get("content") != got.get("content"):
                return False
        if await anyio.to_thread.run_sync(_tree, scratch / MEMORY_DIR) == await anyio.to_thread.run_sync(
            _tree, job_dir / MEMORY_DIR
        ):
            return False
        await anyio.to_thread.run_sync(_swap_in, job_dir, scratch)
        return True
    finally:
        await anyio.to_thread.run_sync(functools.partial(remove_tree, scratch, ignore_errors=True))
