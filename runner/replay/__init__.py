"""``runner replay``: recorded agent histories through the Compactor, open loop, judged by one rule.

- :mod:`.history`: reading a history (the neutral JSONL of ``shared/trajectories/``, or a job's
  ``transcript.jsonl``), every problem named by file and line;
- :mod:`.facts`: the needed facts of each turn, and which facts a text holds;
- :mod:`.contestant`: what is judged (the runner's Compactor with a strategy; peers in ``bench/``);
- :mod:`.engine`: the open loop, pricing and judging each request.

:func:`replay_files` runs a list of files with one strategy and returns one :class:`FileReport` each;
:func:`totals` adds them up.
"""

from __future__ import annotations

import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from ..billing import input_tokens
from ..config import Limits
from .contestant import CompactorContestant, Contestant, DeterministicSummarizer
from .engine import FileReport, ReplayOptions, replay
from .history import History, HistoryError, history_paths, load_history

SUMMARIZER_NAME = (
    "the runner's deterministic fallback summary (runner.compaction.fallback), billed as a call of"
)
TOTAL_KEYS = (
    "turns",
    "requests",
    "tokens_sent",
    "cost_usd",
    "recalls",
    "recall_tokens",
    "effective_cost_usd",
    "needed",
    "in_context",
    "recoverable",
    "lost",
    "summaries",
    "refused",
    "over_window",
)


def window_limits(limits: Limits, context_tokens: int | None, compaction: str | None) -> Limits:
    """``limits`` for a window of ``context_tokens`` tokens: the token limit set to it and the char
    limit to the same window at 4 characters a token (so the window, not the default char limit,
    decides); ``compaction`` (a strategy name) replaces the limits' own."""
    update: dict[str, Any] = {}
    if context_tokens:
        update |= {"context_token_limit": context_tokens, "context_char_limit": context_tokens * 4}
    if compaction:
        update["compaction"] = compaction
    return Limits.model_validate({**limits.model_dump(), **update}) if update else limits


def compactor_contestant(name: str, limits: Limits, job_dir: Path, *, summary_model: str) -> Contestant:
    return CompactorContestant(
        name, limits, job_dir, summarizer=DeterministicSummarizer(summary_model, input_tokens)
    )


async def replay_files(
    paths: Iterable[Path],
    options: ReplayOptions,
    make: Callable[[Path], Contestant],
    *,
    progress: Callable[[FileReport, float], None] | None = None,
) -> list[FileReport]:
    """Each history in ``paths`` (a directory: the histories in it) replayed by a fresh contestant
    (``make(job_dir)``, on a scratch job directory removed after). Raises :class:`HistoryError` before
    replaying anything when one file is not a history."""
    histories: list[History] = [load_history(p) for p in history_paths(paths)]
    reports = []
    for history in histories:
        started = time.perf_counter()
        with tempfile.TemporaryDirectory(prefix="runner-replay-") as scratch:
            report = await replay(history, make(Path(scratch) / "job"), options)
        reports.append(report)
        if progress is not None:
            progress(report, time.perf_counter() - started)
    return reports


def totals(reports: list[FileReport]) -> dict[str, Any]:
    """The reports' sums (compactions by stage too)."""
    out: dict[str, Any] = {key: 0 for key in TOTAL_KEYS}
    compactions: Counter[str] = Counter()
    for report in reports:
        data = report.to_json()
        for key in TOTAL_KEYS:
            out[key] += data[key]
        compactions.update(report.compactions)
    out["cost_usd"] = round(out["cost_usd"], 6)
    out["effective_cost_usd"] = round(out["effective_cost_usd"], 6)
    out["compactions"] = dict(sorted(compactions.items()))
    return out


__all__ = [
    "SUMMARIZER_NAME",
    "Contestant",
    "FileReport",
    "HistoryError",
    "ReplayOptions",
    "compactor_contestant",
    "load_history",
    "replay_files",
    "totals",
    "window_limits",
]
