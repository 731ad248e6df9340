"""The in-context history of one session, with each message's size measured once.

An :class:`Entry` is a message plus its size in characters (measured when it is created, never
again), its line number in ``transcript.jsonl`` (``None`` for messages compaction made), and whether
a model call has already included it. :class:`Window` keeps the running total, so checking a
threshold costs O(1) and appending costs O(size of the new message).

Guarantees (prompt-cache bookkeeping, for :meth:`Strategy.cache_points`):
- :meth:`Window.kept` is the number of leading entries no stage has replaced since the last call
  (identity, not equality: stages copy what they change), so a prefix a call asked to cache that
  ends inside it is still byte for byte what the next request sends.
- :meth:`Window.cached_points` are the message indices the last calls asked to cache that are still
  inside :meth:`Window.kept`: the breakpoints where the next request can read the cache back.
- :meth:`Window.open_results_from` cost O(messages counted).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..messages import Message, measure, result_text, tool_results
from ..protocol import is_placeholder

MICRO_MIN_CHARS = 120


def settled(message: Message) -> bool:
    """True when micro_compact has nothing left to rewrite in ``message``: a prompt-cache breakpoint
    placed after it stays valid until a snip or a summary rewrites the whole history."""
    for block in tool_results(message):
        content = block.get("content")
        if isinstance(content, str) and is_placeholder(content):
            continue
        if len(result_text(block)) > MICRO_MIN_CHARS:
            return False
    return True


@dataclass(frozen=True, slots=True)
class Entry:
    message: Message
    chars: int
    seq: int | None = None
    seen: bool = False

    @classmethod
    def of(cls, message: Message, seq: int | None = None, seen: bool = False) -> Entry:
        return cls(message, measure(message), seq, seen)

    def replaced(self, message: Message) -> Entry:
        return Entry(message, measure(message), self.seq, self.seen)


class Window:
    """Entries in order, their running size, and the message list to send."""

    def __init__(self) -> None:
        self.entries: list[Entry] = []
        self.messages: list[Message] = []
        self.total = 0
        self._seen = 0  # entries[:_seen] have been sent to the model
        self._settled = 0  # entries[:_settled] are seen and settled
        self._kept = 0  # entries[:_kept] are the entries the last call sent, unreplaced since
        self._points: tuple[int, ...] = ()  # messages the calls so far asked to cache (still in _kept)

    def append(self, message: Message, seq: int | None = None, chars: int | None = None) -> None:
        """Append ``message``; ``chars``, when given, must be its :func:`measure` (the length of its JSON
        text without ASCII escapes), from a caller that has serialized it already."""
        entry = Entry(message, measure(message) if chars is None else chars, seq)
        self.entries.append(entry)
        self.messages.append(message)
        self.total += entry.chars

    def replace(self, entries: list[Entry]) -> None:
        """Adopt a stage's output (O(len(entries)); stages run rarely)."""
        kept = 0
        for old, new in zip(self.entries[: self._kept], entries, strict=False):
            if old is not new:
                break
            kept += 1
        self._kept = kept
        self._points = tuple(p for p in self._points if p < kept)
        self.entries = entries
        self.messages = [e.message for e in entries]
        self.total = sum(e.chars for e in entries)
        self._seen = 0
        while self._seen < len(entries) and entries[self._seen].seen:
            self._seen += 1
        self._settled = 0

    def mark_seen(self) -> None:
        """Everything in the window has now been sent to the model (O(new entries))."""
        for i in range(self._seen, len(self.entries)):
            e = self.entries[i]
            self.entries[i] = Entry(e.message, e.chars, e.seq, True)
        self._seen = len(self.entries)
        self._kept = len(self.entries)

    def caching(self, points: tuple[int, ...]) -> None:
        """The next call asks the cache to keep the prefixes ending at these message indices; the
        most recent few are remembered while they stay valid."""
        self._points = tuple(sorted({*self._points, *points}))[-4:]

    def open_results_from(self, index: int) -> int:
        """How many tool results from message ``index`` on micro_compact could still rewrite (over
        ``MICRO_MIN_CHARS`` and not a placeholder)."""
        return sum(
            1
            for entry in self.entries[index:]
            for block in tool_results(entry.message)
            if not (isinstance(block.get("content"), str) and is_placeholder(block["content"]))
            and len(result_text(block)) > MICRO_MIN_CHARS
        )

    def kept(self) -> int:
        """How many leading entries the last call sent and no stage has replaced since."""
        return min(self._kept, len(self.entries))

    def cached_points(self) -> tuple[int, ...]:
        """Message indices an earlier call asked to cache whose prefix is unchanged since."""
        kept = self.kept()
        return tuple(p for p in self._points if p < kept)

    def settled_prefix(self) -> int:
        """How many leading messages are settled: seen (fit_tool_results rewrites what the model has
        not seen), or holding no tool result at all (a summary, the prompt, a tool call); amortized
        O(1): a pointer that only moves forward until a stage replaces the entries."""
        while self._settled < len(self.entries):
            message = self.entries[self._settled].message
            if not settled(message) or (self._settled >= self._seen and tool_results(message)):
                break
            self._settled += 1
        return self._settled

    def __len__(self) -> int:
        return len(self.entries)

    def snapshot(self) -> dict[str, Any]:
        return {"messages": len(self.entries), "chars": self.total}
