"""Progress while a batch runs: a live rich table on a terminal, plain lines otherwise.

Both show what is true so far: jobs by status (a job is running until its end is reported, then
its result's status: the counts and the rows agree), an ETA from the jobs finished (elapsed time per
finished job times the jobs left, so concurrency is accounted for; "?" while a running job has
outlasted the ones that ended), the cost so far against the
run's ``max_cost_usd``, tokens, and the 429/529 answers the API gave (every attempt, retries too).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from ..rundir.docs import JobMetrics, Status
from ..services import Budget
from .terminal import printable


class ApiCounts:
    """429/529 answers seen so far; the model's ``on_rate_limited`` hook calls it once per answer."""

    def __init__(self) -> None:
        self.throttled = 0
        # delivery = "batch": the batcher's line (batch id, requests waiting, turnaround, projected end)
        self.batch_line: Callable[[], str | None] | None = None

    def __call__(self) -> None:
        self.throttled += 1


RUNNING_SUM_S = 0.5  # how often a line adds up again what the running jobs have spent
API = ApiCounts()  # one per process: every model of the batch reports here


def _clock(seconds: float) -> str:
    seconds = int(seconds)
    return (
        f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"
        if seconds >= 3600
        else f"{seconds // 60}:{seconds % 60:02d}"
    )


class Tally:
    """What both displays report: counts, ETA, cost, tokens, retries; a pure summary of what it was told.

    Kept as it is told (:meth:`job_started`, :meth:`finished`): a line costs O(1), not O(jobs), so a
    batch of any size pays the same per job for its progress. What the running jobs have spent so far
    is added up at most every :data:`RUNNING_SUM_S` (O(jobs running) each time; a job that ends in
    between moves its share to the ended jobs' at once), so a line may show their spend up to that
    much late."""

    def __init__(self, budget: Budget | None = None, api: ApiCounts = API):
        self.budget = budget
        self.api = api
        self.progress: dict[str, JobMetrics] = {}
        self.results: dict[str, JobMetrics] = {}
        self.running: dict[str, JobMetrics] = {}  # started (or found running), not ended; in start order
        self.started = time.monotonic()
        self.started_wall = time.time()
        self._ended: Counter[str] = Counter()  # ended jobs by status
        self._ended_cost = 0.0
        self._ended_tokens = [0, 0]  # input, output
        self._retries = 0
        self._durations = [0.0, 0]  # sum and count of the ended jobs' wall times (those above 0)
        self._ended_here = 0  # ended jobs that are in ``progress``
        # the running jobs' (cost, input tokens, output tokens), each job's as last added up, and when
        self._running_parts: dict[str, tuple[float, int, int]] = {}
        self._running_sum: list[float] = [0.0, 0, 0]
        self._summed_at: float | None = None

    def start(self, progress: dict[str, JobMetrics]) -> None:
        self.progress = progress
        self.started = time.monotonic()
        self.started_wall = time.time()
        self.running = {
            n: p for n, p in progress.items() if p.status != Status.QUEUED and n not in self.results
        }
        self._ended_here = sum(1 for n in self.results if n in progress)
        self._summed_at = None

    def job_started(self, progress: JobMetrics) -> None:
        if progress.job not in self.results:
            self.running[progress.job] = self.progress.get(progress.job, progress)

    def finished(self, result: JobMetrics) -> None:
        name = result.job
        if name in self.results:  # told twice: count it once, as its last result
            self._count(self.results[name], self.progress.get(name, self.results[name]), -1)
        elif name in self.progress:
            self._ended_here += 1
        self.results[name] = result
        self.running.pop(name, None)
        part = self._running_parts.pop(name, None)
        if part is not None:
            self._running_sum = [a - b for a, b in zip(self._running_sum, part, strict=True)]
        self._count(result, self.progress.get(name, result), 1)

    def _count(self, result: JobMetrics, record: JobMetrics, sign: int) -> None:
        self._ended[result.status] += sign
        self._ended_cost += sign * record.cost_usd
        self._ended_tokens[0] += sign * record.usage_total("input_tokens")
        self._ended_tokens[1] += sign * record.usage_total("output_tokens")
        self._retries += sign * result.retries
        if result.wall_s > 0:
            self._durations[0] += sign * result.wall_s
            self._durations[1] += sign

    def state(self, name: str) -> str:
        """A job's status as every part of the display tells it: its result's once it ended; until then
        running once started (a session that already set its final status is still running until it
        ends), else queued."""
        if name in self.results:
            return self.results[name].status
        return Status.RUNNING if name in self.running else Status.QUEUED

    def active(self) -> list[JobMetrics]:
        """The jobs running now (started, not ended), in the order they started: a copy made in one step,
        so the live display's refresh thread reads it while the loop starts and ends jobs."""
        return list(self.running.values())

    def eta_s(self, now: float | None = None) -> float | None:
        """Seconds left, or None when they cannot be estimated: before the first job ends, or while a
        running job has already outlasted the jobs that ended (its end is anyone's guess, whatever the
        pace of the others, e.g. six jobs that failed at once beside one at turn 114 of 3,000).

        The estimate: the elapsed time per job ended times the jobs left (concurrency accounted for),
        and at least what a running job needs to reach the jobs' typical duration."""
        done = len(self.results)
        if not done:
            return None
        now = now if now is not None else time.monotonic()
        left = len(self.progress) - self._ended_here
        if left <= 0:
            return 0.0
        estimate = (now - self.started) / done * left
        total, count = self._durations
        typical = total / count if count else None
        wall_now = self.started_wall + (now - self.started)
        started = [p.started for p in self.active() if p.started is not None]
        if not started:
            return estimate
        longest, shortest = max(wall_now - min(started), 0.0), max(wall_now - max(started), 0.0)
        if typical is None or longest > typical:
            return None
        return max(estimate, typical - shortest)

    def _running(self, now: float | None) -> tuple[float, int, int]:
        """What the running jobs have spent: (cost, input tokens, output tokens), added up again when
        the last sum is :data:`RUNNING_SUM_S` old."""
        now = now if now is not None else time.monotonic()
        if self._summed_at is None or not 0 <= now - self._summed_at < RUNNING_SUM_S:
            self._running_parts = {  # over a copy: the refresh thread sums while the loop ends jobs
                name: (p.cost_usd, p.usage_total("input_tokens"), p.usage_total("output_tokens"))
                for name, p in list(self.running.items())
            }
            parts = self._running_parts.values()
            self._running_sum = [sum(column) for column in zip(*parts, strict=True)] or [0.0, 0, 0]
            self._summed_at = now
        cost, tokens_in, tokens_out = self._running_sum
        return cost, int(tokens_in), int(tokens_out)

    def line(self, now: float | None = None) -> str:
        counts: Counter[str] = Counter(dict(self._ended))  # copied in one step (see active)
        counts[Status.RUNNING] += len(self.running)
        counts[Status.QUEUED] += len(self.progress) - self._ended_here - len(self.running)
        parts = [f"{len(self.results)}/{len(self.progress)} done"]
        parts += [f"{n} {s}" for s, n in sorted(counts.items()) if n > 0 and s != Status.SUCCEEDED] + (
            [f"{counts[Status.SUCCEEDED]} {Status.SUCCEEDED}"] if counts[Status.SUCCEEDED] > 0 else []
        )
        eta = self.eta_s(now)
        parts.append(f"ETA {_clock(eta)}" if eta is not None else "ETA ?" if self.results else "ETA -")
        running_cost, running_in, running_out = self._running(now)
        cost = self._ended_cost + running_cost
        limit = self.budget.limit if self.budget else None
        parts.append(f"${cost:.4f}" + (f" of ${limit:g}" if limit is not None else ""))
        tokens_in, tokens_out = self._ended_tokens[0] + running_in, self._ended_tokens[1] + running_out
        parts.append(f"tokens {tokens_in:,} in / {tokens_out:,} out")
        retries = self._retries  # the SDK's (429s and 529s among them)
        parts.append(f"429/529 {self.api.throttled}" + (f", retries {retries}" if retries else ""))
        if self.api.batch_line is not None and (batch := self.api.batch_line()):
            parts.append(batch)
        return " · ".join(parts)


class PlainDisplay:
    """One line when a job starts and one when it ends (with the run's tally); for logs and pipes."""

    def __init__(self, console: Console, budget: Budget | None = None):
        self.console = console
        self.tally = Tally(budget)

    def start(self, progress: dict[str, JobMetrics]) -> None:
        self.tally.start(progress)

    def job_started(self, progress: JobMetrics) -> None:
        self.tally.job_started(progress)
        self._line(f"start  {printable(progress.job)}")

    def job_finished(self, result: JobMetrics) -> None:
        self.tally.finished(result)
        tail = f" ({printable(result.error)})" if result.error else ""
        self._line(
            f"end    {printable(result.job)}: {result.status}, {result.turns} turns, "
            f"{result.wall_s:.1f} s{tail} [{self.tally.line()}]"
        )

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

    def start(self, progress: dict[str, JobMetrics]) -> None:
        self.tally.start(progress)
        self.live = Live(
            get_renderable=self._render, console=self.console, refresh_per_second=4, transient=True
        )
        self.live.start()

    def _render(self) -> Group:
        table = Table(box=None, pad_edge=False)
        for column in ("job", "status", "turns", "context chars", "compactions", "cost $", "elapsed"):
            table.add_column(
                column,
                justify="left" if column in ("job", "status") else "right",
                no_wrap=True,
                overflow="ellipsis",
                max_width=30 if column == "job" else None,
            )
        active = self.tally.active()
        now = time.time()
        for p in active[:30]:
            table.add_row(
                Text(printable(p.job)),
                Text(Status.RUNNING),
                str(p.turns),
                f"{p.context_chars:,}",
                str(sum(p.compactions.values())),
                f"{p.cost_usd:.4f}",
                f"{now - (p.started or now):.0f}s",
            )
        if len(active) > 30:
            table.add_row(f"... {len(active) - 30} more running", "", "", "", "", "", "")
        # one line at any width: cut with an ellipsis, never wrapped
        return Group(table, Text(self.tally.line(), style="bold", no_wrap=True, overflow="ellipsis"))

    def job_started(self, progress: JobMetrics) -> None:
        self.tally.job_started(progress)

    def job_finished(self, result: JobMetrics) -> None:
        self.tally.finished(result)
        tail = f" ({printable(result.error)})" if result.error else ""
        self.console.print(
            Text(f"{printable(result.job)}: {result.status}, {result.turns} turns{tail}"),
            highlight=False,
            soft_wrap=True,
        )

    def stop(self) -> None:
        if self.live is not None:
            self.live.stop()


def make_display(console: Console, budget: Budget | None = None) -> PlainDisplay | LiveDisplay:
    return LiveDisplay(console, budget) if console.is_terminal else PlainDisplay(console, budget)
