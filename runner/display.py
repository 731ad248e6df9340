"""Progress while a batch runs: a live rich table on a terminal, plain lines otherwise."""

from __future__ import annotations

import time

from rich.console import Console, Group
from rich.live import Live
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from .session import JobProgress, JobResult


class PlainDisplay:
    """One line when a job starts and one when it ends; for logs and pipes."""

    def __init__(self, console: Console):
        self.console = console
        self.total = 0
        self.done = 0

    def start(self, progress: dict[str, JobProgress]) -> None:
        self.total = len(progress)

    def job_started(self, progress: JobProgress) -> None:
        self.console.print(f"start  {progress.name}", highlight=False, markup=False)

    def job_finished(self, result: JobResult) -> None:
        self.done += 1
        tail = f" ({result.error})" if result.error else ""
        self.console.print(f"end    {result.name}: {result.status}, {result.turns} turns, "
                           f"{result.wall_s:.1f} s [{self.done}/{self.total}]{tail}", highlight=False, markup=False)

    def stop(self) -> None:
        return None


class LiveDisplay:
    """A row per active job (turns, context size, compactions, status) and an overall bar."""

    def __init__(self, console: Console):
        self.console = console
        self.progress: dict[str, JobProgress] = {}
        self.bar = Progress(TextColumn("jobs"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                            console=console)
        self.task = None
        self.live: Live | None = None

    def start(self, progress: dict[str, JobProgress]) -> None:
        self.progress = progress
        self.task = self.bar.add_task("jobs", total=len(progress))
        self.live = Live(get_renderable=self._render, console=self.console, refresh_per_second=4,
                         transient=True)
        self.live.start()

    def _render(self) -> Group:
        table = Table(box=None, pad_edge=False)
        for column in ("job", "status", "turns", "context chars", "compactions", "cost $", "elapsed"):
            table.add_column(column, justify="left" if column in ("job", "status") else "right")
        active = [p for p in self.progress.values() if p.status == "running"]
        now = time.time()
        for p in active[:30]:
            table.add_row(Text(p.name), p.status, str(p.turns), f"{p.context_chars:,}", str(p.compactions),
                          f"{p.cost_usd:.4f}", f"{now - (p.started or now):.0f}s")
        if len(active) > 30:
            table.add_row(f"... {len(active) - 30} more running", "", "", "", "", "", "")
        return Group(table, self.bar)

    def job_started(self, progress: JobProgress) -> None:
        return None

    def job_finished(self, result: JobResult) -> None:
        if self.task is not None:
            self.bar.advance(self.task)
        tail = f" ({result.error})" if result.error else ""
        self.console.print(f"{result.name}: {result.status}, {result.turns} turns{tail}", highlight=False,
                           markup=False)

    def stop(self) -> None:
        if self.live is not None:
            self.live.stop()


def make_display(console: Console) -> PlainDisplay | LiveDisplay:
    return LiveDisplay(console) if console.is_terminal else PlainDisplay(console)
