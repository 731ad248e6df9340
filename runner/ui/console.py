"""The command line's consoles and how a line reaches them: ``out`` (stdout) and ``err`` (stderr), one
problem or note a line, never read as rich markup nor as terminal escapes, never wrapped; the run table
at the console's width; paths as the user would write them.

A terminal gets its own width; a pipe $COLUMNS or 80 (rich's default), so the run table on a pipe is the
narrow one unless $COLUMNS makes room (every one-line message is printed with soft_wrap: never cut).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape

from .tables import fitting_table
from .terminal import printable


def console(*, stderr: bool = False) -> Console:
    """A console for the CLI's output: emoji codes off, so a report's ``b.py:100:`` or ``:thumbs_up:``
    is printed as written (rich would turn them into emoji); markup is escaped where text is data."""
    return Console(stderr=stderr, emoji=False)


out = console()
err = console(stderr=True)


def print_error(line: str, label: str = "error") -> None:
    """One problem as one line: user text is never read as rich markup, nor as terminal escapes, and never
    wrapped."""
    err.print(f"[red]{label}[/]: {escape(printable(line))}", highlight=False, soft_wrap=True)


def say(line: str) -> None:
    """One note on stderr, as written."""
    err.print(escape(printable(line)), highlight=False, soft_wrap=True)


def print_table(console: Console, rows: list[dict[str, Any]]) -> None:
    """The run table at the console's width; when that is the narrow one (no error column), each job's
    error follows it as a line of its own."""
    table = fitting_table(rows, None, console.width)
    console.print(table)
    if any(str(column.header) == "error" for column in table.columns):
        return
    for row in rows:
        if row.get("error"):
            console.print(
                escape(printable(f"{row.get('job', '?')}: {row['error']}")), highlight=False, soft_wrap=True
            )


def shown_path(path: Path) -> str:
    """A path as the user would write it: relative to the working directory when it is inside it, and
    absolute when that is ``/`` (``tmp/x`` from ``/`` reads as a path of its own)."""
    if Path.cwd() == Path(Path.cwd().anchor):
        return str(path)
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)
