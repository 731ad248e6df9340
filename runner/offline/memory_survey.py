"""The offline survey when the memory tool is offered: a tree of any size in a small window.

Everything the survey learns goes to memory files as it learns it; the context holds only a small
state (one note line a turn, ``- survey-state | {...}``, which summaries keep) and the newest
results. The memory files (under ``/memories/survey/``) are append-only logs, split in shards of
:data:`SHARD_BYTES` so no file outgrows the memory tool's cap (the state says where each starts):

- ``dirs-NNN.md``: directories still to list (one relative path a line), read back a few at a time;
- ``files-NNN.md``: the files to read, one line per group (``dir`` then names, tab-separated);
- ``todo-NNN.md``: every TODO / FIXME / XXX line found, as ``path:line``;
- ``shown-000.md``: the first of those lines with their text, as the report shows them (kept out of
  the note, which every turn rewrites);
- ``facts-NNN.md``: one line per entry read, a JSON array: ``[path, "text", lines, chars, defs,
  doc]``, ``[path, "text", lines, bytes, defs, doc, "bytes"]`` (a file too large for one read,
  measured from the read's first line), ``[path, "binary", bytes]``, ``[path, "image", bytes]``,
  ``[path, "error", text]``; ``defs`` counts a Python file's top-level definitions (from its text, or
  by a ``grep`` of its outline when only part of it was in view; ``null`` when that failed), ``doc``
  is its first docstring or comment line.

Listing: ``glob **/*`` of a directory names its whole subtree when it is not cut; a cut one is
listed by ``*`` (split by first characters while cut) and each entry is read: a directory read as
a file says "not a regular file" and is queued to be listed. The read pass goes down the files log;
how many files a turn reads (and directories it lists) follows a target of what a turn may add to
the context (at first :data:`TARGET_CHARS`, a read the compactor cuts taking about
:data:`READ_CHARS`), which shrinks when history compactions come close together and grows when
they come far apart: the policy does not know the window, it learns what fits.

TODO lines: the first turn searches the tree (a part: each of its directories) with one ``grep``, read
back page by page when saved. A search the grep tool cut (at 100 KiB of output, or its walk's limit)
counts for nothing: that tree's files are searched one by one as they are read instead. A file's lines
are then read off its text when a read shows all of it (by the grep tool's rules: not in a file with a
NUL byte in its first 512; a line over :data:`GREP_LINE_LIMIT` bytes counted, shown cut around its
match as the grep tool shows it), else found by a ``grep`` of
that file (a file too big for one read, a read the compactor saved, a file the read refuses as not UTF-8
whose extension is not a binary one's); a Python file's outline and TODO lines by one grep, or by two
while such greps' answers come back saved. A part's own files (no tree search covers them) are searched
that way too. So a report's TODO count is every line, whatever the tree's size. Then the report: totals
and largest files from the state, every file's row from the facts log when the tree is small (else a
pointer to the facts files), and the first TODO lines viewed back from memory.

A scoped survey (a subagent's, its prompt made from :data:`SCOPED_PROMPT`) lists, reads and
searches only its part: one directory (its first turn finds the workspace root by a glob of the
directory's own name, then lists its subtree), or only the files at the top of the workspace
(listed by ``*``). Its paths are
relative to the workspace root, so the parts' facts make the whole tree's. :func:`report_rows`
follows a parent's report (:mod:`.delegation`) to its subagents' reports.

Pure: the conversation in, the next assistant content out.
"""

from __future__ import annotations

import bisect
import errno
import hashlib
import itertools
import json
import os
import posixpath
import re
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..compaction.fallback import LAST_HEADING, NOTES_HEADING
from ..messages import Message, result_text, text_of, tool_results, tool_uses
from ..protocol import EMPTY_FILE, is_persisted, is_placeholder, is_summary, persisted_preview, saved_path
from ..tools.beneath import Root, open_regular
from ..tools.grep_worker import excerpt
from .listing import BINARY_EXTENSIONS, split
from .readback import (
    binary_size,
    glob_cut,
    is_seed_placeholder,
    persisted_size,
    read_size,
    recall_page,
    without_footer,
)

STATE_KEY = "- survey-state | "
REQUEST_START = "Current user request:"  # a summary's line before its copy of the request
SUMMARY_START = "Conversation summary:"  # a summary's line before its own text (protocol.summary_text)
SUMMARY_END = "Full transcript: "  # and the start of the line after it
FALLBACK_HEAD = "Summary built without a model"  # the first line of compaction.fallback's summary
DIR = "/memories/survey"
SHARD_BYTES = 200_000  # the most a log file holds, under the memory tool's cap of 256 KiB
HEAD = 1  # the heading line of every shard
NAMES_PER_LINE = 16  # names per line of the files log
VIEW_LINES = {"dirs": 16, "files": 1}  # log lines read back at a time
TARGET_CHARS = 8_000  # what one turn's results may take in the context, at first
TARGET_BOUNDS = (1_500, 10_000)
READ_CHARS = 1_000  # a read the compactor cut still takes about this much: reads per turn <= target / this
BINARY_READ_CHARS = 250  # a binary file's read: its error line
READS_MOST = 48
IMAGE_EXTENSIONS = frozenset({".png", ".jpg", ".jpeg", ".gif", ".webp", ".pdf"})
GLOB_CHARS = 4_000
CLOSE, CALM = 4, 8  # turns between history compactions: this close shrinks the target, this calm grows it
GLOB_SHOWN = 200  # the most names a glob shows: a saved answer of more lines was cut
INLINE_FILES = 200  # a tree this small gets every file's row in the report itself
INLINE_VIEW = 40  # rows read back per view for it (about 4,000 chars: under any page)
LARGEST = 10  # largest text files in a report, unless the request asks for another number of them
LARGEST_MOST = 100  # ... at most this many (the state note carries them every turn)
LARGEST_ASKED = re.compile(r"\b(\d{1,9})\s+(?:largest|biggest)\b|\b(?:largest|biggest)\s+(\d{1,9})\b", re.I)
TODO_SHOWN = 30
TODO_SHOWN_PART = 10  # in a part's report (its parent reads the counts; every line is in the todo log)
TITLE_UNITS = 3  # a part's report names this many of its units in its title
MAX_DEPTH = 64  # directories deeper than this (a symlink loop) are not listed
TODO_PATTERN = r"\b(TODO|FIXME|XXX)\b"
TODO = re.compile(TODO_PATTERN)
OUTLINE_PATTERN = r"^(class |def |async def )"
OUTLINE = re.compile(OUTLINE_PATTERN, re.M)
BOTH_PATTERN = f"{OUTLINE_PATTERN}|{TODO_PATTERN}"  # one grep of a file for its outline and TODO lines
OUTLINE_CHARS = 1_000  # what an outline grep's result is expected to take
TAIL_CHARS = 400  # the end of a saved output read back: its last line says whether it was cut
GREP_LINE_LIMIT = 2_000  # the grep tool cuts a longer matching line around its match (bytes, newline counted)
DOC_CHARS = 60  # of a first docstring line, in the facts and the report
TODO_CUT = "; the search output was cut, there may be more"  # in the TODO heading when its search was cut
# the report's TODO heading (written by _report): its lines, its files, and whether its search was cut
TODO_HEAD = re.compile(
    r"^## TODO / FIXME / XXX \((\d+) lines in (\d+) files(; the search output was cut)?", re.M
)
NOT_A_FILE = re.compile(r"^read: .*: not a regular file$")
NUMBERED = re.compile(r"^ *(\d+)\t(.*)$")
_SHARD = re.compile(r"^/memories/survey/(dirs|files|facts)-(\d{3})\.md$")
HEADINGS = {
    "dirs": "# directories to list, one a line",
    "files": "# files to read: a directory, then its names (tab-separated)",
    "facts": '# one entry a line: [path, "text", lines, chars, defs, doc] | [path, "text", lines, bytes, '
    'defs, doc, "bytes"] | [path, "binary", bytes] | [path, "image", bytes] | [path, "error", text]',
    "todo": "# every TODO / FIXME / XXX line the search found: path:line",
    "shown": "# the first TODO / FIXME / XXX lines, as the report shows them: path:line: text",
}
SKIP_DIRS = frozenset({".git", ".hg", ".svn"})  # version control internals: not the tree's files
TOP = "."  # the scope of a survey of only the files at the top of the workspace
# a subagent's prompt: the model's text (a parent writes it, the subagent's survey reads its scope)
SCOPED_PROMPT = (
    "You survey one part of a workspace; other agents survey the rest. Your part: {scope}. "
    "List and read only that part, and give every path relative to the workspace root. The "
    "request you have a part of:\n\n{request}"
)
SCOPE_DIR = "the directory `{dir}/` and everything in it"
SCOPE_DIRS = "the directories {dirs}, each with everything in it"  # several in a row, named once
SCOPE_FILES = "only the files directly in `{dir}/` (not those in its subdirectories)"
SCOPE_FILES_IN = "only the files directly in {dirs} (not those in their subdirectories)"
SCOPE_TOP = "only the files at the top of the workspace (not those in any subdirectory)"
UNITS_JOIN = "; "  # a part of several units names them in this order, joined so
UNIT_SEP = "|"  # a scope's units joined (no name a part can hold has it: see .delegation)
FILES_ONLY = "/."  # the unit ``D/.``: only the files directly in ``D``
_NAME = "([^`\n]+)"
_NAMES = "(`[^`\n]+/`(?:, `[^`\n]+/`)+)"  # two or more, each as `name/`


def _form(template: str, field: str, group: str) -> str:
    return re.escape(template).replace(re.escape("{" + field + "}"), group)


_UNIT = re.compile(
    "|".join(
        (
            _form(SCOPE_DIR, "dir", _NAME),
            _form(SCOPE_FILES, "dir", _NAME),
            "(" + re.escape(SCOPE_TOP) + ")",
            _form(SCOPE_DIRS, "dirs", _NAMES),
            _form(SCOPE_FILES_IN, "dirs", _NAMES),
        )
    )
)
_SCOPE = re.compile(
    "Your part: ((?:"
    + _UNIT.pattern
    + ")(?:"
    + re.escape(UNITS_JOIN)
    + "(?:"
    + _UNIT.pattern
    + "))*)"
    + re.escape(". List and read only that part")
)
_LISTED = re.compile("`([^`\n]+)/`")
INCREMENTAL_TODO_TEXT = (
    "the files themselves (an incremental survey searches only the files added or changed since its baseline)"
)
SCOPED_HEAD = "One part of a survey split among agents; every path is relative to the workspace root."
TOTALS = (
    "{files} files: {text} text files read ({lines} lines, {chars} chars), {binary} binary "
    "({binary_bytes} bytes), {errors} could not be read."
)
TOTALS_LINE = re.compile(
    r"^(\d+) files: (\d+) text files read \((\d+) lines, (\d+) chars\), (\d+) binary "
    r"\((\d+) bytes\), (\d+) could not be read\.$",
    re.M,
)
# a row of a parent's table of its subagents (:mod:`.delegation`): report_rows follows the succeeded ones
SUBAGENT_ROW = "| `{dir}` | {scope} | {status} | {files} | `{report}` |"
_SUBAGENT_ROW = re.compile(r"^\| `([^`\n]+)` \| .* \| (\w+) \| [\d-]+ \| `([^`\n]+)` \|$", re.M)


@dataclass
class State:
    """The survey's whole state between turns (what the note line carries)."""

    phase: str = "start"  # start, list, read, todo, inline, report, done
    root: str = ""
    logs: dict[str, int] = field(
        default_factory=lambda: {"dirs": 0, "files": 0, "facts": 0, "todo": 0, "shown": 0}
    )  # lines
    taken: dict[str, int] = field(default_factory=lambda: {"dirs": 0, "files": 0})  # lines read back
    open: list[list[str]] = field(default_factory=list)  # [dir, pattern] globs still to ask
    dirs_next: list[str] = field(default_factory=list)  # read back from the dirs log, not asked yet
    files_next: list[str] = field(default_factory=list)  # read back from the files log, not read yet
    recalls: list[list[Any]] = field(default_factory=list)  # [saved path, kind, dir, pattern, offset]
    shards: dict[str, list[list[int]]] = field(
        default_factory=lambda: {"dirs": [], "files": [], "facts": [], "todo": [], "shown": []}
    )
    # per log, each file's [first line, bytes]
    waiting: list[list[Any]] = field(default_factory=list)  # facts rows whose outline grep is asked
    issued: dict[str, int] = field(
        default_factory=lambda: {"open": 0, "dirs": 0, "files": 0}
    )  # asked this turn
    target: int = TARGET_CHARS
    turn: int = 0
    summary: str = ""  # the newest history summary seen (a hash) and the turn it came
    compacted_at: int = 0
    totals: dict[str, int] = field(
        default_factory=lambda: {
            "text": 0,
            "lines": 0,
            "chars": 0,
            "binary": 0,
            "binary_bytes": 0,
            "errors": 0,
            "no_defs": 0,
        }
    )
    ext: dict[str, list[int]] = field(default_factory=dict)  # extension -> files, lines
    largest: list[list[Any]] = field(default_factory=list)  # [size, path, lines], largest first
    todo: dict[str, Any] = field(
        default_factory=lambda: {"hits": 0, "files": 0, "last": "", "cut": False, "saved": "", "shown": []}
    )
    scope: str = ""  # "" the whole workspace, else its units (see :func:`units`) joined by UNIT_SEP;
    # not in the note: the request (the first message, or a summary's copy of it) says it
    largest_n: int = LARGEST  # the largest files the report lists: not in the note, the request says it
    inc: dict[str, Any] = field(
        default_factory=dict
    )  # an incremental survey's own state (.incremental_survey)
    lines_found: dict[str, int] = field(default_factory=dict)  # a saved outline-and-TODO grep's lines, by
    # file: its outline is those less its TODO lines that are not outline lines (asked by a TODO grep)
    apart: bool = False  # the newest outline grep's answer was saved: a file's outline and TODO lines
    # are asked by two greps (one would be saved too, and its TODO lines asked again a turn later)
    deep: int = 0  # directories not listed for lying MAX_DEPTH levels down (the report says so)

    def note(self) -> str:
        fields = asdict(self)
        fields["files_next"] = _runs(self.files_next)
        del fields["scope"]  # the request says it (its first message, or a summary's copy of it)
        del fields["largest_n"]  # and this
        if not self.inc:
            del fields["inc"]  # and so is a survey's that is not incremental
        for name in ("lines_found", "apart", "deep"):
            if not fields[name]:
                del fields[name]
        return STATE_KEY + json.dumps(fields, separators=(",", ":"), ensure_ascii=False)


def _runs(paths: list[str]) -> list[list[str]]:
    """Paths as runs of one directory: ``[dir, name, name, ...]`` (the state stays small)."""
    out: list[list[str]] = []
    for p in paths:
        head, name = os.path.split(p)
        if out and out[-1][0] == head:
            out[-1].append(name)
        else:
            out.append([head, name])
    return out


def _unruns(runs: list[list[str]]) -> list[str]:
    return [os.path.join(run[0], name) for run in runs for name in run[1:]]


def own_text(message: Message) -> str:
    """What of ``message`` the policy wrote itself, the only text whose notes it trusts: an assistant
    message's text; of a summary, the assistant's notes and last text it carries (a summary built
    without a model: its notes section and its last assistant text, never its lists of files, calls and
    errors, nor its copy of the request; another summary: its summary part). Nothing of any other
    message: the prompt, the runtime's notes (which quote the workspace's file names), tool results."""
    text = text_of(message)
    if message.get("role") == "assistant":
        return text
    lines = text.split("\n")
    if not is_summary(text) and not (  # a summary under another label: protocol.summary_text's shape
        len(lines) > 3 and lines[0].startswith("[") and lines[0].endswith("]") and lines[2] == REQUEST_START
    ):
        return ""
    if SUMMARY_START in lines:  # what follows the request (a summary of a request that says anything)
        lines = lines[lines.index(SUMMARY_START) + 1 :]
    built_here = bool(lines) and lines[0].startswith(FALLBACK_HEAD)
    if not built_here and NOTES_HEADING not in lines and LAST_HEADING not in lines:
        return "\n".join(line for line in lines if not line.startswith(SUMMARY_END))
    kept: list[str] = []
    section = ""
    for line in lines:
        if line in (NOTES_HEADING, LAST_HEADING):
            section = line
        elif line.startswith(SUMMARY_END):
            break
        elif section == LAST_HEADING or (section == NOTES_HEADING and not line.startswith("### ")):
            kept.append(line)
        else:
            section = ""
    return "\n".join(kept)


def own_lines(messages: list[Message], key: str) -> Iterator[tuple[int, str]]:
    """Every line the policy wrote itself (:func:`own_text`) that starts with ``key``, newest first,
    each with the index of its message and what follows the key (lazily: the newest is found first)."""
    for i in range(len(messages) - 1, -1, -1):
        text = own_text(messages[i])
        if key in text:
            for line in reversed(text.split("\n")):
                if line.startswith(key):
                    yield i, line[len(key) :]


def load_state(messages: list[Message]) -> tuple[State | None, int]:
    """The newest state note in view and the index of the message that carries it: a line of its own
    that the policy wrote (:func:`own_text`), never one a tool result, the request or the runtime's
    note holds (a file may be named like a state note)."""
    for i, line in own_lines(messages, STATE_KEY):
        try:
            fields = json.loads(line)
            fields["files_next"] = _unruns(fields.get("files_next", []))
            fields.setdefault("scope", scope_of(messages) or "")
            fields.setdefault("largest_n", largest_of(messages))
            for kind in ("logs", "shards"):  # a note older than the shown log
                if kind in fields:
                    fields[kind].setdefault("shown", 0 if kind == "logs" else [])
            return State(**fields), i
        except (TypeError, ValueError, AttributeError):
            continue
    return None, -1


def scope_of(messages: list[Message]) -> str | None:
    """The scope the job's request (its first message, or a summary's copy of it) gives (its
    units joined by :data:`UNIT_SEP`), or None for an unscoped request."""
    match = _SCOPE.search(text_of(messages[0])) if messages else None
    if match is None:
        return None
    found: list[str] = []
    for whole, files, top, wholes, files_in in _UNIT.findall(match[1]):
        if top:
            found.append(TOP)
        elif wholes or files_in:
            found += [d + ("" if wholes else FILES_ONLY) for d in _LISTED.findall(wholes or files_in)]
        else:
            found.append(whole or files + FILES_ONLY)
    return UNIT_SEP.join(found)


def largest_asked(request: str) -> int:
    """How many largest files ``request`` asks for ("the 20 largest files", "largest 5"), from 1 to
    :data:`LARGEST_MOST`; :data:`LARGEST` when it names no number."""
    match = LARGEST_ASKED.search(request)
    if match is None:
        return LARGEST
    return max(1, min(LARGEST_MOST, int(match[1] or match[2])))


def largest_of(messages: list[Message]) -> int:
    """:func:`largest_asked` of the job's request (its first message, or a summary's copy of it)."""
    return largest_asked(text_of(messages[0])) if messages else LARGEST


def units(scope: str) -> list[str]:
    """A scope's units: a directory (its whole subtree, relative to the workspace root), ``D/.``
    (only the files directly in ``D``), :data:`TOP` (only the files at the top); none when unscoped."""
    return scope.split(UNIT_SEP) if scope else []


def files_only(unit: str) -> str | None:
    """The directory whose own files alone ``unit`` covers ("" for the top), None for a subtree."""
    if unit == TOP:
        return ""
    return unit[: -len(FILES_ONLY)] if unit.endswith(FILES_ONLY) else None


def unit_dir(unit: str) -> str:
    """The directory a unit is in or of ("" for the top)."""
    only = files_only(unit)
    return unit if only is None else only


def scoped_prompt(scope: str, request: str) -> str:
    """The prompt of a survey of ``scope`` (its units joined by :data:`UNIT_SEP`) only: units of a kind
    in a row are named in one clause (:func:`scope_of` reads them back in the same order)."""
    parts = []
    for kind, run in itertools.groupby(units(scope), key=_kind):
        dirs = [unit_dir(u) for u in run]
        if kind == "top":
            parts += [SCOPE_TOP] * len(dirs)
        elif len(dirs) == 1:
            parts.append(SCOPE_DIR.format(dir=dirs[0]) if kind == "dir" else SCOPE_FILES.format(dir=dirs[0]))
        else:
            listed = ", ".join(f"`{d}/`" for d in dirs)
            template = SCOPE_DIRS if kind == "dir" else SCOPE_FILES_IN
            parts.append(template.format(dirs=listed))
    return SCOPED_PROMPT.format(scope=UNITS_JOIN.join(parts), request=request)


def _kind(unit: str) -> str:
    only = files_only(unit)
    return "dir" if only is None else "files" if only else "top"


def _own_files_dirs(s: State) -> set[str]:
    """The directories whose own files (and no subdirectory) the survey covers."""
    return {d for d in (files_only(u) for u in units(s.scope)) if d is not None}


def glob_literal(path: str) -> str:
    """A glob pattern that matches exactly ``path`` (its wildcard characters bracketed)."""
    return re.sub(r"([*?\[])", r"[\1]", path)


def shard_path(log: str, k: int) -> str:
    return f"{DIR}/{log}-{k:03d}.md"


def shard_of(state: State, log: str, index: int) -> tuple[int, int, int | None]:
    """The log file holding line ``index``: its number, its first line, the next file's first line."""
    starts = [start for start, _ in state.shards[log]]
    k = max(0, bisect.bisect_right(starts, index) - 1)
    return k, starts[k] if starts else 0, starts[k + 1] if k + 1 < len(starts) else None


def escape(name: str) -> str:
    return name.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n").replace("\r", "\\r")


def unescape(text: str) -> str:
    return re.sub(r"\\(.)", lambda m: {"t": "\t", "n": "\n", "r": "\r"}.get(m[1], m[1]), text)


class Turn:
    """One turn being planned: the state, what to append to each log, the calls."""

    def __init__(self, state: State):
        self.state = state
        self.appends: dict[str, list[str]] = {"dirs": [], "files": [], "facts": [], "todo": [], "shown": []}
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.outlines: list[str] = []  # Python files whose outline this turn greps
        self.todos: list[str] = []  # files whose TODO lines this turn greps (not all of it was in view)
        self.before = dict(state.logs)  # log lines that exist before this turn's writes

    def searches(self) -> list[tuple[str, dict[str, Any]]]:
        """This turn's greps of single files: one for a Python file's outline and TODO lines both."""
        todos = set() if self.state.apart else set(self.todos)
        calls = [
            ("grep", {"pattern": BOTH_PATTERN if p in todos else OUTLINE_PATTERN, "path": p})
            for p in self.outlines
        ]
        outlined = todos & set(self.outlines)
        calls += [("grep", {"pattern": TODO_PATTERN, "path": p}) for p in self.todos if p not in outlined]
        return calls

    # --- what a result teaches ----------------------------------------------------------------------

    def fact(self, path: str, row: list[Any]) -> None:
        """A facts row learned: counted, and appended to the facts log."""
        self.count(path, row)
        self.appends["facts"].append(json.dumps(row, ensure_ascii=False))

    def count(self, path: str, row: list[Any]) -> None:
        """A facts row in the totals, the extension table and the largest files (not written)."""
        s = self.state
        kind = row[1]
        if kind == "text":
            lines, size = row[2], row[3]
            s.totals["text"] += 1
            s.totals["lines"] += lines
            s.totals["chars"] += size
            s.totals["no_defs"] += path.endswith(".py") and row[4] is None
            ext = os.path.splitext(path)[1] or "(none)"
            acc = s.ext.setdefault(ext, [0, 0])
            acc[0] += 1
            acc[1] += lines
            self._largest(size, path, lines)
        elif kind in ("binary", "image"):
            s.totals["binary"] += 1
            s.totals["binary_bytes"] += row[2]
        else:
            s.totals["errors"] += 1

    def _largest(self, size: int, path: str, lines: int) -> None:
        top = self.state.largest + [[size, path, lines]]
        top.sort(key=lambda r: (-r[0], r[1]))
        self.state.largest = top[: self.state.largest_n]

    def files(self, paths: list[str], listed: bool) -> None:
        """Relative paths to read, appended to the files log grouped by directory; ``listed``: they
        are a directory's own entries (``*``), so a subdirectory among them is to be listed (a
        ``**/*`` answer names its subdirectories' entries too). Such a group's line starts ``+``."""
        groups: dict[str, list[str]] = {}
        for p in paths:
            if not (set(p.split("/")) & SKIP_DIRS):
                groups.setdefault(os.path.dirname(p), []).append(os.path.basename(p))
        for d, names in sorted(groups.items()):
            for k in range(0, len(names), NAMES_PER_LINE):
                head = ("+" if listed else "") + escape(d or ".")
                self.appends["files"].append(
                    "\t".join([head, *(escape(n) for n in names[k : k + NAMES_PER_LINE])])
                )

    def directory(self, path: str) -> None:
        if os.path.dirname(path) in _own_files_dirs(self.state):  # another part's: not listed here
            return
        if os.path.basename(path) in SKIP_DIRS:
            return
        if path.count("/") < MAX_DEPTH:
            self.appends["dirs"].append(escape(path))
        else:
            self.state.deep += 1

    # --- the memory writes --------------------------------------------------------------------------

    def write_logs(self) -> None:
        """Each log's new lines, appended at its end (a new shard created when one is full)."""
        for log, lines in self.appends.items():
            at = self.state.logs[log]
            shards = self.state.shards[log]
            while lines:
                new = not shards or shards[-1][1] + len(lines[0].encode()) + 1 > SHARD_BYTES
                if new:
                    shards.append([at, len(HEADINGS[log].encode()) + 1])
                part: list[str] = []
                while lines and (not part or shards[-1][1] + len(lines[0].encode()) + 1 <= SHARD_BYTES):
                    shards[-1][1] += len(lines[0].encode()) + 1
                    part.append(lines.pop(0))
                path = shard_path(log, len(shards) - 1)
                if new:
                    self.calls.append(
                        (
                            "memory",
                            {
                                "command": "create",
                                "path": path,
                                "file_text": "\n".join([HEADINGS[log], *part]) + "\n",
                            },
                        )
                    )
                else:
                    self.calls.append(
                        (
                            "memory",
                            {
                                "command": "insert",
                                "path": path,
                                "insert_line": at - shards[-1][0] + HEAD,
                                "insert_text": "\n".join(part) + "\n",
                            },
                        )
                    )
                at += len(part)
            self.state.logs[log] = at

    def view_log(self, log: str) -> bool:
        """Read back the next lines of ``log`` written before this turn; False when there are none."""
        start, end = self.state.taken[log], self.before[log]
        if start >= end:
            return False
        k, base, following = shard_of(self.state, log, start)
        stop = min(end, start + VIEW_LINES[log], following if following is not None else end)
        first = start - base + 1 + HEAD
        self.calls.append(
            (
                "memory",
                {
                    "command": "view",
                    "path": shard_path(log, k),
                    "view_range": [first, first + stop - start - 1],
                },
            )
        )
        return True


def first_doc_line(text: str) -> str:
    """The first docstring or comment line of a source text, or ''."""
    for raw in text.split("\n")[:200]:
        line = raw.strip()
        if not line or line.startswith("#!") or "coding" in line and line.startswith("#"):
            continue
        for quote in ('"""', "'''", 'r"""', "r'''"):
            if line.startswith(quote):
                body = line[len(quote) :].replace(quote.lstrip("r"), "").strip()
                if body:
                    return body[:DOC_CHARS]
                break
        else:
            if line.startswith("#"):
                body = line.lstrip("#").strip()
                if body:
                    return body[:DOC_CHARS]
                continue
            if line.startswith(("import ", "from ", "__", "class ", "def ")) or "=" in line:
                return ""
            continue
        continue
    return ""


def rel_path(root: str, path: str) -> str:
    if root and (path == root or path.startswith(root.rstrip("/") + "/")):
        return path[len(root.rstrip("/")) + 1 :] or "."
    return path.lstrip("/") if not root else path


def _entries(text: str) -> list[str]:
    return [line for line in text.split("\n") if line.startswith("/")]


def _image_bytes(result: dict[str, Any]) -> int | None:
    content = result.get("content")
    for item in content if isinstance(content, list) else []:
        if isinstance(item, dict) and item.get("type") in ("image", "document"):
            data = str((item.get("source") or {}).get("data", ""))
            return len(data) * 3 // 4 - data[-2:].count("=")
    return None


def _learn_read(turn: Turn, path: str, result: dict[str, Any], *, listed: bool) -> bool:
    """A read's fact; False when the result is gone (read again)."""
    text = result_text(result)
    if is_placeholder(text) or is_seed_placeholder(text):
        return False
    if text == EMPTY_FILE:
        turn.fact(path, [path, "text", 0, 0, 0 if path.endswith(".py") else None, ""])
        return True
    if result.get("is_error"):
        if NOT_A_FILE.match(text.strip()):
            if listed:  # a directory among a directory's own entries: list it (else it is listed already)
                turn.directory(path)
            return True
        binary = binary_size(text)
        turn.fact(path, [path, "binary", binary] if binary is not None else [path, "error", text[:200]])
        text_like = os.path.splitext(path)[1].lower() not in BINARY_EXTENSIONS
        if binary is not None and text_like and _todos_by_file(turn.state, path):
            turn.todos.append(path)  # not UTF-8, and maybe text all the same: the grep tool searches it
        return True
    image = _image_bytes(result)
    if image is not None:
        turn.fact(path, [path, "image", image])
        return True
    whole = not is_persisted(text)
    head = persisted_preview(text) if not whole else text
    partial = read_size(head)
    doc = first_doc_line(head.split("\n", 1)[1] if partial else head).replace("\n", " ")
    if partial:
        row: list[Any] = [path, "text", partial[0], partial[1], None, doc, "bytes"]
    else:
        size = persisted_size(text)
        chars, lines = (
            size if size else (len(text), text.count("\n") + (1 if text and not text.endswith("\n") else 0))
        )
        row = [
            path,
            "text",
            lines,
            chars,
            len(OUTLINE.findall(text)) if whole and path.endswith(".py") else None,
            doc,
        ]
    if path.endswith(".py") and row[4] is None:  # only part of it was in view: its outline by grep
        turn.state.waiting.append(row)
        turn.outlines.append(path)
    else:
        turn.fact(path, row)
    if _todos_by_file(turn.state, path):
        if whole and not partial:  # all of it in view: its TODO lines are read off it
            _todo_lines_of(turn, path, text)
        else:
            turn.todos.append(path)  # its own grep
    return True


def _incremental(s: State) -> bool:
    """An incremental survey's own steps (it searches each file it reads ahead of the read, to put the
    file's lines where its old ones were), not a full survey's."""
    return bool(s.inc) and not s.inc.get("fresh")


def _todos_by_file(s: State, path: str) -> bool:
    """Whether ``path``'s TODO lines are found file by file: it is among a part's own files (no search
    of a tree covers them), or beneath a search root whose search was cut (its output, or its walk)."""
    if _incremental(s):
        return False
    if os.path.dirname(path) in _own_files_dirs(s):
        return True
    return any(not root or path.startswith(root + "/") for root in s.todo.get("by_file", []))


def _search_roots(s: State) -> list[str]:
    """What the first turn's TODO searches cover: the tree (``""``), or a part's directory units."""
    return [u for u in units(s.scope) if files_only(u) is None] if s.scope else [""]


def _learn_search(turn: Turn, root: str, result: dict[str, Any], *, text: str) -> None:
    """A search of a tree for TODO lines: learned when whole; a saved one's end read first (a cut
    output ends with the grep tool's line saying so); a cut, failed or gone one leaves that tree's
    files to be searched one by one as they are read."""
    s = turn.state
    s.todo["asked"] = [r for r in s.todo.get("asked", []) if r != root]
    if is_persisted(text) and saved_path(text):
        chars = (persisted_size(text) or (0, 0))[0]
        s.recalls.append([saved_path(text), "todo-tail", root, "", max(0, chars - TAIL_CHARS)])
    elif result.get("is_error") or is_placeholder(text) or is_seed_placeholder(text) or _search_cut(text):
        s.todo.setdefault("by_file", []).append(root)
    else:
        _learn_todo(turn, text)


def _search_cut(text: str) -> bool:
    return "[output truncated at" in text or any(line.startswith("[grep") for line in text.split("\n"))


def _todo_lines_of(turn: Turn, path: str, text: str) -> None:
    """The TODO lines of a file read whole, as the grep tool finds them: not in a file with a NUL
    byte in its first 512; a line longer than :data:`GREP_LINE_LIMIT` bytes shown as the grep tool
    shows it (cut around its match; a read whole holds no line past what it searches)."""
    if b"\x00" in text.encode()[:512]:
        return
    lines = text.split("\n")
    for number, line in enumerate(lines, 1):
        size = len(line.encode()) + (number < len(lines))  # the grep tool counts the newline
        line = line.rstrip("\r")
        if match := TODO.search(line):
            shown = line if size <= GREP_LINE_LIMIT else excerpt(line, match, size)
            _todo_hit(turn, path, str(number), hit=shown)


def _cut(turn: Turn, d: str, pattern: str, *, text: str) -> None:
    """A cut answer: ``**/*`` of ``d`` is listed by its own entries, a cut ``*`` by narrower ones
    (after the beginning all the names it showed share)."""
    if pattern == "**/*":
        turn.state.open.append([d, "*"])
        return
    shown = [os.path.basename(rel_path(turn.state.root, e)) for e in _entries(text)]
    turn.state.open += [[d, p] for p in split(pattern, shown) if p != pattern]


def _learn_glob(turn: Turn, d: str, pattern: str, *, text: str) -> None:
    names = [rel_path(turn.state.root, e) for e in _entries(text)]
    if glob_cut(text) is not None:
        _cut(turn, d, pattern, text=text)
    elif pattern == "**/*":
        parents = {os.path.dirname(n) for n in names}
        turn.files([n for n in names if n not in parents], listed=False)
    else:
        turn.files(names, listed=True)


def _learn_view(turn: Turn, log: str, index: int, *, text: str) -> None:
    s = turn.state
    base = shard_of(s, log, index)[1]
    got = 0
    for line in text.split("\n")[1:]:
        match = NUMBERED.match(line)
        if not match or int(match[1]) <= HEAD:
            continue
        at = base + int(match[1]) - 1 - HEAD
        if at != s.taken[log]:
            continue  # only the next line in order counts
        s.taken[log] += 1
        got += 1
        if log == "dirs":
            s.dirs_next.append(unescape(match[2]))
        else:
            s.files_next += _files_line(match[2])


def _learn_both(
    turn: Turn, path: str, waiting: dict[str, list[Any]], *, result: dict[str, Any], text: str
) -> None:
    """A Python file's outline and TODO lines, from one grep. A saved result (its lines out of view)
    keeps its count of lines and asks a TODO grep next turn; a gone one asks this grep again."""
    row = waiting.pop(path, [])
    saved = persisted_size(text) if is_persisted(text) else None
    turn.state.apart = bool(saved)
    if saved or is_placeholder(text) or is_seed_placeholder(text):
        if row:
            turn.state.waiting.append(row)
            if saved:
                turn.state.lines_found[path] = saved[1]
            else:
                turn.outlines.append(path)
        turn.todos.append(path)
        return
    found = _learn_todo(turn, "" if result.get("is_error") else text, only_todo=True)
    if row:
        row[4] = None if result.get("is_error") else count_matches(text) - _not_outline(found)
        turn.fact(str(row[0]), row)


def _learn_file_todos(
    turn: Turn, path: str, waiting: dict[str, list[Any]], *, result: dict[str, Any], text: str
) -> None:
    """One file's TODO grep; with the count of its saved outline-and-TODO grep, that file's outline."""
    s = turn.state
    found_before = s.lines_found.pop(path, None)
    row = waiting.pop(path, []) if found_before is not None else []
    if is_placeholder(text) or is_seed_placeholder(text):  # gone: asked again
        turn.todos.append(path)
        if row:
            s.waiting.append(row)
            s.lines_found[path] = found_before or 0
    elif is_persisted(text) and saved_path(text):  # read back page by page; the outline by its own grep
        s.recalls.append([saved_path(text), "todo", "", "", 0])
        if row:
            s.waiting.append(row)
            turn.outlines.append(path)
    else:
        found = _learn_todo(turn, "" if result.get("is_error") else text)
        if row:
            row[4] = None if result.get("is_error") else (found_before or 0) - _not_outline(found)
            turn.fact(str(row[0]), row)


def _not_outline(found: list[tuple[str, str, str]]) -> int:
    return sum(1 for place in found if not OUTLINE.match(place[2]))


def _learn_todo(turn: Turn, text: str, *, only_todo: bool = False) -> list[tuple[str, str, str]]:
    """The TODO lines of a grep's output (``only_todo``: of the lines it found, those that are), each
    as (path, line number, text)."""
    todo = turn.state.todo
    found = []
    for line in text.split("\n"):
        if not line.strip() or line.startswith(("no matches", "[output", "[recall", "[grep")):
            continue
        place = todo_place(turn.state.root, line)
        if place is None or (only_todo and not TODO.search(place[2])):
            continue
        _todo_hit(turn, place[0], place[1], hit=place[2])
        found.append(place)
    todo["cut"] = todo["cut"] or "[output truncated at" in text
    return found


def _todo_hit(turn: Turn, path: str, number: str, *, hit: str) -> None:
    todo = turn.state.todo
    todo["hits"] += 1
    turn.appends["todo"].append(escape(f"{path}:{number}"))
    if path != todo["last"]:
        todo["files"] += 1
        todo["last"] = path
    line = f"{path}:{number}: {hit.strip()[:100]}"
    limit = TODO_SHOWN_PART if turn.state.scope else TODO_SHOWN
    if _incremental(turn.state):  # an incremental survey's: in its state, until its report
        if len(todo["shown"]) < limit:
            todo["shown"].append(line)
    elif turn.state.logs["shown"] + len(turn.appends["shown"]) < limit:  # in memory, not in every note
        turn.appends["shown"].append(line)


def todo_place(root: str, line: str) -> tuple[str, str, str] | None:
    """A TODO search's output line as (relative path, line number, the line's text), or None."""
    path, _, rest = rel_path(root, line).partition(":")
    number, _, hit = rest.partition(":")
    return (path, number, hit) if number.isdigit() else None


Learner = Callable[[Turn, dict[str, Any], dict[str, Any]], bool]


def apply(turn: Turn, messages: list[Message], at: int, *, other: Learner | None = None) -> None:
    """The results of the calls made in message ``at`` (the one carrying the state). What was asked
    there leaves the state's queues now; a result that is gone puts its call back (and so does a
    state read from a summary, whose calls are out of view). ``other`` learns first what it claims
    (an incremental survey's own results: it returns True for those)."""
    s = turn.state
    uses = {str(u.get("id")): u for u in tool_uses(messages[at])}
    if not uses:
        _nothing_asked(turn)
        return
    listed = {p.lstrip("+"): p.startswith("+") for p in s.files_next[: s.issued["files"]]}
    del s.open[: s.issued["open"]]
    del s.dirs_next[: s.issued["dirs"]]
    del s.files_next[: s.issued["files"]]
    s.issued = {"open": 0, "dirs": 0, "files": 0}
    waiting, s.waiting = {str(row[0]): row for row in s.waiting}, []
    results = [r for m in messages[at + 1 : at + 2] for r in tool_results(m)]
    lost = []
    for result in results:
        use = uses.get(str(result.get("tool_use_id")))
        if use is None or (other is not None and other(turn, use, result)):
            continue
        again = _learn_result(turn, use, result, listed=listed, waiting=waiting)
        if again is not None:
            lost.append(again)
    s.files_next = lost + s.files_next
    for row in waiting.values():  # an outline that did not come back: the row without it
        s.lines_found.pop(str(row[0]), None)
        turn.fact(str(row[0]), row)
    _unanswered_searches(s)


def _nothing_asked(turn: Turn) -> None:
    """The message carrying the state asked nothing (a state read from a summary): what it had issued
    is issued again, the rows waiting for their outline kept without it."""
    s = turn.state
    _unanswered_searches(s)
    s.issued = {"open": 0, "dirs": 0, "files": 0}
    for row in s.waiting:  # their outline greps are out of view
        turn.fact(str(row[0]), row)
    s.waiting, s.lines_found = [], {}


def _learn_result(
    turn: Turn,
    use: dict[str, Any],
    result: dict[str, Any],
    *,
    listed: dict[str, bool],
    waiting: dict[str, list[Any]],
) -> str | None:
    """One call's result learned; the file to read again (``+`` before it: it was listed) when it was a
    read whose result is gone, else None."""
    s = turn.state
    name, args = use.get("name"), use.get("input") or {}
    text = result_text(result)
    if name == "read":
        path = rel_path(s.root, str(args.get("file_path", "")))
        if not _learn_read(turn, path, result, listed=listed.get(path, False)):
            return ("+" if listed.get(path) else "") + path
    elif name == "glob":
        _learn_glob_result(turn, args, result, text=text)
    elif name == "recall":
        _learn_recall(turn, args, text)
    elif name == "grep":
        _learn_grep(turn, args, result, waiting=waiting)
    elif name == "memory":
        _learn_memory(turn, args, result)
    return None


def _learn_grep(
    turn: Turn, args: dict[str, Any], result: dict[str, Any], *, waiting: dict[str, list[Any]]
) -> None:
    """A grep's result: a Python file's outline and TODO lines, its outline alone, a tree's or a
    file's TODO lines (``waiting``: the rows read, by path, waiting for their outline)."""
    s = turn.state
    text = result_text(result)
    pattern = args.get("pattern")
    if pattern == BOTH_PATTERN:
        _learn_both(turn, rel_path(s.root, str(args.get("path", ""))), waiting, result=result, text=text)
    elif pattern == OUTLINE_PATTERN:
        s.apart = s.apart and is_persisted(text)  # one grep of both again once an outline fits
        row = waiting.pop(rel_path(s.root, str(args.get("path", ""))), [])
        if row:
            row[4] = None if result.get("is_error") or is_placeholder(text) else count_matches(text)
            turn.fact(str(row[0]), row)
    elif pattern == TODO_PATTERN and not _incremental(s):
        where = rel_path(s.root, str(args.get("path") or ""))
        if where in s.todo.get("asked", []):
            _learn_search(turn, where, result, text=text)
        else:
            _learn_file_todos(turn, where, waiting, result=result, text=text)
    elif pattern == TODO_PATTERN:
        if is_persisted(text) and saved_path(text):
            s.todo["saved"] = saved_path(text)
            s.recalls.append([saved_path(text), "todo", "", "", 0])
        elif not result.get("is_error"):
            _learn_todo(turn, text)


def _learn_memory(turn: Turn, args: dict[str, Any], result: dict[str, Any]) -> None:
    """A memory call's result: a failed one ends the survey; a view of a dirs or files shard, the
    entries listed there."""
    s = turn.state
    text = result_text(result)
    if result.get("is_error"):
        raise RuntimeError(f"the survey's memory call failed: {text[:300]}")
    if args.get("command") != "view":
        return
    match = _SHARD.match(str(args.get("path")))
    if match and match[1] in ("dirs", "files"):
        view_range = args.get("view_range") or [1 + HEAD, 0]
        k = int(match[2])
        base = s.shards[match[1]][k][0] if k < len(s.shards[match[1]]) else 0
        _learn_view(turn, match[1], base + int(view_range[0]) - 1 - HEAD, text=text)


def _unanswered_searches(s: State) -> None:
    """A TODO search whose answer is not in view (a summary took it): that tree's files one by one."""
    if s.todo.get("asked"):
        s.todo.setdefault("by_file", []).extend(s.todo.pop("asked"))
    s.todo.pop("asked", None)


def count_matches(text: str) -> int:
    """The lines a grep result found (a saved one's, from its marker)."""
    size = persisted_size(text)
    if size:
        return size[1]
    if text.strip() in ("", "no matches"):
        return 0
    return len(
        [line for line in text.split("\n") if line.strip() and not line.startswith("[output truncated")]
    )


def _learn_glob_result(turn: Turn, args: dict[str, Any], result: dict[str, Any], *, text: str) -> None:
    s = turn.state
    pattern = str(args.get("pattern"))
    if (
        "path" not in args
    ):  # the first turn's: ``*`` tells the root, ``**/*`` the whole tree or that it is big
        probe = pattern == "*" or (s.scope and pattern == glob_literal(_probe_dir(s)))
        if probe and result.get("is_error") and not s.root:  # not an empty workspace: not listed at all
            raise RuntimeError(f"the survey could not list the workspace: {text[:300]}")
        entries = _entries(text)
        if pattern == "*":
            s.root = os.path.dirname(entries[0]) if entries else s.root
            if "" not in _own_files_dirs(s):  # a survey of the top files lists them by this answer
                return
        elif s.scope and pattern == glob_literal(_probe_dir(s)):  # a scoped survey's root, by its directory
            s.root = _root_of(entries[0], _probe_dir(s)) if entries else s.root
            return
    d = rel_path(s.root, str(args.get("path") or s.root))
    d = "" if d == "." else d
    size = persisted_size(text)
    if result.get("is_error"):
        return
    if is_placeholder(text) or is_seed_placeholder(text):  # gone before it was seen: ask again
        s.open.append([d, pattern])
    elif size and size[1] > GLOB_SHOWN:  # saved, and longer than a whole answer: it was cut
        _cut(turn, d, pattern, text=text)
    elif is_persisted(text) and saved_path(text):
        s.recalls.append([saved_path(text), "glob", d, pattern, 0])
    else:
        _learn_glob(turn, d, pattern, text=text)


def _probe_dir(s: State) -> str:
    """The directory whose own name a scoped survey globs to find the workspace root."""
    return next((unit_dir(u) for u in units(s.scope) if unit_dir(u)), "")


def _root_of(entry: str, scope: str) -> str:
    """The workspace root, from the path a glob of the scope's own name answered."""
    if entry.endswith("/" + scope):
        return entry[: -len(scope) - 1]
    for _ in scope.split("/"):
        entry = os.path.dirname(entry)
    return entry


def _learn_recall(turn: Turn, args: dict[str, Any], text: str) -> None:
    s = turn.state
    path = str(args.get("path"))
    item = next((r for r in s.recalls if r[0] == path and r[4] == int(args.get("offset") or 0)), None)
    if item is None or is_placeholder(text):
        return
    footer = recall_page(text)
    body = without_footer(text)
    end, total = (footer[3], footer[4]) if footer else (item[4] + len(body), item[4] + len(body))
    if end < total and "\n" in body:  # a line cut at the page's end is left for the next page
        body = body.rsplit("\n", 1)[0] + "\n"
        end = item[4] + len(body)
    if item[1] == "todo-tail":  # the end of a saved search: whole, read back from its start; or cut
        s.recalls.remove(item)
        if _search_cut(body):
            s.todo.setdefault("by_file", []).append(item[2])
        else:
            s.todo["saved"] = path
            s.recalls.append([path, "todo", "", "", 0])
        return
    if item[1] == "glob":
        _learn_glob(turn, item[2], item[3], text=body)
    else:
        _learn_todo(turn, body)
    if end >= total:
        s.recalls.remove(item)
    else:
        item[4] = end


def read_cost(path: str) -> int:
    """What a read of ``path`` is expected to take in the context: a binary file's is one short
    error line, an image's a block the compactor cannot cut, any other up to :data:`READ_CHARS`;
    and the path itself four times (the call, the state, its result, the facts row written)."""
    ext = os.path.splitext(path)[1].lower()
    if ext in IMAGE_EXTENSIONS:
        base = 4 * READ_CHARS
    else:
        base = BINARY_READ_CHARS if ext in BINARY_EXTENSIONS else READ_CHARS
    return base + 4 * len(path)


def read_batch(queue: list[str], target: int) -> list[str]:
    """The next files to read: as many as fit the target by their expected cost (two at least)."""
    used = 0
    for k, path in enumerate(queue[:READS_MOST]):
        used += read_cost(path)
        if used > target and k >= 2:
            return queue[:k]
    return queue[:READS_MOST]


def _files_line(line: str) -> list[str]:
    """The paths of one files-log line (``+`` kept in front of each when the line has it)."""
    d, *names = line.split("\t")
    flag, d = ("+", d[1:]) if d.startswith("+") else ("", d)
    d = unescape(d)
    return [flag + os.path.join("" if d == "." else d, unescape(n)) for n in names]


def _take_appended(turn: Turn) -> None:
    """The files log's lines appended this turn, as the next files to read (no need to read back
    what this turn writes): the first :data:`VIEW_LINES` of them."""
    s = turn.state
    for line in turn.appends["files"][: VIEW_LINES["files"]]:
        s.files_next += _files_line(line)
        s.taken["files"] += 1


def plan(turn: Turn) -> None:
    """This turn's work, in order: what is left to list, then to read, then the TODO scan."""
    s = turn.state
    if s.phase == "start":
        _plan_start(turn)
        return
    if s.recalls:
        path, _, _, _, offset = s.recalls[0]
        turn.calls.append(
            (
                "recall",
                {"path": path, "offset": offset, "limit": max(1_000, min(s.target, TARGET_CHARS) * 3 // 4)},
            )
        )
        return
    if s.phase == "list" and _plan_list(turn):
        return
    if s.phase == "read" and _plan_read(turn):
        return
    if s.phase == "todo":  # every file's TODO lines are found: read off it, or by its own grep
        s.phase = "inline"
    if s.phase == "inline":  # what the report shows from memory, viewed back
        _plan_inline(turn)


def _plan_start(turn: Turn) -> None:
    """The first turn: the workspace (or the part's units) listed, and the TODO searches asked."""
    s = turn.state
    if s.scope:
        own = _own_files_dirs(s)
        probe = {"pattern": "*"} if "" in own else {"pattern": glob_literal(_probe_dir(s))}
        turn.calls.append(("glob", probe))
        for unit in units(s.scope):
            only = files_only(unit)
            if only is None:
                turn.calls.append(("glob", {"pattern": "**/*", "path": unit}))
            elif only:
                turn.calls.append(("glob", {"pattern": "*", "path": only}))
    else:
        turn.calls += [("glob", {"pattern": "*"}), ("glob", {"pattern": "**/*"})]
    s.todo["asked"] = _search_roots(s)  # answered before any file is read
    for root in s.todo["asked"]:
        turn.calls.append(("grep", {"pattern": TODO_PATTERN, **({"path": root} if root else {})}))
    s.phase = "list"


def _plan_list(turn: Turn) -> bool:
    """The list phase: the next directories listed; True when this turn's work is planned, False when
    the phase is over (the reads begin)."""
    s = turn.state
    if not s.root:  # the workspace is empty
        s.phase = "report"
        return True
    globs = max(1, s.target // GLOB_CHARS)
    opens = s.open[:globs]
    dirs = s.dirs_next[: globs - len(opens)]
    s.issued["open"], s.issued["dirs"] = len(opens), len(dirs)
    turn.calls += [("glob", {"pattern": pattern, "path": d or "."}) for d, pattern in opens]  # relative
    turn.calls += [("glob", {"pattern": "**/*", "path": d}) for d in dirs]
    if len(s.dirs_next) == len(dirs):
        turn.view_log("dirs")
    if turn.calls or s.open or s.logs["dirs"] > s.taken["dirs"] or turn.appends["dirs"]:
        return True
    s.phase = "read"
    return False


def _plan_read(turn: Turn) -> bool:
    """The read phase: the next files read; True when this turn's work is planned (the list phase's
    again when reading found directories), False when the phase is over."""
    s = turn.state
    if not s.files_next and s.taken["files"] == turn.before["files"]:
        _take_appended(turn)
    greps = len(set(turn.outlines) | set(turn.todos))
    batch = read_batch(s.files_next, max(READ_CHARS, s.target - OUTLINE_CHARS * greps))
    reads = max(2, len(batch))
    s.issued["files"] = len(batch)
    turn.calls += [("read", {"file_path": p.lstrip("+")}) for p in batch]  # relative to the workspace
    if len(s.files_next) - len(batch) < reads:
        turn.view_log("files")
    if turn.calls or s.logs["files"] > s.taken["files"] or turn.appends["files"]:
        return True
    if turn.appends["dirs"] or s.logs["dirs"] > s.taken["dirs"]:  # directories found by reading
        s.phase = "list"
        plan(turn)
        return True
    s.phase = "todo"
    return False


def _plan_inline(turn: Turn) -> None:
    """The inline phase: the shown TODO lines and a small tree's rows viewed back from memory."""
    s = turn.state
    if turn.appends["facts"] or turn.appends["shown"]:  # written this turn: read back next turn
        return
    if s.logs["shown"]:
        turn.calls.append(("memory", {"command": "view", "path": shard_path("shown", 0)}))
    small = 0 < s.logs["facts"] <= INLINE_FILES and not s.scope  # a part's rows stay in its files
    for first in range(1 + HEAD, s.logs["facts"] + 1 + HEAD if small else 0, INLINE_VIEW):
        turn.calls.append(
            (
                "memory",
                {
                    "command": "view",
                    "path": shard_path("facts", 0),
                    "view_range": [first, min(first + INLINE_VIEW, s.logs["facts"] + 1 + HEAD) - 1],
                },
            )
        )
    s.phase = "report"


def decide(messages: list[Message]) -> tuple[list[dict[str, Any]], str]:
    """The next assistant content and its stop reason."""
    state, at = load_state(messages)
    turn = Turn(state or State(scope=scope_of(messages) or "", largest_n=largest_of(messages)))
    if state is not None:
        pace(turn.state, messages)
        apply(turn, messages, at)
        turn.calls += turn.searches()
    if turn.state.phase == "report" and state is not None and state.phase == "report":
        rows = _inline_rows(messages, at, turn.state.logs["facts"])
        if turn.state.logs["shown"]:
            turn.state.todo["shown"] = _shown_lines(messages, at)
        return [{"type": "text", "text": report(turn.state, rows)}], "end_turn"
    plan(turn)
    turn.write_logs()
    if not turn.calls:
        return [{"type": "text", "text": report(turn.state, [])}], "end_turn"
    s = turn.state
    text = (
        f"Listed: {s.logs['files']} file groups, {s.taken['dirs']}/{s.logs['dirs']} directories; "
        f"read {s.logs['facts']} entries. Next: {turn.calls[-1][0]}.\n{s.note()}"
    )
    content: list[dict[str, Any]] = [{"type": "text", "text": text}]
    for k, (name, args) in enumerate(turn.calls):
        content.append({"type": "tool_use", "id": call_id(messages, k), "name": name, "input": args})
    return content, "tool_use"


def pace(s: State, messages: list[Message]) -> None:
    """The results' target, from how often history is compacted (a new summary in view)."""
    s.turn += 1
    summaries = [text_of(m) for m in messages if m["role"] == "user" and is_summary(text_of(m))]
    newest = hashlib.sha256(summaries[-1].encode()).hexdigest()[:12] if summaries else ""
    low, high = TARGET_BOUNDS
    if newest and newest != s.summary:
        gap = s.turn - s.compacted_at
        s.summary, s.compacted_at = newest, s.turn
        if gap <= CLOSE:
            s.target = max(low, s.target * 3 // 4)
        elif gap >= CALM:
            s.target = min(high, s.target * 5 // 4)


def call_id(messages: list[Message], k: int) -> str:
    seed = (
        f"{len(messages)}:{k}:{json.dumps(messages[-1] if messages else None, sort_keys=True, default=str)}"
    )
    return "toolu_mem_" + hashlib.sha256(seed.encode()).hexdigest()[:20]


def _inline_rows(messages: list[Message], at: int, total: int) -> list[list[Any]]:
    """Every facts row, from the views made with the state in message ``at``; none unless all
    ``total`` rows are in view (a view the compactor cut leaves the report pointing at the files)."""
    rows: list[list[Any]] = []
    uses = {str(u.get("id")): u for u in tool_uses(messages[at])}
    for m in messages[at + 1 : at + 2]:
        for r in tool_results(m):
            use = uses.get(str(r.get("tool_use_id"))) or {}
            if use.get("name") == "memory" and str((use.get("input") or {}).get("path", "")).startswith(
                f"{DIR}/facts"
            ):
                for line in result_text(r).split("\n")[1:]:
                    match = NUMBERED.match(line)
                    if match and int(match[1]) > HEAD:
                        try:
                            rows.append(json.loads(match[2]))
                        except ValueError:
                            continue
    return rows if len({str(r[0]) for r in rows if r}) == total else []


def _shown_lines(messages: list[Message], at: int) -> list[str]:
    """The TODO lines the report shows, from the view of the shown log made with the state in message
    ``at`` (as many as are in view: a view the compactor cut shows fewer)."""
    uses = {str(u.get("id")): u for u in tool_uses(messages[at])}
    lines: list[str] = []
    for r in tool_results(messages[at + 1]) if at + 1 < len(messages) else []:
        use = uses.get(str(r.get("tool_use_id"))) or {}
        if use.get("name") == "memory" and (use.get("input") or {}).get("path") == shard_path("shown", 0):
            for line in result_text(r).split("\n")[1:]:
                match = NUMBERED.match(line)
                if match and int(match[1]) > HEAD:
                    lines.append(match[2])
    return lines


def report(
    s: State, rows: list[list[Any]], *, partial: str = "", pending: list[list[Any]] | None = None
) -> str:
    """The Markdown report from the state (and every row, for a small tree)."""
    t = s.totals
    out = [f"# Survey of {_scope_title(s)}", ""]
    if s.scope:
        out += [SCOPED_HEAD, ""]
    if s.inc.get("line"):
        out += [s.inc["line"], ""]
    if partial:
        out += [partial, ""]
    out.append(TOTALS.format(files=t["text"] + t["binary"] + t["errors"], **t))
    if s.deep:
        out.append(
            f"Directories more than {MAX_DEPTH} levels down were not listed ({s.deep} found): what they "
            "hold is not in this report."
        )
    if t["no_defs"]:
        out.append(
            f"{t['no_defs']} Python files show no count of top-level definitions: their outline could "
            "not be read."
        )
    out += [
        "",
        "## Files and lines per extension (text files)",
        "",
        "| extension | files | lines |",
        "|---|---:|---:|",
    ]
    out += [
        f"| {e} | {n} | {lines} |"
        for e, (n, lines) in sorted(s.ext.items(), key=lambda kv: (-kv[1][1], kv[0]))
    ]
    out += ["", "## Largest text files", "", "| file | lines | size |", "|---|---:|---:|"]
    out += [f"| {_cell(p)} | {lines} | {size} |" for size, p, lines in s.largest]
    todo = s.todo
    cut = TODO_CUT if todo["cut"] else ""
    out += ["", f"## TODO / FIXME / XXX ({todo['hits']} lines in {todo['files']} files{cut})", ""]
    out += [f"- `{h}`" for h in todo["shown"]] or ([] if todo["hits"] else ["(none)"])
    if todo["hits"] > len(todo["shown"]):
        where = f"the job directory's `{todo['saved']}`" if todo["saved"] else "the transcript"
        if s.inc and not s.inc.get("fresh") and not todo["saved"]:
            where = s.inc.get("where") or INCREMENTAL_TODO_TEXT
        logs = ", ".join(f"`memories/survey/todo-{k:03d}.md`" for k in range(len(s.shards["todo"])))
        shown = (
            f"the first {len(todo['shown'])} are shown"
            if todo["shown"]
            else "none is shown (the survey stopped before it read their text back)"
        )
        out.append(f"- ... {shown}; every line's place is in {logs}, its text in {where}")
    out += ["", "## Every file", ""]
    if rows:
        out += [
            "| file | lines | size | top-level definitions | first docstring or comment |",
            "|---|---:|---:|---:|---|",
        ]
        for row in sorted(rows, key=lambda r: str(r[0])):
            out.append(_row(row))
    else:
        shards = len(s.shards["facts"])
        names = ", ".join(f"`memories/survey/facts-{k:03d}.md`" for k in range(shards))
        out.append(
            f"Every entry's facts ({s.logs['facts']} lines, one JSON array a line: path, kind, lines, size, "
            f"top-level definitions, first docstring or comment line) are in the job directory's {names}."
            if names
            else "No entry's facts were saved to the job directory's memory before the job ended."
        )
        if pending:
            out += [
                "",
                "Read last, not in those files yet:",
                "",
                "| file | lines | size | top-level definitions | first docstring or comment |",
                "|---|---:|---:|---:|---|",
            ]
            out += [_row(row) for row in pending]
    return "\n".join(out) + "\n"


def _scope_title(s: State) -> str:
    root = f"`{s.root or '(workspace)'}`"
    if s.scope == TOP:
        return f"the files at the top of {root}"
    names = []
    for unit in units(s.scope):
        only = files_only(unit)
        if only is None:
            names.append(f"`{unit}/`")
        else:
            names.append(f"the files directly in `{only}/`" if only else "the files at the top")
    if len(names) > TITLE_UNITS:  # the parent's table names them all
        names = [*names[:TITLE_UNITS], f"{len(names) - TITLE_UNITS} more"]
    return f"{', '.join(names)} in {root}" if names else root


def _cell(path: str) -> str:
    return path.replace("|", "\\|").replace("\n", "\\n")


def _row(row: list[Any]) -> str:
    path, kind = _cell(str(row[0])), row[1]
    if kind == "text":
        unit = "bytes" if row[-1] == "bytes" and len(row) > 6 else "chars"
        defs = "" if row[4] is None else row[4]
        doc = _cell(str(row[5])) if len(row) > 5 else ""
        return f"| {path} | {row[2]} | {row[3]} {unit} | {defs} | {doc} |"
    if kind in ("binary", "image"):
        return f"| {path} | {kind}, {row[2]} bytes | | | |"
    return f"| {path} | not readable: {str(row[2])[:120].replace('|', '/')} | | | |"


def partial_report(messages: list[Message]) -> str:
    """The report from the newest state in view and the results since (a job out of turns, time or
    budget): what the facts files hold, and the rows the last results would have added to them."""
    state, at = load_state(messages)
    turn = Turn(state or State())
    if state is not None:
        try:
            apply(turn, messages, at)
        except RuntimeError:  # a failed memory call: the state as it was
            turn = Turn(state)
    s = turn.state
    pending = [json.loads(row) for row in turn.appends["facts"]]
    pending += s.waiting  # read, their outline not known yet
    return report(
        s,
        [],
        partial=f"(Partial: the survey stopped in its {s.phase} phase; the counts below are "
        "what was read by then.)",
        pending=pending,
    )


def report_rows(report: str, job_dir: Path, problems: list[str] | None = None) -> dict[str, list[Any]]:
    """Every entry a survey's report names, by path: the rows of the facts files it points at, then
    those of its own table (a small tree's, or the rows its last results added); a parent's report,
    those of each subagent that succeeded (its report's path is relative to the report's directory).

    A report is the model's text, so what it names is confined: every file is opened beneath
    ``job_dir`` (a relative path, no ``..`` out, no symbolic link anywhere on the way), a regular file
    of at most :data:`ROWS_REPORT_BYTES` (a report) or :data:`ROWS_FACTS_BYTES` (a facts file), at most
    :data:`ROWS_TOTAL_BYTES` in all, subagents followed :data:`ROWS_DEPTH` levels down, each file once.
    A file refused is left out, and why is added to ``problems`` (naming it). Raises ValueError (or
    IndexError, TypeError) for a damaged facts line, OSError when ``job_dir`` cannot be opened."""
    reading = _Rows(job_dir, problems if problems is not None else [])
    with Root.open(str(job_dir)) as root:
        reading.root = root
        return reading.rows(report, "", 0)


ROWS_REPORT_BYTES = 16 * 1024 * 1024  # a subagent's report report_rows reads
ROWS_FACTS_BYTES = 1024 * 1024  # a facts file (a shard holds SHARD_BYTES; the memory tool's cap is 256 KiB)
ROWS_TOTAL_BYTES = 256 * 1024 * 1024  # all it reads for one report
ROWS_DEPTH = 8  # subagents of subagents followed


class _Rows:
    """One :func:`report_rows` call: its root, what it has read, the problems met."""

    def __init__(self, job_dir: Path, problems: list[str]):
        self.job_dir = job_dir
        self.problems = problems
        self.root: Root | None = None
        self.read_bytes = 0
        self.seen: set[str] = set()

    def rows(self, report: str, here: str, depth: int) -> dict[str, list[Any]]:
        rows: dict[str, list[Any]] = {}
        for _, status, path in _SUBAGENT_ROW.findall(report):
            if status != "succeeded":
                continue
            if depth >= ROWS_DEPTH:
                self.problems.append(
                    f"{self.job_dir / here / path}: subagents deeper than {ROWS_DEPTH} levels are not read"
                )
                continue
            text, rel = self.read(here, path, ROWS_REPORT_BYTES, missing_ok=True)
            if text is not None:
                rows.update(self.rows(text, posixpath.dirname(rel), depth + 1))
        for name in re.findall(r"`(memories/survey/facts-\d{3}\.md)`", report):
            text, _ = self.read(here, name, ROWS_FACTS_BYTES)
            for line in (text or "").split("\n")[HEAD:]:
                if line.strip():
                    row = json.loads(line)
                    rows[row[0]] = row
        table = report.split("## Every file", 1)[1] if "## Every file" in report else ""
        for path, lines, size in re.findall(r"^\| (.+?) \| (\d+) \| (\d+) (?:chars|bytes) \|", table, re.M):
            rows[path.replace("\\|", "|")] = [path, "text", int(lines), int(size)]
        for path, kind, size in re.findall(r"^\| (.+?) \| (binary|image), (\d+) bytes \|", table, re.M):
            rows[path.replace("\\|", "|")] = [path, kind, int(size)]
        return rows

    def read(self, here: str, path: str, cap: int, *, missing_ok: bool = False) -> tuple[str | None, str]:
        """The text of ``path`` (relative to the directory ``here`` of the job directory), or None (and
        the problem noted, unless it is only missing and ``missing_ok``); its path beneath the job's."""
        rel = posixpath.normpath(posixpath.join(here, path))
        shown = self.job_dir / path if path.startswith("/") else self.job_dir / rel
        if path.startswith("/") or rel == ".." or rel.startswith("../") or "\x00" in rel:
            self.problems.append(f"{shown}: outside the job directory, not read; its rows are left out")
            return None, rel
        if rel in self.seen:
            return None, rel  # a report naming itself, or a facts file twice: read once
        self.seen.add(rel)
        assert self.root is not None
        try:
            fd, st = open_regular(self.root, rel, no_symlinks=True)
        except FileNotFoundError:
            if not missing_ok:
                self.problems.append(f"{shown}: missing; its rows are left out")
            return None, rel
        except (OSError, ValueError) as e:
            why = (
                "a symbolic link, which is not followed"
                if isinstance(e, OSError) and e.errno == errno.ELOOP
                else (
                    "outside the job directory"
                    if isinstance(e, ValueError)
                    else f"unreadable ({e.strerror or e})"
                )
            )
            self.problems.append(f"{shown}: {why}; its rows are left out")
            return None, rel
        with os.fdopen(fd, "rb") as f:
            if st.st_size > cap:
                self.problems.append(
                    f"{shown}: {st.st_size} bytes, more than the {cap} bytes read of such a file; "
                    "its rows are left out"
                )
                return None, rel
            if self.read_bytes + st.st_size > ROWS_TOTAL_BYTES:
                self.problems.append(
                    f"{shown}: not read, its rows left out: the files this report names come to "
                    f"more than {ROWS_TOTAL_BYTES} bytes"
                )
                return None, rel
            data = f.read(cap + 1)
        if len(data) > cap:  # it grew meanwhile
            self.problems.append(
                f"{shown}: more than {cap} bytes (it grew as it was read); its rows are left out"
            )
            return None, rel
        self.read_bytes += len(data)
        return data.decode("utf-8", errors="replace"), rel


def in_progress(messages: list[Message]) -> bool:
    return load_state(messages)[0] is not None
