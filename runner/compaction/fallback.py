"""The deterministic fallback summary: built without a model, from the history alone.

Used when the summarizer's circuit breaker is open, when a summary call fails, and as the summarizer
of a backend with no summary model. It keeps what a model needs to continue: files read and changed,
commands with their outcome, errors seen, its last text, and every note line (``- ...``) the
assistant wrote or an earlier summary carried, newest first, each once. The whole summary fits its
budget (the job's ``summary_share`` of the context), what matters most first: the notes (the plan
and progress), the last text, then the files written and read and the calls, with where their
outputs are saved; a summary of summaries carries the notes again, so it never grows past the budget
either. A note is a keyed fact: the text before its first `` | `` is its key, and a newer note with
the same key supersedes the older ones (so a fact noted again as it grows, e.g. per directory, is
kept once, in its newest form).
"""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass, field

from ..messages import Message, one_line, result_text, text_of, tool_results, tool_uses
from ..protocol import NOTES_ONLY, is_summary, saved_path

NOTES_HEADING = "### Notes the assistant recorded (newest first, each key once)"
LAST_HEADING = "### Last assistant text"
KEY_END = " | "
READS_SHOWN = 40  # the newest files read, by name
LISTS_SHARE = 5  # the lists of files and calls keep at least 1/LISTS_SHARE of the budget when they need it
LAST_SHARE = 4  # the last assistant text takes at most 1/LAST_SHARE of the budget
LEFT_OUT = "({n} older notes left out; see the transcript)"


def _fit(lines: list[str], room: int) -> list[str]:
    """The leading ``lines`` that fit in ``room`` characters (each with its newline)."""
    kept, used = [], 0
    for line in lines:
        if used + len(line) + 1 > room:
            break
        kept.append(line)
        used += len(line) + 1
    return kept


def _size(lines: list[str]) -> int:
    return sum(len(line) + 1 for line in lines)


def _cut_at_line(text: str, room: int) -> str:
    """``text`` cut to ``room`` characters at a line end: a note cut in half would be a wrong fact."""
    return text if len(text) <= room else text[:room].rsplit("\n", 1)[0]


def _section(heading: str, items: list[str], room: int, *, empty: str | None = "- none") -> list[str]:
    """``heading`` and the newest ``items`` (given newest last) that fit in ``room``, oldest first, with
    a line saying how many were left out; nothing when not even the heading fits."""
    if not items:
        lines = [heading, empty] if empty else []
        return lines if _size(lines) <= room else []
    more = f"- and {len(items)} more (see the transcript)"
    if _size([heading, *items]) <= room:
        return [heading, *items]
    shown = list(reversed(_fit(list(reversed(items)), room - _size([heading, more]))))
    if not shown and _size([heading, more]) > room:
        return []
    return [heading, *shown, f"- and {len(items) - len(shown)} more (see the transcript)"]


@dataclass
class _Tally:
    """What a history did, in order: its assistant texts, the files it read (how often, and where an
    output was saved), and one line per other call, in the list its kind goes to."""

    texts: list[str] = field(default_factory=list)
    reads: Counter[str] = field(default_factory=Counter)
    read_saved: dict[str, str] = field(default_factory=dict)
    calls: dict[str, list[str]] = field(
        default_factory=lambda: {"changed": [], "commands": [], "other": [], "errors": []}
    )


def _call_line(name: str, args: dict, failed: bool, *, at: str) -> tuple[str, str] | None:
    """The list a call other than ``read`` goes to and its line there, or None for one not listed."""
    if name in ("write", "edit"):
        return "changed", f"{name} {args.get('file_path')}" + (" (failed)" if failed else "")
    if name == "bash":
        return (
            "commands",
            f"`{one_line(str(args.get('command')), 120)}` → {'exit != 0' if failed else 'exit 0'}{at}",
        )
    if name in ("compact", "?"):
        return None
    shown = ", ".join(f"{k}={v!r}" for k, v in sorted(args.items()))
    return "other", f"{name}({one_line(shown, 140)}){at}"


def _tally(messages: list[Message]) -> _Tally:
    """The texts, reads and calls of ``messages``, each result matched to the call it answers."""
    tally = _Tally()
    uses: dict[str, dict] = {}
    for message in messages:
        if message.get("role") == "assistant":
            text = text_of(message).strip()
            if text:
                tally.texts.append(text)
            uses.update((str(use.get("id")), use) for use in tool_uses(message))
        for result in tool_results(message):
            use = uses.get(str(result.get("tool_use_id")), {})
            name, args = use.get("name", "?"), use.get("input") or {}
            failed = bool(result.get("is_error"))
            saved = saved_path(result.get("content"))
            if name == "read":
                path = str(args.get("file_path"))
                tally.reads[path] += 1
                if saved:
                    tally.read_saved[path] = saved
            else:
                entry = _call_line(name, args, failed, at=f" → {saved}" if saved else "")
                if entry:
                    tally.calls[entry[0]].append(entry[1])
            if failed:
                tally.calls["errors"].append(f"{name}: {one_line(result_text(result), 160)}")
    return tally


def _read_lines(reads: Counter[str], read_saved: dict[str, str]) -> tuple[str, list[str]]:
    """The directory every newest read is under ('' for none), and their lines, named from there."""
    newest_reads = list(reads.items())[-READS_SHOWN:]
    under = _common_directory([p for p, _ in newest_reads])
    shown_reads = [
        f"- {p[len(under) :]}"
        + (f" ({n} times)" if n > 1 else "")
        + (f" → {read_saved[p]}" if p in read_saved else "")
        for p, n in newest_reads
    ]
    if len(reads) > READS_SHOWN:  # an index of every file would crowd out the notes that hold the facts
        shown_reads = [f"- and {len(reads) - READS_SHOWN} older ones (see the transcript)", *shown_reads]
    return under, shown_reads


def _lists(tally: _Tally) -> list[tuple[str, list[str], str | None]]:
    """The lists of files and calls, each its heading, its lines and its line when empty, in order of
    importance."""
    under, shown_reads = _read_lines(tally.reads, tally.read_saved)
    calls = tally.calls
    return [
        ("### Files written or edited", [f"- {c}" for c in calls["changed"]], "- none"),
        (f"### Files read (paths under `{under}`)" if under else "### Files read", shown_reads, "- none"),
        ("### Errors seen", [f"- {e}" for e in calls["errors"][-20:]], None),
        ("### Commands run", [f"- {c}" for c in calls["commands"][-30:]], "- none"),
        ("### Other tool calls", [f"- {c}" for c in calls["other"][-30:]], None),
    ]


def _notes_part(notes: list[str], room: int, reserve: int) -> list[str]:
    """The notes section: its heading and the newest ``notes`` that fit in ``room`` less ``reserve``,
    with how many were left out; only that line when not even the heading fits."""
    kept = _fit(notes, room - reserve - len(LEFT_OUT) - 12)
    notes_part = [NOTES_HEADING, *kept] if kept else []
    if len(kept) < len(notes):
        notes_part.append(LEFT_OUT.format(n=len(notes) - len(kept)))
    if _size(notes_part) > room:  # not even the heading fits: say what was left out, if that does
        notes_part = _fit([LEFT_OUT.format(n=len(notes))], room)
    return notes_part


def fallback_summary(messages: list[Message], budget: int = 12_000, notes_only: str | None = None) -> str:
    """The summary of ``messages``, at most ``budget`` characters: the notes first (the plan and
    progress the assistant recorded), then its last text, then the files and calls with where their
    outputs are saved. ``notes_only`` (the reason) keeps the notes and the last text alone."""
    tally = _tally(messages)
    header = [
        f"Summary built without a model from {len(messages)} messages "
        f"({sum(len(tool_uses(m)) for m in messages)} tool calls)."
    ]
    if notes_only:
        header.append(NOTES_ONLY.format(why=notes_only))
    room = budget - _size(header)
    texts = tally.texts
    last = _cut_at_line(texts[-1], max(0, budget // LAST_SHARE - len(LAST_HEADING) - 1)) if texts else ""
    last_lines = [LAST_HEADING, last] if last else []
    room -= _size(last_lines)

    lists = [] if notes_only else _lists(tally)
    wanted = sum(_size([h, *(items or ([e] if e else []))]) for h, items, e in lists)
    notes_part = _notes_part(note_lines(messages, skip=last), room, min(wanted, room // LISTS_SHARE))
    room -= _size(notes_part)

    sections: dict[str, list[str]] = {}
    for heading, items, empty in lists:  # in order of importance, each with what is left
        sections[heading] = _section(heading, items, room, empty=empty)
        room -= _size(sections[heading])
    order = [lists[1][0], lists[0][0], lists[3][0], lists[4][0], lists[2][0]] if lists else []
    out = header + [line for h in order for line in sections[h]] + notes_part + last_lines
    # last: the last text is the newest, so a later summary reads its notes as the newest
    return "\n".join(out)[:budget]


def note_lines(messages: list[Message], skip: str = "") -> list[str]:
    """The bullet lines (``- ...``) the assistant wrote, and those an earlier summary carried, newest
    first, each key once: the facts a summary must keep, however often they were repeated or
    updated. A line's key is its text before the first `` | `` (the whole line when it has none).
    Of a summary built here, only its notes and its last assistant text count (its lists of files
    and calls are not notes)."""
    seen: set[str] = {line.split(KEY_END, 1)[0] for line in skip.split("\n") if line.startswith("- ")}
    lines: list[str] = []
    for message in reversed(messages):
        text = text_of(message)
        if message.get("role") == "assistant":
            newest_first = list(reversed(text.split("\n")))
        elif is_summary(text):
            newest_first = _summary_notes(text)
        else:
            continue
        for line in newest_first:
            line = line.rstrip()
            key = line.split(KEY_END, 1)[0]
            if line.startswith("- ") and key not in seen:
                seen.add(key)
                lines.append(line)
    return lines


def _common_directory(paths: list[str]) -> str:
    """The directory (ending in ``/``) that every one of several absolute paths is under, or ''."""
    if len(paths) < 2 or not all(p.startswith("/") for p in paths):
        return ""
    under = os.path.commonpath(paths)
    if under == "/" or under in paths or not all(p.startswith(under + "/") for p in paths):
        return ""  # the root, one of the files, or spellings commonpath normalized (``/./``, ``//``)
    return under + "/"


def _summary_notes(text: str) -> list[str]:
    """A summary's note lines, newest first: its last assistant text (read bottom up), then its
    notes section as listed. A summary not built here: all its lines, bottom up."""
    if NOTES_HEADING not in text and LAST_HEADING not in text:
        return list(reversed(text.split("\n")))
    body, _, last = text.partition(LAST_HEADING)
    notes = body.partition(NOTES_HEADING)[2].split("\n###", 1)[0] if NOTES_HEADING in body else ""
    return list(reversed(last.split("\n"))) + notes.split("\n")
