"""The file tools ``read``, ``write``, ``edit`` and ``glob`` as a job calls them: the SDK's definitions
(:func:`file_tool_definitions`, ``grep``'s too), each call run on the event loop when it is small and
on a worker thread otherwise, under a deadline, its output shaped into a tool_result. What each tool
does is :mod:`runner.tools.file_tools`; ``grep`` is :mod:`runner.tools.grep`.

Trust model: the file tools are ours (:mod:`runner.tools.file_tools`, :mod:`runner.tools.grep_worker`),
with the definitions (names, descriptions, input schemas) and the behaviour of the SDK's
``agent_toolset``, whose implementation checked a path and then opened it by name again: a job that
swapped a directory for a symlink in between could make another job on the same workspace read or
write outside it. Ours open every path beneath a directory descriptor of the workspace
(:mod:`runner.tools.beneath`), so there is nothing between a check and a use.

Guarantees:

- No file tool opens, lists, creates or replaces anything outside the workspace, whatever the tree
  holds or how a concurrent job changes it: every lookup is
  ``openat2(RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS)`` from the root's descriptor on Linux 5.6 and
  later, and elsewhere a walk of one ``O_NOFOLLOW`` component at a time with symlinks resolved by
  hand; a write goes to a new name in the directory's descriptor, renamed over the name. Symlinks
  that stay inside keep working; a path that leads out gets an error result ("outside the session's
  working directory") that says nothing about what is there.
- A call never raises for a model's mistake (bad arguments: wrong types, NUL bytes, lone surrogates,
  huge or negative numbers, a path outside the workspace) nor for a tool's bug: it returns an
  ``is_error`` tool_result the model can read (:func:`shaped_call`).
- No call blocks the event loop or outlives its job: ``read``, ``write``, ``edit`` and ``glob`` run on a
  worker thread under a deadline (:data:`FILE_TOOL_DEADLINE_S`, then an error result, the call is
  abandoned and its walk stops soon after; the thread is one of the job's few,
  :func:`runner.tools.shares.in_thread`: one job's flood of slow calls never holds another job's),
  and never run a model-chosen regular expression in this process. The small calls skip the thread:
  on a workspace on a local file system (:func:`runner.rundir.store.local_disk`), ``read`` and ``glob``
  run first on the event loop with a budget of :data:`INLINE_BUDGET_S`, and all those of one batch
  together within the batch's budget (:attr:`Workspace.inline_left`; then the batch's other calls go
  straight to a thread); one that needs longer stops at its next clock check (after each 1 MiB chunk
  of a paged or image/PDF read, scanned in C, each 256 directory entries; a whole text file, at most
  256 KiB, is one read), having changed nothing (both only read), and runs again from the start on a
  worker thread under the deadline. A thread hand-off costs the loop the GIL twice, more than most of
  these calls take. A network or FUSE workspace, which can hang, never runs a tool on the loop.
  ``read``, ``write`` and ``edit`` refuse non-regular files (FIFOs, devices, sockets) without blocking
  (looked at with ``O_PATH``, opened non-blocking).
- Every cut result says so and how to get the rest (texts in :mod:`runner.protocol`).
- Every result is valid UTF-8: undecodable file names and bytes are escaped (``\\xNN``).
- A path a tool shows names one file, and given back names that file: in the paths ``glob`` and
  ``grep`` show, a byte that is not UTF-8 text and a control character are ``\\xNN`` and a backslash
  is ``\\\\`` (:func:`runner.tools.beneath.shown`, one line per path), and the path of ``read``,
  ``write``, ``edit``, ``glob`` and ``grep`` and ``glob``'s pattern map those escapes back
  (:func:`runner.tools.beneath.from_shown`). An escape of a printable ASCII character (``\\x2e``,
  ``\\x2f``) is refused, so no escape spells ``.``, ``..`` or ``/``.
"""

from __future__ import annotations

import functools
import importlib.metadata
import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio

from ..rundir.store import local_disk
from . import file_tools
from .base import error_result, safe_content, safe_text
from .file_tools import ToolFailure
from .shares import JobShare, in_thread

FILE_TOOL_DEADLINE_S = 60.0
INLINE_BUDGET_S = 0.002  # how long a read or glob may hold the event loop before it goes to a thread
INLINE_TOOLS = frozenset({"read", "glob"})  # read-only: stopped part-way, a call changed nothing
LATE = object()  # a call's output when it did not finish within its deadline
NOT_INLINE = object()  # FileTool.inline: run the call on a worker thread


FILE_TOOL_NAMES = ("read", "write", "edit", "glob", "grep")  # the SDK's agent_toolset tools we run
SDK_FILE_TOOLS = Path(__file__).with_name("sdk_file_tools.json")  # made by write_sdk_file_tools()


@functools.lru_cache(maxsize=1)
def file_tool_definitions() -> dict[str, dict[str, Any]]:
    """The SDK's published definitions of its file tools (name, description, input schema), built
    once: the model sees the same tools (``read`` with one more optional input, ``byte_range``); only
    their implementation is ours. They are the installed SDK's: :data:`SDK_FILE_TOOLS` when it was
    made from the installed version (the SDK's import costs a process about 1.5 s, which an offline
    run never needs otherwise), else built from the SDK."""
    definitions = saved_sdk_file_tools() or sdk_file_tools()
    schema = dict(definitions["read"]["input_schema"])  # one addition: a byte range, for a line too long
    schema["properties"] = {**schema["properties"], "byte_range": BYTE_RANGE_SCHEMA}
    return {**definitions, "read": {**definitions["read"], "input_schema": schema}}


def sdk_version() -> str | None:
    try:
        return importlib.metadata.version("anthropic")
    except importlib.metadata.PackageNotFoundError:
        return None


def saved_sdk_file_tools() -> dict[str, dict[str, Any]] | None:
    """:data:`SDK_FILE_TOOLS`'s definitions if it was made from the installed SDK's version, else None."""
    try:
        saved = json.loads(SDK_FILE_TOOLS.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(saved, dict) or saved.get("anthropic") != sdk_version():
        return None
    definitions = saved.get("definitions")
    if not isinstance(definitions, dict) or set(definitions) != set(FILE_TOOL_NAMES):
        return None
    return definitions


def sdk_file_tools() -> dict[str, dict[str, Any]]:
    """The definitions the installed SDK's ``agent_toolset`` publishes (this imports the SDK)."""
    from anthropic.lib.tools.agent_toolset import (
        AgentToolContext,
        beta_edit_tool,
        beta_glob_tool,
        beta_grep_tool,
        beta_read_tool,
        beta_write_tool,
    )

    factories = {
        "read": beta_read_tool,
        "write": beta_write_tool,
        "edit": beta_edit_tool,
        "glob": beta_glob_tool,
        "grep": beta_grep_tool,
    }
    context = AgentToolContext(workdir="/")
    return {name: dict(factory(context).to_dict()) for name, factory in factories.items()}  # type: ignore[arg-type]


def write_sdk_file_tools() -> None:
    """Save the installed SDK's definitions in :data:`SDK_FILE_TOOLS` with its version."""
    document = {"anthropic": sdk_version(), "definitions": sdk_file_tools()}
    SDK_FILE_TOOLS.write_text(json.dumps(document, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


BYTE_RANGE_SCHEMA: dict[str, Any] = {
    "anyOf": [{"items": {"type": "integer"}, "type": "array"}, {"type": "null"}],
    "default": None,
    "title": "Byte Range",
    "description": "[start_byte, end_byte): part of a file by bytes (at most 64 KiB), for a line too long "
    "for view_range; a read of such a file says so and where to go on",
}


@dataclass
class Workspace:
    """What the file tools (``grep`` too) of one toolset share: the workspace, the job's share of the
    loop's workers, a call's deadline and what is left of the running batch's inline budget."""

    path: str
    share: Callable[[], JobShare]
    deadline_s: float | None = None  # a call's deadline; None: FILE_TOOL_DEADLINE_S
    inline_left: float | None = None  # the running batch's inline budget left (None: no batch)

    def deadline(self) -> float:
        return self.deadline_s or FILE_TOOL_DEADLINE_S


async def shaped_call(
    name: str, tool_use_id: str, deadline: float, *, output: Callable[[], Awaitable[Any]]
) -> dict[str, Any]:
    """The tool_result of a file tool's call: what ``output()`` returns (:data:`LATE`: it ran past
    ``deadline``), or the error it raised; never an exception."""
    try:
        got = await output()
    except ToolFailure as e:
        return error_result(tool_use_id, safe_text(e.text[:2000]))
    except Exception as e:  # a tool bug must not crash the job; the model sees what happened
        return error_result(tool_use_id, safe_text(f"{name} failed: {type(e).__name__}: {e}"[:2000]))
    if got is LATE:
        return error_result(
            tool_use_id, f"{name}: did not finish within {deadline:g} s; abandoned (narrow the call)"
        )
    content: Any = got if isinstance(got, str) else list(got)
    if content == "" or content == []:
        content = "(no output)"
    return {"type": "tool_result", "tool_use_id": tool_use_id, "content": safe_content(content)}


def _run_file_tool(workspace: str, name: str, args: dict[str, Any], *, stop_at: float) -> Any:
    """One ``read``, ``write``, ``edit`` or ``glob`` call, on a worker thread."""
    return file_tools.TOOLS[name](workspace, args, stop_at)


class FileTool:
    """``read``, ``write``, ``edit`` or ``glob`` (``name``) on one toolset's :class:`Workspace`."""

    def __init__(self, name: str, workspace: Workspace):
        self.name = name
        self.workspace = workspace

    @property
    def definition(self) -> dict[str, Any]:
        return file_tool_definitions()[self.name]

    async def run(self, tool_use_id: str, args: dict[str, Any]) -> dict[str, Any]:
        deadline = self.workspace.deadline()
        return await shaped_call(
            self.name, tool_use_id, deadline, output=lambda: self._output(args, deadline)
        )

    async def _output(self, args: dict[str, Any], deadline: float) -> Any:
        output = self.inline(args)
        if output is not NOT_INLINE:
            return output
        with anyio.move_on_after(deadline) as scope:
            output = await in_thread(
                self.workspace.share(),
                functools.partial(_run_file_tool, stop_at=time.monotonic() + deadline),
                self.workspace.path,
                self.name,
                args,
                abandon_on_cancel=True,
            )
        return LATE if scope.cancelled_caught else output

    def inline(self, args: dict[str, Any]) -> Any:
        """The call's output, run on the event loop within :data:`INLINE_BUDGET_S` and what is left
        of its batch's budget; :data:`NOT_INLINE` when it may not run here (not read-only, not a local
        disk, the batch's budget spent) or needs longer."""
        ws = self.workspace
        if self.name not in INLINE_TOOLS or not local_disk(ws.path):
            return NOT_INLINE
        batch = ws.inline_left
        if batch is not None and batch <= 0:
            return NOT_INLINE
        start = time.monotonic()
        budget = INLINE_BUDGET_S if batch is None else min(INLINE_BUDGET_S, batch)
        try:
            return file_tools.TOOLS[self.name](ws.path, args, start + budget)
        except file_tools.OutOfTime:
            return NOT_INLINE
        finally:
            if ws.inline_left is not None:
                ws.inline_left -= time.monotonic() - start
