"""The text protocol: every marker, placeholder and label the runner writes into a model's context,
and the parsers that recognize them.

Everything that writes or reads these texts (the compactor, the tools, the offline policy, the
emulator, the benchmarks) imports them from here, so a change of wording is one change.
"""

from __future__ import annotations

import re

# -- cut results: every result the tools cut says so, and how to get the rest -------------------------

GLOB_CUT = ("[glob: cut: showing {shown} of {total} matches (newest first){walk}; narrow the pattern "
            "(e.g. per directory with `path`, or by name) to see the rest]")
GLOB_WALK = ", counting stopped at {cap} entries, there may be more"
_GLOB_CUT = re.compile(r"^\[glob: cut: showing (\d+) of (\d+) matches", re.M)

GREP_WALK_CUT = ("[grep: cut: the search stopped after {cap} files, matches in later files are not shown; "
                 "search a narrower `path`]")
BASH_OUTPUT_CUT = ("[bash: cut: output was {total} bytes, showing the first {shown}; narrow it with head, tail, "
                   "grep or sed -n]")
READ_PAGE = ("[read: lines {start}-{end} of {lines} ({size} bytes; too large for one read); next: "
             "view_range [{next_start}, {next_end}]]")
RECALL_PAGE = "[recall: page {page} of {pages}, characters {start}-{end} of {total}; {rest}]"
RECALL_NEXT = "next page: offset {end}"
RECALL_END = "end of file"
_RECALL_PAGE = re.compile(r"\n\[recall: page (\d+) of (\d+), characters (\d+)-(\d+) of (\d+); ([^\]]*)\]$")

REPEATED_CALL = ("[not run: this exact {name} call was already made {count} times in the last {window} turns, "
                 "first at turn {turn}; its result {where}. Change the call or move on]")
STUCK = "repeated the same call {count} times after being told it was already made: {call}"


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
    return text[:match.start()] if match else text
