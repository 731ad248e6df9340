"""A recorded agent history, read from disk: the neutral Messages-API JSONL of ``shared/trajectories/``
(line 1 a header with ``system``, ``task``, ``source``..., then one message a line) or a runner job's
own ``transcript.jsonl`` (one message a line; the system prompt from ``job.json`` beside it). A directory
stands for the histories in it (:func:`history_paths`).

Guarantees:
- A history is data from anywhere. What cannot be replayed is a :class:`HistoryError` naming the file
  and the line (not JSON, not an object, no role, a role other than user and assistant, content that
  is neither a string nor a list, a block that is not an object, a text that is not a string, a tool
  call without an id, a name or an object input, a tool result without an id or whose content is
  neither a string, null, nor a list of blocks, a header whose ``system`` is neither a string, null,
  nor a list of text blocks, a line nested deeper than :data:`MAX_DEPTH` arrays and objects (no agent
  writes one, and every contestant copies and converts messages by recursion), a history that does
  not start with the user, an empty file or one whose every message is empty, a file that is not a
  regular file or is over :data:`MAX_HISTORY_BYTES`, a file of more than :data:`MAX_MESSAGES` message
  lines (the error names the first line over, which is not parsed, nor any after it), a job's
  ``job.json`` that is there but is not a regular file, is a symbolic link or is over
  :data:`MAX_JOB_JSON_BYTES`); what can be replayed
  without changing what was said is a counted skip (:attr:`History.skipped`): an unknown
  block type (thinking, image...), in a message or in a tool result's content, a text block without
  a word (the API takes none), a tool result answering no call of the assistant message before it, a
  call left without a result (answered with an empty error result so every request stays valid),
  consecutive messages of one role (merged, as the API would need them), a tool call id that is not
  an API id or repeats an earlier call's (renamed, its result with it), a tool name that is not an
  API tool name (its characters outside ``[A-Za-z0-9_-]`` as ``_``, cut at 64).
- A runner transcript's system prompt is ``system`` of the ``job.json`` beside it, read as a history is
  (opened without waiting on a FIFO, never through a symbolic link, a regular file only, at most
  :data:`MAX_JOB_JSON_BYTES`, else the :class:`HistoryError` above); a missing one, one that is not
  JSON, or one without a string ``system`` gives none (``""``).
- Loading takes time and memory linear in the file: consecutive messages are merged in place, the
  calls still unanswered are kept as they change, a repeated call id's new name is found from where
  the last search for its stem ended, and lines are found and decoded one at a time (a history over
  :data:`MAX_MESSAGES` stops there, whatever the rest of the file holds; one wide character widens
  its own line's text only; a run of blank lines is passed over whole).
- Lines are split at line feeds only (a JSON string may hold U+2028, U+0085...), a carriage return
  before one and a UTF-8 byte order mark at the start are dropped; a header without ``system`` (or
  with null) has none (``""``), one of text blocks has their texts, one per line. The header's counts
  are not checked against the body: the body is what is replayed.
- The returned messages alternate roles, start with the user, every ``tool_use`` of an assistant
  message is answered in the next user message, the tool results first (the API wants them before
  any text), and tool call ids are unique across the history.
"""

from __future__ import annotations

import errno
import json
import os
import re
import stat
from collections import Counter, deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..messages import Message
from ..rundir.docs import CONTEXT, EVENTS, JOB_JSON, MANIFEST, TRANSCRIPT

KNOWN_BLOCKS = {"user": {"text", "tool_result"}, "assistant": {"text", "tool_use"}}
MISSING_RESULT = "[no result was recorded for this call]"
API_ID = re.compile(r"[A-Za-z0-9_-]+")
API_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
NOT_API = re.compile(r"[^A-Za-z0-9_-]")
BOM = "\ufeff".encode()
NOT_HISTORIES = frozenset({EVENTS, CONTEXT, MANIFEST})  # a job's other logs, in its directory
MAX_HISTORY_BYTES = 256 * 2**20  # a history is read whole (the 7 shared ones are 0.13-0.35 MB each)
MAX_DEPTH = 100  # arrays and objects inside one another in a line (a message's own levels included)
# message lines a history may hold: real ones hold hundreds (the 7 shared ones 170-290), long agent runs a
# few thousand; a replay's work grows with the square of the turns, so 20,000 bounds it (about 10,000
# turns) where a 256 MiB file of one-character messages would be 7.5 GB and hours
MAX_MESSAGES = 20_000
MAX_JOB_JSON_BYTES = 2**20  # a job's job.json (its spec: the system prompt, the task, settings)
NOT_BLANK = re.compile(rb"\S[^\n]*")  # a line from its first byte not ASCII space (to its end)


class HistoryError(ValueError):
    """A history that cannot be replayed: the message names the file and the line."""


@dataclass
class History:
    path: Path
    system: str
    messages: list[Message]
    header: dict[str, Any] = field(default_factory=dict)
    skipped: Counter[str] = field(default_factory=Counter)
    # the loader's bookkeeping, not part of the history: every call id so far (as replayed), the ids
    # the last assistant message's calls were given, by their recorded id, in order, the ids of its
    # calls no result has answered yet, and, by stem, how many of a renamed id's candidates (the stem,
    # then stem_2, stem_3...) are known taken
    _ids: set[str] = field(default_factory=set, repr=False, compare=False)
    _renamed: dict[str, deque[str]] = field(default_factory=dict, repr=False, compare=False)
    _unanswered: set[str] = field(default_factory=set, repr=False, compare=False)
    _taken: dict[str, int] = field(default_factory=dict, repr=False, compare=False)

    @property
    def turns(self) -> int:
        return sum(1 for m in self.messages if m["role"] == "assistant")

    @property
    def name(self) -> str:
        """How reports name it: its file name; a job's transcript, ``<job>/transcript.jsonl``."""
        return f"{self.path.parent.name}/{TRANSCRIPT}" if self.path.name == TRANSCRIPT else self.path.name


def history_paths(paths: Iterable[Path]) -> list[Path]:
    """The histories ``paths`` name: a file as it is; a directory, its ``*.jsonl`` regular files in name
    order (the runner's own logs of a job left out), or, for a job's directory, its
    ``transcript.jsonl`` alone. :class:`HistoryError` for a directory that holds none."""
    found: list[Path] = []
    for path in paths:
        if not path.is_dir():
            found.append(path)
            continue
        inside = sorted(p for p in path.glob("*.jsonl") if p.name not in NOT_HISTORIES and p.is_file())
        transcript = path / TRANSCRIPT
        if transcript in inside:
            inside = [transcript]
        if not inside:
            raise HistoryError(f"{path}: a directory without a history in it (no *.jsonl file)")
        found += inside
    return found


def load_history(path: Path) -> History:
    """The history in ``path`` (see the module's guarantees)."""
    header, header_line, records = _lines(path, _read_whole(path))
    if not records:
        raise HistoryError(f"{path}: no messages (a history is one JSON message a line)")
    where = f"{path}:{header_line}"
    system = _header_system(where, header.get("system")) if header_line else _job_system(path)
    history = History(path=path, system=system, messages=[], header=header)
    for number, record in records:
        _add(history, number, record)
    if not history.messages:
        raise HistoryError(f"{path}: no messages (every message was empty: {dict(history.skipped)})")
    if history.messages[0]["role"] != "user":
        raise HistoryError(
            f"{path}:{records[0][0]}: the first message is the assistant's; a history starts with the user"
        )
    _answer_every_call(history)
    return history


def _read_whole(path: Path) -> bytes:
    """A regular file's bytes, at most :data:`MAX_HISTORY_BYTES` (a FIFO is refused, never waited on)."""
    return _read_regular(path, MAX_HISTORY_BYTES, "a history", follow=True)


def _read_regular(path: Path, limit: int, what: str, *, follow: bool) -> bytes:
    """A regular file's bytes, at most ``limit`` (a FIFO is refused, never waited on; without
    ``follow``, a symbolic link is refused too). :class:`FileNotFoundError` when there is none."""
    flags = os.O_RDONLY | os.O_NONBLOCK | (0 if follow else os.O_NOFOLLOW)  # a FIFO does not block the open
    try:
        fd = os.open(path, flags)
        with os.fdopen(fd, "rb") as f:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise HistoryError(f"{path}: not a regular file")
            data = f.read(limit + 1)
    except OSError as e:
        if isinstance(e, FileNotFoundError) and not follow:
            raise
        if e.errno == errno.ELOOP and not follow:
            raise HistoryError(f"{path}: a symbolic link (not followed)") from None
        raise HistoryError(f"{path}: cannot read it: {e.strerror or e}") from None
    if len(data) > limit:
        raise HistoryError(f"{path}: over {limit:,} bytes; {what} is read whole")
    return data


def _lines(path: Path, data: bytes) -> tuple[dict[str, Any], int, list[tuple[int, dict[str, Any]]]]:
    """The header (its line number: 0 when there is none) and the message lines, each a checked JSON
    object with its line number. Each line is decoded alone (UTF-8, an undecodable byte kept as a lone
    surrogate, as decoding the whole would: a line feed ends any sequence), so one wide character
    widens its line's text only, and a run of blank lines is passed over without a string each."""
    header: dict[str, Any] = {}
    header_line = 0
    records: list[tuple[int, dict[str, Any]]] = []
    start = len(BOM) if data.startswith(BOM) else 0
    number, counted = 1, start  # the line number of the byte at ``counted``
    for match in NOT_BLANK.finditer(data, start):  # lines not blank in ASCII, one at a time
        begin = max(data.rfind(b"\n", start, match.start()) + 1, start)
        number += data.count(b"\n", counted, begin)
        counted = begin
        line = data[begin : match.end()].decode("utf-8", errors="surrogateescape").removesuffix("\r")
        if not line.strip():  # blank in Unicode (U+2028, U+00A0...)
            continue
        if len(records) == MAX_MESSAGES:  # (a header comes before any message: this line is one)
            raise HistoryError(
                f"{path}:{number}: over {MAX_MESSAGES:,} messages, the most a history may hold"
            )
        value = _json_object(f"{path}:{number}", line)
        if not records and not header_line and "role" not in value:
            header, header_line = value, number
            continue
        records.append((number, value))
    return header, header_line, records


def _json_object(where: str, line: str) -> dict[str, Any]:
    try:
        value = json.loads(line)
    except (json.JSONDecodeError, RecursionError) as e:
        raise HistoryError(f"{where}: not a JSON line ({str(e)[:80]})") from None
    if not isinstance(value, dict):
        raise HistoryError(f"{where}: expected a JSON object, got {type(value).__name__}")
    if _deeper_than(value, MAX_DEPTH):
        raise HistoryError(f"{where}: nested more than {MAX_DEPTH} arrays and objects deep")
    return value


def _deeper_than(value: Any, limit: int) -> bool:
    """Whether ``value`` holds arrays and objects more than ``limit`` deep (without recursion)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > limit:
            return True
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else []
        stack += [(v, depth + 1) for v in children if isinstance(v, (dict, list))]
    return False


def _header_system(where: str, system: Any) -> str:
    """The header's ``system``: a string, nothing (``""``), or text blocks (their texts, a line each)."""
    if system is None or isinstance(system, str):
        return system or ""
    if isinstance(system, list):
        texts = [b.get("text") for b in system if isinstance(b, dict) and b.get("type") == "text"]
        if len(texts) == len(system) and all(isinstance(t, str) for t in texts):
            return "\n".join(str(t) for t in texts)
    raise HistoryError(f"{where}: header field system: expected a string or a list of text blocks")


def _job_system(path: Path) -> str:
    """A runner transcript's system prompt: ``system`` of the ``job.json`` beside it ("" when none; a
    :class:`HistoryError` when it is not a regular file, is a link, or is over :data:`MAX_JOB_JSON_BYTES`)."""
    try:
        data = _read_regular(path.parent / JOB_JSON, MAX_JOB_JSON_BYTES, f"a {JOB_JSON}", follow=False)
    except FileNotFoundError:
        return ""
    try:
        job = json.loads(data.decode("utf-8"))
    except (ValueError, RecursionError):
        return ""
    system = job.get("system") if isinstance(job, dict) else None
    return system if isinstance(system, str) else ""


def _add(history: History, number: int, record: dict[str, Any]) -> None:
    where = f"{history.path}:{number}"
    role = record.get("role")
    if role not in KNOWN_BLOCKS:
        raise HistoryError(f'{where}: role: expected "user" or "assistant", got {str(role)[:40]!r}')
    content = record.get("content")
    if isinstance(content, str):
        content = [{"type": "text", "text": content}]
    if not isinstance(content, list):
        raise HistoryError(f"{where}: content: expected a string or a list of blocks")
    kept = []
    for i, block in enumerate(content):
        if not isinstance(block, dict):
            raise HistoryError(f"{where}: content.{i}: expected a block (an object)")
        kind = block.get("type")
        if kind not in KNOWN_BLOCKS[role]:
            history.skipped[f"{role} block {str(kind)[:30]}"] += 1
            continue
        checked = _checked(history, block, f"{where}: content.{i}")
        if checked["type"] == "text" and not checked["text"].strip():
            history.skipped["text block without a word"] += 1
            continue
        kept.append(checked)
    kept = _answers_only(history, kept) if role == "user" else _api_calls(history, kept)
    if not kept:
        history.skipped[f"empty {role} message"] += 1
        return
    messages = history.messages
    merged = bool(messages) and messages[-1]["role"] == role
    if merged:
        history.skipped[f"consecutive {role} messages merged"] += 1
        messages[-1]["content"].extend(kept)  # a list of the loader's own: extended in place
    else:
        messages.append({"role": role, "content": kept})
    if role == "assistant":  # the calls the next user message may answer
        if not merged:
            history._unanswered = set()
        history._unanswered.update(b["id"] for b in kept if b["type"] == "tool_use")


def _checked(history: History, block: dict[str, Any], where: str) -> dict[str, Any]:
    kind = block["type"]
    if kind == "text":
        if not isinstance(block.get("text"), str):
            raise HistoryError(f"{where}.text: expected a string")
        return {"type": "text", "text": block["text"]}
    if kind == "tool_use":
        for key, expected in (("id", str), ("name", str), ("input", dict)):
            if not isinstance(block.get(key), expected):
                raise HistoryError(
                    f"{where}.{key}: expected {'an object' if expected is dict else 'a string'}"
                )
        return {"type": "tool_use", "id": block["id"], "name": block["name"], "input": block["input"]}
    if not isinstance(block.get("tool_use_id"), str):
        raise HistoryError(f"{where}.tool_use_id: expected a string")
    content = "" if block.get("content") is None else block["content"]
    if isinstance(content, list):
        content = _result_text(history, content, where)
    if not isinstance(content, str):
        raise HistoryError(f"{where}.content: expected a string or a list of text blocks")
    out: dict[str, Any] = {"type": "tool_result", "tool_use_id": block["tool_use_id"], "content": content}
    if block.get("is_error") is True:
        out["is_error"] = True
    return out


def _result_text(history: History, content: list[Any], where: str) -> str:
    """A tool result's list of blocks as its text blocks' texts, a line apart (other blocks skipped)."""
    parts = []
    for i, inner in enumerate(content):
        if not isinstance(inner, dict):
            raise HistoryError(f"{where}.content.{i}: expected a block (an object)")
        if inner.get("type") != "text":
            history.skipped[f"tool_result block {str(inner.get('type'))[:30]}"] += 1
            continue
        if not isinstance(inner.get("text"), str):
            raise HistoryError(f"{where}.content.{i}.text: expected a string")
        parts.append(inner["text"])
    return "\n".join(parts)


def _api_calls(history: History, blocks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """An assistant message's blocks with each call's id unique and an API id, and its name an API
    tool name (renamed and counted when not); ``history._renamed`` maps its recorded ids to them."""
    if not history.messages or history.messages[-1]["role"] != "assistant":  # (else merged into it)
        history._renamed = {}
    assigned: dict[str, list[str]] = {}
    out = []
    for block in blocks:
        if block["type"] != "tool_use":
            out.append(block)
            continue
        name = block["name"]
        if not API_NAME.fullmatch(name):
            history.skipped["tool name renamed (not an API tool name)"] += 1
            name = NOT_API.sub("_", name)[:64] or "_"
        old = call_id = block["id"]
        if not API_ID.fullmatch(call_id) or call_id in history._ids:
            history.skipped["tool call id renamed (not an API id, or repeated)"] += 1
            stem = NOT_API.sub("_", call_id) or "call"
            call_id = _free_id(history, stem)
        assigned.setdefault(old, []).append(call_id)
        history._ids.add(call_id)
        out.append({**block, "id": call_id, "name": name})
    for old, ids in assigned.items():  # results in order, over every piece of a turn split in lines
        history._renamed.setdefault(old, deque()).extend(ids)
    return out


def _free_id(history: History, stem: str) -> str:
    """The first of ``stem``, ``stem_2``, ``stem_3``... not yet a call's id: the search starts after
    the candidates an earlier search found taken (ids are never freed), so each is tried once."""
    n = history._taken.get(stem, 0) + 1
    call_id = stem if n == 1 else f"{stem}_{n}"
    while call_id in history._ids:
        n += 1
        call_id = f"{stem}_{n}"
    history._taken[stem] = n  # taken once the caller adds it
    return call_id


def _answers_only(history: History, blocks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``blocks`` without the tool results that answer no call of the assistant message before them
    (results spread over consecutive user messages are all answers: the messages are merged); a result
    of a renamed call takes the call's new id. ``history._unanswered`` is the last assistant message's
    calls less those answered since (a result kept here is kept in the history: :func:`_add`)."""
    calls = history._unanswered
    kept = []
    for block in blocks:
        if block["type"] == "tool_result":
            renamed = history._renamed.get(block["tool_use_id"])
            if renamed:
                block = {**block, "tool_use_id": renamed.popleft()}
            if block["tool_use_id"] not in calls:
                history.skipped["tool result answering no call"] += 1
                continue
            calls.discard(block["tool_use_id"])  # a second answer to one call is no answer either
        kept.append(block)
    return kept


def _answer_every_call(history: History) -> None:
    """Every call of an assistant message answered in the next user message (an empty error result
    for a call without one), the results first, as the API wants them."""
    messages = history.messages
    for i, message in enumerate(messages):
        if message["role"] != "user":
            continue
        content = message["content"]
        results = [b for b in content if b["type"] == "tool_result"]
        previous = messages[i - 1] if i else None
        calls = [b["id"] for b in previous["content"] if b["type"] == "tool_use"] if previous else []
        answered = {b["tool_use_id"] for b in results}
        missing = [c for c in calls if c not in answered]
        if missing:
            history.skipped["call without a recorded result"] += len(missing)
            results += [
                {"type": "tool_result", "tool_use_id": c, "content": MISSING_RESULT, "is_error": True}
                for c in missing
            ]
        ordered = results + [b for b in content if b["type"] != "tool_result"]
        if ordered != content:
            messages[i] = {"role": "user", "content": ordered}
