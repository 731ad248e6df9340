"""``context.jsonl``: the compacted context of a job, recorded by reference, and rebuilt on resume.

One line is appended whenever a compaction stage changes the window; the window at any later turn is
that line plus the transcript lines written after it. A line lists the window's entries; each block of
each entry is a reference, not a copy:

- ``{"t": 12}``: message 12 of ``transcript.jsonl`` (1-based) as written; ``{"t": 12, "b": 3}`` its block 3;
- ``{"t": 12, "b": 3, "saved": "tool-results/x.txt"}``: that tool_result with its content replaced by
  the placeholder naming the saved output; with ``"preview": n``, by the persisted-output marker
  with an ``n``-character preview (both rebuilt from the saved file);
- ``{"summary": "summaries/0001.md", "label": ..., "where": ...}``: a summary message;
- ``{"x": block}``: anything else (the short markers compaction writes), inline.

Guarantees:
- :func:`decode` of a line returns exactly the window :class:`Recorder` encoded, given the same
  transcript and job directory (a saved output is never rewritten with other content).
- A :class:`Recorder`'s memory is proportional to the window, not to the job: what it remembers of
  messages, blocks, texts and tool results that left the window is forgotten at the next
  :meth:`Recorder.encode` once it is as much again as what is in view (plus :data:`SLACK`), so the
  forgetting costs O(1) per message added, amortized. A window only loses old parts and gains new
  ones, so nothing forgotten is ever asked for again; were it, it would be encoded inline (``x``).
"""

from __future__ import annotations

from typing import Any

from ..messages import Message
from ..protocol import is_persisted, persisted_marker, persisted_preview, placeholder, saved_path
from ..rundir.store import JobStore
from .stages import summary_message
from .window import Entry

Ref = dict[str, Any]
SLACK = 16  # entries of each kind a Recorder may hold past twice what is in view before it forgets


def _read(store: JobStore, rel: str) -> str:
    with open(store.resolve(rel), encoding="utf-8", errors="surrogatepass", newline="") as f:
        return f.read()


class Recorder:
    """Remembers where every block of the window came from, and encodes the window as references.

    Objects are tracked by identity (stages never mutate a block, they copy the ones they change) and
    held only while they are in the window, so memory stays proportional to the window; so are texts
    (a summary's, a prompt's) and tool results (where each is in the transcript)."""

    def __init__(self) -> None:
        self._by_id: dict[int, tuple[Any, Ref]] = {}
        self._by_text: dict[str, Ref] = {}
        self._results: dict[str, tuple[int, int]] = {}  # tool_use_id -> (transcript line, block index)
        self._kept = [0, 0, 0]  # how many of each (by id, by text, results) the last forgetting kept

    def added(self, message: Message, seq: int) -> None:
        """``message`` is line ``seq`` of the transcript."""
        content = message.get("content")
        self._by_id[id(message)] = (message, {"t": seq})
        if isinstance(content, str):
            self._by_text[content] = {"t": seq}
            return
        for i, block in enumerate(content or []):
            self._by_id[id(block)] = (block, {"t": seq, "b": i})
            if isinstance(block, dict) and block.get("type") == "tool_result":
                self._results[str(block.get("tool_use_id", ""))] = (seq, i)

    def summary(self, message: Message, path: str, label: str, *, where: str, memory: str = "") -> None:
        ref = {"summary": path, "label": label, "where": where, **({"memory": memory} if memory else {})}
        self._by_id[id(message)] = (message, ref)
        self._by_text[message["content"]] = ref

    def encode(self, entries: list[Entry]) -> list[Ref]:
        live: set[int] = set()
        out = [self._entry(e, live) for e in entries]
        # forget what left the window, once it is as much again as what the last forgetting kept
        if self._over(0, len(self._by_id), len(live)):
            self._by_id = {k: v for k, v in self._by_id.items() if k in live}
            self._kept[0] = len(self._by_id)
        if self._over(1, len(self._by_text), len(entries)):
            shown = set(_texts(entries))
            self._by_text = {k: v for k, v in self._by_text.items() if k in shown}
            self._kept[1] = len(self._by_text)
        if self._over(2, len(self._results), len(entries)):
            ids = set(_result_ids(entries))
            self._results = {k: v for k, v in self._results.items() if k in ids}
            self._kept[2] = len(self._results)
        return out

    def _over(self, kind: int, held: int, in_view: int) -> bool:
        """Whether ``held`` things of ``kind`` are due to be forgotten: more than twice what the last
        forgetting kept and twice ``in_view`` (a floor, for the first time), plus :data:`SLACK`."""
        return held > 2 * max(self._kept[kind], in_view) + SLACK

    def _entry(self, entry: Entry, live: set[int]) -> Ref:
        message = entry.message
        ref: Ref = {"role": message["role"]}
        if entry.seq is not None:
            ref["seq"] = entry.seq
        if entry.seen:
            ref["seen"] = 1
        known = self._by_id.get(id(message))
        content = message.get("content")
        if known is not None:
            live.add(id(message))
            if isinstance(content, list):
                live.update(map(id, content))
            ref["m"] = known[1]
            return ref
        if isinstance(content, str):
            ref["m"] = self._by_text.get(content) or {"x": content}
            return ref
        ref["c"] = [self._block(b, live) for b in content or []]
        return ref

    def _block(self, block: Any, live: set[int]) -> Ref:
        known = self._by_id.get(id(block))
        if known is not None:
            live.add(id(block))
            return known[1]
        if isinstance(block, dict) and block.get("type") == "text" and block.get("text") in self._by_text:
            return {**self._by_text[block["text"]], "text": 1}
        if isinstance(block, dict) and block.get("type") == "tool_result":
            where = self._results.get(str(block.get("tool_use_id", "")))
            content = block.get("content")
            path = saved_path(content)
            if where is not None and path is not None and isinstance(content, str):
                ref: Ref = {"t": where[0], "b": where[1], "saved": path}
                if is_persisted(content):
                    ref["preview"] = len(persisted_preview(content))
                return ref
        return {"x": block}

    def decode(
        self, refs: list[Ref], transcript: list[Message], store: JobStore, *, active_request: str
    ) -> list[Entry]:
        """The window a context line describes, each part remembered under the reference it came from.
        Raises (KeyError, IndexError, TypeError, OSError, ValueError) when the transcript or a saved
        file does not match it."""
        entries = []
        for ref in refs:
            if "m" in ref:
                message = {
                    "role": ref["role"],
                    "content": _content(ref["m"], transcript, store, active_request=active_request),
                }
                self._remember(message, ref["m"])
            else:
                content = []
                for b in ref["c"]:
                    block = _block(b, transcript, store, active_request=active_request)
                    self._remember(block, b)
                    content.append(block)
                message = {"role": ref["role"], "content": content}
            if ref["role"] not in ("user", "assistant"):
                raise ValueError(f"unknown role {ref['role']!r}")
            entries.append(Entry.of(message, ref.get("seq"), bool(ref.get("seen"))))
        return entries

    def _remember(self, obj: Any, ref: Ref) -> None:
        if "x" in ref:
            return
        self._by_id[id(obj)] = (obj, ref)
        content = obj.get("content") if isinstance(obj, dict) else None
        if isinstance(content, str) and "b" not in ref:
            self._by_text[content] = ref
        if isinstance(content, list) and "t" in ref and "b" not in ref:
            for i, block in enumerate(content):
                self._remember(block, {"t": ref["t"], "b": i})
        if "t" in ref and "b" in ref and isinstance(obj, dict) and obj.get("type") == "tool_result":
            self._results[str(obj.get("tool_use_id", ""))] = (ref["t"], ref["b"])


def _content(ref: Ref, transcript: list[Message], store: JobStore, *, active_request: str) -> Any:
    if "x" in ref:
        return ref["x"]
    if "summary" in ref:
        text = _read(store, ref["summary"])
        return summary_message(
            ref["label"], active_request, text, where=ref["where"], memory=ref.get("memory", "")
        )["content"]
    return _line(transcript, ref["t"])["content"]


def _line(transcript: list[Message], seq: int) -> Message:
    if not 1 <= seq <= len(transcript):
        raise IndexError(f"transcript message {seq} is not there")
    return transcript[seq - 1]


def _block(ref: Ref, transcript: list[Message], store: JobStore, *, active_request: str) -> Any:
    if "x" in ref:
        return ref["x"]
    if ref.get("text"):
        return {
            "type": "text",
            "text": _content(
                {k: v for k, v in ref.items() if k != "text"},
                transcript,
                store,
                active_request=active_request,
            ),
        }
    block = _line(transcript, ref["t"])["content"][ref["b"]]
    if "saved" not in ref:
        return block
    path = ref["saved"]
    store.claim(str(block.get("tool_use_id", "")), path)  # saved for this result (a stage may name it again)
    if "preview" not in ref:
        return {**block, "content": placeholder(path)}
    text = _read(store, path)
    return {**block, "content": persisted_marker(path, text, ref["preview"])}


def _texts(entries: list[Entry]) -> list[str]:
    """Every text in the window: a message's string content, and each text block's."""
    out: list[str] = []
    for entry in entries:
        content = entry.message.get("content")
        if isinstance(content, str):
            out.append(content)
        else:
            out += [
                b["text"] for b in content or [] if isinstance(b, dict) and isinstance(b.get("text"), str)
            ]
    return out


def _result_ids(entries: list[Entry]) -> list[str]:
    """The tool_use id of every tool_result block in the window."""
    out: list[str] = []
    for entry in entries:
        content = entry.message.get("content")
        if isinstance(content, list):
            out += [
                str(b.get("tool_use_id", ""))
                for b in content
                if isinstance(b, dict) and b.get("type") == "tool_result"
            ]
    return out
