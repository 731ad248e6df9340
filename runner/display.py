"""Progress while a batch runs: a live rich table on a terminal, plain lines otherwise.

Both show what is true so far: jobs by status, an ETA from the jobs finished (elapsed time per
finished job times the jobs left, so concurrency is accounted for), the cost so far against the
run's ``max_cost_usd``, tokens, and the 429/529 answers the API gave (every attempt, retries too).
"""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from .rundocs import Status
from .services import Budget
from .session import JobProgress, JobResult
from .terminal import printable


class ApiCounts:
    """429/529 answers seen so far; the model's ``on_rate_limited`` hook calls it once per answer."""

    def __init__(self) -> None:
        self.throttled = 0

    def __call__(self) -> None:
        self.throttled += 1


API = ApiCounts()  # one per process: every model of the batch reports here


def _clock(seconds: float) -> str:
    seconds = int(seconds)
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}" if seconds >= 3600 else \
        f"{seconds // 60}:{seconds % 60:02d}"


class Tally:
    """What both displays report: counts, ETA, cost, tokens, retries; a pure summary of what it was told."""

    def __init__(self, budget: Budget | None = None, api: ApiCounts = API):
        self.budget = budget
        self.api = api
        self.progress: dict[str, JobProgress] = {}
        self.results: dict[str, JobResult] = {}
        self.started = time.monotonic()

    def start(self, progress: dict[str, JobProgress]) -> None:
        self.progress = progress
        self.started = time.monotonic()

    def finished(self, result: JobResult) -> None:
        self.results[result.name] = result

    def eta_s(self, now: float | None = None) -> float | None:
        """Seconds left at the pace of the jobs finished so far; None before the first one ends."""
        done = len(self.results)
        if not done:
            return None
        elapsed = (now if now is not None else time.monotonic()) - self.started
        return elapsed / done * max(len(self.progress) - done, 0)

    def line(self, now: float | None = None) -> str:
        # a job's result is the truth once it ended; its progress until then
        counts: Counter[str] = Counter(self.results[n].status if n in self.results else p.status for n, p in self.progress.items())
        parts = [f"{len(self.results)}/{len(self.progress)} done"]
        parts += [f"{n} {s}" for s, n in sorted(counts.items()) if n and s != Status.SUCCEEDED] + (
            [f"{counts[Status.SUCCEEDED]} {Status.SUCCEEDED}"] if counts[Status.SUCCEEDED] else [])
        eta = self.eta_s(now)
        parts.append(f"ETA {_clock(eta)}" if eta is not None else "ETA -")
        cost = sum(p.cost_usd for p in self.progress.values())
        limit = self.budget.limit if self.budget else None
        parts.append(f"${cost:.4f}" + (f" of ${limit:g}" if limit is not None else ""))
        tokens_in = sum(p.input_tokens for p in self.progress.values())
        tokens_out = sum(p.output_tokens for p in self.progress.values())
        parts.append(f"tokens {tokens_in:,} in / {tokens_out:,} out")
        retries = sum(r.wire.retries for r in self.results.values())  # the SDK's (429s and 529s among them)
        parts.append(f"429/529 {self.api.throttled}" + (f", retries {retries}" if retries else ""))
        return " · ".join(parts)


class PlainDisplay:
    """One line when a job starts and one when it ends (with the run's tally); for logs and pipes."""

    def __init__(self, console: Console, budget: Budget | None = None):
        self.console = console
        self.tally = Tally(budget)

    def start(self, progress: dict[str, JobProgress]) -> None:
        self.tally.start(progress)

    def job_started(self, progress: JobProgress) -> None:
        self._line(f"start  {printable(progress.name)}")

    def job_finished(self, result: JobResult) -> None:
        self.tally.finished(result)
        tail = f" ({printable(result.error)})" if result.error else ""
        self._line(f"end    {printable(result.name)}: {result.status}, {result.turns} turns, "
                   f"{result.wall_s:.1f} s{tail} [{self.tally.line()}]")

    def _line(self, text: str) -> None:
        """One line as it is (free text in it already :func:`printable`), straight to the console's
        file: no markup, wrapping or styling to work out (rich's print costs about 0.3 ms a line, two
        lines a job)."""
        file = self.console.file
        file.write(text + "\n")
        file.flush()

    def stop(self) -> None:
        return None


class LiveDisplay:
    """A row per active job (turns, context size, compactions, cost) under the run's tally line."""

    def __init__(self, console: Console, budget: Budget | None = None):
        self.console = console
        self.tally = Tally(budget)
        self.live: Live | None = None

    def start(self, progress: dict[str, JobProgress]) -> None:
        self.tally.start(progress)
        self.live = Live(get_renderable=self._render, console=self.console, refresh_per_second=4,
                         transient=True)
        self.live.start()

    def _render(self) -> Group:
        table = Table(box=None, pad_edge=False)
        for column in ("job", "status", "turns", "context chars", "compactions", "cost $", "elapsed"):
            table.add_column(column, justify="left" if column in ("job", "status") else "right",
                             no_wrap=True, overflow="ellipsis", max_width=30 if column == "job" else None)
        active = [p for p in self.tally.progress.values() if p.status == Status.RUNNING]
        now = time.time()
        for p in active[:30]:
            table.add_row(Text(printable(p.name)), Text(printable(p.status)), str(p.turns), f"{p.context_chars:,}",
                          str(p.compactions),
                          f"{p.cost_usd:.4f}", f"{now - (p.started or now):.0f}s")
        if len(active) > 30:
            table.add_row(f"... {len(active) - 30} more running", "", "", "", "", "", "")
        return Group(table, Text(self.tally.line(), style="bold"))

    def job_started(self, progress: JobProgress) -> None:
        return None

    def job_finished(self, result: JobResult) -> None:
        self.tally.finished(result)
        tail = f" ({printable(result.error)})" if result.error else ""
        self.console.print(Text(f"{printable(result.name)}: {result.status}, {result.turns} turns{tail}"),
                           highlight=False, soft_wrap=True)

    def stop(self) -> None:
        if self.live is not None:
            self.live.stop()


def make_display(console: Console, budget: Budget | None = None, **_: Any) -> PlainDisplay | LiveDisplay:
    return LiveDisplay(console, budget) if console.is_terminal else PlainDisplay(console, budget)
