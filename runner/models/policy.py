"""A deterministic survey policy: it decides every step from the messages it is given.

It is not a language model. Given a conversation, it works out what it already knows (from tool
results still in view, from its own notes in earlier assistant text, from summaries) and takes the
next step of a workspace survey:

1. ``glob`` the workspace, narrowed per directory when a listing was cut (:mod:`.listing`), leaving
   out ``__pycache__`` and binary files;
2. ``read`` every file, ``batch_size`` at a time (parallel tool calls);
3. ``compact`` once, at the end of the read pass, when the tool is offered;
4. ``grep`` each Python file for its top-level definitions (its outline);
5. ``grep`` the workspace for TODO/FIXME/XXX;
6. answer with a factual Markdown report.

After each batch it writes what it learned as note lines in its reply, and every few turns a
checkpoint of what it knows that no summary in view carries yet, so the facts survive compaction.
Notes are keyed (``- kind: key | ...``; the fallback summary keeps the newest note of each key) and
compact enough that everything learned about a tree of 500 files fits in a summary: the glob
answers are the listing (a directory whose listing is whole is one ``dir`` note of its
subdirectories, its files and each read file's chars, lines and top-level definitions, rewritten
as it grows), and TODO hits are noted by file and line numbers; their text is shown in the report
where still in view, else the report names the saved output that has it. When compaction removes
a fact before it was noted, the policy has to fetch it again: ``rereads`` counts those, which
measures what a compaction strategy lost.

With the ``memory`` tool offered (every job has it), the notes leave the context: they go to memory
files, one write a turn (an ``insert`` at the top, which is valid whatever the file holds):
``/memories/globs.md`` holds the glob answers' notes until the listing is whole,
``/memories/listing.md`` the listing (a heading with the count and the root, then one path a line,
in reading order), ``/memories/survey.md`` every file's facts, outlines and TODO hits. The read pass
goes down the listing file: each turn's text carries a ``progress`` note (how many of its files are
read, and the root) and the next files, which a summary keeps; the rest of the listing is read back
a slice at a time. After a compaction the policy reads back only what it needs (paged memory views:
the glob notes while listing, the survey's notes before the report), never the tree again; the TODO
scan comes before the survey's notes are read back, and the report is written from them.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
from dataclasses import dataclass, field
from typing import Any

from ..memory import split_lines
from ..messages import Message, blocks, result_text, text_of, tool_results, tool_uses
from ..protocol import (
    EMPTY_FILE,
    RETIRED,
    archived_count,
    glob_cut,
    is_persisted,
    is_placeholder,
    is_seed_placeholder,
    is_summary,
    memory_index_entries,
    mentions_summary,
    persisted_preview,
    persisted_size,
    recall_page,
    saved_path,
    without_footer,
)
from ..rundocs import TRANSCRIPT
from . import memory_survey
from .listing import Listing, rel, skipped

TODO_PATTERN = r"\b(TODO|FIXME|XXX)\b"
OUTLINE_PATTERN = r"^(class |def |async def )"
GLOBS_PER_TURN = 8
OUTLINES_PER_READ = 3  # outline greps per turn, per file read per turn: a file's outline is a few lines
BIG_TREE = 60  # files; a bigger tree's notes leave out the first docstring lines
DOC_CHARS = 60  # of a first docstring line, in notes and the report
CHECKPOINT_EVERY = 6  # assistant turns between checkpoints; snip keeps far more than that
RECALL_PAGE = 20_000  # the most it reads back at once: a page that fits beside the rest of the context
NOTE = re.compile(r"^- (dir|file|files|error|outline|glob|saved|todo-at|todo-part|todo-scan|progress|next-files"
                  r"|todo-cut): (.*)$", re.M)
GLOB_AT = " @ "  # a glob note's key: ``<pattern> @ <directory>``
GLOBS_FILE = "/memories/globs.md"  # the glob answers' notes, until the listing is whole
MEMORY_FILE = "/memories/survey.md"  # where the survey keeps its notes when the memory tool is offered
LISTING_FILE = "/memories/listing.md"  # the files to read, one a line after a heading, in reading order
LISTING_HEAD = 1  # heading lines before the first path: the path at index i is on line i + 1 + LISTING_HEAD
SLICES_AHEAD = 2  # listing lines viewed at a time, in read batches
_NUMBERED = re.compile(r"^ *(\d+)\t(.*)$")
_MEMORY_PAGE = re.compile(r"^\[memory: lines (\d+)-(\d+) of (\d+) shown;", re.M)


@dataclass
class NotesFile:
    """What the conversation in view says of one notes file of the memory."""

    exists: bool = False  # a write, a view or an index in view shows it exists
    known: list[str] | None = None  # its lines, when the messages in view tell them all
    paging: list[str] | None = None  # the pages read back so far (from line 1)
    total: int = 0  # lines of the file the pages are read from
    written: list[str] = field(default_factory=list)  # note lines of the writes in view


@dataclass
class Memory:
    """What the conversation in view says of the survey's memory files."""

    unsure: bool = False  # a summary or a snip marker in view: earlier evidence may be gone
    listed: bool = False  # a view of /memories in view
    notes: dict[str, NotesFile] = field(default_factory=dict)
    listing: bool = False  # the listing file exists
    slices: dict[int, str] = field(default_factory=dict)  # listing index -> path, from the lines in view
    listing_total: int = 0  # from the listing file's heading, when in view
    listing_root: str | None = None
    listing_created: bool = False  # its create is in view (so is every read since)


class SurveyFailed(RuntimeError):
    """The survey found nothing it could read in a workspace that is not empty."""


@dataclass
class Facts:
    """What the policy knows at one point of a conversation."""

    root: str | None = None
    listing: list[str] | None = None  # relative paths of the workspace's entries
    files: dict[str, tuple[int, int, str]] = field(default_factory=dict)  # rel -> chars, lines, doc
    errors: dict[str, str] = field(default_factory=dict)
    outlines: dict[str, int] = field(default_factory=dict)
    todo_done: bool = False  # the scan is whole
    todo_at: dict[str, set[int]] = field(default_factory=dict)  # rel -> line numbers of its hits
    todo_text: dict[tuple[str, int], str] = field(default_factory=dict)  # hits whose text is in view
    todo_cut: bool = False  # the search output itself was cut
    todo_saved: str | None = None  # where the scan's whole output is saved, once it is
    todo_parts: dict[int, tuple[int, int]] = field(default_factory=dict)  # pages: start -> (next start, hits)
    todo_total: int = 0
    todo_count: int = 0  # every hit of the scan
    glob: Listing = field(default_factory=Listing)
    # persisted path -> kind ("glob" or "todo"), size, the glob's (path, pattern)
    recall_due: dict[str, tuple[str, int, tuple[str, str]]] = field(default_factory=dict)
    memory: Memory = field(default_factory=Memory)
    listed_total: int = 0  # files in the listing file (from a progress note)
    progress: int = 0  # the first files of the listing read (from a progress note)
    next_files: dict[int, str] = field(default_factory=dict)  # listing index -> path, from a next-files note
    memory_notes: list[str] = field(default_factory=list)  # the newest results' notes, for the memory file


def first_doc_line(text: str) -> str:
    """The first docstring or comment line of a source text, or ''."""
    for raw in text.split("\n")[:200]:
        line = raw.strip()
        if not line or line.startswith("#!") or "coding" in line and line.startswith("#"):
            continue
        for quote in ('"""', "'''", 'r"""', "r'''"):
            if line.startswith(quote):
                body = line[len(quote):].replace(quote.lstrip("r"), "").strip()
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


def _count_lines(text: str) -> int:
    return text.count("\n") + (1 if text and not text.endswith("\n") else 0)


def _file_facts(content: str) -> tuple[int, int, str]:
    """chars, lines, first doc line from a read result (whole, or a persisted-output marker)."""
    size = persisted_size(content)
    if size:
        return size[0], size[1], first_doc_line(persisted_preview(content))
    if content == EMPTY_FILE:
        return 0, 0, ""
    return len(content), _count_lines(content), first_doc_line(content)


def _count_matches(content: str) -> int:
    size = persisted_size(content)
    if size:
        return size[1]
    if content.strip() in ("", "no matches"):
        return 0
    return len([line for line in content.split("\n") if line.strip() and not line.startswith("[output truncated")])


def _parse_notes(text: str, facts: Facts) -> None:
    """Every note line in ``text``, merged into ``facts`` (facts only grow: an older, shorter
    version of a note read after a newer one takes nothing away)."""
    for kind, rest in NOTE.findall(text):
        parts = [p.strip() for p in (rest + " ").split(" | ", 4)]  # a summary may strip a trailing space
        try:
            if kind == "dir" and len(parts) >= 3:
                _parse_dir(facts, parts[0], parts[1], parts[2])
            elif kind == "files" and len(parts) >= 2:
                for item in parts[1].split("; "):
                    name, chars, lines, defs = item.rsplit(" ", 3)
                    path = name if parts[0] == "." else f"{parts[0]}/{name}"
                    facts.files[path] = (int(chars), int(lines), "")
                    if defs != "-":
                        facts.outlines[path] = int(defs)
            elif kind == "glob" and len(parts) >= 2 and GLOB_AT in parts[0]:
                pattern, _, where = parts[0].partition(GLOB_AT)
                where = re.sub(r" \+\d+$", "", where)
                span, _, cut = parts[1].partition(" ")
                start, _, rest = span.partition("-")
                end, _, total = rest.partition("/")
                prefix = "" if where == "." else f"{where}/"
                names = [p if p.startswith("/") else prefix + p for p in parts[2].split(", ") if p] \
                    if len(parts) > 2 else []
                facts.glob.root = facts.glob.root or (parts[3] if len(parts) > 3 and parts[3] else None)
                facts.glob.record("" if where == "." else where, pattern, names,
                                  (int(start), int(end), int(total)), cut == "cut")
            elif kind == "saved" and len(parts) >= 5:
                facts.recall_due[parts[0]] = (parts[1], int(parts[2]), ("" if parts[3] == "." else parts[3], parts[4]))
                if parts[1] == "todo":
                    facts.todo_saved = parts[0]
            elif kind == "todo-part":
                span, _, total = parts[0].partition("/")
                start, _, end = span.partition("-")
                facts.todo_parts[int(start)] = (int(end), int(parts[1]) if len(parts) > 1 and parts[1] else 0)
                facts.todo_total = int(total)
            elif kind == "todo-at" and len(parts) >= 2:
                facts.todo_at.setdefault(parts[0], set()).update(int(n) for n in parts[1].split(", ") if n)
            elif kind == "todo-cut":
                facts.todo_cut = True
            elif kind == "next-files" and len(parts) >= 3:
                start = int(parts[1])
                facts.next_files.update({start + i: name for i, name in enumerate(parts[2].split(", ")) if name})
            elif kind == "progress" and len(parts) >= 3:
                done, _, total = parts[1].partition("/")
                facts.progress = max(facts.progress, int(done))
                facts.listed_total = int(total)
                facts.root = facts.root or parts[2] or None
            elif kind == "file" and len(parts) >= 3:
                facts.files[parts[0]] = (int(parts[1]), int(parts[2]), parts[3] if len(parts) > 3 else "")
                if len(parts) > 4 and parts[4].isdigit():  # the outline, counted from the whole text read
                    facts.outlines[parts[0]] = int(parts[4])
            elif kind == "error" and len(parts) >= 2:
                facts.errors[parts[0]] = parts[1]
            elif kind == "outline" and len(parts) >= 2:
                facts.outlines[parts[0]] = int(parts[1])
            elif kind == "todo-scan":
                facts.todo_done = True
                facts.todo_count = int(parts[0].split()[0]) if parts[0].split()[0].isdigit() else 0
                facts.todo_saved = facts.todo_saved or (parts[1] if len(parts) > 1 and parts[1] else None)
        except ValueError:  # a note mangled by a summary: the fact counts as unknown
            continue


def _parse_dir(facts: Facts, d: str, subdirs: str, items: str) -> None:
    """A directory note: its listing (both glob answers) and the facts of its files read so far."""
    subs = [f"{d}/{n.rstrip('/')}" for n in subdirs.split(", ") if n]
    names = []
    for item in (i for i in items.split("; ") if i):
        fields = item.rsplit(" ", 3)
        name = f"{d}/{fields[0] if len(fields) == 4 else item}"
        names.append(name)
        if len(fields) == 4:
            facts.files[name] = (int(fields[1]), int(fields[2]), "")
            if fields[3] != "-":
                facts.outlines[name] = int(fields[3])
    facts.glob.record(d, "*/", subs, (0, 1, 1), False)
    facts.glob.record(d, "*", subs + names, (0, 1, 1), False)


def _combined(facts: Facts, d: str) -> bool:
    """Whether directory ``d``'s listing and file facts are noted as one ``dir`` note: both its
    glob answers are whole, were not cut and name nothing with a separator in it (the root's carry
    the root path: they stay glob notes)."""
    if not d or d == ".":
        return False
    answers = [facts.glob.answers.get((d, p)) for p in ("*/", "*")]
    return all(a is not None and a.whole and not a.cut and _groupable_names(a.names()) for a in answers)


def _groupable_names(names: list[str]) -> bool:
    """Whether names can be items of a ``dir`` note (which separates them by spaces, ``;`` and ``,``)."""
    return not any(c in os.path.basename(n) for n in names for c in " ;,")


def _dir_note(facts: Facts, d: str) -> str:
    subdirs = sorted(facts.glob.rel(n) for n in facts.glob.answers[(d, "*/")].names())
    subdirs = [n for n in subdirs if not skipped(n)]
    items = []
    for name in sorted(facts.glob.rel(n) for n in facts.glob.answers[(d, "*")].names()):
        if name in subdirs or skipped(name):
            continue
        base = name[len(d) + 1:] if name.startswith(d + "/") else name
        if name in facts.files:
            chars, lines, _ = facts.files[name]
            items.append(f"{base} {chars} {lines} {facts.outlines.get(name, '-')}")
        else:
            items.append(base)
    subs = [n[len(d) + 1:] + "/" if n.startswith(d + "/") else n for n in subdirs]
    return f"- dir: {d} | {', '.join(subs)} | {'; '.join(items)}"


def _entries(content: str) -> list[str]:
    return [line.strip() for line in content.split("\n") if line.strip().startswith("/")]


def _learn_glob(facts: Facts, query: tuple[str, str], content: str, span: tuple[int, int, int],
                notes: list[str] | None) -> None:
    """A glob answer (or one page of a saved one) for ``query``; noted so it survives compaction."""
    cut = glob_cut(content) is not None
    names = facts.glob.learn(query[0], query[1], _entries(content), span, cut)
    if notes is not None:  # a cut answer's names are a sample the narrower queries list again
        notes.append(_glob_note(query, span, cut, [] if cut else names, facts.glob.root))


def _glob_note(query: tuple[str, str], span: tuple[int, int, int], cut: bool, names: list[str],
               root: str | None) -> str:
    """One page of one glob answer; skipped names (``__pycache__``, binaries) are left out. Its key
    is the query and, after the first, the page's start, so every page is kept once."""
    page = f" +{span[0]}" if span[0] else ""
    prefix = f"{query[0]}/" if query[0] else ""
    kept = [n[len(prefix):] if n.startswith(prefix) else n for n in names if not skipped(n)]
    return (f"- glob: {query[1]}{GLOB_AT}{query[0] or '.'}{page} | {span[0]}-{span[1]}/{span[2]}"
            f"{' cut' if cut else ''} | {', '.join(kept)} | {'' if query[0] else root or ''}")


def _big(facts: Facts) -> bool:
    """Whether the tree is big: by its listing, or (while the listing is being relearned after a
    compaction lost part of it) by the files already read."""
    return len(facts.listing or ()) > BIG_TREE or len(facts.files) > BIG_TREE or facts.listed_total > BIG_TREE


def _dir_files_note(facts: Facts, d: str) -> str:
    """A big tree's facts of every file of directory ``d`` known so far, as one note: ``name chars
    lines defs`` items. The note grows as files are read; the newest one has all of them."""
    items = [f"{os.path.basename(p)} {c} {n} {facts.outlines.get(p, '-')}"
             for p, (c, n, _) in sorted(facts.files.items()) if (os.path.dirname(p) or ".") == d]
    return f"- files: {d} | {'; '.join(items)}"


def _groupable(path: str) -> bool:
    return " " not in os.path.basename(path) and ";" not in path


def _file_notes(facts: Facts, paths: list[str]) -> list[str]:
    """The notes that record ``paths``' facts: per file for a small tree, per directory (each
    directory's whole line) for a big one."""
    if not _big(facts):
        return [_file_note(facts, p) for p in paths]
    dirs = sorted({os.path.dirname(p) or "." for p in paths if _groupable(p)})
    return ([_file_note(facts, p) for p in paths if not _groupable(p)]
            + [_dir_note(facts, d) if _combined(facts, d) else _dir_files_note(facts, d) for d in dirs])


def _file_note(facts: Facts, path: str) -> str:
    chars, lines, doc = facts.files[path]
    if _big(facts):  # facts of every file must fit in a context: no docs then
        doc = ""
    return f"- file: {path} | {chars} | {lines} | {doc} | {facts.outlines.get(path, '')}"


def _saved_note(path: str, due: tuple[str, int, tuple[str, str]]) -> str:
    kind, size, query = due
    return f"- saved: {path} | {kind} | {size} | {query[0] or '.'} | {query[1]}"


def _todo_at_note(facts: Facts, path: str) -> str:
    return f"- todo-at: {path} | {', '.join(str(n) for n in sorted(facts.todo_at[path]))}"


def _learn_todos(facts: Facts, content: str, span: tuple[int, int, int], notes: list[str] | None) -> None:
    """A page of the TODO scan: each hit's file and line number is noted (compact, per file); its
    text is kept only while the page is in view (the report names where the whole output is)."""
    hits = 0
    touched: set[str] = set()
    for raw in content.split("\n"):
        line = raw.strip()
        if not line or line.startswith(("no matches", "[output", "[recall", "[grep")):
            continue
        hits += 1
        path, _, rest = rel(facts.root or facts.glob.root, line).partition(":")
        number, _, text = rest.partition(":")
        if not number.isdigit():
            continue
        facts.todo_at.setdefault(path, set()).add(int(number))
        facts.todo_text[(path, int(number))] = text.strip()[:160]
        touched.add(path)
    cut = "[output truncated at" in content
    facts.todo_cut = facts.todo_cut or cut
    facts.todo_parts[span[0]] = (span[1], hits)
    facts.todo_total = span[2]
    if notes is not None:
        notes.append(f"- todo-part: {span[0]}-{span[1]}/{span[2]} | {hits}")
        notes += [_todo_at_note(facts, p) for p in sorted(touched)]
        if cut:
            notes.append("- todo-cut: the search output was cut")


def _chain(parts: dict[int, tuple[int, int]]) -> tuple[int, int]:
    """Where the contiguous run of pages from offset 0 ends, and the hits in it."""
    start, hits, steps = 0, 0, 0
    while start in parts and steps <= len(parts):
        start, hits, steps = parts[start][0], hits + parts[start][1], steps + 1
    return start, hits


def _chain_end(parts: dict[int, tuple[int, int]]) -> int:
    return _chain(parts)[0]


def _whole(parts: dict[int, tuple[int, int]], total: int) -> bool:
    return _chain_end(parts) >= total


def _answered(facts: Facts, query: tuple[str, str]) -> bool:
    answer = facts.glob.answers.get(query)
    return answer is not None and answer.whole


def _page(content: str) -> tuple[str, tuple[int, int, int]]:
    """The whole lines of a recall page and its span (start, next start, total): a line cut at the
    end of a page is left for the next page, which starts where that line does."""
    footer = recall_page(content)
    body = without_footer(content)
    if footer is None:
        return body, (0, 1, 1)
    _, _, start, end, total = footer
    if end < total and "\n" in body:
        kept = body.rsplit("\n", 1)[0] + "\n"
        end = start + len(kept)
        body = kept
    return body, (start, end, total)


def _learn(facts: Facts, use: dict[str, Any], result: dict[str, Any], notes: list[str] | None,
           touched: list[str]) -> None:
    """Learn from one result; for the newest results (``notes`` given) note what it taught, and add
    the files whose facts it added to ``touched`` (noted together, per directory in a big tree)."""
    name, args = use.get("name"), use.get("input") or {}
    if not isinstance(args, dict):
        return
    content = result_text(result)
    placeholder = is_placeholder(content) or is_seed_placeholder(content)
    failed = bool(result.get("is_error"))
    persisted = saved_path(content) if is_persisted(content) else None
    query = (str(args.get("path") or ""), str(args.get("pattern", "")))
    if name in ("glob", "grep") and persisted and not failed:
        # only a preview is in context: read the whole output back with recall, page by page
        kind = "glob" if name == "glob" else ("todo" if args.get("pattern") == TODO_PATTERN else None)
        size = persisted_size(content)
        if kind == "todo":
            facts.todo_saved = persisted
        if kind:
            facts.recall_due[persisted] = (kind, size[0] if size else RECALL_PAGE, query)
            if notes is not None:
                notes.append(_saved_note(persisted, facts.recall_due[persisted]))
            return
    if name == "glob" and not failed and not placeholder:
        _learn_glob(facts, query, content, (0, 1, 1), notes)
    elif name == "recall" and not placeholder and not failed:
        path = str(args.get("path"))
        kind, _, glob_query = facts.recall_due.get(path, (None, 0, ("", "")))
        body, span = _page(content)
        if kind == "glob":
            _learn_glob(facts, glob_query, body, span, notes)
        elif kind == "todo":
            _learn_todos(facts, body, span, notes)
    elif name == "read":
        path = rel(facts.root or facts.glob.root, str(args.get("file_path", "")))
        if placeholder:
            return
        if failed:
            facts.errors[path] = content.replace("\n", " ").replace(" | ", " / ")[:160]
            if notes is not None:
                notes.append(f"- error: {path} | {facts.errors[path]}")
        else:
            chars, lines, doc = _file_facts(content)
            facts.files[path] = (chars, lines, doc.replace(" | ", " / "))
            if path.endswith(".py") and not is_persisted(content):
                facts.outlines[path] = len(re.findall(OUTLINE_PATTERN, content, re.M))
            if notes is not None:
                touched.append(path)
    elif name == "grep" and args.get("pattern") == TODO_PATTERN and placeholder:
        facts.todo_saved = facts.todo_saved or saved_path(content)
    elif name == "grep" and not placeholder:
        if args.get("pattern") == OUTLINE_PATTERN:
            path = rel(facts.root or facts.glob.root, str(args.get("path", "")))
            facts.outlines[path] = 0 if failed else _count_matches(content)
            if notes is not None:
                touched.append(path)
        elif args.get("pattern") == TODO_PATTERN and not persisted:
            _learn_todos(facts, "" if failed else content, (0, 1, 1), notes)


def _memory_page(content: str) -> tuple[int, list[str], int] | None:
    """A view of the memory file: its first line number, its lines and the file's line count."""
    lines = content.split("\n")[1:]
    footer = _MEMORY_PAGE.search(content)
    numbered = [m for m in (_NUMBERED.match(line) for line in lines) if m]
    if not numbered:
        return (1, [], int(footer.group(3)) if footer else 0) if not footer else None
    first = int(numbered[0].group(1))
    texts = [m.group(2) for m in numbered]
    return first, texts, int(footer.group(3)) if footer else first + len(texts) - 1


def _track_memory(messages: list[Message]) -> Memory:
    """The memory files as far as the conversation in view tells them: writes (``create``,
    ``insert``) and views whose results are in view, an index of a compaction; a summary or a snip
    in between (after which what is not in view is unknown)."""
    memory = Memory(notes={GLOBS_FILE: NotesFile(), MEMORY_FILE: NotesFile()})
    uses: dict[str, dict[str, Any]] = {}
    for message in messages:
        for use in tool_uses(message):
            uses[str(use.get("id"))] = use
        for result in blocks(message) if message["role"] == "user" else []:  # in order: a marker may
            if result.get("type") == "text":  # follow the results it was merged after
                text = str(result.get("text", ""))
                if is_summary(text) or archived_count(text):
                    memory.unsure = True
                    entries = memory_index_entries(text)
                    for path, notes in memory.notes.items():
                        notes.known, notes.paging = None, None
                        notes.exists = notes.exists or path in entries
                    memory.listing = memory.listing or LISTING_FILE in entries
                continue
            if result.get("type") != "tool_result":
                continue
            call = uses.get(str(result.get("tool_use_id")))
            args = call.get("input") if call is not None and call.get("name") == "memory" else None
            if not isinstance(args, dict):
                continue
            content = result_text(result)
            command = args.get("command")
            if command == "view" and args.get("path") == "/memories":
                memory.listed = True
            if not result.get("is_error") and args.get("path") == LISTING_FILE:
                _track_listing(memory, command, args, content)
            held = memory.notes.get(str(args.get("path")))
            if held is not None:
                _track_notes(held, command, args, content, bool(result.get("is_error")))
    return memory


def _track_notes(notes: NotesFile, command: Any, args: dict[str, Any], content: str, failed: bool) -> None:
    if failed:
        if command == "view" and "does not exist" in content:  # never written: nothing to read back
            notes.exists, notes.known, notes.paging = False, [], None
        return
    if command == "create":
        notes.exists = True
        notes.known = split_lines(str(args.get("file_text", "")))
        notes.written.append(str(args.get("file_text", "")))
    elif command == "insert":
        notes.exists = True
        added = split_lines(str(args.get("insert_text", "")))
        notes.written.append(str(args.get("insert_text", "")))
        if notes.known is not None and args.get("insert_line") == 0:
            notes.known[0:0] = added
        else:
            notes.known = None
        notes.paging = None
    elif command == "view":
        notes.exists = True
        page = None if is_placeholder(content) or is_persisted(content) else _memory_page(content)
        if page is None:
            notes.known, notes.paging = None, None
            return
        first, lines, total = page
        if first == 1:
            notes.paging, notes.total = list(lines), total
        elif notes.paging is not None and first == len(notes.paging) + 1 and total == notes.total:
            notes.paging += lines
        else:
            notes.paging = None
        if notes.paging is not None and len(notes.paging) >= notes.total:
            notes.known = notes.paging


def _track_listing(memory: Memory, command: Any, args: dict[str, Any], content: str) -> None:
    """The listing file's lines a create or a view in view tells."""
    if command == "create":
        memory.listing = memory.listing_created = True
        lines = split_lines(str(args.get("file_text", "")))
        memory.slices.update({i: p for i, p in enumerate(lines[LISTING_HEAD:])})
        _listing_heading(memory, lines[0] if lines else "")
    elif command == "view" and not (is_placeholder(content) or is_persisted(content)):
        memory.listing = True
        for line in content.split("\n")[1:]:
            match = _NUMBERED.match(line)
            if match and int(match.group(1)) > LISTING_HEAD:
                memory.slices[int(match.group(1)) - 1 - LISTING_HEAD] = match.group(2)
            elif match:
                _listing_heading(memory, match.group(2))


_LISTING_HEADING = re.compile(r"^# (\d+) files to read under (.+)$")


def _saved_reads(messages: list[Message]) -> bool:
    """Whether most reads of the newest results were saved to disk at once (only their previews
    reached the context): the batch of reads was more than the context has room for."""
    uses = {str(u.get("id")): u for m in messages[-2:] for u in tool_uses(m)}
    reads = [r for r in (tool_results(messages[-1]) if messages else [])
             if uses.get(str(r.get("tool_use_id")), {}).get("name") == "read"]
    return 4 * sum(is_persisted(result_text(r)) for r in reads) > 3 * len(reads)


def _listing_heading(memory: Memory, line: str) -> None:
    match = _LISTING_HEADING.match(line)
    if match:
        memory.listing_total, memory.listing_root = int(match.group(1)), match.group(2)


def _listing_file(facts: Facts) -> dict[str, Any]:
    listing = [p for p in facts.listing or [] if "\n" not in p]
    return {"command": "create", "path": LISTING_FILE,
            "file_text": "\n".join([f"# {len(listing)} files to read under {facts.root}", *listing]) + "\n"}


def _progress_note(done: int, total: int, root: str) -> str:
    return f"- progress: listing | {done}/{total} | {root}"


def _reading(facts: Facts, tool_names: set[str], batch_size: int, messages: list[Message]
             ) -> tuple[list[tuple[str, dict[str, Any]]], list[str]] | None:
    """The read pass driven by the listing file: this turn's calls (its note write, the next reads,
    the next slice of the listing when what is in view runs short) and texts; ``None`` when the
    listing file does not drive this turn (not written yet, or every file in it is read)."""
    memory = facts.memory
    if not memory.listing or "read" not in tool_names:
        return None
    total = facts.listed_total or memory.listing_total
    root = facts.root or memory.listing_root
    if not total or not root:  # its heading: how many files, under which root
        head = LISTING_HEAD + SLICES_AHEAD * batch_size
        return [("memory", {"command": "view", "path": LISTING_FILE, "view_range": [1, head]})], \
            [f"Reading back where I am from {LISTING_FILE}."]
    facts.root = root
    facts.listed_total = total
    memory.slices = {**facts.next_files, **memory.slices}
    known = set(facts.files) | set(facts.errors)
    done = facts.progress
    while done < total and done in memory.slices and memory.slices[done] in known:
        done += 1
    if done >= total:
        facts.progress = done
        return None
    progress_known = facts.progress > 0 or memory.listing_created or memory.notes[MEMORY_FILE].known is not None
    if not progress_known:
        return None  # the notes say which files are read: read them back first
    batch = max(batch_size, math.ceil(total / 60))
    if _saved_reads(messages):  # the files outgrow the context's room for results: fewer at a time
        batch = max(1, batch // 3)
    reads: list[str] = []
    index = done
    while index < total and index in memory.slices and len(reads) < batch:
        if memory.slices[index] not in known:
            reads.append(memory.slices[index])
        index += 1
    covered = index
    while covered < total and covered in memory.slices:
        covered += 1
    calls: list[tuple[str, dict[str, Any]]] = []
    write = _memory_write(messages, facts)
    if write is not None:
        calls.append(("memory", write))
    calls += [("read", {"file_path": os.path.join(root, p)}) for p in reads]
    if "grep" in tool_names:  # a python file read in part (its result saved): its outline, while in view
        outline = [p for p in sorted(facts.files) if p.endswith(".py") and p not in facts.outlines]
        calls += [("grep", {"pattern": OUTLINE_PATTERN, "path": os.path.join(root, p)})
                  for p in outline[:batch * OUTLINES_PER_READ]]
    if covered < total and covered - index < batch:
        last = min(total, covered + SLICES_AHEAD * batch)
        calls.append(("memory", {"command": "view", "path": LISTING_FILE,
                                 "view_range": [covered + 1 + LISTING_HEAD, last + LISTING_HEAD]}))
    texts = [_progress_note(index, total, root)]  # every file before ``index`` is read, or read this turn
    ahead = []  # the next files, in the context too: after a compaction the reads go on at once
    for i in range(index, min(total, index + batch)):
        if i not in memory.slices or ", " in memory.slices[i] or " | " in memory.slices[i]:
            break
        ahead.append(memory.slices[i])
    if ahead:
        texts.append(f"- next-files: listing | {index} | {', '.join(ahead)}")
    if reads:
        texts.append(f"Next: read ({len(reads)} call{'s' if len(reads) > 1 else ''}).")
    else:
        texts.append(f"Next: the next files from {LISTING_FILE}.")
    return calls, texts


def _is_memory_write(use: dict[str, Any]) -> bool:
    """A write to the notes file (the listing file is written once, and holds no notes)."""
    args = use.get("input")
    return (use.get("name") == "memory" and isinstance(args, dict) and args.get("command") in ("create", "insert")
            and args.get("path") in (MEMORY_FILE, GLOBS_FILE))


def _notes_due_from(messages: list[Message], memory: Memory) -> int:
    """The first message whose results are not noted yet: the newest one, or with the memory file,
    every one after the newest write to it (all in view when none is: a duplicate note is harmless)."""
    if not (memory.unsure or memory.listed or any(n.exists for n in memory.notes.values())):
        return len(messages) - 1
    for index in range(len(messages) - 1, -1, -1):
        if any(_is_memory_write(use) for use in tool_uses(messages[index])):
            return index + 1
    return 0


def _memory_file_notes(facts: Facts, paths: list[str]) -> list[str]:
    """The notes that add ``paths``' facts to the memory file: per file for a small tree; for a big
    one, per directory, each naming only these files (the file's notes add up; none is rewritten)."""
    if not _big(facts):
        return [_file_note(facts, p) for p in paths]
    out = [_file_note(facts, p) for p in paths if not _groupable(p)]
    by_dir: dict[str, list[str]] = {}
    for p in sorted(set(paths)):
        if _groupable(p):
            by_dir.setdefault(os.path.dirname(p) or ".", []).append(p)
    for d, names in sorted(by_dir.items()):
        items = [f"{os.path.basename(p)} {facts.files[p][0]} {facts.files[p][1]} {facts.outlines.get(p, '-')}"
                 for p in names]
        out.append(f"- files: {d} | {'; '.join(items)}")
    return out


def observe(messages: list[Message]) -> tuple[Facts, list[str], int]:
    """Facts from the whole conversation; the notes due for the newest results; turns since the
    last checkpoint."""
    facts = Facts()
    facts.memory = _track_memory(messages)
    for notes in facts.memory.notes.values():
        if notes.known is not None:
            _parse_notes("\n".join(notes.known), facts)
        _parse_notes("\n".join(notes.written), facts)
    uses: dict[str, dict[str, Any]] = {}
    last_checkpoint = None
    assistant_turns = 0
    for message in messages:
        if message["role"] == "assistant":
            assistant_turns += 1
            text = text_of(message)
            if "## Checkpoint" in text:
                last_checkpoint = assistant_turns
            _parse_notes(text, facts)
            for use in tool_uses(message):
                uses[str(use.get("id"))] = use
        else:
            _parse_notes("\n".join(b.get("text", "") for b in blocks(message) if b.get("type") == "text"), facts)
    facts.root = facts.root or facts.memory.listing_root  # before any result is learned: paths are relative to it
    facts.memory.listing = facts.memory.listing or facts.listed_total > 0  # a progress note names the listing file
    new_notes: list[str] = []
    touched: list[str] = []
    due_from = _notes_due_from(messages, facts.memory)
    for index, message in enumerate(messages):
        newest = index >= due_from
        for result in tool_results(message):
            call = uses.get(str(result.get("tool_use_id")))
            if call is not None:
                _learn(facts, call, result, new_notes if newest else None, touched)
    if facts.listing is None and facts.glob.answers and not facts.glob.pending():
        facts.root = facts.glob.root
        facts.listing = facts.glob.files()  # the glob notes are the listing's notes
    facts.memory_notes = [*new_notes, *_memory_file_notes(facts, [p for p in touched if p in facts.files]),
                          *(f"- outline: {p} | {facts.outlines[p]}" for p in touched if p not in facts.files)]
    new_notes = _combine_glob_notes(facts, new_notes)
    new_notes += _file_notes(facts, [p for p in touched if p in facts.files])
    new_notes += [f"- outline: {p} | {facts.outlines[p]}" for p in touched if p not in facts.files]
    if not facts.todo_done and facts.todo_parts and _whole(facts.todo_parts, facts.todo_total):
        facts.todo_done = True
        facts.todo_count = _chain(facts.todo_parts)[1]
        new_notes.append(_todo_scan_note(facts))
        facts.memory_notes.append(_todo_scan_note(facts))
    since = assistant_turns - last_checkpoint if last_checkpoint is not None else assistant_turns
    return facts, new_notes, since


def _combine_glob_notes(facts: Facts, notes: list[str], retire: bool = True) -> list[str]:
    """The glob notes of a directory whose listing is whole, as its one ``dir`` note; with
    ``retire``, followed by lines retiring the notes it replaces that these notes do not rewrite."""
    out: list[str] = []
    done: list[str] = []
    for note in notes:
        match = re.match(r"^- glob: \*/? @ (.*?) \| ", note)
        d = match.group(1) if match else None
        if d is None or not _combined(facts, d):
            out.append(note)
        elif d not in done:
            done.append(d)
            out.append(_dir_note(facts, d))
    if retire and done:
        written = {note.split(" | ", 1)[0][2:] for note in out}
        out += [f"{RETIRED}{key}" for d in done for key in _replaced_by_dir_note(facts, d) if key not in written]
    return out


def _replaced_by_dir_note(facts: Facts, d: str) -> list[str]:
    """The keys of the notes that directory ``d``'s ``dir`` note replaces: its glob pages, the saved
    answers they were read back from, and a ``files`` note of the files read before it was whole."""
    keys = [f"glob: {pattern}{GLOB_AT}{d}{f' +{start}' if start else ''}"
            for (where, pattern), answer in facts.glob.answers.items() if where == d for start in answer.parts]
    keys += [f"saved: {path}" for path, (_, _, query) in facts.recall_due.items() if query[0] == d]
    if _big(facts) and any(os.path.dirname(p) == d for p in facts.files):  # only a big tree notes ``files``
        keys.append(f"files: {d}")
    return sorted(keys)


def _todo_scan_note(facts: Facts) -> str:
    return f"- todo-scan: {facts.todo_count} matches | {facts.todo_saved or ''}"


def checkpoint(facts: Facts, kept: set[str] = frozenset()) -> str:  # type: ignore[assignment]
    """Every fact as notes, but those already in ``kept`` (the note lines of a summary in view,
    which stays at the head of the conversation): a checkpoint holds what is not safe yet."""
    lines = ["## Checkpoint (everything learned so far and not in the summary)"]
    for query, answer in sorted(facts.glob.answers.items()):
        for start, (end, names) in sorted(answer.parts.items()):
            lines.append(_glob_note(query, (start, end, answer.total), answer.cut, [] if answer.cut else names,
                                    facts.glob.root))
    lines = _combine_glob_notes(facts, lines, retire=False)  # a checkpoint restates: nothing to retire
    lines += [n for n in _file_notes(facts, sorted(facts.files)) if n not in lines]
    lines += [f"- error: {p} | {e}" for p, e in sorted(facts.errors.items())]
    lines += [f"- outline: {p} | {n}" for p, n in sorted(facts.outlines.items()) if p not in facts.files]
    lines += [_saved_note(path, due) for path, due in sorted(facts.recall_due.items())
              if not _combined(facts, due[2][0])]  # a whole directory's saved answers are read
    lines += [_todo_at_note(facts, p) for p in sorted(facts.todo_at)]
    if facts.todo_cut:
        lines.append("- todo-cut: the search output was cut")
    if facts.todo_done:
        lines.append(_todo_scan_note(facts))
    else:
        lines += [f"- todo-part: {start}-{end}/{facts.todo_total} | {n}"
                  for start, (end, n) in sorted(facts.todo_parts.items())]
    return "\n".join(lines[:1] + [line for line in lines[1:] if line.rstrip() not in kept])


def report(facts: Facts) -> str:
    """The final Markdown report, built from facts alone."""
    root = facts.root or "(workspace)"
    files = facts.files
    out = [f"# Survey of `{root}`", ""]
    out.append(f"{len(files)} files read, {sum(c for c, _, _ in files.values())} chars, "
               f"{sum(n for _, n, _ in files.values())} lines; {len(facts.errors)} entries could not be read.")
    out += ["", "## Files and lines per extension", "", "| extension | files | lines | chars |", "|---|---:|---:|---:|"]
    by_ext: dict[str, list[int]] = {}
    for path, (chars, lines, _) in files.items():
        ext = os.path.splitext(path)[1] or "(none)"
        acc = by_ext.setdefault(ext, [0, 0, 0])
        acc[0] += 1
        acc[1] += lines
        acc[2] += chars
    for ext, (n, lines, chars) in sorted(by_ext.items(), key=lambda kv: (-kv[1][1], kv[0])):
        out.append(f"| {ext} | {n} | {lines} | {chars} |")
    out += ["", "## Largest files", "", "| file | lines | chars |", "|---|---:|---:|"]
    for path, (chars, lines, _) in sorted(files.items(), key=lambda kv: (-kv[1][0], kv[0]))[:10]:
        out.append(f"| {path} | {lines} | {chars} |")
    out += ["", *_todo_section(facts)]
    out += ["", "## Every file", "", "| file | lines | top-level definitions | first docstring or comment |",
            "|---|---:|---:|---|"]
    for path, (_, lines, doc) in sorted(files.items()):
        defs = facts.outlines.get(path, "")
        out.append(f"| {path} | {lines} | {defs} | {doc.replace('|', '/')} |")
    if facts.errors:
        out += ["", "## Not readable", ""]
        out += [f"- {p}: {e}" for p, e in sorted(facts.errors.items())]
    return "\n".join(out) + "\n"


def _todo_section(facts: Facts) -> list[str]:
    """Every hit of the TODO scan by file and line; with its text where the text is in view, and
    where the scan's whole output is saved when it is not."""
    hits = sorted((p, n) for p, numbers in facts.todo_at.items() for n in numbers)
    cut = "; the search output was cut, there may be more" if facts.todo_cut else ""
    out = [f"## TODO / FIXME / XXX ({max(facts.todo_count, len(hits))} found in {len(facts.todo_at)} files{cut})", ""]
    if any((p, n) not in facts.todo_text for p, n in hits):
        where = f"`{facts.todo_saved}`" if facts.todo_saved else f"`{TRANSCRIPT}` (the grep call's result)"
        out += [f"The text of every line is in the job directory's {where}; lines shown here without "
                "their text are listed by file and line.", ""]
    for p, n in hits:
        text = facts.todo_text.get((p, n))
        out.append(f"- `{p}:{n}: {text}`" if text is not None else f"- `{p}:{n}`")
    return out if hits else out + ["(none)"]


def _call_id(messages: list[Message], name: str, args: dict[str, Any], k: int) -> str:
    seed = json.dumps([len(messages), messages[-1] if messages else None, name, args, k], sort_keys=True,
                      default=str)
    return "toolu_off_" + hashlib.sha256(seed.encode()).hexdigest()[:20]


def _summary_notes(messages: list[Message]) -> set[str]:
    """The note lines that summaries in view carry."""
    return {line.rstrip() for m in messages if m["role"] == "user" and is_summary(text_of(m))
            for line in text_of(m).split("\n") if line.startswith("- ")}


def decide(messages: list[Message], tool_names: set[str], batch_size: int = 4) -> tuple[list[dict[str, Any]], str]:
    """The next assistant content and its stop reason (``tool_use`` or ``end_turn``)."""
    if "memory" in tool_names:  # the survey keeps its work in memory files
        return memory_survey.decide(messages)
    facts, notes, since_checkpoint = observe(messages)
    text_parts: list[str] = []
    in_memory = "memory" in tool_names  # the notes go to the memory file, not into the context
    if notes and not in_memory:
        text_parts.append("Notes from the last results:\n" + "\n".join(notes))
    scan = [n for n in notes if n.startswith(("- todo-part:", "- todo-scan:", "- todo-cut:"))
            or n.startswith("- saved:") and " | todo | " in n]
    if scan and in_memory:  # where the TODO scan is: a few lines, kept in the context too
        text_parts.append("\n".join(scan))
    calls: list[tuple[str, dict[str, Any]]] = []
    memory = facts.memory
    if in_memory:
        reading = _reading(facts, tool_names, batch_size, messages)
        if reading is not None:
            return _content(messages, [*text_parts, *reading[1]], reading[0]), "tool_use"
        # what a notes file holds is not in view (a compaction, a snip): read it back, page by page,
        # before noting anything (the notes of the results since are written after it); the glob
        # answers' notes only while the listing is not whole
        # (once the listing is read, the TODO scan comes first: it needs no notes, the report all)
        scanning = memory.listing and not facts.todo_done and "grep" in tool_names
        for path in () if scanning else (MEMORY_FILE,) if memory.listing else (GLOBS_FILE, MEMORY_FILE):
            held = memory.notes[path]
            if (held.exists or memory.unsure) and held.known is None:
                due = _memory_write(messages, facts) if facts.root else None  # notes due, before the view
                if due is not None:
                    calls.append(("memory", due))
                more = {"view_range": [len(held.paging) + 1, -1]} if held.paging and due is None else {}
                calls.append(("memory", {"command": "view", "path": path, **more}))
                text_parts.append(f"Reading back my notes from {path}.")
                return _content(messages, text_parts, calls), "tool_use"
        write: dict[str, Any] | None
        if facts.listing is not None and not memory.listing:  # the listing is whole: kept in its own file
            write = _listing_file(facts)
        else:
            write = _memory_write(messages, facts)
        if write is not None:
            calls.append(("memory", write))
        if memory.listing and facts.listed_total and facts.root:
            text_parts.append(_progress_note(facts.progress, facts.listed_total, facts.root))
    listing_done = in_memory and memory.listing and 0 < facts.listed_total <= facts.progress
    work_start = len(calls)
    root = facts.root
    known = set(facts.files) | set(facts.errors)
    pending = [] if listing_done else [p for p in (facts.listing or []) if p not in known]
    python = [p for p in sorted(facts.files) if p.endswith(".py")]
    pending_outline = [p for p in python if p not in facts.outlines]
    summarized = any(m["role"] == "user" and mentions_summary(text_of(m))
                     for m in messages)
    # big workspaces are read more files at a time, so any tree is surveyed in a bounded number of turns
    batch = max(batch_size, math.ceil(len(facts.listing or []) / 60))
    glob_due = [(path, query) for path, (kind, _, query) in facts.recall_due.items()
                if kind == "glob" and not _answered(facts, query)]
    todo_due = [path for path, (kind, _, _) in facts.recall_due.items() if kind == "todo"]
    if facts.listing is None and not listing_done and glob_due and "recall" in tool_names:
        path, query = glob_due[0]
        answer = facts.glob.answers.get(query)
        calls.append(("recall", {"path": path, "offset": answer.next_start() if answer else 0}))
    elif facts.listing is None and not listing_done and "glob" in tool_names:
        waiting = {query for _, query in glob_due}
        for path, pattern in [q for q in facts.glob.pending() if q not in waiting][:GLOBS_PER_TURN]:
            calls.append(("glob", {"pattern": pattern, **({"path": path} if path else {})}))
    elif pending and "read" in tool_names:
        calls += [("read", {"file_path": os.path.join(root or "", p)}) for p in pending[:batch]]
    elif pending_outline and not summarized and "compact" in tool_names and not facts.outlines:
        calls.append(("compact", {}))
    elif (listing_done and not summarized and "compact" in tool_names and not facts.todo_done
          and not facts.todo_parts and not facts.todo_saved):  # the read pass is over: its results can go
        calls.append(("compact", {}))
    elif pending_outline and "grep" in tool_names:
        calls += [("grep", {"pattern": OUTLINE_PATTERN, "path": os.path.join(root or "", p)})
                  for p in pending_outline[:batch * OUTLINES_PER_READ]]
    elif not facts.todo_done and todo_due and "recall" in tool_names:
        calls.append(("recall", {"path": todo_due[-1], "offset": _chain_end(facts.todo_parts)}))
    elif not facts.todo_done and "grep" in tool_names:
        calls.append(("grep", {"pattern": TODO_PATTERN}))
    if in_memory and not calls[work_start:] and facts.root:
        calls += _missing_reads(facts, tool_names, batch_size)
    work = calls[work_start:]
    if not work and not facts.files and (facts.listing or facts.glob.seen_anything()):
        raise SurveyFailed(f"the survey of {root or 'the workspace'} read no file of the "
                           f"{len(facts.listing or [])} it listed")
    if not work and not calls:
        return [{"type": "text", "text": report(facts)}], "end_turn"
    if not in_memory and (since_checkpoint >= CHECKPOINT_EVERY or (calls[0][0] == "compact")):
        text_parts.append(checkpoint(facts, _summary_notes(messages)))
    if work:
        text_parts.append(f"Next: {work[0][0]} ({len(work)} call{'s' if len(work) > 1 else ''}).")
    else:  # the last notes are saved this turn; the report follows
        text_parts.append(f"Saving the last notes to {MEMORY_FILE}; the report follows.")
    return _content(messages, text_parts, calls), "tool_use"


def _missing_reads(facts: Facts, tool_names: set[str], batch_size: int) -> list[tuple[str, dict[str, Any]]]:
    """Before the report: when the notes hold fewer files than the listing file, the listing read
    back whole and the files it names that the notes lack read (a fact lost is found again)."""
    memory, total = facts.memory, facts.listed_total
    if not total or len(set(facts.files) | set(facts.errors)) >= total or "read" not in tool_names:
        return []
    gap = next((i for i in range(total) if i not in memory.slices), None)
    if gap is not None:
        return [("memory", {"command": "view", "path": LISTING_FILE, "view_range": [gap + 1 + LISTING_HEAD, -1]})]
    known = set(facts.files) | set(facts.errors)
    missing = [memory.slices[i] for i in range(total) if memory.slices[i] not in known]
    return [("read", {"file_path": os.path.join(facts.root or "", p)})
            for p in missing[:max(batch_size, math.ceil(total / 60))]]


def _content(messages: list[Message], text_parts: list[str], calls: list[tuple[str, dict[str, Any]]]
             ) -> list[dict[str, Any]]:
    content: list[dict[str, Any]] = [{"type": "text", "text": "\n\n".join(text_parts)}]
    for k, (name, args) in enumerate(calls):
        content.append({"type": "tool_use", "id": _call_id(messages, name, args, k), "name": name, "input": args})
    return content


def _memory_write(messages: list[Message], facts: Facts) -> dict[str, Any] | None:
    """This turn's one write to a notes file (the glob answers' until the listing is whole, then the
    survey's): the notes of the results since the last write, added at its top (a position that is
    valid whatever the file holds). The survey's file is created on the first turn, the globs' at
    its first notes (or whenever nothing in view says it exists and nothing could have hidden it)."""
    memory = facts.memory
    survey = memory.notes[MEMORY_FILE]
    if not survey.exists and not memory.unsure:
        header = "# Survey notes (one fact a line, newest first)"
        return {"command": "create", "path": MEMORY_FILE,
                "file_text": "\n".join([*facts.memory_notes, header]) + "\n"}
    if not facts.memory_notes:
        return None
    listing_only = all(n.startswith(("- glob:", "- saved:", RETIRED)) for n in facts.memory_notes)
    path = GLOBS_FILE if listing_only and not memory.listing else MEMORY_FILE  # file facts: always the survey's
    target = memory.notes[path]
    if not target.exists and (not memory.unsure or target.known == []):
        return {"command": "create", "path": path, "file_text": "\n".join(facts.memory_notes) + "\n"}
    return {"command": "insert", "path": path, "insert_line": 0,
            "insert_text": "\n".join(facts.memory_notes) + "\n"}


def partial_report(messages: list[Message]) -> str:
    """The report from what the conversation holds so far, with no further tool call: the answer to
    a request that allows no tools (the job is out of turns, time or budget)."""
    if memory_survey.in_progress(messages):
        return memory_survey.partial_report(messages)
    return report(observe(messages)[0])


def reread_count(transcript: list[Message]) -> int:
    """How many read calls in a whole transcript asked for a file already read before."""
    seen: set[str] = set()
    rereads = 0
    for message in transcript:
        for use in tool_uses(message):
            if use.get("name") == "read":
                path = str((use.get("input") or {}).get("file_path"))
                rereads += path in seen
                seen.add(path)
    return rereads
