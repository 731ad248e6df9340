"""A deterministic survey policy: it decides every step from the messages it is given.

It is not a language model. Given a conversation, it works out what it already knows (from tool
results still in view, from its own notes in earlier assistant text, from summaries) and takes the
next step of a workspace survey. Its notes are trusted only where it wrote them: its own assistant
text, and what a summary carries of it (:func:`.memory_survey.own_text`), never a line of a tool
result, of the request or of the runtime's note, which quote the workspace's file names:

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

With the ``memory`` tool offered (every job has it), the survey is :mod:`.memory_survey`'s; with the
``task`` tool offered too, a big tree's survey is handed to subagents (:mod:`.delegation`); an incremental
job's (it starts with the runtime's note on its baseline) carries the baseline's facts over and examines only
what changed (:mod:`.incremental_survey`); one whose baseline was split among subagents keeps that split,
the parts with no change carried over (:mod:`.incremental_parts`).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
from dataclasses import dataclass, field
from typing import Any

from ..messages import Message, blocks, result_text, text_of, tool_results, tool_uses
from ..protocol import (
    EMPTY_FILE,
    archived_count,
    is_persisted,
    is_placeholder,
    is_summary,
    persisted_preview,
    saved_path,
)
from ..rundir.docs import TRANSCRIPT
from . import delegation, incremental_parts, incremental_survey, memory_survey
from .listing import Listing, rel, skipped
from .memory_survey import (
    LARGEST,
    OUTLINE_PATTERN,
    TODO_PATTERN,
    count_matches,
    first_doc_line,
    largest_of,
)
from .readback import (
    glob_cut,
    is_seed_placeholder,
    mentions_summary,
    persisted_size,
    recall_page,
    without_footer,
)

GLOBS_PER_TURN = 8
OUTLINES_PER_READ = 3  # outline greps per turn, per file read per turn: a file's outline is a few lines
BIG_TREE = 60  # files; a bigger tree's notes leave out the first docstring lines
CHECKPOINT_EVERY = 6  # assistant turns between checkpoints; snip keeps far more than that
RECALL_PAGE = 20_000  # the most it reads back at once: a page that fits beside the rest of the context
NOTE = re.compile(
    r"^- (dir|file|files|error|outline|glob|saved|todo-at|todo-part|todo-scan"
    r"|todo-cut): (.*)$",
    re.M,
)
GLOB_AT = " @ "  # a glob note's key: ``<pattern> @ <directory>``
FOLDED = " | in its dir note"  # the body of a note a ``dir`` note replaced (no fact: the parsers skip it)


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


def _parse_notes(text: str, facts: Facts) -> None:
    """Every note line in ``text``, merged into ``facts`` (facts only grow: an older, shorter
    version of a note read after a newer one takes nothing away)."""
    for kind, rest in NOTE.findall(text):
        parts = [p.strip() for p in (rest + " ").split(" | ", 4)]  # a summary may strip a trailing space
        try:
            _parse_note(facts, kind, parts)
        except ValueError:  # a note mangled by a summary: the fact counts as unknown
            continue


def _parse_note(facts: Facts, kind: str, parts: list[str]) -> None:
    """One note (its kind and its `` | ``-separated fields) merged into ``facts``; a field that is
    not what its kind holds raises ValueError."""
    if kind == "dir" and len(parts) >= 3:
        _parse_dir(facts, parts[0], parts[1], items=parts[2])
    elif kind == "files" and len(parts) >= 2:
        _parse_files(facts, parts[0], parts[1])
    elif kind == "glob" and len(parts) >= 2 and GLOB_AT in parts[0]:
        _parse_glob(facts, parts)
    elif kind == "saved" and len(parts) >= 5:
        facts.recall_due[parts[0]] = (
            parts[1],
            int(parts[2]),
            ("" if parts[3] == "." else parts[3], parts[4]),
        )
        if parts[1] == "todo":
            facts.todo_saved = parts[0]
    elif kind.startswith("todo"):
        _parse_todo_note(facts, kind, parts)
    elif kind == "file" and len(parts) >= 3:
        facts.files[parts[0]] = (int(parts[1]), int(parts[2]), parts[3] if len(parts) > 3 else "")
        if len(parts) > 4 and parts[4].isdigit():  # the outline, counted from the whole text read
            facts.outlines[parts[0]] = int(parts[4])
    elif kind == "error" and len(parts) >= 2:
        facts.errors[parts[0]] = parts[1]
    elif kind == "outline" and len(parts) >= 2:
        facts.outlines[parts[0]] = int(parts[1])


def _parse_files(facts: Facts, d: str, items: str) -> None:
    """A big tree's note of directory ``d``'s files: ``name chars lines defs`` items."""
    for item in items.split("; "):
        name, chars, lines, defs = item.rsplit(" ", 3)
        path = name if d == "." else f"{d}/{name}"
        facts.files[path] = (int(chars), int(lines), "")
        if defs != "-":
            facts.outlines[path] = int(defs)


def _parse_glob(facts: Facts, parts: list[str]) -> None:
    """A glob note: one page of one glob answer (and, for the root's, the root)."""
    pattern, _, where = parts[0].partition(GLOB_AT)
    where = re.sub(r" \+\d+$", "", where)
    span, _, cut = parts[1].partition(" ")
    start, _, rest = span.partition("-")
    end, _, total = rest.partition("/")
    prefix = "" if where == "." else f"{where}/"
    names = (
        [p if p.startswith("/") else prefix + p for p in parts[2].split(", ") if p] if len(parts) > 2 else []
    )
    facts.glob.root = facts.glob.root or (parts[3] if len(parts) > 3 and parts[3] else None)
    facts.glob.record(
        "" if where == "." else where,
        pattern,
        names,
        (int(start), int(end), int(total)),
        cut == "cut",
    )


def _parse_todo_note(facts: Facts, kind: str, parts: list[str]) -> None:
    """A note of the TODO scan: a page of it, a file's hit lines, the output cut, or the scan done."""
    if kind == "todo-part":
        span, _, total = parts[0].partition("/")
        start, _, end = span.partition("-")
        facts.todo_parts[int(start)] = (int(end), int(parts[1]) if len(parts) > 1 and parts[1] else 0)
        facts.todo_total = int(total)
    elif kind == "todo-at" and len(parts) >= 2:
        facts.todo_at.setdefault(parts[0], set()).update(int(n) for n in parts[1].split(", ") if n)
    elif kind == "todo-cut":
        facts.todo_cut = True
    elif kind == "todo-scan":
        facts.todo_done = True
        facts.todo_count = int(parts[0].split()[0]) if parts[0].split()[0].isdigit() else 0
        facts.todo_saved = facts.todo_saved or (parts[1] if len(parts) > 1 and parts[1] else None)


def _parse_dir(facts: Facts, d: str, subdirs: str, *, items: str) -> None:
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
        base = name[len(d) + 1 :] if name.startswith(d + "/") else name
        if name in facts.files:
            chars, lines, _ = facts.files[name]
            items.append(f"{base} {chars} {lines} {facts.outlines.get(name, '-')}")
        else:
            items.append(base)
    subs = [n[len(d) + 1 :] + "/" if n.startswith(d + "/") else n for n in subdirs]
    return f"- dir: {d} | {', '.join(subs)} | {'; '.join(items)}"


def _entries(content: str) -> list[str]:
    return [line.strip() for line in content.split("\n") if line.strip().startswith("/")]


def _learn_glob(
    facts: Facts, query: tuple[str, str], content: str, *, span: tuple[int, int, int], notes: list[str] | None
) -> None:
    """A glob answer (or one page of a saved one) for ``query``; noted so it survives compaction."""
    cut = glob_cut(content) is not None
    names = facts.glob.learn(query[0], query[1], _entries(content), span, cut)
    if notes is not None:  # a cut answer's names are a sample the narrower queries list again
        notes.append(_glob_note(query, span, cut, names=[] if cut else names, root=facts.glob.root))


def _glob_note(
    query: tuple[str, str], span: tuple[int, int, int], cut: bool, *, names: list[str], root: str | None
) -> str:
    """One page of one glob answer; skipped names (``__pycache__``, binaries) are left out. Its key
    is the query and, after the first, the page's start, so every page is kept once."""
    page = f" +{span[0]}" if span[0] else ""
    prefix = f"{query[0]}/" if query[0] else ""
    kept = [n[len(prefix) :] if n.startswith(prefix) else n for n in names if not skipped(n)]
    return (
        f"- glob: {query[1]}{GLOB_AT}{query[0] or '.'}{page} | {span[0]}-{span[1]}/{span[2]}"
        f"{' cut' if cut else ''} | {', '.join(kept)} | {'' if query[0] else root or ''}"
    )


def _big(facts: Facts) -> bool:
    """Whether the tree is big: by its listing, or (while the listing is being relearned after a
    compaction lost part of it) by the files already read."""
    return len(facts.listing or ()) > BIG_TREE or len(facts.files) > BIG_TREE


def _dir_files_note(facts: Facts, d: str) -> str:
    """A big tree's facts of every file of directory ``d`` known so far, as one note: ``name chars
    lines defs`` items. The note grows as files are read; the newest one has all of them."""
    items = [
        f"{os.path.basename(p)} {c} {n} {facts.outlines.get(p, '-')}"
        for p, (c, n, _) in sorted(facts.files.items())
        if (os.path.dirname(p) or ".") == d
    ]
    return f"- files: {d} | {'; '.join(items)}"


def _groupable(path: str) -> bool:
    return " " not in os.path.basename(path) and ";" not in path


def _file_notes(facts: Facts, paths: list[str]) -> list[str]:
    """The notes that record ``paths``' facts: per file for a small tree, per directory (each
    directory's whole line) for a big one."""
    if not _big(facts):
        return [_file_note(facts, p) for p in paths]
    dirs = sorted({os.path.dirname(p) or "." for p in paths if _groupable(p)})
    return [_file_note(facts, p) for p in paths if not _groupable(p)] + [
        _dir_note(facts, d) if _combined(facts, d) else _dir_files_note(facts, d) for d in dirs
    ]


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


def _learn_todos(facts: Facts, content: str, span: tuple[int, int, int], *, notes: list[str] | None) -> None:
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


def _learn(
    facts: Facts, use: dict[str, Any], result: dict[str, Any], *, notes: list[str] | None, touched: list[str]
) -> None:
    """Learn from one result; for the newest results (``notes`` given) note what it taught, and add
    the files whose facts it added to ``touched`` (noted together, per directory in a big tree)."""
    name, args = use.get("name"), use.get("input") or {}
    if not isinstance(args, dict):
        return
    content = result_text(result)
    placeholder = is_placeholder(content) or is_seed_placeholder(content)
    failed = bool(result.get("is_error"))
    if name in ("glob", "grep") and not failed and _learn_saved(facts, use, content, notes=notes):
        return
    if name == "glob" and not failed and not placeholder:
        _learn_glob(facts, _query(args), content, span=(0, 1, 1), notes=notes)
    elif name == "recall" and not placeholder and not failed:
        kind, _, glob_query = facts.recall_due.get(str(args.get("path")), (None, 0, ("", "")))
        body, span = _page(content)
        if kind == "glob":
            _learn_glob(facts, glob_query, body, span=span, notes=notes)
        elif kind == "todo":
            _learn_todos(facts, body, span, notes=notes)
    elif name == "read" and not placeholder:
        _learn_read(facts, args, result, notes=notes, touched=touched)
    elif name == "grep" and args.get("pattern") == TODO_PATTERN and placeholder:
        facts.todo_saved = facts.todo_saved or saved_path(content)
    elif name == "grep" and not placeholder:
        _learn_grep(facts, args, result, notes=notes, touched=touched)


def _query(args: dict[str, Any]) -> tuple[str, str]:
    """A glob's or grep's query: its path ('' for none) and its pattern."""
    return str(args.get("path") or ""), str(args.get("pattern", ""))


def _learn_saved(facts: Facts, use: dict[str, Any], content: str, *, notes: list[str] | None) -> bool:
    """A glob's or TODO search's output saved (only a preview in context): due to be read back with
    recall, page by page; False for a result that is not one of those."""
    persisted = saved_path(content) if is_persisted(content) else None
    if not persisted:
        return False
    args = use.get("input") or {}
    kind = "glob" if use.get("name") == "glob" else ("todo" if args.get("pattern") == TODO_PATTERN else None)
    size = persisted_size(content)
    if kind == "todo":
        facts.todo_saved = persisted
    if not kind:
        return False
    facts.recall_due[persisted] = (kind, size[0] if size else RECALL_PAGE, _query(args))
    if notes is not None:
        notes.append(_saved_note(persisted, facts.recall_due[persisted]))
    return True


def _learn_read(
    facts: Facts, args: dict[str, Any], result: dict[str, Any], *, notes: list[str] | None, touched: list[str]
) -> None:
    """A read's result (not gone): the file's facts, or the error it met."""
    content = result_text(result)
    path = rel(facts.root or facts.glob.root, str(args.get("file_path", "")))
    if result.get("is_error"):
        facts.errors[path] = content.replace("\n", " ").replace(" | ", " / ")[:160]
        if notes is not None:
            notes.append(f"- error: {path} | {facts.errors[path]}")
        return
    chars, lines, doc = _file_facts(content)
    facts.files[path] = (chars, lines, doc.replace(" | ", " / "))
    if path.endswith(".py") and not is_persisted(content):
        facts.outlines[path] = len(re.findall(OUTLINE_PATTERN, content, re.M))
    if notes is not None:
        touched.append(path)


def _learn_grep(
    facts: Facts, args: dict[str, Any], result: dict[str, Any], *, notes: list[str] | None, touched: list[str]
) -> None:
    """A grep's result (not gone, not saved): a file's outline count, or the TODO lines found."""
    content = result_text(result)
    failed = bool(result.get("is_error"))
    if args.get("pattern") == OUTLINE_PATTERN:
        path = rel(facts.root or facts.glob.root, str(args.get("path", "")))
        facts.outlines[path] = 0 if failed else count_matches(content)
        if notes is not None:
            touched.append(path)
    elif args.get("pattern") == TODO_PATTERN and not (is_persisted(content) and saved_path(content)):
        _learn_todos(facts, "" if failed else content, (0, 1, 1), notes=notes)


def _history_cut(messages: list[Message]) -> bool:
    """Whether a summary or a snip marker is in view: what noted the results in view may be gone."""
    return any(
        is_summary(text) or archived_count(text)
        for message in messages
        if message["role"] == "user"
        for text in (str(b.get("text", "")) for b in blocks(message) if b.get("type") == "text")
    )


def observe(messages: list[Message]) -> tuple[Facts, list[str], int]:
    """Facts from the whole conversation; the notes due for the newest results; turns since the
    last checkpoint."""
    facts = Facts()
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
        else:  # a summary's notes: never the request, a runtime note or a result quoting a file's name
            _parse_notes(memory_survey.own_text(message), facts)
    new_notes: list[str] = []
    touched: list[str] = []
    # after a summary or a snip, every result in view is noted again (a duplicate note is harmless)
    due_from = 0 if _history_cut(messages) else len(messages) - 1
    for index, message in enumerate(messages):
        newest = index >= due_from
        for result in tool_results(message):
            call = uses.get(str(result.get("tool_use_id")))
            if call is not None:
                _learn(facts, call, result, notes=new_notes if newest else None, touched=touched)
    if facts.listing is None and facts.glob.answers and not facts.glob.pending():
        facts.root = facts.glob.root
        facts.listing = facts.glob.files()  # the glob notes are the listing's notes
    new_notes = _combine_glob_notes(facts, new_notes)
    new_notes += _file_notes(facts, [p for p in touched if p in facts.files])
    new_notes += [f"- outline: {p} | {facts.outlines[p]}" for p in touched if p not in facts.files]
    if not facts.todo_done and facts.todo_parts and _whole(facts.todo_parts, facts.todo_total):
        facts.todo_done = True
        facts.todo_count = _chain(facts.todo_parts)[1]
        new_notes.append(_todo_scan_note(facts))
    since = assistant_turns - last_checkpoint if last_checkpoint is not None else assistant_turns
    return facts, new_notes, since


def _combine_glob_notes(facts: Facts, notes: list[str], retire: bool = True) -> list[str]:
    """The glob notes of a directory whose listing is whole, as its one ``dir`` note; with
    ``retire``, followed by a short note under each key it replaces that these notes do not rewrite,
    so that a summary, which keeps the newest note of each key, keeps that and not the replaced one."""
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
        out += [
            f"- {key}{FOLDED}" for d in done for key in _replaced_by_dir_note(facts, d) if key not in written
        ]
    return out


def _replaced_by_dir_note(facts: Facts, d: str) -> list[str]:
    """The keys of the notes that directory ``d``'s ``dir`` note replaces: its glob pages, the saved
    answers they were read back from, and a ``files`` note of the files read before it was whole."""
    keys = [
        f"glob: {pattern}{GLOB_AT}{d}{f' +{start}' if start else ''}"
        for (where, pattern), answer in facts.glob.answers.items()
        if where == d
        for start in answer.parts
    ]
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
            lines.append(
                _glob_note(
                    query,
                    (start, end, answer.total),
                    answer.cut,
                    names=[] if answer.cut else names,
                    root=facts.glob.root,
                )
            )
    lines = _combine_glob_notes(facts, lines, retire=False)  # a checkpoint restates: nothing to retire
    lines += [n for n in _file_notes(facts, sorted(facts.files)) if n not in lines]
    lines += [f"- error: {p} | {e}" for p, e in sorted(facts.errors.items())]
    lines += [f"- outline: {p} | {n}" for p, n in sorted(facts.outlines.items()) if p not in facts.files]
    lines += [
        _saved_note(path, due)
        for path, due in sorted(facts.recall_due.items())
        if not _combined(facts, due[2][0])
    ]  # a whole directory's saved answers are read
    lines += [_todo_at_note(facts, p) for p in sorted(facts.todo_at)]
    if facts.todo_cut:
        lines.append("- todo-cut: the search output was cut")
    if facts.todo_done:
        lines.append(_todo_scan_note(facts))
    else:
        lines += [
            f"- todo-part: {start}-{end}/{facts.todo_total} | {n}"
            for start, (end, n) in sorted(facts.todo_parts.items())
        ]
    return "\n".join(lines[:1] + [line for line in lines[1:] if line.rstrip() not in kept])


def report(facts: Facts, largest: int = LARGEST) -> str:
    """The final Markdown report, built from facts alone (``largest``: the largest files it lists)."""
    root = facts.root or "(workspace)"
    files = facts.files
    out = [f"# Survey of `{root}`", ""]
    out.append(
        f"{len(files)} files read, {sum(c for c, _, _ in files.values())} chars, "
        f"{sum(n for _, n, _ in files.values())} lines; {len(facts.errors)} entries could not be read."
    )
    out += [
        "",
        "## Files and lines per extension",
        "",
        "| extension | files | lines | chars |",
        "|---|---:|---:|---:|",
    ]
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
    for path, (chars, lines, _) in sorted(files.items(), key=lambda kv: (-kv[1][0], kv[0]))[:largest]:
        out.append(f"| {path} | {lines} | {chars} |")
    out += ["", *_todo_section(facts)]
    out += [
        "",
        "## Every file",
        "",
        "| file | lines | top-level definitions | first docstring or comment |",
        "|---|---:|---:|---|",
    ]
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
    out = [
        f"## TODO / FIXME / XXX ({max(facts.todo_count, len(hits))} found in "
        f"{len(facts.todo_at)} files{cut})",
        "",
    ]
    if any((p, n) not in facts.todo_text for p, n in hits):
        where = f"`{facts.todo_saved}`" if facts.todo_saved else f"`{TRANSCRIPT}` (the grep call's result)"
        out += [
            f"The text of every line is in the job directory's {where}; lines shown here without "
            "their text are listed by file and line.",
            "",
        ]
    for p, n in hits:
        text = facts.todo_text.get((p, n))
        out.append(f"- `{p}:{n}: {text}`" if text is not None else f"- `{p}:{n}`")
    return out if hits else out + ["(none)"]


def _call_id(messages: list[Message], name: str, args: dict[str, Any], *, k: int) -> str:
    seed = json.dumps(
        [len(messages), messages[-1] if messages else None, name, args, k], sort_keys=True, default=str
    )
    return "toolu_off_" + hashlib.sha256(seed.encode()).hexdigest()[:20]


def _summary_notes(messages: list[Message]) -> set[str]:
    """The note lines that summaries in view carry (of their own text: :func:`.memory_survey.own_text`)."""
    return {
        line.rstrip()
        for m in messages
        if m["role"] == "user"
        for line in memory_survey.own_text(m).split("\n")
        if line.startswith("- ")
    }


def decide(
    messages: list[Message], tool_names: set[str], batch_size: int = 4
) -> tuple[list[dict[str, Any]], str]:
    """The next assistant content and its stop reason (``tool_use`` or ``end_turn``)."""
    if "memory" in tool_names:  # the survey keeps its work in memory files
        return _memory_decide(messages, tool_names)
    facts, notes, since_checkpoint = observe(messages)
    text_parts: list[str] = []
    if notes:
        text_parts.append("Notes from the last results:\n" + "\n".join(notes))
    summarized = any(m["role"] == "user" and mentions_summary(text_of(m)) for m in messages)
    # big workspaces are read more files at a time, so any tree is surveyed in a bounded number of turns
    batch = max(batch_size, math.ceil(len(facts.listing or []) / 60))
    calls = _next_calls(facts, tool_names, batch=batch, summarized=summarized)
    if not calls and not facts.files and (facts.listing or facts.glob.seen_anything()):
        raise SurveyFailed(
            f"the survey of {facts.root or 'the workspace'} read no file of the "
            f"{len(facts.listing or [])} it listed"
        )
    if not calls:
        return [{"type": "text", "text": report(facts, largest_of(messages))}], "end_turn"
    if since_checkpoint >= CHECKPOINT_EVERY or (calls[0][0] == "compact"):
        text_parts.append(checkpoint(facts, _summary_notes(messages)))
    text_parts.append(f"Next: {calls[0][0]} ({len(calls)} call{'s' if len(calls) > 1 else ''}).")
    return _content(messages, text_parts, calls), "tool_use"


def _memory_decide(messages: list[Message], tool_names: set[str]) -> tuple[list[dict[str, Any]], str]:
    """The next turn of a survey kept in memory files: an incremental one (of a split baseline, or of
    one to start from), one handed to subagents (a big tree), or the memory survey."""
    if incremental_parts.applies(messages, tool_names):  # a split baseline
        return incremental_parts.decide(messages, tool_names)
    if incremental_survey.applies(messages, tool_names):  # a baseline to start from
        return incremental_survey.decide(messages)
    if delegation.applies(messages, tool_names):  # a big tree: subagents
        return delegation.decide(messages, tool_names)
    return memory_survey.decide(messages)


def _next_calls(
    facts: Facts, tool_names: set[str], *, batch: int, summarized: bool
) -> list[tuple[str, dict[str, Any]]]:
    """This turn's calls, in the survey's order: the listing (saved answers read back first), the
    reads, the outlines (after a compaction when one is offered), then the TODO scan; none when done."""
    calls: list[tuple[str, dict[str, Any]]] = []
    root = facts.root
    known = set(facts.files) | set(facts.errors)
    pending = [p for p in (facts.listing or []) if p not in known]
    python = [p for p in sorted(facts.files) if p.endswith(".py")]
    pending_outline = [p for p in python if p not in facts.outlines]
    glob_due = [
        (path, query)
        for path, (kind, _, query) in facts.recall_due.items()
        if kind == "glob" and not _answered(facts, query)
    ]
    todo_due = [path for path, (kind, _, _) in facts.recall_due.items() if kind == "todo"]
    if facts.listing is None and glob_due and "recall" in tool_names:
        path, query = glob_due[0]
        answer = facts.glob.answers.get(query)
        calls.append(("recall", {"path": path, "offset": answer.next_start() if answer else 0}))
    elif facts.listing is None and "glob" in tool_names:
        waiting = {query for _, query in glob_due}
        for path, pattern in [q for q in facts.glob.pending() if q not in waiting][:GLOBS_PER_TURN]:
            calls.append(("glob", {"pattern": pattern, **({"path": path} if path else {})}))
    elif pending and "read" in tool_names:
        calls += [("read", {"file_path": os.path.join(root or "", p)}) for p in pending[:batch]]
    elif pending_outline and not summarized and "compact" in tool_names and not facts.outlines:
        calls.append(("compact", {}))
    elif pending_outline and "grep" in tool_names:
        calls += [
            ("grep", {"pattern": OUTLINE_PATTERN, "path": os.path.join(root or "", p)})
            for p in pending_outline[: batch * OUTLINES_PER_READ]
        ]
    elif not facts.todo_done and todo_due and "recall" in tool_names:
        calls.append(("recall", {"path": todo_due[-1], "offset": _chain_end(facts.todo_parts)}))
    elif not facts.todo_done and "grep" in tool_names:
        calls.append(("grep", {"pattern": TODO_PATTERN}))
    return calls


def _content(
    messages: list[Message], text_parts: list[str], calls: list[tuple[str, dict[str, Any]]]
) -> list[dict[str, Any]]:
    content: list[dict[str, Any]] = [{"type": "text", "text": "\n\n".join(text_parts)}]
    for k, (name, args) in enumerate(calls):
        content.append(
            {"type": "tool_use", "id": _call_id(messages, name, args, k=k), "name": name, "input": args}
        )
    return content


def partial_report(messages: list[Message]) -> str:
    """The report from what the conversation holds so far, with no further tool call: the answer to
    a request that allows no tools (the job is out of turns, time or budget)."""
    if delegation.in_progress(messages) or delegation.probed(messages):
        return delegation.partial_report(messages)
    if incremental_survey.in_progress(messages):
        return incremental_survey.partial_report(messages)
    if memory_survey.in_progress(messages):
        return memory_survey.partial_report(messages)
    return report(observe(messages)[0], largest_of(messages))


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
