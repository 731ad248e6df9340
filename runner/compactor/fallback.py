"""The deterministic fallback summary: built without a model, from the history alone.

Used when the summarizer's circuit breaker is open, when a summary call fails, and as the offline
model's summarizer. It keeps what a model needs to continue: files read and changed, commands with
their outcome, errors seen, its last text, and every note line (``- ...``) the assistant wrote or
an earlier summary carried, newest first, each once, within a budget. A note is a keyed fact: the
text before its first `` | `` is its key, and a newer note with the same key supersedes the older
ones (so a fact noted again as it grows, e.g. per directory, is kept once, in its newest form).
A note ``- retired-note: <key>`` (the key without its leading ``- ``) says that older notes with
that key are obsolete: they are left out of the notes, and so is the retiring line, so that notes
a newer one has replaced do not crowd out live facts when the notes outgrow the budget.
"""

from __future__ import annotations

import os
from collections import Counter

from ..messages import Message, one_line, result_text, text_of, tool_results, tool_uses
from ..protocol import RETIRED, is_summary

NOTES_HEADING = "### Notes the assistant recorded (newest first, each key once)"
LAST_HEADING = "### Last assistant text"
KEY_END = " | "
READS_SHOWN = 40  # the newest files read, by name



def fallback_summary(messages: list[Message], notes_budget: int = 12_000) -> str:
    reads: Counter[str] = Counter()
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
            if name == "read":
                reads[str(args.get("file_path"))] += 1
            elif name in ("write", "edit"):
                changed.append(f"{name} {args.get('file_path')}" + (" (failed)" if failed else ""))
            elif name == "bash":
                commands.append(f"`{one_line(str(args.get('command')), 120)}` → {'exit != 0' if failed else 'exit 0'}")
            elif name not in ("compact", "?"):
                shown = ", ".join(f"{k}={v!r}" for k, v in sorted(args.items()))
                other.append(f"{name}({one_line(shown, 140)})")
            if failed:
                errors.append(f"{name}: {one_line(result_text(result), 160)}")
    out = [f"Summary built without a model from {len(messages)} messages "
           f"({sum(len(tool_uses(m)) for m in messages)} tool calls)."]
    newest_reads = list(reads.items())[-READS_SHOWN:]
    under = _common_directory([p for p, _ in newest_reads])
    shown_reads = [f"- {p[len(under):]}" + (f" ({n} times)" if n > 1 else "") for p, n in newest_reads]
    out += [f"### Files read (paths under `{under}`)" if under else "### Files read"] + (shown_reads or ["- none"])
    if len(reads) > READS_SHOWN:  # an index of every file would crowd out the notes that hold the facts
        out.append(f"- and {len(reads) - READS_SHOWN} more (see the transcript)")
    out += ["### Files written or edited"] + ([f"- {c}" for c in changed] or ["- none"])
    out += ["### Commands run"] + ([f"- {c}" for c in commands[-30:]] or ["- none"])
    if other:
        out += ["### Other tool calls"] + [f"- {c}" for c in other[-30:]]
    if errors:
        out += ["### Errors seen"] + [f"- {e}" for e in errors[-20:]]
    last = texts[-1] if texts else ""
    if len(last) > notes_budget // 2:  # cut at a line end: a note cut in half would be a wrong fact
        last = last[: notes_budget // 2].rsplit("\n", 1)[0]
    notes = note_lines(messages, skip=last)
    kept, used = [], 0
    for line in notes:
        if used + len(line) + 1 > notes_budget:
            break
        kept.append(line)
        used += len(line) + 1
    if kept:
        out += [NOTES_HEADING, *kept]
    if len(kept) < len(notes):
        out.append(f"({len(notes) - len(kept)} older notes left out; see the transcript)")
    if last:  # last: it is the newest text, so a later summary reads its notes as the newest
        out += [LAST_HEADING, last]
    return "\n".join(out)


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
                seen.add("- " + line[len(RETIRED):])
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
