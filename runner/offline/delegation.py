"""The offline survey of a big tree, handed to subagents: the parent's side of the ``task`` tool.

When the ``task`` tool is offered and the request is a survey that is not itself a part of one, the
first turn is the memory survey's (:mod:`.memory_survey`) with one more call, a ``glob`` of ``*/``
(the top-level directories). With its answers in view the parent decides:

- a small tree (a ``**/*`` listing of at most :data:`DELEGATE_ENTRIES` entries), fewer than two
  top-level directories, or one it cannot name in a prompt: the memory survey goes on as if the
  extra call had not been made (it never sees it);
- else it measures each top-level directory (a ``glob`` of ``**/*`` in it: a cut answer says its
  total) and the subdirectories of a big one, cuts a directory bigger than :data:`CUT_SHARE` of the
  tree into its subdirectories and its own files, and deals these units (and the files at the top)
  out to 4 to 8 parts of about the same size (:func:`plan_parts`); then one ``task`` call per
  part, largest first (the runtime starts them in that order, ``max_subagents`` at a time, so the
  longest part does not start last), all in one reply, each with a scoped prompt
  (:func:`.memory_survey.scoped_prompt`) that names its units and carries the request.

Each result (:func:`runner.protocol.subagent_result`'s header, then the subagent's report, maybe cut)
gives its part's status and totals; a part whose report was cut before its TODO count is read back
once with ``recall`` (its report path is relative to the job directory). Then the report: the sum of
the parts' totals, each subagent with its scope, status and report path, the parts not covered
(a subagent that did not succeed), the merged extension and largest-file tables, and where every
file's row is (:func:`.memory_survey.report_rows` follows the succeeded subagents' reports).

Guarantees:

- Without the ``task`` tool nothing here runs: the surveys are as they were.
- A part whose subagent did not succeed is named as not covered, and its counts are not in the
  totals the report gives.
- Every fact the next turn needs is in a note line (``- delegation | ...``, ``- subagent | ...``),
  so a summary or a cut result loses none of it.

Pure: the conversation in, the next assistant content out.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from typing import Any

from ..messages import Message, result_text, text_of, tool_results, tool_uses
from ..protocol import (
    is_persisted,
    is_placeholder,
    is_summary,
    persisted_preview,
    saved_path,
    subagent_result,
)
from . import memory_survey
from .memory_survey import (
    GLOB_SHOWN,
    INLINE_FILES,
    LARGEST_MOST,
    SKIP_DIRS,
    SUBAGENT_ROW,
    TAIL_CHARS,
    TODO_HEAD,
    TOP,
    TOTALS,
    TOTALS_LINE,
    UNIT_SEP,
    files_only,
    largest_of,
    own_text,
    scope_of,
    scoped_prompt,
    units,
)
from .readback import glob_cut, persisted_size, without_footer

DELEGATE_ENTRIES = INLINE_FILES  # a tree whose listing names more entries than this is split
MIN_PARTS = 2  # top-level directories a tree needs to be split
# the parts a tree is cut into: one per subagent that runs at once by default (each part costs a
# start and a report, about 4 turns), and for a big tree up to twice as many, so that, handed out
# largest first, parts whose sizes were misjudged still end close together: one part per
# PART_ENTRIES entries between the two
LANES = 4
PARTS = 2 * LANES
PART_ENTRIES = 1_000
CUT_SHARE = 3 / 16  # a directory bigger than this share of the tree is cut (one part is 1/8 of a big
# one; a bigger directory still runs within a lane's share, 1/4, and cutting it costs each piece a start)
PROBE = {"pattern": "*/"}  # the first turn's extra call: the top-level directories
SUBAGENT_TOOLS = ("read", "glob", "grep")
TOP_DESCRIPTION = "top-level files"
RECALL_CHARS = 4_000  # a cut report read back: its head (totals, tables, TODO count) is well within this
RECALLS = 3  # cut reports read back a turn (their pages fit a small window)
PLAN_KEY = "- delegation | "
SIZES_KEY = "- delegation-sizes | "  # the split waiting for its directories' sizes
DIRS_KEY = (
    "- delegation-dirs | "  # the top-level directories measured: written once (the sizes' note is small)
)
# the top-level directories, asked again after a summary: each way at most the times a call may repeat
REPROBES = ({"pattern": "*/", "path": "."}, {"pattern": "./*/"}, {"pattern": "*/", "path": "./"})
REPROBE = REPROBES[0]
MEASURE_BATCH = 8  # directories a measuring turn lists (their answers fit a small window)
MEASURE_BATCH_SMALL = 3  # and once a summary is in view: the window is smaller than they need
MEASURE_ROUNDS = 80  # measuring turns at most before the split (a few minutes; the parts take hours)
MEASURE_SUMMARIES = 5  # history summaries at most while measuring: then the split, with what is known
CLOSE_SUMMARIES = 2  # or once two come this close (turns): the thrashing detector's first strike;
# a few more and it halves the summaries, which could drop the measuring notes
LIST_BATCH = 16  # directories whose subdirectories a turn lists (short answers)
TABLES_KEY = "- delegation-tables | "  # the parts' tables merged so far: one note, whatever their number
PART_KEY = "- subagent {k} | "  # one key per part: a summary keeps each part's newest note
_PART_NOTE = re.compile(r"^- subagent(?: \d+)? \| (.*)$")
SURVEY = re.compile(r"\bsurvey", re.I)
_UNNAMEABLE = re.compile(r"[`|\n\r]")  # a directory a prompt, a note or a table cell could not name
_EXT_ROW = re.compile(r"^\| (\S+) \| (\d+) \| (\d+) \|$", re.M)
_LARGEST_ROW = re.compile(r"^\| (.+?) \| (\d+) \| (\d+) \|$", re.M)
TOTAL_NAMES = ("files", "text", "lines", "chars", "binary", "binary_bytes", "errors")


def applies(messages: list[Message], tool_names: set[str]) -> bool:
    """Whether this job's survey may be handed to subagents: ``task`` (and ``memory``) offered, the
    request a survey and not a scoped one."""
    return (
        {"task", "memory"} <= tool_names
        and bool(SURVEY.search(request(messages)))
        and scope_of(messages) is None
    )


def request(messages: list[Message]) -> str:
    """The job's request: its first message, or the copy a summary in its place carries."""
    text = text_of(messages[0]) if messages else ""
    if is_summary(text) and "Current user request:\n" in text:
        return text.split("Current user request:\n", 1)[1].split("\n\nConversation summary:", 1)[0]
    return text


def decide(messages: list[Message], tool_names: set[str]) -> tuple[list[dict[str, Any]], str]:
    """The parent's next assistant content and its stop reason."""
    plan = _plan(messages)
    if plan is not None:
        return _assemble(messages, plan)
    again = reprobe(messages)
    if again is not None:
        return again
    found = _measured(messages)  # measuring: its note says all it needs (the survey's may be gone)
    if found is not None:
        return _measure_more(messages, found) or _delegate(messages, tool_names, found)
    state, _ = memory_survey.load_state(messages)
    if state is None:  # the first turn: the memory survey's, and the top-level directories
        content, stop = memory_survey.decide(messages)
        if stop == "tool_use":
            content.append(
                {
                    "type": "tool_use",
                    "id": _call_id(messages, len(content)),
                    "name": "glob",
                    "input": dict(PROBE),
                }
            )
        return content, stop
    split = _split(messages)
    if split is not None:
        return _measure(messages, split)
    return memory_survey.decide(without_probe(messages))


def partial_report(messages: list[Message]) -> str:
    """The report from what is known (no more calls can be made)."""
    plan = _plan(messages)
    if plan is None:
        return memory_survey.partial_report(without_probe(messages))
    parts = _parts(messages, plan)
    done = sum(1 for scope in scopes(plan) if scope in parts)
    tables = _merged(messages, plan, parts)
    partial = f"(Partial: {done} of the {len(plan['parts'])} subagents' results were in when the job ended.)"
    return report(plan, parts, tables, partial=partial)


def in_progress(messages: list[Message]) -> bool:
    return _plan(messages) is not None


def _probes(messages: list[Message]) -> set[str]:
    return {
        str(u.get("id"))
        for m in messages
        for u in tool_uses(m)
        if u.get("name") == "glob" and u.get("input") == PROBE
    }


def probed(messages: list[Message]) -> bool:
    """Whether the first turn asked for the top-level directories (the conversation is this module's)."""
    return bool(_probes(messages))


def without_probe(messages: list[Message]) -> list[Message]:
    """The conversation without the first turn's extra call and its result (the memory survey's own)."""
    ids = _probes(messages)
    if not ids:
        return messages
    out = []
    for m in messages:
        content = m.get("content")
        if isinstance(content, list):
            content = [
                b
                for b in content
                if not (
                    isinstance(b, dict)
                    and (
                        (b.get("type") == "tool_use" and str(b.get("id")) in ids)
                        or (b.get("type") == "tool_result" and str(b.get("tool_use_id")) in ids)
                    )
                )
            ]
            m = {**m, "content": content}
        out.append(m)
    return out


# --- the split ------------------------------------------------------------------------------------


def _split(messages: list[Message]) -> tuple[str, int, list[str], int] | None:
    """(root, entries, top-level directories, the files at the top: how many, at least 1 when the
    top listing was cut) when the newest results answer the first turn's listing and the tree is to
    be split; else None."""
    if len(messages) < 2 or messages[-2].get("role") != "assistant":
        return None
    uses = {
        str(u.get("id")): u.get("input") or {} for u in tool_uses(messages[-2]) if u.get("name") == "glob"
    }
    answers: dict[str, str] = {}
    for result in tool_results(messages[-1]):
        args = uses.get(str(result.get("tool_use_id")))
        if args is not None and "path" not in args and not result.get("is_error"):
            answers[str(args.get("pattern"))] = result_text(result)
    if not {"*", "**/*", PROBE["pattern"]} <= set(answers):
        return None
    listing, dirs_text = answers["**/*"], answers[PROBE["pattern"]]
    if any(is_placeholder(t) or is_persisted(t) for t in (dirs_text, answers["*"])) or glob_cut(dirs_text):
        return None  # the top-level directories are not all in view
    entries = _entry_count(listing)
    dirs = [e for e in _entries(dirs_text) if os.path.basename(e) not in SKIP_DIRS]
    if entries <= DELEGATE_ENTRIES or len(dirs) < MIN_PARTS or any(_UNNAMEABLE.search(d) for d in dirs):
        return None
    top = [e for e in _entries(answers["*"]) if e not in set(_entries(dirs_text))]
    root = os.path.dirname(dirs[0])
    cut = glob_cut(answers["*"])
    files = max(len(top), cut[1] - len(dirs), 1) if cut else len(top)
    return root, entries, sorted(os.path.basename(d) for d in dirs), files  # names, as paths


def _entries(text: str) -> list[str]:
    return [line for line in text.split("\n") if line.startswith("/")]


def _entry_count(text: str) -> int:
    """How many entries a glob answer says it matched (a cut one says its total; a saved one of more
    lines than a whole answer shows was cut: more than it shows)."""
    cut = glob_cut(text)
    if cut:
        return cut[1]
    size = persisted_size(text)
    if size:  # one entry a line (and the cut line: a saved cut answer says at least this many)
        return size[1]
    if is_placeholder(text):
        return 0
    return len(_entries(text))


def _measure(
    messages: list[Message], split: tuple[str, int, list[str], int]
) -> tuple[list[dict[str, Any]], str]:
    """The first measuring turn: the first :data:`MEASURE_BATCH` top-level directories' sizes."""
    root, entries, dirs, top = split
    found = Measured({"root": root, "entries": entries, "dirs": dirs, "top": top, "round": 0})
    return _measure_more(messages, found) or _delegate(messages, set(), found)


def _sizes_turn(
    messages: list[Message], say: str, note: dict[str, Any], *, calls: list[tuple[str, dict[str, Any]]]
) -> tuple[list[dict[str, Any]], str]:
    dirs = note.pop("dirs", None)  # the first measuring turn's alone
    head = f"{DIRS_KEY}{_plan_json({'dirs': dirs})}\n" if dirs is not None else ""
    content: list[dict[str, Any]] = [{"type": "text", "text": f"{say}\n{head}{SIZES_KEY}{_plan_json(note)}"}]
    for k, (name, args) in enumerate(calls):
        content.append({"type": "tool_use", "id": _call_id(messages, k), "name": name, "input": args})
    return content, "tool_use"


class Measured:
    """The sizes known so far, carried from one measuring turn to the next in its note.

    Each turn measures at most :data:`MEASURE_BATCH` directories (:data:`MEASURE_BATCH_SMALL` once a
    summary is in view; a ``glob`` of ``**/*`` in each, and one of ``*/``: its subdirectories), so
    that their answers fit a small window and are read before a compaction takes them; an answer
    that is gone is asked again (once). A saved cut listing's total is read from its end
    (``recall``). A directory bigger than :data:`CUT_SHARE` of the tree
    is cut into its pieces: its subdirectories, measured in turn (and cut in turn when as big), and
    its own files."""

    def __init__(self, note: dict[str, Any]):
        self.note = note
        self.root = str(note["root"])
        self.dirs = [str(d) for d in note["dirs"]]
        self.round = int(note.get("round", 1))
        sizes = note.get("n") or []  # aligned with dirs: 0 not known yet
        self.sizes: dict[str, int] = {d: int(n) for d, n in zip(self.dirs, sizes, strict=False) if n}
        self.sizes.update({str(d): int(n) for d, n in (note.get("sub") or {}).items()})
        bits = str(note.get("exact") or "")
        self.exact: set[str] = {d for d, bit in zip(self.dirs, bits, strict=False) if bit == "1"}
        self.exact |= set(note.get("sub_exact") or [])  # the sizes that are not lower bounds
        self.subdirs: dict[str, list[str]] = {
            self._name(d): list(subs) for d, subs in (note.get("subdirs") or {}).items()
        }  # a directory's subdirectories, while it may be big
        self.counts: dict[str, int] = {self._name(d): int(n) for d, n in (note.get("counts") or {}).items()}
        self.pieces: dict[str, list[list[Any]]] = dict(note.get("pieces") or {})
        self.asked = self._names(note.get("asked"))  # sized by the last turn
        self.listing = self._names(note.get("listing"))  # their subdirectories listed by the last turn
        self.retried = set(self._names(note.get("retried")))
        self.retried_listing = set(self._names(note.get("retried_listing")))
        self.summaries: dict[str, int] = dict(note.get("summaries") or {})  # seen while measuring: round
        self.tails: dict[str, list[Any]] = {}  # a saved cut listing: [its saved path, its chars]
        self.batch = MEASURE_BATCH
        self.rewrite_dirs = False

    def _names(self, items: Any) -> list[str]:
        """Directories as the note writes them: a top-level one by its index in ``dirs``."""
        return [self._name(i) for i in items or []]

    def _name(self, item: Any) -> str:
        if isinstance(item, int) or (isinstance(item, str) and item.isdigit()):  # a JSON key is a string
            return self.dirs[int(item)]
        return str(item)

    def _refs(self, names: list[str] | set[str]) -> list[Any]:
        index = {d: k for k, d in enumerate(self.dirs)}
        return [index.get(d, d) for d in names]

    @property
    def goal(self) -> int:
        """The size above which a top-level directory is cut."""
        return max(1, int(int(self.note["entries"]) * CUT_SHARE))

    def size(self, d: str) -> int:
        return max(self.sizes.get(d, 1), 1)

    def learn(self, args: dict[str, Any], text: str) -> None:
        """One measuring call's answer."""
        d = str(args.get("path", ""))
        if "offset" in args:  # the end of a saved cut listing: its total
            cut = glob_cut(without_footer(text))
            if cut:
                self.sizes[d] = cut[1]
                self.exact.add(d)
            return
        if args.get("pattern") == "*/":
            if not (glob_cut(text) or is_placeholder(text) or is_persisted(text)):
                names = [n for n in (os.path.basename(e) for e in _entries(text)) if n not in SKIP_DIRS]
                if d in self.sizes and self.size(d) > self.goal:  # named: it is to be cut
                    self.subdirs[d] = names
                else:  # how many: the order in which the sizes are asked
                    self.counts[d] = len(names)
            return
        if is_placeholder(text):
            return
        self.sizes[d] = max(self.sizes.get(d, 0), _entry_count(text), 1)
        saved, lines = saved_path(text), (persisted_size(text) or (0, 0))[1]
        if is_persisted(text) and saved and lines > GLOB_SHOWN:  # a lower bound: its total at its end
            self.tails[d] = [saved, (persisted_size(text) or (0, 0))[0]]
        else:
            self.exact.add(d)
        if not (glob_cut(text) or is_persisted(text)) and self.size(d) > self.goal:
            listing = [e[len(self.root) + 1 :] for e in _entries(text) if e.startswith(self.root + "/")]
            pieces = pieces_of(d, listing)
            if pieces:
                self.pieces[d] = [[n, unit] for n, unit in pieces]

    def settle(self) -> None:
        """What the answers leave: a lost one asked again (once, then given up), and a big
        directory whose subdirectories' sizes are all known cut into its pieces."""
        for d in self.asked:
            if d not in self.sizes and d in self.retried:  # lost twice: counted as one entry
                self.sizes[d] = 1
        for d in self.listing:
            if d not in self.subdirs and d not in self.counts and d in self.retried_listing:
                self.counts[d] = 0
        self.retried |= {d for d in self.asked if d not in self.sizes}
        self.retried_listing |= {d for d in self.listing if d not in self.subdirs and d not in self.counts}
        for d in list(self.sizes):  # a big piece of a big directory is cut in turn
            subs = self.subdirs.get(d)
            if self.size(d) <= self.goal or d in self.pieces or not subs:
                continue
            if any(_UNNAMEABLE.search(n) or UNIT_SEP in n for n in subs):
                continue
            if all(f"{d}/{sub}" in self.sizes for sub in subs):
                known = [(self.size(f"{d}/{sub}"), f"{d}/{sub}") for sub in subs]
                own = self.size(d) - sum(n for n, _ in known) - len(known)
                self.pieces[d] = [[n, unit] for n, unit in known] + [[max(own, 1), d + "/."]]
        for d in list(self.subdirs):  # only a big directory's subdirectories are named again
            if d in self.sizes and (self.size(d) <= self.goal or d in self.pieces):
                self.counts[d] = len(self.subdirs.pop(d))

    def cut_unmeasured(self) -> None:
        """Measuring is over: a big directory whose subdirectories are named but not all sized is cut
        still, each subdirectory not sized (and its own files) taking an equal share of the rest."""
        for d, subs in list(self.subdirs.items()):
            if not subs or d in self.pieces or self.size(d) <= self.goal:
                continue
            if any(_UNNAMEABLE.search(n) or UNIT_SEP in n for n in subs):
                continue
            known = {sub: self.size(f"{d}/{sub}") for sub in subs if f"{d}/{sub}" in self.sizes}
            rest = max(self.size(d) - sum(known.values()) - len(subs), 0)
            share = max(1, rest // (len(subs) - len(known) + 1))
            cut = [[known.get(sub, share), f"{d}/{sub}"] for sub in subs]
            self.pieces[d] = [*cut, [share if len(known) < len(subs) else max(rest, 1), d + "/."]]

    def queue(self) -> list[str]:
        """What to size next: a big directory's subdirectories first (how it is cut matters more than
        the small ones' sizes), then the top-level directories with subdirectories, those with the
        most first (the directories without any are small: each counts as one entry)."""
        big = [
            f"{d}/{sub}"
            for d, subs in self.subdirs.items()
            if d in self.sizes and self.size(d) > self.goal and d not in self.pieces
            for sub in subs
            if f"{d}/{sub}" not in self.sizes
        ]
        wide = len(self.dirs) > MEASURE_BATCH
        rest = [
            d
            for d in self.dirs
            if d not in self.sizes and (not wide or self.subdirs.get(d) or self.counts.get(d))
        ]
        rest.sort(key=lambda d: -len(self.subdirs.get(d) or []) - self.counts.get(d, 0))
        return big + rest

    def next_calls(self) -> list[tuple[str, dict[str, Any]]]:
        """The next turn's calls: the totals of saved cut listings; for a tree of many top-level
        directories, their subdirectories first (short answers, :data:`LIST_BATCH` a turn), then the
        sizes; nothing after :data:`MEASURE_ROUNDS` turns, :data:`MEASURE_SUMMARIES` summaries, or two
        summaries :data:`CLOSE_SUMMARIES` turns apart."""
        rounds = sorted(self.summaries.values())
        close = any(b - a <= CLOSE_SUMMARIES for a, b in zip(rounds, rounds[1:], strict=False))
        if self.round >= MEASURE_ROUNDS or len(rounds) >= MEASURE_SUMMARIES or close:
            return []
        calls: list[tuple[str, dict[str, Any]]] = [
            ("recall", {"path": saved, "offset": max(0, chars - TAIL_CHARS), "limit": TAIL_CHARS})
            for saved, chars in self.tails.values()
        ]
        unlisted = [d for d in self.dirs if d not in self.subdirs and d not in self.counts]
        if len(self.dirs) > MEASURE_BATCH and unlisted:
            self.asked, self.listing = [], unlisted[:LIST_BATCH]
            return calls + [("glob", {"pattern": "*/", "path": d}) for d in self.listing]
        self.asked = self.queue()[: self.batch]
        self.listing = [d for d in self.asked if d not in self.subdirs]  # named if it proves big
        for d in self.asked:
            calls.append(("glob", {"pattern": "**/*", "path": d}))
            if d in self.listing:
                calls.append(("glob", {"pattern": "*/", "path": d}))
        unnamed = [  # big, known so only now (a saved listing's total): its subdirectories named
            d
            for d in self.sizes
            if self.size(d) > self.goal
            and d not in self.subdirs
            and d not in self.pieces
            and d not in self.asked
            and self.counts.get(d) != 0
        ]
        self.listing += unnamed
        calls += [("glob", {"pattern": "*/", "path": d}) for d in unnamed]
        return calls

    def note_of(self) -> dict[str, Any]:
        """The note the next measuring turn carries (kept small: a summary keeps it whole)."""
        top = set(self.dirs)
        return {
            **{k: self.note[k] for k in ("root", "entries", "top")},
            # written by the first turn, and again by the first after each summary (which keeps
            # the newest notes first: written once, they would be the first it leaves out)
            **({"dirs": self.dirs} if self.round == 0 or self.rewrite_dirs else {}),
            "round": self.round + 1,
            "n": [self.sizes.get(d, 0) for d in self.dirs],
            "exact": "".join("1" if d in self.exact else "0" for d in self.dirs),
            "sub": {d: n for d, n in self.sizes.items() if d not in top},
            "sub_exact": sorted(d for d in self.exact if d not in top),
            "subdirs": {self._refs([d])[0] if d in top else d: subs for d, subs in self.subdirs.items()},
            "counts": {self._refs([d])[0] if d in top else d: n for d, n in self.counts.items()},
            "pieces": self.pieces,
            "asked": self._refs(self.asked),
            "listing": self._refs(self.listing),
            "retried": self._refs(sorted(self.retried)),
            "retried_listing": self._refs(sorted(self.retried_listing)),
            "tails": {d: saved for d, (saved, _) in self.tails.items()},
            "summaries": self.summaries,
            "reprobes": int(self.note.get("reprobes") or 0),
        }


def _newest_note(messages: list[Message], key: str) -> dict[str, Any] | None:
    """The newest note with ``key`` in view (a summary's too), as its JSON object."""
    for m in reversed(messages):
        text = own_text(m)  # its own notes: never a line a file's name or a result put in view
        at = text.rfind(key)
        if at >= 0:
            try:
                note = json.loads(text[at + len(key) :].split("\n", 1)[0])
            except ValueError:
                continue
            if isinstance(note, dict):
                return note
    return None


def _reprobed(messages: list[Message]) -> dict[str, Any] | None:
    """The top-level directories again, from the answer to :data:`REPROBE` in the newest results."""
    if len(messages) < 2:
        return None
    ids = {str(u.get("id")) for u in tool_uses(messages[-2]) if u.get("input") in REPROBES}
    for r in tool_results(messages[-1]):
        text = result_text(r)
        if str(r.get("tool_use_id")) in ids and not r.get("is_error") and not glob_cut(text):
            if not (is_placeholder(text) or is_persisted(text)):
                names = {os.path.basename(e) for e in _entries(text)}
                return {"dirs": sorted(n for n in names if n not in SKIP_DIRS)}
    return None


def reprobe(messages: list[Message]) -> tuple[list[dict[str, Any]], str] | None:
    """When a summary kept the sizes' note but not the directories' (it keeps the newest notes first):
    the top-level directories asked again (the note counts them in their sorted order), rather than
    measuring from the start; None when that is not the case."""
    if _plan(messages) is not None or _newest_note(messages, DIRS_KEY) or _reprobed(messages):
        return None
    note = _newest_note(messages, SIZES_KEY)
    if note is None:
        return None
    times = int(note.get("reprobes") or 0)
    note["reprobes"] = times + 1
    text = f"The top-level directories' note is gone: listing them again.\n{SIZES_KEY}{_plan_json(note)}"
    way = REPROBES[times % len(REPROBES)]
    call = {"type": "tool_use", "id": _call_id(messages, 0), "name": "glob", "input": dict(way)}
    return [{"type": "text", "text": text}, call], "tool_use"


def _measured(messages: list[Message]) -> Measured | None:
    """The sizes known from the newest measuring note (in the message before the newest results,
    or in a summary: then the answers of its turn are gone, and asked again); None when there is
    none, or the tree was split since."""
    noted = _newest_note(messages, DIRS_KEY)
    dirs = noted or _reprobed(messages)
    found, where = None, -1
    for where in range(len(messages) - 1, -1, -1):  # the newest note: a summary may carry it
        text = own_text(messages[where])
        at = text.rfind(SIZES_KEY)
        if at >= 0 and dirs is not None:
            try:
                note = json.loads(text[at + len(SIZES_KEY) :].split("\n", 1)[0])
                found = Measured({**note, "dirs": dirs.get("dirs")})
                break
            except (ValueError, KeyError, TypeError, AttributeError, IndexError):
                continue
    if found is None or any(PLAN_KEY in own_text(m) for m in messages[where:]):
        return None
    found.rewrite_dirs = noted is None  # listed again: noted again
    if where != len(messages) - 2 or messages[where].get("role") != "assistant":  # its answers are gone
        found.settle()
        return found
    uses = {str(u.get("id")): u.get("input") or {} for u in tool_uses(messages[-2])}
    tails = found.note.get("tails") or {}
    for r in tool_results(messages[-1]):
        args = uses.get(str(r.get("tool_use_id")))
        if args is None or r.get("is_error") or args in REPROBES:
            continue
        if "offset" in args:  # a recall names the saved file: the directory is in the note
            for d in [d for d, saved in tails.items() if saved == args.get("path")]:
                found.learn({**args, "path": d}, result_text(r))
        else:
            found.learn(args, result_text(r))
    found.settle()
    return found


def _measure_more(messages: list[Message], found: Measured) -> tuple[list[dict[str, Any]], str] | None:
    """The next measuring turn, when something is left to measure; else None."""
    seen = [text_of(m) for m in messages if m.get("role") == "user" and is_summary(text_of(m))]
    if seen:
        found.batch = MEASURE_BATCH_SMALL
        newest = hashlib.sha256(seen[-1].encode()).hexdigest()[:12]
        found.rewrite_dirs = found.rewrite_dirs or newest not in found.summaries
        found.summaries.setdefault(newest, found.round)
    calls = found.next_calls()
    if not calls:
        return None
    if found.asked:
        say = f"Measuring the tree before handing it out: {len(found.queue()) + len(found.asked)} to size."
    else:
        say = f"Measuring the tree before handing it out: the subdirectories of {len(found.listing)}."
    return _sizes_turn(messages, say, found.note_of(), calls=calls)


def plan_parts(
    *, entries: int, sizes: dict[str, int], pieces: dict[str, list[list[Any]]], top: int
) -> list[str]:
    """The parts, largest first, each a scope (its units joined by ``UNIT_SEP``): a directory bigger
    than :data:`CUT_SHARE` of the tree is cut into its ``pieces`` (its subdirectories and its own
    files, with their sizes) when they are known, and so is a piece as big; the units are dealt out
    largest first to the least loaded of one part per :data:`PART_ENTRIES` entries, at least
    :data:`LANES` and at most :data:`PARTS` (fewer when there are fewer units)."""

    def units_of(d: str, size: int) -> list[tuple[int, str]]:
        cut = pieces.get(d)
        return [u for n, unit in cut for u in units_of(str(unit), int(n))] if cut else [(max(size, 1), d)]

    found = [u for d, size in sizes.items() for u in units_of(d, size)]
    if top:
        found.append((top, TOP))
    count = max(LANES, min(PARTS, entries // PART_ENTRIES))
    loads: list[tuple[int, list[str]]] = [(0, []) for _ in range(min(count, len(found)))]
    for size, unit in sorted(found, key=lambda f: (-f[0], f[1])):
        k = min(range(len(loads)), key=lambda i: (loads[i][0], i))
        loads[k] = (loads[k][0] + size, [*loads[k][1], unit])
    loads.sort(key=lambda load: (-load[0], load[1]))
    return [UNIT_SEP.join(names) for _, names in loads if names]


def pieces_of(d: str, listing: list[str]) -> list[tuple[int, str]] | None:
    """A directory's subdirectories and its own files as units with their sizes (entries), from its
    whole listing; None when it has no subdirectory or names one no prompt could."""
    inside = [e[len(d) + 1 :] for e in listing if e.startswith(d + "/")]
    sub: dict[str, int] = {}
    for rest in inside:
        head, sep, _ = rest.partition("/")
        if sep:
            sub[head] = sub.get(head, 0) + 1
    own = sum(1 for rest in inside if "/" not in rest and rest not in sub)
    sub = {name: n + (name in inside) for name, n in sub.items() if name not in SKIP_DIRS}
    if not sub or any(_UNNAMEABLE.search(name) or UNIT_SEP in name for name in sub):
        return None
    pieces = [(n, f"{d}/{name}") for name, n in sub.items()]
    return pieces + ([(own, d + "/.")] if own else [])


def _delegate(
    messages: list[Message], tool_names: set[str], found: Measured
) -> tuple[list[dict[str, Any]], str]:
    found.cut_unmeasured()
    root, entries, top = found.root, int(found.note["entries"]), int(found.note["top"])
    sizes = {d: found.size(d) for d in found.dirs}
    parts = plan_parts(entries=entries, sizes=sizes, pieces=found.pieces, top=top)
    plan = {"root": root, "entries": entries, "parts": parts}
    tools = [t for t in SUBAGENT_TOOLS if t in tool_names]
    asked = request(messages).strip()
    text = (
        f"The tree is big ({entries} entries in {len(sizes)} top-level directories"
        f"{' and files at the top' if top else ''}): {len(parts)} parts of about the same size, one "
        f"subagent each, largest first.\n{PLAN_KEY}{_plan_json(plan)}"
    )
    content: list[dict[str, Any]] = [{"type": "text", "text": text}]
    for k, scope in enumerate(parts):
        task = {"prompt": scoped_prompt(scope, asked), "description": description(scope), "tools": tools}
        content.append({"type": "tool_use", "id": _call_id(messages, k), "name": "task", "input": task})
    return content, "tool_use"


def _plan_json(plan: dict[str, Any]) -> str:
    return json.dumps(plan, separators=(",", ":"), ensure_ascii=False)


def description(scope: str) -> str:
    """A few words naming a part: its first unit, and how many more."""
    first, *more = units(scope)
    only = files_only(first)
    name = first if only is None else (f"{only} files" if only else TOP_DESCRIPTION)
    return name + (f" and {len(more)} more" if more else "")


# --- the parts' results ---------------------------------------------------------------------------


def _plan(messages: list[Message]) -> dict[str, Any] | None:
    """The newest split note in view."""
    plan = _newest_note(messages, PLAN_KEY)
    return plan if plan is not None and isinstance(plan.get("parts"), list) else None


def _parts(messages: list[Message], plan: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """What is known of each part (by scope): its notes, then the task results and recalls in view."""
    known = set(scopes(plan))
    parts: dict[str, dict[str, Any]] = {}
    uses: dict[str, dict[str, Any]] = {}
    for m in messages:
        for part in _part_notes(m, known):
            parts[part["scope"]] = part
        for use in tool_uses(m):
            uses[str(use.get("id"))] = use
        for result in tool_results(m):
            use = uses.get(str(result.get("tool_use_id"))) or {}
            args = use.get("input") or {}
            if use.get("name") == "task":
                scope = scope_of([{"role": "user", "content": str(args.get("prompt", ""))}])
                if scope is not None and scope in known and not parts.get(scope, {}).get("status"):
                    parts[scope] = _task_part(scope, result) or parts.get(scope, {})
            elif use.get("name") == "recall":
                for part in parts.values():
                    if str(args.get("path")) in (part.get("report"), part.get("saved")):
                        text = without_footer(result_text(result))
                        if not part.get("status"):  # a saved task result read back: header and report
                            _learn_result(part, text, bool(result.get("is_error")), whole=True)
                        _learn_report(part, text)
                        part["recalled"] = True
    return parts


def _part_notes(message: Message, known: set[str]) -> list[dict[str, Any]]:
    """The part notes ``message`` wrote, in its order, of the parts in ``known`` (by scope)."""
    found = []
    for line in own_text(message).split("\n"):
        note = _PART_NOTE.match(line)
        if not note:
            continue
        try:
            part = json.loads(note[1])
        except ValueError:
            continue
        if isinstance(part, dict) and part.get("scope") in known:
            found.append(part)
    return found


def _task_part(scope: str, result: dict[str, Any]) -> dict[str, Any] | None:
    """A part from its task result (None when the result is gone: a placeholder with nothing to read)."""
    text = result_text(result)
    part: dict[str, Any] = {"scope": scope, "recalled": False}
    if is_placeholder(text):  # seen and put away: read back where it was saved
        return {**part, "saved": saved_path(text)} if saved_path(text) else None
    whole = not is_persisted(text)
    _learn_result(part, text if whole else persisted_preview(text), bool(result.get("is_error")), whole=whole)
    return part


def _learn_result(part: dict[str, Any], shown: str, error: bool, *, whole: bool) -> None:
    """A task result's header (the subagent's status and report) and what its report shows."""
    head = subagent_result(shown)
    if head is None:  # not run: the text says why
        part.update(status="not run", error=shown.strip().split("\n", 1)[0][:300])
        return
    where, status, report_path, cut = head
    part.update(
        dir=where,
        status="failed" if error and status == "succeeded" else status,
        report=report_path,
        cut=cut or not whole,
    )
    _learn_report(part, shown.split("\n", 1)[1] if "\n" in shown else "")


def _learn_report(part: dict[str, Any], body: str) -> None:
    """A part's totals, extension table, largest files and TODO count, from its report's text."""
    totals = TOTALS_LINE.search(body)
    if totals and "totals" not in part:
        part["totals"] = dict(zip(TOTAL_NAMES, (int(g) for g in totals.groups()), strict=True))
    todo = TODO_HEAD.search(body)
    if todo and "todo" not in part:
        part["todo"] = [int(todo[1]), int(todo[2]), bool(todo[3])]
        sections = body[: todo.start()]
        ext = sections.split("## Files and lines per extension", 1)[-1].split("## Largest", 1)[0]
        part["ext"] = {e: [int(n), int(lines)] for e, n, lines in _EXT_ROW.findall(ext)}
        largest = sections.split("## Largest text files", 1)[-1]
        part["largest"] = [
            [int(size), path.replace("\\|", "|"), int(lines)]
            for path, lines, size in _LARGEST_ROW.findall(largest)
        ][:LARGEST_MOST]


def _assemble(messages: list[Message], plan: dict[str, Any]) -> tuple[list[dict[str, Any]], str]:
    """Read back the reports cut before their TODO count, once; then the report."""
    parts = _parts(messages, plan)
    due = [
        p
        for p in parts.values()
        if not p.get("recalled")
        and (
            p.get("saved")
            or (p.get("report") and p.get("cut") and "todo" not in p and p.get("status") == "succeeded")
        )
    ]
    tables = _merged(messages, plan, parts)
    if not due:
        return [{"type": "text", "text": report(plan, parts, tables)}], "end_turn"
    order = {scope: k for k, scope in enumerate(scopes(plan))}
    notes = "\n".join(
        PART_KEY.format(k=order[scope])
        + _plan_json({k: v for k, v in p.items() if k not in ("ext", "largest")})  # in the tables' note
        for scope, p in sorted(parts.items(), key=lambda kv: order[kv[0]])
    )
    text = (
        f"{len(due)} report{'s' if len(due) > 1 else ''} cut before the TODO count: reading back "
        f"{min(len(due), RECALLS)}.\n{PLAN_KEY}{_plan_json(plan)}\n{TABLES_KEY}{_plan_json(tables)}\n{notes}"
    )
    content: list[dict[str, Any]] = [{"type": "text", "text": text}]
    for k, part in enumerate(due[:RECALLS]):
        path = part.get("report") or part.get("saved")
        content.append(
            {
                "type": "tool_use",
                "id": _call_id(messages, k),
                "name": "recall",
                "input": {"path": path, "offset": 0, "limit": RECALL_CHARS},
            }
        )
    return content, "tool_use"


# --- the report -----------------------------------------------------------------------------------


def scopes(plan: dict[str, Any]) -> list[str]:
    """A plan's parts' scopes, in order (a part written as ``[scope, description]`` too)."""
    return [p[0] if isinstance(p, list) else str(p) for p in plan["parts"]]


def _scope_cell(scope: str) -> str:
    cells = []
    for unit in units(scope):
        only = files_only(unit)
        if only is None:
            cells.append(f"`{unit}/`")
        else:
            cells.append(f"the files directly in `{only}/`" if only else "the files at the top")
    return ", ".join(cells)


def report(
    plan: dict[str, Any], parts: dict[str, dict[str, Any]], tables: dict[str, Any], *, partial: str = ""
) -> str:
    """The parent's Markdown report: the parts' sums, each subagent, what is not covered."""
    names = scopes(plan)
    covered = [
        (s, parts[s]) for s in names if parts.get(s, {}).get("status") == "succeeded" and "totals" in parts[s]
    ]
    missing = [s for s in names if s not in dict(covered)]
    n = len(names)
    out = [f"# Survey of `{plan['root']}`", ""]
    if partial:
        out += [partial, ""]
    out.append(
        f"The tree ({plan['entries']} entries) was split among {n} subagents, each a part of about the "
        "same size (one directory, several, or a big one's subdirectories and its own files); each "
        "surveyed its part and wrote its own report. The totals here are the sum of theirs."
    )
    if missing:
        cells = "; ".join(map(_scope_cell, missing))
        out.append(
            f"**Not covered**: {len(missing)} of the {n} parts ({cells}): their subagents did not "
            "succeed, and their files are not in these totals."
        )
    else:
        out.append(f"Every part is covered: all {n} subagents succeeded.")
    sums = {name: sum(p["totals"][name] for _, p in covered) for name in TOTAL_NAMES}
    out += ["", TOTALS.format(**sums)]
    out += [
        "",
        "## Subagents",
        "",
        "| subagent | scope | status | files | report |",
        "|---|---|---|---:|---|",
    ]
    out += [_subagent_row(scope, parts.get(scope, {})) for scope in names]
    if missing:
        out += ["", "## Not covered", ""]
        out += [f"- {_scope_cell(scope)}: not covered ({_why(parts.get(scope, {}))})." for scope in missing]
    out += _merged_tables(covered, tables)
    reports = ", ".join(f"`{p['report']}`" for _, p in covered)
    out += [
        "",
        "## Every file",
        "",
        "Every file's row (lines, size, top-level definitions, first docstring or comment line) is in "
        f"its part's report: {reports or '(none)'}, in its table or in the facts files it names (under "
        "that report's directory).",
    ]
    return "\n".join(out) + "\n"


def _subagent_row(scope: str, part: dict[str, Any]) -> str:
    files = part["totals"]["files"] if "totals" in part else "-"
    status = part.get("status") or "no result"
    if part.get("report"):
        return SUBAGENT_ROW.format(
            dir=part.get("dir"), scope=_scope_cell(scope), status=status, files=files, report=part["report"]
        )
    return f"| (none) | {_scope_cell(scope)} | {status} | {files} | (none) |"


def _why(part: dict[str, Any]) -> str:
    """Why a part is not covered, and where what its subagent did is."""
    if part.get("error"):
        why = str(part["error"])
    elif part.get("status") == "succeeded":
        why = "its report gives no totals"
    else:
        why = f"it ended {part['status']}" if part.get("status") else "no result came back"
    return why + (f"; what it did is in `{part['report']}`" if part.get("report") else "")


def _merged(
    messages: list[Message], plan: dict[str, Any], parts: dict[str, dict[str, Any]]
) -> dict[str, Any]:
    """The parts' extension and largest-file tables and TODO counts merged: the newest tables' note,
    and the parts whose tables are in view since (each part once, in the plan's order)."""
    tables: dict[str, Any] = {"ext": {}, "largest": [], "todo": [0, 0, False], "from": []}
    note = _newest_note(messages, TABLES_KEY)
    if note is not None and {"ext", "largest", "todo", "from"} <= set(note):
        tables = note
    for scope in scopes(plan):
        part = parts.get(scope, {})
        covered = part.get("status") == "succeeded" and "totals" in part
        if scope in tables["from"] or not covered or not {"ext", "largest", "todo"} <= set(part):
            continue
        for e, (n, lines) in part["ext"].items():
            acc = tables["ext"].setdefault(e, [0, 0])
            acc[0] += n
            acc[1] += lines
        rows = [*tables["largest"], *part["largest"]]
        tables["largest"] = sorted(rows, key=lambda r: (-r[0], r[1]))[: largest_of(messages)]
        hits, files, cut = tables["todo"]
        tables["todo"] = [hits + part["todo"][0], files + part["todo"][1], bool(cut or part["todo"][2])]
        tables["from"] = [*tables["from"], scope]
    return tables


def _merged_tables(covered: list[tuple[str, dict[str, Any]]], tables: dict[str, Any]) -> list[str]:
    """The extension and largest-file tables and the TODO count, merged from the parts that gave them."""
    merged = set(tables["from"])
    unknown = [_scope_cell(s) for s, _ in covered if s not in merged]
    gap = [f"(Without {'; '.join(unknown)}: see its report.)", ""] if unknown else []
    out = [
        "",
        "## Files and lines per extension (text files)",
        "",
        *gap,
        "| extension | files | lines |",
        "|---|---:|---:|",
    ]
    by_lines = sorted(tables["ext"].items(), key=lambda kv: (-kv[1][1], kv[0]))
    out += [f"| {e} | {n} | {lines} |" for e, (n, lines) in by_lines]
    out += ["", "## Largest text files", "", *gap, "| file | lines | size |", "|---|---:|---:|"]
    out += [
        f"| {path.replace('|', chr(92) + '|')} | {lines} | {size} |"
        for size, path, lines in tables["largest"]
    ]
    hits, files, cut = tables["todo"]
    more = "; a search output was cut, there may be more" if cut else ""
    out += ["", f"## TODO / FIXME / XXX ({hits} lines in {files} files{more})", "", *gap]
    out.append(
        "Each line is listed in its part's report (the first ones) and its todo files (all of them)."
        if hits
        else "(none)"
    )
    return out


def _call_id(messages: list[Message], k: int) -> str:
    newest = json.dumps(messages[-1] if messages else None, sort_keys=True, default=str)
    seed = f"{len(messages)}:{k}:{newest}"
    return "toolu_dlg_" + hashlib.sha256(seed.encode()).hexdigest()[:20]
