"""The compaction stages: pure functions from a list of entries to a list of entries.

No stage mutates its input or touches the disk. A stage that removes content from context returns
the outputs to save as :class:`Persist` requests; the Compactor writes them *before* it adopts the
new list, so a placeholder never points at a file that does not exist. Every stage keeps a request
API-valid: no ``tool_use`` is separated from its ``tool_result``, roles keep alternating.

``name_for(tool_use_id, content)`` gives the path (relative to the job directory) an output is saved
under; it is deterministic, so calling a stage twice gives the same answer.

:class:`Stage` names every compaction stage as ``events.jsonl`` and ``compactions`` spell it, with
its short label (tables, the viewer) and its chart colour.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from ..messages import Message, blocks, has_tool_use, is_tool_result_message, user_text, with_content
from ..protocol import (
    SNIP_DIGEST_CHARS,
    archived_count,
    archived_marker,
    archived_span,
    is_placeholder,
    persisted_marker,
    placeholder,
    saved_path,
    summary_text,
    transcript_range,
)
from ..rundir.docs import TRANSCRIPT
from .digest import digest, marker_texts
from .window import MICRO_MIN_CHARS, Entry


class Stage(StrEnum):
    """A compaction stage: its name on disk (a str, so JSON is unchanged), ``label`` and ``color``."""

    label: str
    color: str

    def __new__(cls, value: str, label: str, color: str) -> Stage:
        member = str.__new__(cls, value)
        member._value_ = value
        member.label = label
        member.color = color
        return member

    @classmethod
    def named(cls, name: str) -> Stage | None:
        """The stage called ``name``, or None (another kind of event, a damaged line)."""
        return next((stage for stage in cls if stage == name), None)

    TOOL_RESULT_BUDGET = "tool_result_budget", "budget", "#8c564b"
    SNIP = "snip", "snip", "#7f7f7f"
    MICRO_COMPACT = "micro_compact", "micro", "#17becf"
    FIT_TOOL_RESULTS = "fit_tool_results", "fit", "#bcbd22"
    COMPACT_HISTORY = "compact_history", "history", "#d62728"
    REACTIVE_COMPACT = "reactive_compact", "reactive", "#e377c2"
    COMPACT_TOOL = "compact_tool", "tool", "#9467bd"
    SERVER_COMPACTION = "server_compaction", "server", "#ff7f0e"
    # the API's context editing cleared tool results before the model read the request (the window
    # the runner keeps is unchanged)
    TOOL_USE_CLEARING = "tool_use_clearing", "cleared", "#aec7e8"
    OBSERVATION_MASK = "observation_mask", "mask", "#2ca02c"


#: the stages that replace the history with one summary message
SUMMARY_STAGES = frozenset({Stage.COMPACT_HISTORY, Stage.COMPACT_TOOL, Stage.REACTIVE_COMPACT})

NameFor = Callable[[str, str], str]
SavedFor = Callable[[str, str], bool]  # (tool_use_id, path): was that id's output saved at path by us?


@dataclass(frozen=True)
class Persist:
    path: str
    content: str
    tool_use_id: str = ""  # whose output it is (the repeat guard names the file when the call is repeated)


@dataclass
class Outcome:
    """A stage's result: the new entries and the outputs to save first."""

    entries: list[Entry]
    persist: list[Persist] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)


def output_text(content: Any) -> str | None:
    """The exact text a tool_result's content is saved as, or None if it cannot be saved as text.

    A string is saved as is; a list holding one text block as that block's text; a list of several
    text blocks as its JSON. Content with images or documents stays in context.
    """
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(isinstance(b, dict) and b.get("type") == "text" for b in content):
        if len(content) == 1:
            return str(content[0].get("text", ""))
        return json.dumps(content, ensure_ascii=False)
    return None


def size_of(content: Any) -> int:
    text = output_text(content)
    return len(text) if text is not None else len(json.dumps(content, ensure_ascii=False))


def _replace_results(entry: Entry, new: dict[int, str]) -> Entry:
    content = list(blocks(entry.message))
    for index, text in new.items():
        content[index] = {**content[index], "content": text}
    return entry.replaced(with_content(entry.message, content))


def _result_slots(entry: Entry) -> list[tuple[int, dict[str, Any]]]:
    if entry.message.get("role") != "user" or isinstance(entry.message.get("content"), str):
        return []
    return [
        (i, b)
        for i, b in enumerate(entry.message["content"])
        if isinstance(b, dict) and b.get("type") == "tool_result"
    ]


def _recall_ids(entries: list[Entry]) -> set[str]:
    """The ids of ``recall`` calls and ``memory`` views: their results are read-backs (of saved
    outputs, of memory files, one page each), never saved again (persisting one would hand the model
    a preview of what it asked to read in full)."""
    return {
        str(b.get("id"))
        for entry in entries
        if entry.message.get("role") == "assistant"
        for b in blocks(entry.message)
        if b.get("type") == "tool_use"
        and (
            b.get("name") == "recall"
            or b.get("name") == "memory"
            and isinstance(b.get("input"), dict)
            and b["input"].get("command") == "view"
        )
    }


def _marker(
    block: dict[str, Any], min_chars: int, preview: int, *, name_for: NameFor, out: Outcome
) -> tuple[str, int] | None:
    """The persisted-output marker for ``block`` and the chars it saves, its output queued in ``out``;
    None when the result is not text, not over ``min_chars``, already a marker, or would not shrink."""
    text = output_text(block.get("content"))
    if text is None or len(text) <= min_chars or saved_path(text):
        return None
    path = name_for(str(block.get("tool_use_id", "")), text)
    marker = persisted_marker(path, text, preview)
    if len(marker) >= len(text):  # a preview plus the marker's lines would not be smaller
        return None
    out.persist.append(Persist(path, text, str(block.get("tool_use_id", ""))))
    out.paths.append(path)
    return marker, len(text) - len(marker)


def _persist_slots(
    entry: Entry,
    ranked: list[tuple[int, dict[str, Any]]],
    over: Callable[[int], bool],
    *,
    min_chars: int,
    preview: int,
    name_for: NameFor,
    out: Outcome,
) -> tuple[Entry, int]:
    """Persist results of ``entry`` in ``ranked`` order while ``over(saved_so_far)``."""
    new: dict[int, str] = {}
    saved = 0
    for index, block in ranked:
        if not over(saved):
            break
        made = _marker(block, min_chars, preview, name_for=name_for, out=out)
        if made is not None:
            new[index] = made[0]
            saved += made[1]
    return (_replace_results(entry, new), saved) if new else (entry, 0)


def tool_result_budget(
    entries: list[Entry],
    batch_char_limit: int,
    large_result_chars: int,
    *,
    preview_chars: int,
    name_for: NameFor,
) -> Outcome | None:
    """1. The newest batch of tool results is over ``batch_char_limit``: persist its largest results
    over ``large_result_chars``, each replaced by a marker with a preview, until the batch fits."""
    if not entries:
        return None
    last = entries[-1]
    slots = _result_slots(last)
    total = sum(size_of(b.get("content")) for _, b in slots)
    if total <= batch_char_limit:
        return None
    recalls = _recall_ids(entries[-2:])
    ranked = sorted(
        (s for s in slots if str(s[1].get("tool_use_id")) not in recalls),
        key=lambda s: size_of(s[1].get("content")),
        reverse=True,
    )
    out = Outcome(entries)
    entry, _ = _persist_slots(
        last,
        ranked,
        lambda saved: total - saved > batch_char_limit,
        min_chars=large_result_chars,
        preview=preview_chars,
        name_for=name_for,
        out=out,
    )
    if entry is last:
        return None
    out.entries = [*entries[:-1], entry]
    return out


def _merge(a: Entry, b: Entry) -> Entry:
    """Two neighbours with one role as one entry (text after tool_results, as the API requires)."""
    both = blocks(a.message) + blocks(b.message)
    results = [block for block in both if block.get("type") == "tool_result"]
    others = [block for block in both if block.get("type") != "tool_result"]
    merged = with_content(a.message, results + others)
    return Entry.of(merged, a.seq if a.seq is not None else b.seq, a.seen and b.seen)


def join(*parts: list[Entry]) -> list[Entry]:
    """Concatenate runs of entries, merging same-role neighbours at the joins only."""
    out: list[Entry] = []
    for part in parts:
        if not part:
            continue
        if out and out[-1].message["role"] == part[0].message["role"]:
            out[-1] = _merge(out[-1], part[0])
            out.extend(part[1:])
        else:
            out.extend(part)
    return out


def safe_tail_start(entries: list[Entry], start: int) -> int:
    """Move a cut point back so the kept tail never begins with an orphaned tool_result."""
    while (
        0 < start < len(entries)
        and is_tool_result_message(entries[start].message)
        and has_tool_use(entries[start - 1].message)
    ):
        start -= 1
    return start


def archived_range(archived: list[Entry]) -> str:
    """The transcript range of ``archived``, the ranges earlier snip markers among them name included."""
    seqs = [e.seq for e in archived if e.seq is not None]
    for e in archived:
        for text in marker_texts(e.message):
            seqs += list(archived_span(text) or ())
    return transcript_range(min(seqs), max(seqs)) if seqs else TRANSCRIPT


def snip(
    entries: list[Entry],
    trigger: int,
    head: int,
    *,
    target: int,
    name_for: NameFor | None = None,
    saved_for: SavedFor | None = None,
    digest_chars: int = SNIP_DIGEST_CHARS,
) -> Outcome | None:
    """2. Over ``trigger`` messages: keep the first ``head`` and the newest messages, ``target`` in all,
    with one marker in the middle naming the archived transcript range and carrying a digest of what
    those messages did (:mod:`.digest`, at most ``digest_chars``). Pair-safe at both edges.

    With ``name_for``, each archived tool result over :data:`MICRO_MIN_CHARS` that is not saved yet
    is saved on its own (as micro_compact saves one), so the digest names the file that holds it: a
    fact of one result is recalled from that result, not from the whole archived range."""
    if len(entries) <= trigger:
        return None
    head_end = min(head, len(entries))
    if has_tool_use(entries[head_end - 1].message):
        while head_end < len(entries) and is_tool_result_message(entries[head_end].message):
            head_end += 1
    tail_start = safe_tail_start(entries, max(head_end, len(entries) - (target - head_end - 1)))
    if tail_start <= head_end:
        return None
    archived = entries[head_end:tail_start]
    # an earlier marker merged into the head's last message: this marker takes its place and carries it
    head_entries, earlier = _without_markers(entries[:head_end])
    carried = [Entry.of(user_text(t)) for t in earlier]
    count = len(archived) + sum(archived_count(t) for t in earlier)
    out = Outcome([])
    described = _saved_each(archived, name_for, saved_for, out=out) if name_for is not None else archived
    text = archived_marker(
        count,
        archived_range(carried + archived),
        digest([e.message for e in carried + described], digest_chars),
    )
    marker = Entry.of(user_text(text), seen=True)
    out.entries = join(head_entries, [marker], entries[tail_start:])
    return out


def _saved_each(
    archived: list[Entry], name_for: NameFor, saved_for: SavedFor | None, *, out: Outcome
) -> list[Entry]:
    """``archived`` with each result over :data:`MICRO_MIN_CHARS` as the placeholder of its saved
    file (saved now, queued in ``out``, unless it is one already); read-backs are left as they are."""
    recalls = _recall_ids(archived)
    described = []
    for entry in archived:
        new: dict[int, str] = {}
        for index, block in _result_slots(entry):
            tool_use_id = str(block.get("tool_use_id", ""))
            text = output_text(block.get("content"))
            content = block.get("content")
            if (
                text is None
                or len(text) <= MICRO_MIN_CHARS
                or tool_use_id in recalls
                or (isinstance(content, str) and is_placeholder(content))
            ):
                continue
            path = saved_path(text)
            if path is not None and saved_for is not None and saved_for(tool_use_id, path):
                continue  # a marker of ours already names its file
            path = name_for(tool_use_id, text)
            out.persist.append(Persist(path, text, tool_use_id))
            out.paths.append(path)
            new[index] = placeholder(path)
        described.append(_replace_results(entry, new) if new else entry)
    return described


def _without_markers(entries: list[Entry]) -> tuple[list[Entry], list[str]]:
    """``entries`` with the snip markers merged into them taken out, and those markers' texts."""
    out, markers = [], []
    for entry in entries:
        found = marker_texts(entry.message)
        if not found:
            out.append(entry)
            continue
        markers += found
        kept = [b for b in blocks(entry.message) if not (b.get("type") == "text" and b.get("text") in found)]
        out.append(entry.replaced(with_content(entry.message, kept)) if kept else entry)
    return out, markers


def micro_compact(
    entries: list[Entry], total: int, target: int, *, keep_recent: int, name_for: NameFor, saved_for: SavedFor
) -> Outcome | None:
    """3. Replace tool results the model has already seen, oldest first, except the newest
    ``keep_recent``, with a one-line placeholder naming where each is saved, until ``total`` is
    at most ``target``. A marker's path is reused only when ``saved_for`` confirms it."""
    seen = [
        (pos, index, block)
        for pos, entry in enumerate(entries)
        if entry.seen
        for index, block in _result_slots(entry)
    ]
    candidates = seen[:-keep_recent] if keep_recent else seen
    out = Outcome(entries)
    changed: dict[int, dict[int, str]] = {}
    for pos, index, block in candidates:
        if total <= target:
            break
        content = block.get("content")
        text = output_text(content)
        if (
            text is None
            or len(text) <= MICRO_MIN_CHARS
            or (isinstance(content, str) and is_placeholder(content))
        ):
            continue
        tool_use_id = str(block.get("tool_use_id", ""))
        path = saved_path(text)
        if path is None or not saved_for(tool_use_id, path):  # not ours: a tool output that looks like one
            path = name_for(tool_use_id, text)
            out.persist.append(Persist(path, text, tool_use_id))
        short = placeholder(path)
        changed.setdefault(pos, {})[index] = short
        out.paths.append(path)
        total -= len(text) - len(short)  # the JSON escapes saved too are not counted: an underestimate
    if not changed:
        return None
    new_entries = list(entries)
    for pos, new in changed.items():
        new_entries[pos] = _replace_results(entries[pos], new)
    out.entries = new_entries
    return out


def fit_tool_results(
    entries: list[Entry], total: int, target: int, *, preview_chars: int, name_for: NameFor
) -> Outcome | None:
    """4. Persist results the model has not seen yet, largest first, keeping a short preview and the
    path, until ``total`` is at most ``target``. The model still sees every new result, at least
    as a preview. A ``recall`` result is never persisted again: the model sees it whole."""
    recalls = _recall_ids(entries)
    unseen = [
        (pos, index, block)
        for pos, entry in enumerate(entries)
        if not entry.seen
        for index, block in _result_slots(entry)
        if str(block.get("tool_use_id")) not in recalls
    ]
    ranked = sorted(unseen, key=lambda s: size_of(s[2].get("content")), reverse=True)
    out = Outcome(entries)
    changed: dict[int, dict[int, str]] = {}
    for pos, index, block in ranked:
        if total <= target:
            break
        made = _marker(block, preview_chars, preview_chars, name_for=name_for, out=out)
        if made is not None:
            changed.setdefault(pos, {})[index] = made[0]
            total -= made[1]
    if not changed:
        return None
    out.entries = list(entries)
    for pos, new in changed.items():  # each changed message is rebuilt and measured once
        out.entries[pos] = _replace_results(entries[pos], new)
    return out


def unseen_tail_start(entries: list[Entry]) -> int:
    """Where the trailing run of messages the model has not seen begins (pair-safe)."""
    start = len(entries)
    while start > 0 and not entries[start - 1].seen:
        start -= 1
    return safe_tail_start(entries, start)


def summary_message(
    label: str, active_request: str, summary: str, *, where: str, memory: str = ""
) -> Message:
    """The one message that replaces summarized history; ``memory``: the index of the memory files."""
    summary = (
        summary.replace(active_request, "(the current user request, above)") if active_request else summary
    )
    return user_text(summary_text(label, active_request, summary, where=where, memory=memory))


def replace_with_summary(entries: list[Entry], tail_start: int, message: Message) -> list[Entry]:
    """``message`` followed by ``entries[tail_start:]``, merged where roles would repeat."""
    return join([Entry.of(message, seen=False)], entries[tail_start:])
