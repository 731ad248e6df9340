"""Where a job that did not finish continues: its transcript cut back to the last complete turn.

Used by ``runner resume`` and by an executor whose worker died. The transcript is cut in whole lines
(a paused turn and its continuation are two lines and one message of the history), so the line
numbers ``context.jsonl`` refers to stay valid. Guarantees: a half-written last line is dropped and
reported; a transcript that does not start with the job's prompt is set aside
(``transcript.unusable.jsonl``) and the job starts over; nothing is read or written outside
``job_dir``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from .messages import Message, merge_adjacent, request_problems
from .rundocs import TRANSCRIPT, UNUSABLE_TRANSCRIPT
from .store import dumps, read_jsonl, write_atomic_sync


def last_complete_turn(messages: list[Message]) -> list[Message]:
    """The longest prefix that ends after a complete turn: never on an assistant message whose tool
    calls are unanswered, never on a final answer the job did not get to record."""
    end = len(messages)
    while end > 0 and messages[end - 1].get("role") == "assistant":
        end -= 1
    prefix = messages[:end]
    while prefix and request_problems(prefix):
        prefix = prefix[:-1]
    return prefix


def raw_lines(raw: list[Message], merged: int) -> int:
    """How many transcript lines make up the first ``merged`` messages of ``merge_adjacent(raw)``."""
    groups = 0
    for i, message in enumerate(raw):
        if i == 0 or message.get("role") != raw[i - 1].get("role"):
            groups += 1
            if groups > merged:
                return i
    return len(raw)


@dataclass
class Continuation:
    """``history``: the transcript lines the job continues from (None: it starts over)."""

    history: list[Message] | None
    lines_before: int = 0  # transcript lines on disk before the cut
    warnings: list[str] = field(default_factory=list)
    replies_before: int = 0  # assistant lines on disk before the cut

    @property
    def turns_rerun(self) -> int:
        """Model replies on disk that the cut drops: the job makes those calls again."""
        return self.replies_before - sum(m.get("role") == "assistant" for m in self.history or [])

    @property
    def dropped(self) -> int:
        return self.lines_before - len(self.history or [])


def cut_transcript(job_dir: Path, prompt: str) -> Continuation:
    """Cut ``job_dir``'s transcript back to its last complete turn (rewritten so on disk)."""
    transcript, warnings = read_jsonl(job_dir / TRANSCRIPT)
    raw = [m for m in transcript if isinstance(m, dict)]
    replies = sum(m.get("role") == "assistant" for m in raw)
    history = raw[:raw_lines(raw, len(last_complete_turn(merge_adjacent(raw))))]
    if not history or history[0].get("content") != prompt:
        if transcript:
            (job_dir / TRANSCRIPT).replace(job_dir / UNUSABLE_TRANSCRIPT)
        return Continuation(None, len(transcript), warnings, replies)
    if len(history) != len(transcript) or warnings:
        write_atomic_sync(job_dir / TRANSCRIPT, "".join(dumps(m) + "\n" for m in history))
    return Continuation(history, len(transcript), warnings, replies)
