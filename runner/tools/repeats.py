"""Catches a model that repeats itself: the same call (tool and input) made again and again.

Like OpenHands' stuck detector, it compares calls, not texts; unlike it, a caught call is not run
and the model is told what happened (when the call was first made and where its result is), so it
can change course; only a model that keeps repeating after being told is stuck.

Guarantees:
- A call is counted anywhere in the job, however many turns apart (a repeat after a compaction
  removed the first result from view is the loop that thrashes). It is run at most ``max_repeated``
  times; the next identical call is caught. With ``at_once``, a call whose newest result this job
  saved to a file (:meth:`RepeatGuard.saved`) is caught at its first repeat, and :meth:`caught`
  says where that file is (``Caught.saved``): its result is there to be read back. (Off by default:
  it is for a caller that names that file, or hands back the saved output, in the caught result.)
- A ``write`` or ``edit`` starts afresh: what was read before it may be read again.
- The ``max_repeated``-th caught call of one kind makes the job stuck.
- Memory is bounded per distinct call: a key is kept as a 16-byte hash, never as the call's input,
  with a record of its count, first turn and first and last ids (ids of at most
  :data:`runner.rundir.store.MAX_ID_CHARS` characters); a repeat replaces the record, adding nothing
  past the first repeat's last id. Catching a repeat anywhere in the job means keeping every distinct
  call's record for the whole job, in a dict: a session that reads a new file every call grows it by
  about 0.2 KiB a call (``bench/job_records.py``: 0.6-0.7 KiB a call for all of a job's job-long
  records when every output is saved, 6 MiB for 10,000 calls). Only a caught call keeps a short
  description of itself in memory (for the stuck reason).
Bookkeeping: no I/O.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from ..rundir.store import MAX_ID_CHARS

# how many turns the tools keep a result in memory to name it when a repeat is caught (older ones
# are named by where the compactor saved them); the guard itself counts over the whole job
WINDOW_TURNS = 10
DESCRIPTION_CHARS = 300
MUTATING = ("write", "edit")


def call_key(name: str, args: Any) -> str:
    return json.dumps([name, args], sort_keys=True, ensure_ascii=False, default=str)


def _hash(key: str) -> bytes:
    return hashlib.blake2b(key.encode("utf-8", "surrogatepass"), digest_size=16).digest()


@dataclass
class Made:
    turn: int
    tool_use_id: str


@dataclass
class Caught:
    """A repeat the guard caught: how often the call ran, when first, and where a result is saved."""

    count: int
    first: Made
    saved: str | None


@dataclass
class RepeatGuard:
    max_repeated: int = 3
    window: int = WINDOW_TURNS
    at_once: bool = False
    # call hash -> (count, first turn, first id, last id); both kept for the whole job
    _runs: dict[bytes, tuple[int, int, str, str]] = field(default_factory=dict)
    _saved: dict[str, str] = field(default_factory=dict)  # tool_use id -> where its output is saved
    _caught: dict[bytes, int] = field(default_factory=dict)
    _described: dict[bytes, str] = field(default_factory=dict)  # caught keys only

    def caught(self, key: str, turn: int) -> Caught | None:
        """The repeat to catch when the call ``key`` is about to run at ``turn``, else ``None``."""
        h = _hash(key)
        runs = self._runs.get(h)
        if runs is None:
            return None
        count, first_turn, first_id, last_id = runs
        saved = self._saved.get(last_id) or self._saved.get(first_id)
        if not (self.at_once and saved is not None) and count < self.max_repeated:
            return None
        self._caught[h] = self._caught.get(h, 0) + 1
        self._described.setdefault(h, key[:DESCRIPTION_CHARS])
        return Caught(count, Made(first_turn, first_id), saved)

    def check(self, key: str, turn: int) -> tuple[int, Made] | None:
        """``(count, first)`` when the call ``key`` at ``turn`` is a repeat to catch, else ``None``."""
        found = self.caught(key, turn)
        return (found.count, found.first) if found else None

    def remember(self, key: str, turn: int, tool_use_id: str) -> None:
        """The call ``key`` was run at ``turn``."""
        if any(key.startswith(f'["{name}"') for name in MUTATING):
            self._runs.clear()  # the workspace may have changed: earlier reads are not repeats
            self._saved.clear()
        h = _hash(key)
        runs = self._runs.get(h)
        if runs is None:
            self._runs[h] = (1, turn, tool_use_id, tool_use_id)
        else:
            self._runs[h] = (runs[0] + 1, runs[1], runs[2], tool_use_id)

    def saved(self, tool_use_id: str, path: str) -> None:
        """The output of ``tool_use_id`` is saved at ``path`` (relative to the job directory)."""
        if len(tool_use_id) <= MAX_ID_CHARS:  # a longer one's call was not run: nothing to catch
            self._saved[tool_use_id] = path

    def close(self) -> None:
        """Let go of the records (the job ended)."""
        self._runs.clear()
        self._saved.clear()

    def stuck(self) -> tuple[str, int] | None:
        """The call a model keeps repeating after being told, and how often it was caught."""
        for h, count in self._caught.items():
            if count >= self.max_repeated:
                return self._described.get(h, "?"), count
        return None
