"""The ``grep`` tool: a model's regular expression run over the workspace in a child process
(``python -I``, :mod:`runner.tools.grep_worker`, kept for the next call by :mod:`runner.tools.grep_pool`),
never in this one.

Guarantees:

- A call never blocks the event loop or outlives its deadline (:meth:`Workspace.deadline`): its worker
  is killed at the deadline or when the call is cancelled, and the result says it was abandoned; at
  most :data:`runner.tools.shares.JOB_GREPS` workers serve one job at once.
- A model's mistake (an unexpected argument, a pattern or path that is not a string, a pattern that
  does not compile, a path outside the workspace) is an ``is_error`` result, never an exception.
- A search cut at :data:`runner.tools.file_tools.WALK_MAX_ENTRIES` files says so.
"""

from __future__ import annotations

from typing import Any

from .. import protocol
from . import file_tools, grep_pool
from .file_calls import LATE, Workspace, file_tool_definitions, shaped_call
from .file_tools import ToolFailure


class Grep:
    """The ``grep`` tool on one toolset's :class:`~runner.tools.file_calls.Workspace`."""

    name = "grep"

    def __init__(self, workspace: Workspace):
        self.workspace = workspace

    @property
    def definition(self) -> dict[str, Any]:
        return file_tool_definitions()["grep"]

    async def run(self, tool_use_id: str, args: dict[str, Any]) -> dict[str, Any]:
        deadline = self.workspace.deadline()
        return await shaped_call("grep", tool_use_id, deadline, output=lambda: self._search(args, deadline))

    async def _search(self, args: dict[str, Any], deadline: float) -> Any:
        file_tools.check_args("grep", args)
        file_tools.string_arg("grep", args, "pattern")
        file_tools.string_arg("grep", args, "path", optional=True)
        answer = await grep_pool.search(
            {
                "workspace": self.workspace.path,
                "path": args.get("path"),
                "pattern": args["pattern"],
                "max_files": file_tools.WALK_MAX_ENTRIES,
                "cpu_s": deadline + 5,
            },
            deadline,
            job_slots=self.workspace.share().greps,
        )
        if answer is None:
            return LATE
        if "error" in answer:
            raise ToolFailure(str(answer["error"]))
        output = str(answer.get("text", ""))
        if answer.get("cut"):
            output += "\n" + protocol.GREP_WALK_CUT.format(cap=file_tools.WALK_MAX_ENTRIES)
        return output
