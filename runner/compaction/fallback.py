"""The deterministic fallback summary: built without a model, from the history alone.

Used when the summarizer's circuit breaker is open, when a summary call fails, and as the summarizer of
a backend with no summary model. It keeps what a model needs to continue: files read and changed,
commands with their outcome, errors seen, its last text, and every note line (``- ...``) the assistant
wrote or an earlier summary carried, newest first, each once. The whole summary fits its budget (the
job's ``summary_share`` of the context), what matters most first: the notes (the plan and progress), the
last text, then the files written and read and the calls, with where their outputs are saved; a summary
of summaries carries the notes again, so it never grows past the budget either. A note is a keyed fact:
the text before its first `` | `` is its key, and a newer note with the same key supersedes the older
ones (so a fact noted again as it grows, e.g. per directory, is kept once, in its newest form). A note
``- retired-note: <key>`` (the key without its leading ``- ``) says that older notes with that key are
obsolete: they are left out of the notes, and so is the retiring line, so that notes a newer one has
replaced do not crowd out live facts when the notes outgrow the budget.
"""

from __future__ import annotations

import os
from collections import Counter

from ..messages import Message, one_line, result_text, text_of, tool_results, tool_uses
from ..protocol import NOTES_ONLY, RETIRED, is_summary, saved_path

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


def _section(heading: str, items: list[str], room: int, empty: str | None = "- none") -> list[str]:
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


def fallback_summary(messages: list[Message], budget: int = 12_000, notes_only: str | None = None) -> str:
    """The summary of ``messages``, at most ``budget`` characters: the notes first (the plan and
    progress the assistant recorded), then its last text, then the files and calls with where their
    outputs are saved. ``notes_only`` (the reason) keeps the notes and the last text alone."""
    reads: Counter[str] = Counter()
    read_saved: dict[str, str] = {}
    changed: list[str] = []
    commands: list[str] = []
    other: list[str] = []
    errors: list[str] = []
    uses: dict[str, dict] = {}
    texts: list[str] = []
    for message in messages:
        if message.get("role") == "assistant":
            text = text_of(message).strip()
            if text:
                texts.append(text)
            for use in tool_uses(message):
                uses[str(use.get("id"))] = use
        for result in tool_results(message):
            use = uses.get(str(result.get("tool_use_id")), {})
            name, args = use.get("name", "?"), use.get("input") or {}
            failed = bool(result.get("is_error"))
            saved = saved_path(result.get("content"))
            at = f" → {saved}" if saved else ""
            if name == "read":
                path = str(args.get("file_path"))
                reads[path] += 1
                if saved:
                    read_saved[path] = saved
            elif name in ("write", "edit"):
                changed.append(f"{name} {args.get('file_path')}" + (" (failed)" if failed else ""))
            elif name == "bash":
                commands.append(
                    f"`{one_line(str(args.get('command')), 120)}` → {'exit != 0' if failed else 'exit 0'}{at}"
                )
            elif name not in ("compact", "?"):
                shown = ", ".join(f"{k}={v!r}" for k, v in sorted(args.items()))
                other.append(f"{name}({one_line(shown, 140)}){at}")
            if failed:
                errors.append(f"{name}: {one_line(result_text(result), 160)}")
    header = [
        f"Summary built without a model from {len(messages)} messages "
        f"({sum(len(tool_uses(m)) for m in messages)} tool calls)."
    ]
    if notes_only:
        header.append(NOTES_ONLY.format(why=notes_only))
    room = budget - _size(header)
    last = _cut_at_line(texts[-1], max(0, budget // LAST_SHARE - len(LAST_HEADING) - 1)) if texts else ""
    last_lines = [LAST_HEADING, last] if last else []
    room -= _size(last_lines)

    lists: list[tuple[str, list[str], str | None]] = []
    if not notes_only:
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
        lists = [
            ("### Files written or edited", [f"- {c}" for c in changed], "- none"),
            (f"### Files read (paths under `{under}`)" if under else "### Files read", shown_reads, "- none"),
            ("### Errors seen", [f"- {e}" for e in errors[-20:]], None),
            ("### Commands run", [f"- {c}" for c in commands[-30:]], "- none"),
            ("### Other tool calls", [f"- {c}" for c in other[-30:]], None),
        ]
    wanted = sum(_size([h, *(items or ([e] if e else []))]) for h, items, e in lists)
    reserve = min(wanted, room // LISTS_SHARE)

    notes = note_lines(messages, skip=last)
    kept = _fit(notes, room - reserve - len(LEFT_OUT) - 12)
    notes_part = [NOTES_HEADING, *kept] if kept else []
    if len(kept) < len(notes):
        notes_part.append(LEFT_OUT.format(n=len(notes) - len(kept)))
    if _size(notes_part) > room:  # not even the heading fits: say what was left out, if that does
        notes_part = _fit([LEFT_OUT.format(n=len(notes))], room)
    room -= _size(notes_part)

    sections: dict[str, list[str]] = {}
    for heading, items, empty in lists:  # in order of importance, each with what is left
        sections[heading] = _section(heading, items, room, empty)
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
            if line.startswith(RETIRED):
                seen.add("- " + line[len(RETIRED) :])
                continue
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
