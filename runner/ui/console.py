"""The command line's consoles and how a line reaches them: ``out`` (stdout) and ``err`` (stderr), one
problem or note a line, never read as rich markup nor as terminal escapes, never wrapped; the run table
at the console's width; paths as the user would write them.

A terminal gets its own width; a pipe $COLUMNS or 80 (rich's default), so the run table on a pipe is the
narrow one unless $COLUMNS makes room (every one-line message is printed with soft_wrap: never cut).

Guarantees:
- A closed stdout (``runner report | head``) is never an error of the command: the first write that
  meets the broken pipe points stdout at ``/dev/null`` (Python's advice for ``BrokenPipeError``), so
  the command goes on to its end, prints nothing more there and exits with its own code; nothing raises
  again when the interpreter flushes stdout at exit. A run goes on and writes all its files.
"""

from __future__ import annotations

import os
import select
import sys
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape

from .tables import fitting_table
from .terminal import printable


def stdout_closed() -> bool:
    """Whether stdout is a pipe whose reader has gone (``poll`` reports an error on it)."""
    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(events & select.POLLERR for _, events in poller.poll(0))
    except (OSError, ValueError, AttributeError):  # no file descriptor, or no poll here
        return False


def stdout_gone() -> None:
    """stdout's reader has gone: point stdout at ``/dev/null`` (what is left in its buffer included), so
    later writes, and the flush at exit, go nowhere instead of raising ``BrokenPipeError``."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    finally:
        os.close(devnull)


class _Console(Console):
    def on_broken_pipe(self) -> None:
        """Not rich's ``SystemExit(1)``: the command goes on; this console prints nothing more."""
        self.quiet = True
        if self.file is sys.stdout:
            stdout_gone()


def console(*, stderr: bool = False) -> Console:
    """A console for the CLI's output: emoji codes off, so a report's ``b.py:100:`` or ``:thumbs_up:``
    is printed as written (rich would turn them into emoji); markup is escaped where text is data."""
    return _Console(stderr=stderr, emoji=False)


def print_document(text: str) -> None:
    """A document (``--json``) on stdout, flushed; nothing when stdout's reader has gone."""
    try:
        sys.stdout.write(text + "\n")
        sys.stdout.flush()
    except BrokenPipeError:
        stdout_gone()


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
