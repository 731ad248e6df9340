"""An incremental job's survey split among subagents: the baseline's parts whose files did not change
carried over, only the parts with changes surveyed again.

It leads when the ``task`` tool is offered, the request is an unscoped survey (:func:`.delegation.applies`)
and the job starts with the runtime's note on a baseline whose subagents that succeeded were copied in
(:data:`runner.protocol.INCREMENTAL_AGENTS`). Then:

1. ``recall`` the list of the copied subagents (each one's directory and task prompt, whose scope
   :func:`.memory_survey.scope_of` reads) and the head of the baseline's report (its root, its entries,
   and that every part was covered), page by page;
2. ``recall`` the change lists page by page: each path added, changed or removed marks the part whose
   scope holds it (a path in a directory no survey lists, :data:`.memory_survey.SKIP_DIRS`, marks none);
3. the baseline's split again, as :mod:`.delegation` writes it (a ``- delegation |`` note): a part no
   change touched is carried over, a ``- subagent k |`` note naming its copied report (read back by
   :mod:`.delegation` as a cut report is: its totals, tables and TODO count), and each other part is a
   ``task`` call with the baseline's own prompt for it. From there :mod:`.delegation` assembles the report.

A baseline that does not fit (a part not covered, a prompt that is not a part's, a change no part holds,
such as a new top-level directory, or a list that cannot be read) means the usual split of the whole tree
(:mod:`.delegation`), the reason said in the turn's text.

Guarantees:

- A part's facts are carried over only when no path of its scope was added, changed or removed since the
  baseline: its report and facts files are the baseline's, copied; every other part is surveyed again.
- The report is :mod:`.delegation`'s, its rows (:func:`.memory_survey.report_rows`) a fresh split
  survey's of the new tree: the carried parts' rows from their copied facts files.
- Without the runtime's copies (no ``task`` tool, a baseline that was not split) nothing here runs.

Pure: the conversation in, the next assistant content out.
"""

from __future__ import annotations

import hashlib
import json
import posixpath
import re
from typing import Any

from ..messages import Message, result_text, tool_results, tool_uses
from ..protocol import DEPENDENTS_KIND, INCREMENTAL_AGENTS, is_placeholder
from . import delegation
from .incremental_survey import note_of
from .memory_survey import SKIP_DIRS, TOP, files_only, own_text, scope_of, units
from .readback import (
    agents_of,
    change_heading,
    first_listed,
    incremental_head,
    recall_page,
    unlisted,
    without_footer,
)

KEY = "- delegation-inc | "  # what is known so far: one note, rewritten every turn
PAGE_CHARS = 8_000  # a page of the lists read back (the changes of a big night fill a few)
HEAD_CHARS = 1_500  # of the baseline's report: its title and first paragraph
_AGENTS = re.compile(
    re.escape(INCREMENTAL_AGENTS.format(count="\0", folder="\1", listed="\2"))
    .replace("\0", r"(\d+)")
    .replace("\1", r"(\S+)")
    .replace("\2", r"(\S+)")
)
_TITLE = re.compile(r"^# Survey of `([^`\n]*)`$", re.M)
_SPLIT = re.compile(r"^The tree \((\d+) entries\) was split among (\d+) subagents", re.M)
_COVERED = re.compile(r"^Every part is covered: all (\d+) subagents succeeded\.$", re.M)
_CHANGES_LINE = re.compile(r"^(\[Changes since .*\]|(added|changed|removed) \(\d+\):)$")


def applies(messages: list[Message], tool_names: set[str]) -> bool:
    """Whether this module makes the next step: a split survey of an incremental job whose baseline's
    subagents were copied in, its split not written yet and not given up."""
    if not delegation.applies(messages, tool_names) or delegation.in_progress(messages):
        return False
    found = note_of(messages)
    if found is None or _AGENTS.search(incremental_head(found[1])) is None:
        return False
    note = _note(messages)
    return note is None or not note.get("fresh")


def decide(messages: list[Message], tool_names: set[str]) -> tuple[list[dict[str, Any]], str]:
    """The next assistant content and its stop reason."""
    note = _note(messages)
    if note is None:
        return _start(messages)
    _learn(note, messages)
    problem = _problem(note)
    if problem is not None:
        note["fresh"] = problem
        content, stop = delegation.decide(messages, tool_names)
        say = f"A full split survey: {problem}.\n{KEY}{_json(note)}"
        return [{"type": "text", "text": say}, *content], stop
    calls = _asks(note)
    if calls:
        return _turn(messages, "Reading the baseline's parts and the changes since.", note, calls=calls)
    return _split(messages, note, tool_names)


# --- what it reads ------------------------------------------------------------------------------------


def _start(messages: list[Message]) -> tuple[list[dict[str, Any]], str]:
    found = note_of(messages)
    assert found is not None
    match = _AGENTS.search(incremental_head(found[1]))
    assert match is not None
    info, _ = found
    note: dict[str, Any] = {
        "listed": match[3],
        "report": info["report"],
        "changes": info["changes"],
        "entries": int(info["added"]) - int(info["removed"]),  # the baseline's entries added later
        "count": int(match[1]),
        "at": {"listed": 0, "changes": 0, "report": 0},  # the next offset of each; -1: read whole
        "parts": [],  # [scope, directory, task prompt] of each copied subagent
        "touched": [],  # the scopes a change is in
    }
    return _turn(messages, "Reading the baseline's parts and the changes since.", note, calls=_asks(note))


def _asks(note: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """The recalls still to make: the list and the report head first, then the changes (which need the
    parts' scopes)."""
    at = note["at"]
    calls = []
    if at["listed"] >= 0:
        calls.append(("recall", {"path": note["listed"], "offset": at["listed"], "limit": PAGE_CHARS}))
    if at["report"] >= 0:
        calls.append(("recall", {"path": note["report"], "offset": 0, "limit": HEAD_CHARS}))
    if not calls and at["changes"] >= 0:
        calls.append(("recall", {"path": note["changes"], "offset": at["changes"], "limit": PAGE_CHARS}))
    return calls


def _learn(note: dict[str, Any], messages: list[Message]) -> None:
    """The answers to the last turn's recalls (one that is gone is asked again: its offset stays)."""
    if len(messages) < 2:
        return
    uses = {
        str(u.get("id")): u.get("input") or {} for u in tool_uses(messages[-2]) if u.get("name") == "recall"
    }
    for result in tool_results(messages[-1]):
        args = uses.get(str(result.get("tool_use_id")))
        text = result_text(result)
        if args is None or result.get("is_error") or is_placeholder(text):
            continue
        path = str(args.get("path"))
        body = without_footer(text)
        if path == note["report"]:
            _learn_head(note, body)
            note["at"]["report"] = -1
            continue
        kind = "listed" if path == note["listed"] else "changes" if path == note["changes"] else None
        if kind is None or int(args.get("offset", 0)) != note["at"][kind]:
            continue
        whole, taken = _whole_lines(body, recall_page(text))
        if kind == "listed":
            note["parts"] += [
                [scope_of([{"role": "user", "content": p}]) or "", d, p] for d, p in agents_of(whole)
            ]
        else:
            _learn_changes(note, whole)
        note["at"][kind] = -1 if taken is None else note["at"][kind] + taken


def _whole_lines(body: str, page: tuple[int, int, int, int, int] | None) -> tuple[str, int | None]:
    """A page's whole lines and how many characters they take (None: the file's end is in it)."""
    if page is None or page[3] >= page[4]:
        return body, None
    body = body[: page[3] - page[2]]  # what the footer says the page holds
    cut = body.rfind("\n") + 1
    if cut == 0:
        return "", len(body)  # a line longer than a page: past it (no list line is)
    return body[:cut], cut


def _learn_head(note: dict[str, Any], head: str) -> None:
    title, split, covered = _TITLE.search(head), _SPLIT.search(head), _COVERED.search(head)
    note["root"] = title[1] if title else None
    note["entries"] += int(split[1]) if split else 0
    note["covered"] = bool(split and covered and split[2] == covered[1])
    note["split"] = int(split[2]) if split else 0


def _learn_changes(note: dict[str, Any], text: str) -> None:
    """The parts a page of the change lists touches: a file added, changed or removed, and an unchanged
    file that depends on a changed one (re-examined with its part)."""
    scopes = [part[0] for part in note["parts"]]
    touched = set(note["touched"])
    for line in text.split("\n"):
        heading = change_heading(line)
        if heading is not None:
            note["section"] = heading  # pages follow on: the section a page starts in is the last one seen
            continue
        if not line or _CHANGES_LINE.match(line):
            continue
        path = first_listed(line)[0] if note.get("section") == DEPENDENTS_KIND else unlisted(line)
        if SKIP_DIRS & set(posixpath.dirname(path).split("/")):
            continue
        scope = next((s for s in scopes if in_scope(path, s)), None)
        if scope is None:
            note["outside"] = path[:200]
        else:
            touched.add(scope)
    note["touched"] = [s for s in scopes if s in touched]


def in_scope(path: str, scope: str) -> bool:
    """Whether a workspace-relative path is in one of the scope's units."""
    for unit in units(scope):
        only = files_only(unit)
        if only is None:
            if path.startswith(unit + "/"):
                return True
        elif posixpath.dirname(path) == only or (unit == TOP and "/" not in path):
            return True
    return False


def _problem(note: dict[str, Any]) -> str | None:
    """Why the baseline's split cannot be carried over, or None (also while it is still being read)."""
    if note["at"]["report"] < 0 and not note.get("covered"):
        return "the baseline's report is not one whose every part was covered"
    if note["at"]["report"] < 0 and not note.get("root"):
        return "the baseline's report names no root"
    if note["at"]["listed"] < 0 and (
        len(note["parts"]) != note["count"] or not note["parts"] or not all(part[0] for part in note["parts"])
    ):
        return "the baseline's subagents are not all parts of a survey"
    if max(note["at"]["listed"], note["at"]["report"]) < 0 and len(note["parts"]) != note.get("split"):
        return "the baseline's parts were not all copied"
    if note.get("outside"):
        return f"a change is in no part of the baseline's split ({json.dumps(note['outside'])})"
    return None


# --- the split ------------------------------------------------------------------------------------------


def _split(
    messages: list[Message], note: dict[str, Any], tool_names: set[str]
) -> tuple[list[dict[str, Any]], str]:
    """The baseline's split written as delegation's: the carried parts' notes, a task per touched part."""
    scopes = [part[0] for part in note["parts"]]
    plan = {"root": note["root"], "entries": note["entries"], "parts": scopes}
    touched = set(note["touched"])
    lines = [f"{delegation.PLAN_KEY}{_json(plan)}"]
    calls: list[tuple[str, dict[str, Any]]] = []
    carried = 0
    tools = [t for t in delegation.SUBAGENT_TOOLS if t in tool_names]
    for k, (scope, where, prompt) in enumerate(note["parts"]):
        if scope in touched:
            task = {"prompt": prompt, "description": delegation.description(scope), "tools": tools}
            calls.append(("task", task))
            continue
        carried += 1
        part = {"scope": scope, "recalled": False, "dir": where, "status": "succeeded"}
        part |= {"report": f"{where}/final.md", "cut": True}
        lines.append(delegation.PART_KEY.format(k=k) + _json(part))
        if carried <= delegation.RECALLS:
            calls.append(("recall", {"path": part["report"], "offset": 0, "limit": delegation.RECALL_CHARS}))
    one = len(touched) == 1
    say = (
        f"Incremental: {len(touched)} of the baseline's {len(scopes)} parts {'has' if one else 'have'} "
        f"changes and {'is' if one else 'are'} surveyed again; the other {carried} "
        f"{'is' if carried == 1 else 'are'} carried over from their copied reports."
    )
    return _content(messages, "\n".join([say, *lines]), calls), "tool_use"


# --- notes and calls --------------------------------------------------------------------------------------


def _note(messages: list[Message]) -> dict[str, Any] | None:
    """The newest note of this module in view, as its JSON object."""
    for m in reversed(messages):
        text = own_text(m)
        at = text.rfind(KEY)
        if at >= 0:
            try:
                note = json.loads(text[at + len(KEY) :].split("\n", 1)[0])
            except ValueError:
                continue
            if isinstance(note, dict):
                return note
    return None


def _json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _turn(
    messages: list[Message], say: str, note: dict[str, Any], *, calls: list[tuple[str, dict[str, Any]]]
) -> tuple[list[dict[str, Any]], str]:
    return _content(messages, f"{say}\n{KEY}{_json(note)}", calls), "tool_use"


def _content(
    messages: list[Message], text: str, calls: list[tuple[str, dict[str, Any]]]
) -> list[dict[str, Any]]:
    content: list[dict[str, Any]] = [{"type": "text", "text": text}]
    newest = json.dumps(messages[-1] if messages else None, sort_keys=True, default=str)
    for k, (name, args) in enumerate(calls):
        seed = f"{len(messages)}:{k}:{newest}"
        call_id = "toolu_inc_" + hashlib.sha256(seed.encode()).hexdigest()[:20]
        content.append({"type": "tool_use", "id": call_id, "name": name, "input": args})
    return content
