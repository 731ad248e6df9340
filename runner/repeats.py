"""Catches a model that repeats itself: the same call (tool and input) made again and again.

Like OpenHands' stuck detector, it compares calls, not texts; unlike it, a caught call is not run
and the model is told what happened (when the call was first made and where its result is), so it
can change course; only a model that keeps repeating after being told is stuck.

Guarantee: a call is run at most ``max_repeated`` times within any ``window`` turns; the next
identical call in that window is caught; the ``max_repeated``-th caught call of one kind makes the
job stuck. Pure bookkeeping: no I/O.
"""

from __future__ import annotations

import json
from collections import deque
from dataclasses import dataclass, field
from typing import Any

WINDOW_TURNS = 10


def call_key(name: str, args: Any) -> str:
    return json.dumps([name, args], sort_keys=True, ensure_ascii=False, default=str)


@dataclass
class Made:
    turn: int
    tool_use_id: str


@dataclass
class RepeatGuard:
    max_repeated: int = 3
    window: int = WINDOW_TURNS
    _made: dict[str, deque[Made]] = field(default_factory=dict)
    _caught: dict[str, int] = field(default_factory=dict)

    def check(self, key: str, turn: int) -> tuple[int, Made] | None:
        """``(count, first)`` when the call ``key`` at ``turn`` is a repeat to catch, else ``None``."""
        made = self._made.get(key)
        if made is None:
            return None
        while made and made[0].turn <= turn - self.window:
            made.popleft()
        if len(made) < self.max_repeated:
            return None
        self._caught[key] = self._caught.get(key, 0) + 1
        return len(made), made[0]

    def record(self, key: str, turn: int, tool_use_id: str) -> None:
        """The call ``key`` was run at ``turn``."""
        self._made.setdefault(key, deque()).append(Made(turn, tool_use_id))

    def stuck(self) -> tuple[str, int] | None:
        """The call a model keeps repeating after being told, and how often it was caught."""
        for key, count in self._caught.items():
            if count >= self.max_repeated:
                return key, count
        return None
