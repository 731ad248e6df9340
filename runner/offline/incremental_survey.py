"""The offline survey of an incremental job: the previous survey's facts carried over, only what changed
examined again.

An incremental job starts with its prompt and the runtime's note on its baseline
(:func:`runner.protocol.incremental_note`): the baseline's report saved in the job directory, the full
change lists beside it, the baseline's memory files this job's memory. With that note in view the survey
(:mod:`.memory_survey`'s state, with an ``inc`` part) goes:

1. open: ``recall`` the change lists (page by page; the state keeps only a hash of each path) and the head
   of the baseline's report (up to ``## Every file``: its root, its TODO count, where its TODO lines are),
   and ``view`` ``/memories/survey`` (the shards and their sizes);
2. todo: ``view`` each ``todo-NNN.md`` page by page (pages as large as a view gives): the lines of a file
   removed, changed or added are taken out (``str_replace``, a run of lines at once; a changed file's place
   kept), the others counted, the first :data:`~.memory_survey.TODO_SHOWN` kept in order;
3. facts: the same over ``facts-NNN.md``: the rows of those files taken out, every other row counted
   (totals, extensions, largest files);
4. read: the change lists are read back a page at a time as the reads need them (the added and changed
   paths); each file is searched for TODO lines by a ``grep`` of that file, then read; its row goes to the
   end of the facts log, its TODO lines where its old ones were (a file that had none: at the todo log's
   end); the text of the TODO lines the report will show comes from the baseline's report;
5. the report, as a fresh memory survey writes it (a small tree's every row viewed back from the facts
   log), word for word: what the run carried over and read is said in its turns' text, not in the report,
   so ``runner diff`` of two nights compares facts.

Nothing changed: the report's head gives the totals, tables and TODO lines; nothing is read (a small
tree's rows are viewed back from memory): the report is the baseline's, word for word. A baseline whose
report is not a whole memory survey's (split among subagents, scoped, partial), a memory without the
survey's facts, or a damaged facts line mean a full survey, the reason in the report's second line. A
baseline whose TODO search was cut means a whole-tree TODO search again.

Guarantees:

- The report's facts are a fresh survey's of the new tree: the same totals, extension table, largest
  files, TODO count (lines and files) and TODO places, every file's row
  (:func:`.memory_survey.report_rows`). The order of the TODO lines is the baseline's, a changed file's in
  its old place; the lines of a file that had none go last (a fresh survey lists them where the
  filesystem's walk finds them, which no tool shows short of searching every file), so the report may
  show other lines among its first ones than a fresh survey would; and when it shows only the first of
  more, it says their text is in the files (a fresh survey names its saved search output).
- No file is read that is not in the change lists. A TODO line the report shows whose text the
  baseline's report did not show (lines taken out before it moved it up) is found by a ``grep`` of its
  file (a search, not a read).
- A symlink is examined again only when the link itself changed (the manifest records links, not what
  they lead to): a linked file's new content under an unchanged link is not seen.
- Unscoped surveys that are not incremental are untouched: their state note has no ``inc`` part.

Pure: the conversation in, the next assistant content out.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

from ..messages import Message, blocks, result_text
from ..protocol import (
    CHANGE_KINDS,
    DEPENDENTS_KIND,
    INCREMENTAL_HEAD,
    INCREMENTAL_MEMORY,
    is_persisted,
    is_placeholder,
    saved_path,
)
from . import memory_survey
from .memory_survey import (
    DIR,
    HEAD,
    NUMBERED,
    OUTLINE_CHARS,
    OUTLINE_PATTERN,
    READ_CHARS,
    SCOPED_HEAD,
    SKIP_DIRS,
    TARGET_CHARS,
    TODO_HEAD,
    TODO_PATTERN,
    TODO_SHOWN,
    TOTALS_LINE,
    State,
    Turn,
    call_id,
    escape,
    load_state,
    pace,
    read_batch,
    rel_path,
    report,
    scope_of,
    shard_path,
    todo_place,
    unescape,
)
from .readback import (
    changes_of,
    incremental_head,
    incremental_of,
    is_seed_placeholder,
    recall_page,
    without_footer,
)

PHASE = "incremental"  # the memory survey's phase while this module leads
VIEW_CHARS = {"facts": 100, "todo": 30}  # what a line of each log takes, about, until a page says
QUEUE_CHARS = 2_000  # a page of the change lists read back for the reads: some 60 paths
HASH_CHARS = 10  # of a path's key in the state's sets
GREPS_PER_TURN = 24  # TODO searches of single files a turn, at least (their results are a few lines)
_MEMORY = re.compile(
    re.escape(INCREMENTAL_MEMORY.format(files="\0", prefix="\1"))
    .replace("\0", r"(\d+)")
    .replace(re.escape("\1"), r"\S+")
    .replace("\1", r"\S+")
)
_LISTED = re.compile(r"^(\d+)\t" + re.escape(DIR) + r"/(facts|todo)-(\d{3})\.md$", re.M)
_VIEW_FOOTER = re.compile(r"\[memory: lines (\d+)-(\d+) of (\d+) shown")
_KIND = re.compile(r"^(" + "|".join((*CHANGE_KINDS, DEPENDENTS_KIND)) + r") \(\d+\):$", re.M)
_TITLE = re.compile(r"^# Survey of `([^`\n]*)`$")
_SHOWN = re.compile(r"^- `([^:`]*:\d+): (.*)`$")
_WHERE = re.compile(
    r"^- \.\.\. (?:the first \d+ are|none is) shown\b.*?; every line's place is in .*?, its text in (.*)$"
)
_NO_DEFS = re.compile(r"^(\d+) Python files show no count of top-level definitions")
_TABLE_ROW = re.compile(r"^\| (.+?) \| (\d+) \| (\d+) \|$")


# --- when it leads ----------------------------------------------------------------------------------


def note_of(messages: list[Message]) -> tuple[dict[str, Any], str] | None:
    """The runtime's note on the baseline (what :func:`runner.offline.readback.incremental_of` reads) and its
    text, from the job's first messages; None when the job is not incremental."""
    for message in messages[:2]:
        if message.get("role") != "user":
            continue
        for block in blocks(message):
            text = str(block.get("text", "")) if block.get("type") == "text" else ""
            found = incremental_of(text) if text.startswith(INCREMENTAL_HEAD) else None
            if found is not None:
                return found, text
    return None


def applies(messages: list[Message], tool_names: set[str]) -> bool:
    """Whether this module makes the next step: its phase is on, or the job starts with the note on a
    baseline and is no part of a survey (with ``task`` offered, only when the baseline left memory: a
    survey split among subagents left none, and the job is split again)."""
    state, _ = load_state(messages)
    if state is not None:
        return state.phase == PHASE
    found = note_of(messages)
    if found is None or scope_of(messages) is not None:
        return False
    return "task" not in tool_names or _MEMORY.search(incremental_head(found[1])) is not None


def in_progress(messages: list[Message]) -> bool:
    state, _ = load_state(messages)
    return state is not None and state.phase == PHASE


def fresh_line(run: str, reason: str) -> str:
    return f"A full survey: run {run} is this job's baseline, but {reason}."


# --- the steps --------------------------------------------------------------------------------------


def _start(messages: list[Message]) -> Turn:
    note, text = note_of(messages) or ({}, "")
    counts = [note["added"], note["changed"], note["removed"]]
    s = State(phase=PHASE)
    s.inc = {
        "run": note["run"],
        "report": note["report"],
        "changes": note["changes"],
        "counts": counts,
        "step": "open",
        "kind": "",
        "examined": "",
        "removed": "",
        "shards": None,
        "zero": not any(counts),
        "section": "",
        "base": {},
        "shown": {},
    }
    turn = Turn(s)
    if _MEMORY.search(incremental_head(text)) is None:
        return _fresh(turn, "it left no memory files to carry over")
    if any(counts):
        s.recalls.append([note["changes"], "changes", "", "", 0])
    s.recalls.append([note["report"], "report", "", "", 0])
    turn.calls += [("recall", {"path": r[0], "offset": 0}) for r in s.recalls]
    turn.calls.append(("memory", {"command": "view", "path": DIR}))
    return turn


def _fresh(turn: Turn, reason: str) -> Turn:
    """A full survey from here, the reason kept for its report."""
    old = turn.state
    s = State(
        target=old.target,
        turn=old.turn,
        summary=old.summary,
        compacted_at=old.compacted_at,
        largest_n=old.largest_n,
    )
    s.inc = {"run": old.inc["run"], "fresh": reason, "line": fresh_line(old.inc["run"], reason)}
    turn = Turn(s)
    memory_survey.plan(turn)
    return turn


def _unusable(inc: dict[str, Any], root: str) -> str | None:
    """Why the baseline's report and memory cannot be carried over, or None."""
    base, shards = inc["base"], inc["shards"] or {}
    if base.get("kind"):
        return f"its report is {base['kind']}"
    if not root:
        return "its report names no workspace root (not a whole survey's report)"
    if "todo" not in base:
        return "its report gives no TODO count"
    if not shards.get("facts"):
        return f"its memory holds no survey facts ({DIR}/facts-000.md)"
    return None


def _plan(turn: Turn) -> Turn:
    """This turn's calls for the step the survey is in; the turn that goes on (a full survey's, when the
    baseline proves unusable)."""
    s = turn.state
    inc = s.inc
    if inc.get("fail"):
        return _fresh(turn, inc["fail"])
    recalls = [
        ("recall", {"path": path, "offset": offset})
        for path, kind, _, _, offset in s.recalls
        if kind not in ("todo", "queue")
    ]  # the whole tree's TODO search is read back by the memory
    turn.calls += recalls  # survey, the files to read as they are needed
    if inc["step"] == "open":
        if s.recalls:
            return turn
        opened = _plan_open(turn)
        if opened is not None:
            return opened
    if inc["step"] in ("facts", "todo"):
        return _plan_scan(turn)
    if inc["step"] == "read":
        _plan_reads(turn)
        if turn.calls or s.waiting or any(r[1] != "todo" for r in s.recalls):
            return turn
        inc["step"] = "texts" if not inc.get("whole_todo") else "all-todo"
    if inc["step"] == "all-todo":  # the baseline's search was cut: the whole tree's again, as a fresh survey
        return _plan_all_todo(turn)
    if inc["step"] == "texts":
        return _plan_texts(turn)
    return turn


def _plan_open(turn: Turn) -> Turn | None:
    """The open step: the baseline's memory listed, judged, and either handed over or its scan begun
    (None: the scan's first view is this turn's call)."""
    s = turn.state
    inc = s.inc
    if inc["shards"] is None:  # the listing's result was lost: ask again
        turn.calls.append(("memory", {"command": "view", "path": DIR}))
        return turn
    reason = _unusable(inc, s.root)
    if reason:
        return _fresh(turn, reason)
    if inc["zero"] and _carry_report(s):
        return _hand_over(turn)
    _begin_scan(s)
    return None


def _plan_scan(turn: Turn) -> Turn:
    """The facts and todo steps: the next page of the shard the scan is at."""
    log, k, seen, dropped = turn.state.inc["scan"][:4]
    first = 1 + HEAD + seen - dropped
    turn.calls.append(("memory", {"command": "view", "path": shard_path(log, k), "view_range": [first, -1]}))
    return turn


def _plan_all_todo(turn: Turn) -> Turn:
    """The whole tree's TODO search, asked for once and read back as the memory survey does, then the
    hand-over."""
    s = turn.state
    inc = s.inc
    if not inc.get("asked"):
        inc["asked"] = True
        turn.calls.append(("grep", {"pattern": TODO_PATTERN}))
        return turn
    if any(r[1] == "todo" for r in s.recalls):
        memory_survey.plan(turn)  # its recall of the saved search output
        return turn
    return _hand_over(turn)


def _plan_texts(turn: Turn) -> Turn:
    """The text of the TODO lines the report shows, searched for in the files not read yet; then the
    TODO facts, and the hand-over."""
    s = turn.state
    inc = s.inc
    wanted = [p for p in _shown_places(inc) if p not in inc["shown"] and p not in inc["texts"]]
    files = sorted({p.rpartition(":")[0] for p in wanted} - set(inc.get("texts_asked", [])))
    if files:
        inc["texts_asked"] = inc.get("texts_asked", []) + files
        turn.calls += [("grep", {"pattern": TODO_PATTERN, "path": p}) for p in files]
        return turn
    places = _shown_places(inc)
    s.todo = {
        "hits": inc["hits"][0] + inc["new"][0],
        "files": inc["hits"][1] + inc["new"][1],
        "last": "",
        "cut": bool(inc.get("cut")),
        "saved": "",
        "shown": [f"{p}: {inc['texts'].get(p, inc['shown'].get(p, ''))}" for p in places],
    }
    return _hand_over(turn)


def _hand_over(turn: Turn) -> Turn:
    """The memory survey's last phases from here: a small tree's rows viewed back, then the report."""
    s = turn.state
    inc = s.inc
    s.inc = {
        "run": inc["run"],
        "counts": inc["counts"],
        **({"where": inc["base"]["where"]} if inc["zero"] and "where" in inc["base"] else {}),
    }
    s.phase = "todo"
    memory_survey.plan(turn)
    return turn


def _carry_report(s: State) -> bool:
    """Nothing changed: the state from the baseline report's head and the memory's shards. False when
    the report does not give all of it (the facts are counted from memory then)."""
    base = s.inc["base"]
    if not {"totals", "ext", "largest", "todo"} <= set(base):
        return False
    files, text, lines, chars, binary, binary_bytes, errors = base["totals"]
    if files != text + binary + errors:
        return False
    s.totals = {
        "text": text,
        "lines": lines,
        "chars": chars,
        "binary": binary,
        "binary_bytes": binary_bytes,
        "errors": errors,
        "no_defs": base.get("no_defs", 0),
    }
    s.ext = {e: [n, lines] for e, n, lines in base["ext"]}
    s.largest = [[size, path, lines] for path, lines, size in base["largest"]]
    hits, todo_files, cut = base["todo"]
    s.todo = {
        "hits": hits,
        "files": todo_files,
        "last": "",
        "cut": cut,
        "saved": "",
        "shown": [f"{p}: {t}" for p, t in s.inc["shown"].items()],
    }
    shards = s.inc["shards"]
    s.shards["facts"] = [[0, size] for size in shards["facts"]]
    s.shards["todo"] = [[0, size] for size in shards.get("todo", [])]
    s.logs["facts"] = files
    return True


def _begin_scan(s: State) -> None:
    """The scans start: the todo log first (a changed file's new TODO lines go where its old ones were),
    then the facts."""
    inc = s.inc
    inc.update(
        step="todo",
        scan=["todo", -1, 0, 0, 0, 0],
        hits=[0, 0, ""],
        top=[],
        slots={},
        new=[0, 0, ""],
        texts={},
        tail=[],
        cnew={},
        whole_todo=bool(inc["base"]["todo"][2]),
        grepped=0,
        pending=[],
        queued=0,
    )
    inc["shown"] = {}  # read back when the report is made: the state stays small
    for log in ("facts", "todo"):
        s.shards[log], s.logs[log] = [], 0
    _next_shard(s)


def _next_shard(s: State) -> None:
    """The scan moves to the next shard, the next log (todo, then facts), or to the reads."""
    inc = s.inc
    log, k = inc["scan"][0], inc["scan"][1] + 1
    shards = inc["shards"]
    if log == "todo" and (inc["whole_todo"] or k >= len(shards.get("todo", []))):
        shown = {p for kind, p in inc["top"] if kind == "h"}
        inc["shown"] = {p: t for p, t in inc["shown"].items() if p in shown}  # the text of what may be shown
        log, k = "facts", 0
    if k < len(shards.get(log, [])):
        inc["step"], inc["scan"] = log, [log, k, 0, 0, 0, 0]
    else:  # the files to read: the change lists read back as they are needed (the state stays small)
        inc.update(step="read", scan=None, removed="", examined="", kind="")
        s.recalls.append([inc["changes"], "queue", "", "", 0])
        if not inc["whole_todo"] and "todo_at" in inc:  # the text of the TODO lines its report shows
            s.recalls.append([inc["report"], "shown", "", "", inc.pop("todo_at")])


def _plan_greps(turn: Turn) -> None:
    """The next TODO searches of the files to read, ahead of the reads (and those whose result was lost,
    again). ``grepped`` counts the files at the queue's head already searched: the reads take them."""
    s = turn.state
    inc = s.inc
    if inc["whole_todo"]:
        return
    inc["grepped"] = max(0, inc["grepped"] - (inc["queued"] - len(s.files_next)))  # the reads took those
    again = inc["pending"]  # asked last turn and not learned: their results are gone
    start = inc["grepped"]
    paths = again + s.files_next[start : start + max(0, GREPS_PER_TURN - len(again))]
    inc["grepped"] = start + len(paths) - len(again)
    inc["pending"] = paths
    turn.calls += [("grep", {"pattern": TODO_PATTERN, "path": p}) for p in paths]


def _plan_reads(turn: Turn) -> None:
    """The next page of the files to read when the queue runs short, their TODO searches, their reads."""
    s = turn.state
    inc = s.inc
    queue = next((r for r in s.recalls if r[1] == "queue"), None)
    if queue is not None and len(s.files_next) - inc["grepped"] < GREPS_PER_TURN:
        turn.calls.append(("recall", {"path": queue[0], "offset": queue[4], "limit": QUEUE_CHARS}))
    _plan_greps(turn)
    searched = s.files_next if inc["whole_todo"] else s.files_next[: inc["grepped"]]
    batch = read_batch(searched, max(READ_CHARS, s.target - OUTLINE_CHARS * len(turn.outlines)))
    s.issued["files"] = len(batch)
    inc["queued"] = len(s.files_next)
    turn.calls += [("read", {"file_path": p}) for p in batch]


def _shown_places(inc: dict[str, Any]) -> list[str]:
    """The TODO places the report shows: the first of the baseline's order, a changed file's new lines in
    its old place, the lines of files that had none last."""
    places: list[str] = []
    for kind, value in inc["top"]:
        places += [value] if kind == "h" else inc["cnew"].get(value, [])
    return (places + inc["tail"])[:TODO_SHOWN]


# --- what a result teaches ----------------------------------------------------------------------------


def learn(turn: Turn, use: dict[str, Any], result: dict[str, Any]) -> bool:
    """An incremental step's result learned; False for what the memory survey learns (reads, outline
    searches, memory writes, the whole tree's TODO search)."""
    s = turn.state
    name, args = use.get("name"), use.get("input") or {}
    text = result_text(result)
    gone = is_placeholder(text) or is_seed_placeholder(text)
    if name == "recall":
        return _learn_recalled(turn, args, result)
    if name == "memory" and result.get("is_error") and args.get("command") != "view":
        s.inc["fail"] = f"a change to its memory failed ({text[:200]})"
        return True
    if name == "memory" and args.get("command") == "view":
        if not gone:
            _learn_view(turn, str(args.get("path")), args.get("view_range"), result=result, text=text)
        return True
    if name == "grep" and args.get("pattern") == TODO_PATTERN and "path" in args:
        if not gone:
            _learn_file_search(turn, str(args["path"]), result)
        return True
    return False


def _learn_recalled(turn: Turn, args: dict[str, Any], result: dict[str, Any]) -> bool:
    """A recall's result learned; False for a recall the memory survey reads (not one of these steps')."""
    s = turn.state
    text = result_text(result)
    item = next(
        (r for r in s.recalls if r[0] == str(args.get("path")) and r[4] == int(args.get("offset") or 0)),
        None,
    )
    if item is None or item[1] == "todo":
        return item is None
    if not (is_placeholder(text) or is_seed_placeholder(text)) and not result.get("is_error"):
        _learn_recall(turn, item, text)
    elif result.get("is_error"):
        s.recalls.remove(item)
        if item[1] != "itodo":
            s.inc["fail"] = f"its {item[1]} could not be read back ({text[:200]})"
    return True


def _learn_file_search(turn: Turn, searched: str, result: dict[str, Any]) -> None:
    """The TODO search of one file (``searched``, as asked), its result not gone: the text of the lines
    shown, or the file's TODO lines (read back when its output was saved)."""
    s = turn.state
    text = result_text(result)
    path = rel_path(s.root, searched)
    if s.inc.get("step") == "texts":
        _learn_texts(s, text)
        return
    if path not in s.inc.get("pending", []):
        return  # not asked for (a result read again after a summary)
    s.inc["pending"].remove(path)
    if is_persisted(text) and saved_path(text):
        s.recalls.append([saved_path(text), "itodo", path, "", 0])
    else:
        _learn_file_todo(turn, path, "" if result.get("is_error") else text, first=True)


def _page(item: list[Any], text: str) -> tuple[str, bool]:
    """A recall page's whole lines, and whether it is the last; the item's offset moved past them."""
    footer = recall_page(text)
    body = without_footer(text)
    end, total = (footer[3], footer[4]) if footer else (item[4] + len(body), item[4] + len(body))
    if end < total and "\n" in body:
        body = body.rsplit("\n", 1)[0] + "\n"
        end = item[4] + len(body)
    item[4] = end
    return body, end >= total


def _learn_recall(turn: Turn, item: list[Any], text: str) -> None:
    s = turn.state
    start = item[4]
    first = start == 0
    body, last = _page(item, text)
    if item[1] in ("changes", "queue"):
        _learn_changes(s, body, first, queue=item[1] == "queue")
        last = last or s.inc["kind"] == DEPENDENTS_KIND  # the pairs after the lists: no file to read
    elif item[1] == "shown":
        _learn_shown(s.inc, body)
        last = True
    elif item[1] == "report":
        last = _learn_report(s, body, first, start=start) or last
    else:
        _learn_file_todo(turn, item[2], body, first=first)
    if last:
        s.recalls.remove(item)


def _learn_changes(s: State, body: str, first: bool, *, queue: bool) -> None:
    """A page of the change lists: their paths' hashes (what the scans look up), or, read back for the
    reads, the paths added and changed (the files to read)."""
    inc = s.inc
    head = "" if first else "[changes]\n" + (f"{inc['kind']} (0):\n" if inc["kind"] else "")
    lists = changes_of(head + body)
    for kind in CHANGE_KINDS:
        kept = [p for p in lists[kind] if not set(p.split("/")) & SKIP_DIRS]  # a survey never lists these
        if queue and kind != "removed":
            s.files_next += kept
            inc["queued"] += len(kept)  # the queue grew: not by the reads
        elif not queue:
            key = "removed" if kind == "removed" else "examined"
            inc[key] += "".join(path_hash(p) for p in kept)
    kinds = _KIND.findall(body)
    inc["kind"] = kinds[-1] if kinds else inc["kind"]


def path_hash(path: str) -> str:
    """A path's key in the state's sets of paths (its sha256's first :data:`HASH_CHARS` hex digits)."""
    return hashlib.sha256(path.encode("utf-8", "surrogatepass")).hexdigest()[:HASH_CHARS]


def hashes(keys: str) -> set[str]:
    return {keys[i : i + HASH_CHARS] for i in range(0, len(keys), HASH_CHARS)}


def _learn_shown(inc: dict[str, Any], body: str) -> None:
    """The TODO lines the baseline's report shows, with their text (read from its TODO heading on)."""
    for n, line in enumerate(body.split("\n")):
        if n and line.startswith("## "):
            break
        shown = _SHOWN.match(line)
        if shown:
            inc["shown"][shown[1]] = shown[2]


def _learn_report(s: State, body: str, first: bool, *, start: int) -> bool:
    """The baseline report's lines up to ``## Every file`` (``start``: where this page starts in it);
    True once that heading is read."""
    inc = s.inc
    base = inc["base"]
    lines = body.split("\n")
    if first:
        title = _TITLE.match(lines[0])
        s.root = title[1] if title and title[1] != "(workspace)" else ""
    at = start
    for n, line in enumerate(lines):
        at += len(line) + 1
        if first and not n:
            continue
        if line.startswith("## "):
            inc["section"] = line
            todo = TODO_HEAD.match(line)
            if todo:
                base["todo"] = [int(todo[1]), int(todo[2]), bool(todo[3])]
                inc["todo_at"] = at - len(line) - 1
            elif line == "## Subagents":
                base["kind"] = "a survey split among subagents, whose facts are in their own memory"
            elif line.startswith("## Every file"):
                return True
        elif line == SCOPED_HEAD:
            base["kind"] = "a survey of one part of the workspace"
        elif line.startswith("(Partial:"):
            base["kind"] = "partial (that survey stopped before its end)"
        else:
            _learn_report_line(inc, line)
    return False


def _learn_report_line(inc: dict[str, Any], line: str) -> None:
    """One line of the report's head: the TODO lines it shows, and, when nothing changed, its counts."""
    base, section = inc["base"], inc["section"]
    if not inc["zero"]:  # the counts and the TODO lines' text are read again from memory and files
        return
    if section.startswith("## TODO"):
        shown, where = _SHOWN.match(line), _WHERE.match(line)
        if shown:
            inc["shown"][shown[1]] = shown[2]
        elif where:  # nothing changed: the report says what the baseline's says, word for word
            base["where"] = where[1]
        return
    totals, no_defs, row = TOTALS_LINE.match(line), _NO_DEFS.match(line), _TABLE_ROW.match(line)
    if totals and not section:
        base["totals"] = [int(n) for n in totals.groups()]
    elif no_defs and not section:
        base["no_defs"] = int(no_defs[1])
    elif section.startswith("## Files and lines per extension"):
        base.setdefault("ext", [])
        if row:
            base["ext"].append([row[1], int(row[2]), int(row[3])])
    elif section.startswith("## Largest"):
        base.setdefault("largest", [])
        if row:
            base["largest"].append(
                [row[1].replace("\\|", "|").replace("\\n", "\n"), int(row[2]), int(row[3])]
            )


def _learn_view(turn: Turn, path: str, view_range: Any, *, result: dict[str, Any], text: str) -> None:
    s = turn.state
    inc = s.inc
    if path == DIR:
        inc["shards"] = {"facts": [], "todo": []}
        if not result.get("is_error"):
            for size, log, k in _LISTED.findall(text):
                if int(k) == len(inc["shards"][log]):  # shards in order, from 000
                    inc["shards"][log].append(int(size))
        return
    scan = inc.get("scan")
    if (
        not scan
        or path != shard_path(scan[0], scan[1])
        or not isinstance(view_range, list)
        or view_range[0] != 1 + HEAD + scan[2] - scan[3]
    ):
        return  # not the page the scan is at (a result read again after a summary)
    if result.get("is_error"):
        if "view_range starts at line" not in text:
            inc["fail"] = f"its memory file {path} could not be viewed ({text[:200]})"
            return
        lines: list[str] = []  # an empty shard (its heading only)
    else:
        lines = [m[2] for m in (NUMBERED.match(line) for line in text.split("\n")[1:]) if m]
    stale = _scan_lines(turn, scan, lines)
    if stale is None:
        return
    _take_out(turn, path, scan, runs=stale)
    log, k = scan[0], scan[1]
    if result.get("is_error") or not _VIEW_FOOTER.search(
        text
    ):  # the shard's end (a page says where the rest is)
        seen, dropped, dropped_bytes = scan[2:5]
        s.shards[log].append([s.logs[log], inc["shards"][log][k] - dropped_bytes])
        s.logs[log] += seen - dropped
        _next_shard(s)


def _scan_lines(turn: Turn, scan: list[Any], lines: list[str]) -> list[list[str]] | None:
    """One page of a shard: each line counted, kept or found stale; the runs of stale lines (None when
    a facts line is damaged: the survey is done in full then)."""
    s = turn.state
    inc = s.inc
    removed = hashes(inc["removed"])
    changed = hashes(inc["examined"])  # added or changed: examined again
    runs: list[list[str]] = []
    previous_stale = False
    for line in lines:
        if scan[0] == "facts":
            try:
                row = json.loads(line)
                if not isinstance(row, list) or len(row) < 3:
                    raise ValueError(line)
                path = str(row[0])
            except ValueError:
                inc["fail"] = (
                    f"its memory file {shard_path('facts', scan[1])} has a damaged line ({line[:120]})"
                )
                return None
            key = path_hash(path)
            stale = key in removed or key in changed
            if not stale:
                turn.count(path, row)
        else:
            place = unescape(line)
            path = place.rpartition(":")[0]
            key = path_hash(path)
            stale = key in removed or key in changed
            if key in changed and path not in inc["slots"]:  # its new lines go where its old ones were
                inc["slots"][path] = [scan[1], scan[2] - scan[3], len(inc["slots"])]
                if _carried_shown(inc) < TODO_SHOWN:
                    inc["top"].append(["c", path])
            elif not stale:
                hits = inc["hits"]
                hits[0] += 1
                hits[1] += hits[2] != path
                hits[2] = path
                if _carried_shown(inc) < TODO_SHOWN:
                    inc["top"].append(["h", place])
        scan[2] += 1
        scan[5] += len(line.encode()) + 1
        if stale:
            scan[3] += 1
            scan[4] += len(line.encode()) + 1
            if previous_stale:
                runs[-1].append(line)
            else:
                runs.append([line])
        previous_stale = stale
    return runs


def _carried_shown(inc: dict[str, Any]) -> int:
    return sum(1 for kind, _ in inc["top"] if kind == "h")


def _take_out(turn: Turn, path: str, scan: list[Any], *, runs: list[list[str]]) -> None:
    """The stale lines of the page just seen, out of their shard (these calls run before the view of the
    next page, which starts where the lines that are left end)."""
    for run in runs:
        turn.calls.append(
            (
                "memory",
                {
                    "command": "str_replace",
                    "path": path,
                    "old_str": "\n" + "\n".join(run) + "\n",
                    "new_str": "\n",
                },
            )
        )


def _learn_file_todo(turn: Turn, path: str, text: str, *, first: bool) -> None:
    """The TODO lines of one added or changed file (a page of them): counted, written to the todo log in
    its old lines' place (a file that had none: at the log's end), the first ones' text kept."""
    s = turn.state
    inc = s.inc
    found = [
        f
        for f in (
            todo_place(s.root, line)
            for line in text.split("\n")
            if line.strip() and not line.startswith(("no matches", "[output", "[recall", "[grep"))
        )
        if f is not None
    ]
    places = [f"{p}:{n}" for p, n, _ in found]
    inc["cut"] = inc.get("cut") or "[output truncated at" in text
    new = inc["new"]
    new[0] += len(places)
    if places and new[2] != path:
        new[1] += 1
        new[2] = path
    if ["c", path] in inc["top"]:  # its lines may be among those shown: their text is kept
        inc["cnew"][path] = (inc["cnew"].get(path, []) + places)[:TODO_SHOWN]
        shown = found[:TODO_SHOWN]
    else:
        room = max(0, TODO_SHOWN - _carried_shown(inc) - len(inc["tail"]))
        inc["tail"] += places[:room]
        shown = found[:room]
    inc["texts"].update({f"{p}:{n}": hit.strip()[:100] for p, n, hit in shown})
    slot = inc["slots"].pop(path, None) if first else None
    if slot is not None and places:
        _insert(turn, slot, [escape(p) for p in places])
    elif places:
        turn.appends["todo"] += [escape(p) for p in places]


def _insert(turn: Turn, slot: list[int], lines: list[str]) -> None:
    """A changed file's new TODO lines where its old ones were (``slot``: the shard, the kept lines before
    them, the order of the old lines); the other slots and the shards' layout follow."""
    s = turn.state
    k, pos, order = slot
    turn.calls.append(
        (
            "memory",
            {
                "command": "insert",
                "path": shard_path("todo", k),
                "insert_line": HEAD + pos,
                "insert_text": "".join(line + "\n" for line in lines),
            },
        )
    )
    for other in s.inc["slots"].values():
        if other[0] == k and (other[1] > pos or other[1] == pos and other[2] > order):
            other[1] += len(lines)
    s.shards["todo"][k][1] += sum(len(line.encode()) + 1 for line in lines)
    for later in s.shards["todo"][k + 1 :]:
        later[0] += len(lines)
    s.logs["todo"] += len(lines)


def _learn_texts(s: State, text: str) -> None:
    wanted = set(_shown_places(s.inc))
    for line in text.split("\n"):
        found = todo_place(s.root, line)
        if found is not None and f"{found[0]}:{found[1]}" in wanted:
            s.inc["texts"][f"{found[0]}:{found[1]}"] = found[2].strip()[:100]


# --- the turn -------------------------------------------------------------------------------------------


def decide(messages: list[Message]) -> tuple[list[dict[str, Any]], str]:
    """The next assistant content and its stop reason."""
    state, at = load_state(messages)
    if state is None:
        turn = _start(messages)
    else:
        turn = Turn(state)
        pace(state, messages)
        if state.inc.get("step") in (
            "open",
            "todo",
            "facts",
        ):  # their pages are large: compactions come often,
            state.target = TARGET_CHARS  # which says nothing of what the reads after them may take a turn
        memory_survey.apply(turn, messages, at, other=learn)
        turn.calls += [("grep", {"pattern": OUTLINE_PATTERN, "path": p}) for p in turn.outlines]
        turn = _plan(turn)
    turn.write_logs()
    s = turn.state
    if not turn.calls:
        return [{"type": "text", "text": report(s, [])}], "end_turn"
    text = f"{_progress(s)} Next: {turn.calls[-1][0]}.\n{s.note()}"
    content: list[dict[str, Any]] = [{"type": "text", "text": text}]
    for k, (name, args) in enumerate(turn.calls):
        content.append({"type": "tool_use", "id": call_id(messages, k), "name": name, "input": args})
    return content, "tool_use"


def _progress(s: State) -> str:
    """What this turn's text says of the survey (the report itself is a fresh survey's, word for word)."""
    inc = s.inc
    if inc.get("fresh"):
        return fresh_line(inc["run"], inc["fresh"])
    a, c, r = inc.get("counts", [0, 0, 0])
    if not any((a, c, r)):
        return (
            f"Incremental survey: nothing changed since run {inc.get('run')}; no file is read, every fact "
            "is carried over from its report and memory."
        )
    step = inc.get("step") if s.phase == PHASE else s.phase
    return (
        f"Incremental survey: {a} files added, {c} changed and {r} removed since run {inc.get('run')}; only "
        f"the {a + c} added or changed are read, every other fact is carried over from its memory. Now: "
        f"{step}; {s.logs['facts']} facts rows, {len(s.files_next)} files queued to read."
    )


def partial_report(messages: list[Message]) -> str:
    """The report from what is known when the job must stop mid-way: the rows counted so far."""
    state, at = load_state(messages)
    turn = Turn(state or State())
    if state is not None:
        try:
            memory_survey.apply(turn, messages, at, other=learn)
        except RuntimeError:
            turn = Turn(state)
    s = turn.state
    step = s.inc.get("step", "open")
    return report(
        s,
        [],
        partial=f"(Partial: the incremental survey stopped in its {step} step; the counts "
        "below are the facts carried over or read by then, not the whole tree's.)",
    )
