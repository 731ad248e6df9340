"""A job's history: the messages its session added, in ``transcript.jsonl`` and in its window.

Guarantees:
- Every message added is in ``transcript.jsonl``: its line is queued in the job's writer when it is
  added and written, with the turn's other lines, by the next flush (at the latest the next
  ``Compactor.prepare``, before any model sees it); each message is serialized once, and its
  line's length is its size in the window.
- The window (the compaction state's) takes each message as the transcript numbers it; the
  Compactor rewrites the window, never the history.
- The job's event lines (``events.jsonl``) go through :meth:`History.log`, queued with the turn.
"""

from __future__ import annotations

from typing import Any

from ..compaction.compactor import CompactionState
from ..messages import Message
from ..rundir.docs import EVENTS, TRANSCRIPT
from ..rundir.store import JobStore, dumps


class History:
    """The history one session keeps: ``writer`` is the job's, ``state`` the compaction state whose
    window takes each message."""

    def __init__(self, writer: JobStore, state: CompactionState):
        self.writer = writer
        self.state = state
        self.n = 0  # messages in the transcript

    def add(self, *messages: Message) -> None:
        """Append ``messages``: their transcript lines queued (one write with the turn's), the window told."""
        lines = [dumps(message) for message in messages]
        self.writer.queue(lines={TRANSCRIPT: lines})
        for message, line in zip(messages, lines, strict=True):
            self.n += 1
            self.state.take(message, self.n, len(line))

    def log(self, *events: dict[str, Any]) -> None:
        """Queue event lines for ``events.jsonl``, written with the turn."""
        self.writer.queue_records(EVENTS, list(events))

    async def resume(self, transcript: list[Message]) -> bool:
        """Continue ``transcript`` (already on disk): the window as the newest fitting ``context.jsonl``
        record left it (True), else rebuilt from the whole transcript."""
        used = await self.state.resume(transcript, self.writer)
        self.n = len(transcript)
        return used
