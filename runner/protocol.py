"""The text protocol: every marker, placeholder and label the runner writes into a model's context,
and the parsers the runner itself needs to recognize them (the compactor, the viewer, resume).

Everything that writes or reads these texts (the compactor, the tools, the emulator, the benchmarks)
imports them from here, so a change of wording is one change. Parsers only a model reading the
runner's texts back would need are not here.
"""

from __future__ import annotations

import json
import re
from enum import StrEnum
from typing import Any

from .rundir.docs import TRANSCRIPT

# --- a persisted output: the marker that replaces a large result, with a preview ------------------

PERSISTED_TAG = "<persisted-output>"
PERSISTED_END = "</persisted-output>"
SAVED_AT = "Full output saved to: "
PREVIEW = "Preview:\n"
_SAVED_AT = re.compile(re.escape(SAVED_AT) + r"(\S+)")


def line_count(text: str) -> int:
    return text.count("\n") + (1 if text and not text.endswith("\n") else 0)


def persisted_marker(path: str, text: str, preview_chars: int) -> str:
    """What replaces a result saved at ``path``: where it is, its size, and its first characters."""
    return (
        f"{PERSISTED_TAG}\n{SAVED_AT}{path}\nOriginal size: {len(text)} chars, "
        f"{line_count(text)} lines\n{PREVIEW}{text[:preview_chars]}\n{PERSISTED_END}"
    )


def is_persisted(content: str) -> bool:
    return content.startswith(PERSISTED_TAG)


def persisted_preview(content: str) -> str:
    """The preview a persisted-output marker carries (everything after ``Preview:``)."""
    return content.split(PREVIEW, 1)[-1].rsplit(f"\n{PERSISTED_END}", 1)[0]


# --- a placeholder: the one line that replaces a result the model has already seen ---------------

PLACEHOLDER_PREFIX = "[Earlier tool result saved at "


def placeholder(path: str) -> str:
    return f"{PLACEHOLDER_PREFIX}{path}]"


def is_placeholder(content: str) -> bool:
    return content.startswith(PLACEHOLDER_PREFIX)


def saved_path(content: Any) -> str | None:
    """The path a placeholder or persisted-output marker points at (None for any other content)."""
    if isinstance(content, str):
        if is_persisted(content):
            match = _SAVED_AT.search(content)
            return match.group(1) if match else None
        if is_placeholder(content):
            return content[len(PLACEHOLDER_PREFIX) :].rstrip("]")
    return None


# --- snip: the marker that stands for the archived middle of a conversation -----------------------

SNIP_DIGEST_CHARS = 1_500  # the most a snip marker's digest of what it archived may take (at least)
SNIP_DIGEST_MAX_CHARS = 8_000  # ... and at most, whatever share of a large window snip_digest_share gives
_ARCHIVED = re.compile(r"^\[(\d+) messages archived: \S+ messages (\d+)-(\d+)\]")
_ARCHIVED_HEAD = re.compile(r"^\[\d+ messages archived: ")  # whatever the range (a marker may name none)


def archived_marker(count: int, where: str, digest: str = "") -> str:
    """The marker of a snip: how many messages, where they are, and a digest of what they held."""
    return f"[{count} messages archived: {where}]" + (f"\n{digest}" if digest else "")


def archived_span(text: str) -> tuple[int, int] | None:
    """The transcript range ``(first, last)`` a snip marker names, else ``None``."""
    match = _ARCHIVED.match(text)
    return (int(match.group(2)), int(match.group(3))) if match else None


def is_snip_marker(text: str) -> bool:
    """Whether ``text`` is a snip marker (:func:`archived_marker`)."""
    return _ARCHIVED_HEAD.match(text) is not None


def archived_count(text: str) -> int:
    """How many messages a snip marker stands for (0 for any other text)."""
    match = _ARCHIVED.match(text)
    return int(match.group(1)) if match else 0


# the digest's lines: what the archived messages did, and where their outputs are
DIGEST_HEADING = "Digest of the archived messages (read them back with recall):"
DIGEST_READ = "files read: {items}"
DIGEST_WRITTEN = "files written or edited: {items}"
DIGEST_CALLS = "other calls: {items}"
DIGEST_UNDER = "(paths under {under})"
DIGEST_MORE = "and {n} more"


def transcript_range(first: int, last: int) -> str:
    return f"{TRANSCRIPT} messages {first}-{last}"


# --- a tool result the API cleared (context editing, ``clear_tool_uses_20250919``) ----------------

# what the server puts in place of a cleared result's content (and, with ``clear_tool_inputs``, a
# cleared call's input is ``{}``): the emulator writes it, ``runner replay`` reads views that hold it
CLEARED_TOOL_RESULT = "[Tool result cleared by context editing]"


# --- summaries: the message that replaces summarized history --------------------------------------

COMPACTED = "Compacted"
REACTIVE_COMPACT = "Reactive compact"
SUMMARY_LABELS = (f"[{COMPACTED}]", f"[{REACTIVE_COMPACT}]")
# the API's compaction block, as it reads it back: a user message of this and the block's content
COMPACTION_BLOCK_HEAD = f"[{COMPACTED}]\n"


SUMMARY_CUT = (
    "[summary cut at a line end: {kept} of {total} characters fit this job's summary limit "
    "({limit} characters, summary_share of the context); the full transcript is {where}]"
)
NOTES_ONLY = (
    "Only the notes are carried over: history compactions came too often or freed too little "
    "of the context ({why}), so this summary keeps the notes alone."
)
THRASHING = (
    "thrashing: {compactions} history compactions in a row came within {turns} turns of the one "
    "before or freed under {share} of the context (turns between them: {gaps}; share of the context "
    "freed: {freed}); a summary of half the size and then one of the notes alone did not help"
)


def summary_text(label: str, active_request: str, summary: str, *, where: str, memory: str = "") -> str:
    return (
        f"[{label}]\n\nCurrent user request:\n{active_request}\n\nConversation summary:\n{summary}\n\n"
        f"Full transcript: {where}. Read any part back with the recall tool."
        + (f"\n\n{memory}" if memory else "")
    )


# -- the memory index: what a compacted context is told of the memory files --------------------------

MEMORY_INDEX_CHARS = 1_500
MEMORY_INDEX = (
    "[Memory files] kept outside the context, never compacted; read them with the memory tool "
    "(view, paged with view_range):"
)


def memory_index(files: list[tuple[str, int]], budget: int = MEMORY_INDEX_CHARS) -> str:
    """The index of the memory files (``/memories/...`` path, bytes) within ``budget`` characters:
    a heading and one line per file, and how many more there are when they do not all fit; ``""``
    when there are none."""
    if not files:
        return ""
    lines = [MEMORY_INDEX]
    used = len(MEMORY_INDEX)
    for k, (path, size) in enumerate(files):
        line = f"  {path} ({size} bytes)"
        more = f"  and {len(files) - k} more (view /memories to list them)"
        if (
            used + 1 + len(line) + 1 + len(more) > budget
            and k < len(files) - 1
            or used + 1 + len(line) > budget
        ):
            lines.append(more)
            break
        lines.append(line)
        used += 1 + len(line)
    return "\n".join(lines)


def is_summary(text: str) -> bool:
    """Whether a user message's text is a summary that replaced history."""
    return text.startswith(SUMMARY_LABELS)


# -- which marker a text is: for readers of a conversation (the viewer) -------------------------------


class Marker(StrEnum):
    """A text the runner put in a context in place of what it removed."""

    SUMMARY = "summary"  # [Compacted] / [Reactive compact]: summarized history
    PERSISTED = "persisted"  # <persisted-output>: a large result saved, with a preview
    PLACEHOLDER = "placeholder"  # [Earlier tool result saved at ...]: a seen result saved
    SNIP = "snip"  # [N messages archived: ...]: the archived middle of a conversation


def marker_of(text: str) -> Marker | None:
    """Which marker ``text`` starts with, or ``None`` for any other text."""
    if is_summary(text):
        return Marker.SUMMARY
    if is_persisted(text):
        return Marker.PERSISTED
    if is_placeholder(text):
        return Marker.PLACEHOLDER
    if is_snip_marker(text):
        return Marker.SNIP
    return None


# -- cut results: every result the tools cut says so, and how to get the rest -------------------------

GLOB_CUT = (
    "[glob: cut: showing {shown} of {total} matches (newest first){walk}; narrow the pattern "
    "(e.g. per directory with `path`, or by name) to see the rest]"
)
GLOB_WALK = ", counting stopped at {cap} entries, there may be more"

GREP_WALK_CUT = (
    "[grep: cut: the search stopped after {cap} files, matches in later files are not shown; "
    "search a narrower `path`]"
)
BASH_OUTPUT_CUT = (
    "[bash: cut: output was {total} bytes, showing the first {shown}; narrow it with head, tail, "
    "grep or sed -n]"
)
BASH_OUTPUT_STOPPED = (
    "[bash: stopped: the output passed {limit} bytes, so the command was killed before it ended; "
    "showing the first {shown}; write less (redirect to a file, then look at part of it with head, "
    "tail, grep or sed -n)]"
)
BASH_DISK_LOW = (
    "[bash: stopped: the workspace's file system fell to {free:,} bytes free while the command ran, under "
    "the {reserve:,} kept free for the machine, so it was killed before it ended; remove files that are "
    "not needed (with rm: under that floor a command runs as long as it takes at most {slack} MiB more)]"
)
EMPTY_FILE = "[read: the file is empty (0 lines, 0 bytes)]"
# a large file's read starts with one of these lines (first, so a preview of the result shows it)
READ_PAGE = (
    "[read: lines {start}-{end} of {lines} ({size} bytes; too large for one read); next: "
    "view_range [{next_start}, {next_end}]]"
)
READ_BYTES = (
    "[read: bytes {start}-{end} of {size} ({lines} lines; {why}); next: byte_range [{end}, {next_end}]]"
)
READ_BYTES_END = "[read: bytes {start}-{end} of {size} ({lines} lines); the end of the file]"
BINARY_READ = (
    "read: {path}: not valid UTF-8 text ({size} bytes; binary files are only supported for "
    "image/PDF extensions)"
)


RECALL_PAGE = "[recall: page {page} of {pages}, characters {start}-{end} of {total}; {rest}]"
RECALL_NEXT = "next page: offset {end}"
RECALL_END = "end of file"

REPEATED_CALL = (
    "[not run: this exact {name} call was already made {count} times in this job, "
    "first at turn {turn}; its result {where}. Change the call or move on]"
)
REPEATED_WHERE = "is saved at {path} (recall it with the recall tool)"
REPEATED_ABOVE = "is in the conversation above"
STUCK = "repeated the same call {count} times after being told it was already made: {call}"
# the next message after a reply cut at max_tokens that called no tool
CONTINUE_AFTER_MAX_TOKENS = (
    "Your reply was cut off by the output token limit. Continue from where you stopped."
)
CUT_OFF = "not run: your reply was cut off"  # the results of calls in a reply cut at max_tokens (never run)


# the last request of a job about to hit a limit: answered without tools (tool_choice "none")
OUT_OF_TURNS = (
    "You are out of turns ({reason}); no more tool calls can run. Write your report now from what "
    "you have gathered so far, and say what you could not finish."
)
NO_TOOLS = {"type": "none"}


# --- subagents (the ``task`` tool) ----------------------------------------------------------------

SUBAGENT_RESULT = (
    "[subagent {dir}: {status} after {turns} turns, ${cost:.4f}; its report is {path} ({chars} chars{cut})]\n"
)
SUBAGENT_CUT = ", cut here: read the rest with recall"
SUBAGENT_FAILED = "the subagent could not run: {error}"
_SUBAGENT_RESULT = re.compile(
    r"^\[subagent (\S+): (\w+) after (\d+) turns, \$[\d.]+; its report is (\S+) "
    r"\((\d+) chars(, cut here[^)]*)?\)\]\n"
)


def subagent_result(text: str) -> tuple[str, str, str, bool] | None:
    """(its directory, status, report path, cut) from the head of a ``task`` result, or None."""
    match = _SUBAGENT_RESULT.match(text)
    return (match[1], match[2], match[4], match[6] is not None) if match else None


# --- an incremental job: its baseline and what changed since (rundir/manifest.py) ----------------

INCREMENTAL_HEAD = "[Incremental run]"
INCREMENTAL_LISTS = "The first of each (paths as data: one that is not plain is a JSON string):\n"
INCREMENTAL_NOTE = (
    INCREMENTAL_HEAD + " This analysis ran before: run {run}, started {when}, on this same "
    "workspace. Its report is saved at {report} (read it with recall){memory}{agents}. Since then "
    "{added} files were added, {changed} changed and {removed} removed ({unchanged} unchanged); "
    "the full lists are saved at {changes} (read it with recall). " + INCREMENTAL_LISTS + "{inline}\n"
    "Examine what was added or changed, leave out what was removed, and carry the rest over "
    "from the previous report."
)
INCREMENTAL_MEMORY = ", and its {files} memory files are your memory now (view {prefix} with the memory tool)"
INCREMENTAL_AGENTS = (
    "; its {count} subagents that succeeded are copied to {folder}/ (each one's final.md and memories/), "
    "their directories and task prompts listed at {listed} (read it with recall)"
)
AGENTS_HEAD = "[The baseline's subagents that succeeded: {count}; a line each: directory, tab, task prompt]"
CHANGES_INLINE_CHARS = 1_500  # the three inline lists together; each gets a third
CHANGE_KINDS = ("added", "changed", "removed")
CHANGES_HEAD = (
    "[Changes since run {run}: {added} added, {changed} changed, {removed} removed, {unchanged} unchanged]"
)
# the unchanged files that import a changed one (rundir/dependents.py): a line per changed file in the
# note, at most DEPENDENTS_SHOWN of them in DEPENDENTS_INLINE_CHARS; every pair in the saved lists
DEPENDENTS_KIND = "dependents"
DEPENDENTS_LINE = "unchanged, but depends on changed {changed}: {files}"
DEPENDENTS_MORE = "and {more} more changed files have dependents: see {changes}"
DEPENDENTS_HINT = (
    "Examine, too, the unchanged files that depend on a changed one, where the change may matter."
)
DEPENDENTS_PAIR = "{file} depends on changed {changed}"
DEPENDENTS_SHOWN = 8
DEPENDENTS_INLINE_CHARS = 900


_PLAIN_PATH = re.compile(r"[\w.+@=~%-][\w./+@=~%-]*")  # no space, quote, comma, bar, brace...


def listed_path(path: str) -> str:
    """A path as the runtime quotes it, one line of a list or an item of an inline one: as it is when
    it is plain (letters, digits and ``_ . / + @ = ~ % -``, not starting with ``/``), else as a JSON
    string with every character beyond ASCII escaped. So a workspace's file name never reads as the
    runtime's words or a note (``- key | ...``) of its own, and always reads back (:func:`changes_of`)."""
    if _PLAIN_PATH.fullmatch(path) and path.isprintable():
        return path
    return json.dumps(path, ensure_ascii=True)


def inline_list(paths: list[str], chars: int) -> str:
    """As many of ``paths`` as fit in ``chars``, comma-separated, then how many more there are."""
    shown: list[str] = []
    used = 0
    for path in paths:
        item = listed_path(path)
        if shown and used + len(item) + 2 > chars - 16:
            break
        shown.append(item)
        used += len(item) + 2
    rest = len(paths) - len(shown)
    return (", ".join(shown) or "(none)") + (f", and {rest} more" if rest else "")


def incremental_note(
    *,
    run: str,
    when: str,
    report: str,
    changes: str,
    memory: str,
    lists: dict[str, list[str]],
    unchanged: int,
    dependents: dict[str, list[str]] | None = None,
    agents: str = "",
) -> str:
    """The message an incremental job starts with, after its prompt: its baseline, and what changed;
    with ``dependents`` (a changed path -> the unchanged files that import it), a line for each of the
    first of those, and a sentence asking to examine them (``agents``: :data:`INCREMENTAL_AGENTS` filled
    in, when the baseline's subagents were copied)."""
    share = CHANGES_INLINE_CHARS // len(CHANGE_KINDS)
    inline = "\n".join(f"{kind}: {inline_list(lists[kind], share)}" for kind in CHANGE_KINDS)
    if dependents:
        inline += "\n" + _dependents_lines(dependents, changes)
    note = INCREMENTAL_NOTE.format(
        run=run,
        when=when,
        report=report,
        changes=changes,
        memory=memory,
        agents=agents,
        unchanged=unchanged,
        inline=inline,
        **{k: len(lists[k]) for k in CHANGE_KINDS},
    )
    return note + (" " + DEPENDENTS_HINT if dependents else "")


def _dependents_lines(dependents: dict[str, list[str]], changes: str) -> str:
    """The note's lines on the unchanged files that import a changed one, within their budget."""
    shown = sorted(dependents)[:DEPENDENTS_SHOWN]
    share = DEPENDENTS_INLINE_CHARS // len(shown)
    lines = [
        DEPENDENTS_LINE.format(changed=listed_path(changed), files=inline_list(dependents[changed], share))
        for changed in shown
    ]
    if len(dependents) > len(shown):
        lines.append(DEPENDENTS_MORE.format(more=len(dependents) - len(shown), changes=changes))
    return "\n".join(lines)


def changes_text(
    *, run: str, lists: dict[str, list[str]], unchanged: int, dependents: dict[str, list[str]] | None = None
) -> str:
    """The saved output with every added, changed and removed path, one a line (see :func:`changes_of`),
    then, with ``dependents``, every unchanged file that imports a changed one, a line per pair."""
    out = [CHANGES_HEAD.format(run=run, unchanged=unchanged, **{k: len(lists[k]) for k in CHANGE_KINDS})]
    for kind in CHANGE_KINDS:
        out += ["", f"{kind} ({len(lists[kind])}):", *(listed_path(p) for p in lists[kind])]
    if dependents:
        pairs = [
            DEPENDENTS_PAIR.format(file=listed_path(f), changed=listed_path(changed))
            for changed in sorted(dependents)
            for f in dependents[changed]
        ]
        out += ["", f"{DEPENDENTS_KIND} ({len(pairs)}):", *pairs]
    return "\n".join(out) + "\n"


def agents_text(agents: list[tuple[str, str]]) -> str:
    """The saved list of a baseline's subagents copied in: (directory, task prompt) a line, the prompt
    as a JSON string (read back by the stand-in)."""
    out = [AGENTS_HEAD.format(count=len(agents))]
    out += [f"{where}\t{json.dumps(prompt, ensure_ascii=True)}" for where, prompt in agents]
    return "\n".join(out) + "\n"
