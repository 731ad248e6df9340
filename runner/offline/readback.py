"""The stand-in's reading of the runner's texts: sizes, cuts, pages and notes parsed back out of a
conversation, as a model reading its context would. The runtime never parses these; it only writes
them (:mod:`runner.protocol`).

Guarantees:
- Each parser answers ``None`` (or an empty value) for a text that is not the one it reads, never
  raises on any text.
- The seed lessons' placeholders (what ``bench/seeds_pipeline.py`` writes in place of a removed
  result) are read as "this result is gone from context", not as the tool's output.
"""

from __future__ import annotations

import json
import re
from typing import Any

from ..protocol import (
    CHANGE_KINDS,
    DEPENDENTS_KIND,
    DEPENDENTS_PAIR,
    INCREMENTAL_HEAD,
    INCREMENTAL_LISTS,
    PLACEHOLDER_PREFIX,
    SUMMARY_LABELS,
    is_persisted,
)

_SIZE_LINE = re.compile(r"Original size: (\d+) chars, (\d+) lines")


def persisted_size(content: str) -> tuple[int, int] | None:
    """(chars, lines) of the whole output a persisted-output marker stands for."""
    match = _SIZE_LINE.search(content) if is_persisted(content) else None
    return (int(match.group(1)), int(match.group(2))) if match else None


def mentions_summary(text: str) -> bool:
    return any(label in text for label in SUMMARY_LABELS)


_GLOB_CUT = re.compile(r"^\[glob: cut: showing (\d+) of (\d+) matches", re.M)


_READ_SIZE = re.compile(
    r"^\[read: (?:lines \d+-\d+ of (\d+) \((\d+) bytes|bytes \d+-\d+ of (\d+) \((\d+) lines)"
)


_BINARY_READ = re.compile(r"^read: .*: not valid UTF-8 text \((\d+) bytes;")


def read_size(text: str) -> tuple[int, int] | None:
    """(lines, bytes) of the whole file a partial read's first line states."""
    match = _READ_SIZE.match(text)
    if not match:
        return None
    if match.group(1):
        return int(match.group(1)), int(match.group(2))
    return int(match.group(4)), int(match.group(3))


def binary_size(error: str) -> int | None:
    """The size of the file a read refused as binary."""
    match = _BINARY_READ.match(error)
    return int(match.group(1)) if match else None


_RECALL_PAGE = re.compile(r"\n\[recall: page (\d+) of (\d+), characters (\d+)-(\d+) of (\d+); ([^\]]*)\]$")


def glob_cut(text: str) -> tuple[int, int] | None:
    """``(shown, total)`` when a glob result says it was cut, else ``None``."""
    match = _GLOB_CUT.search(text)
    return (int(match.group(1)), int(match.group(2))) if match else None


def recall_page(text: str) -> tuple[int, int, int, int, int] | None:
    """``(page, pages, start, end, total)`` of a recall result's footer, else ``None``."""
    match = _RECALL_PAGE.search(text)
    return tuple(int(g) for g in match.groups()[:5]) if match else None  # type: ignore[return-value]


def without_footer(text: str) -> str:
    """A recall result's page without its footer."""
    match = _RECALL_PAGE.search(text)
    return text[: match.start()] if match else text


SEED_000_PLACEHOLDER_PREFIX = PLACEHOLDER_PREFIX  # 000 (Vietnamese): + path + "]"


SEED_001_MICRO_PLACEHOLDER = "[Earlier tool result compacted. Re-run if needed.]"  # 001 (English)


SEED_002_MICRO_PLACEHOLDER = "[Earlier tool result omitted for brevity]"  # 002 (Chinese)


def is_seed_placeholder(content: str) -> bool:
    """Whether a tool result's text is one of the seed lessons' placeholders for a removed result
    (000's names where the result was saved; 001's and 002's name nothing: the tool must be re-run)."""
    return (
        content.startswith(SEED_000_PLACEHOLDER_PREFIX)
        and content.endswith("]")
        or content in (SEED_001_MICRO_PLACEHOLDER, SEED_002_MICRO_PLACEHOLDER)
    )


_INCREMENTAL = re.compile(
    re.escape(INCREMENTAL_HEAD) + r" This analysis ran before: run (\S+), started .*? "
    r"Its report is saved at (\S+) \(read it with recall\).*? Since then (\d+) files were "
    r"added, (\d+) changed and (\d+) removed \((\d+) unchanged\); the full lists are saved "
    r"at (\S+) \(",
    re.S,
)


_CHANGES_LIST = re.compile(r"^(added|changed|removed|" + DEPENDENTS_KIND + r") \((\d+)\):$")
_PAIR_WORDS = DEPENDENTS_PAIR.format(file="", changed="")


def incremental_of(text: str) -> dict[str, Any] | None:
    """What an incremental note says: the baseline ``run``, the ``report`` and ``changes`` paths and
    the counts (``added``, ``changed``, ``removed``, ``unchanged``); None for any other text."""
    match = _INCREMENTAL.match(text) if text.startswith(INCREMENTAL_HEAD) else None
    if match is None:
        return None
    return {
        "run": match[1],
        "report": match[2],
        "changes": match[7],
        "added": int(match[3]),
        "changed": int(match[4]),
        "removed": int(match[5]),
        "unchanged": int(match[6]),
    }


def changes_of(text: str) -> dict[str, list[str]]:
    """The lists of a :func:`changes_text` output (a kind it lacks: an empty list)."""
    lists: dict[str, list[str]] = {kind: [] for kind in CHANGE_KINDS}
    current: list[str] | None = None
    for line in text.split("\n")[1:]:
        match = _CHANGES_LIST.match(line)
        if match:
            current = lists.get(match[1])  # the dependents are no list of changes
        elif line and current is not None:
            current.append(unlisted(line))
    return lists


def dependents_of(text: str) -> dict[str, list[str]]:
    """The dependents of a :func:`changes_text` output: each changed path, the files that import it."""
    found: dict[str, list[str]] = {}
    inside = False
    for line in text.split("\n")[1:]:
        match = _CHANGES_LIST.match(line)
        if match:
            inside = match[1] == DEPENDENTS_KIND
        elif line and inside:
            file, rest = first_listed(line)
            if rest.startswith(_PAIR_WORDS):
                found.setdefault(unlisted(rest[len(_PAIR_WORDS) :]), []).append(file)
    return found


def change_heading(line: str) -> str | None:
    """The kind a heading line of a change list opens (``added`` ... ``dependents``), or None."""
    match = _CHANGES_LIST.match(line)
    return match[1] if match else None


def first_listed(line: str) -> tuple[str, str]:
    """A line's first listed path (a JSON string, or up to its first space) and the rest."""
    if line.startswith('"'):
        try:
            value, end = json.JSONDecoder().raw_decode(line)
            if isinstance(value, str):
                return value, line[end:]
        except ValueError:
            pass
    head, _, rest = line.partition(" ")
    return head, " " + rest if rest else ""


def unlisted(line: str) -> str:
    """A path as :func:`runner.protocol.listed_path` wrote it, read back."""
    if line.startswith('"'):
        try:
            value = json.loads(line)
            return value if isinstance(value, str) else line
        except ValueError:
            return line
    return line


def incremental_head(text: str) -> str:
    """An incremental note's own words, before its lists of paths (where a file's name may say
    anything): what a reader looks for the runtime's phrases in."""
    return text.split(INCREMENTAL_LISTS, 1)[0]


def agents_of(text: str) -> list[tuple[str, str]]:
    """The (directory, task prompt) lines of an :func:`runner.protocol.agents_text` output or a page of
    it (a line it cannot read is left out)."""
    found = []
    for line in text.split("\n"):
        where, tab, prompt = line.partition("\t")
        if not tab or not where or where.startswith("["):
            continue
        try:
            value = json.loads(prompt)
        except ValueError:
            continue
        if isinstance(value, str):
            found.append((where, value))
    return found
