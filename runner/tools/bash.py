"""The ``bash`` tool: every call a fresh shell in its own bubblewrap sandbox (:mod:`runner.tools.sandbox`).

The SDK's ``bash`` keeps one persistent shell that runs as a plain child of the runner, which cannot
be put in a sandbox; ours starts a new sandboxed shell in the workspace for every call.

Guarantees:

- A model's mistake (no command, a NUL byte, a ``timeout_ms`` that is not a positive integer) or a
  sandbox that cannot start is an ``is_error`` result, never an exception.
- A cancelled call kills its process tree, and so does one whose output passes
  :data:`runner.tools.sandbox.READ_LIMIT` (its result says so); ``timeout_ms`` is capped at
  :data:`runner.tools.sandbox.MAX_TIMEOUT_S`, and the result says so. A call killed at its deadline,
  or that exits non-zero, is an error result that says which.
"""

from __future__ import annotations

from typing import Any

from ..config import Limits
from .base import error_result, safe_text
from .sandbox import MAX_TIMEOUT_S, CommandResult, run_command

BASH_DEFAULT_TIMEOUT = 120.0  # seconds, the SDK's default

BASH_TOOL: dict[str, Any] = {
    "name": "bash",
    "description": (
        "Run a bash command in a sandbox and return its output (stdout and stderr). Every call is a "
        "fresh shell in the workspace directory: no state carries over. No network unless the job "
        "allows it; /tmp is private to the call; nothing outside the workspace and the system "
        "directories is visible."
    ),
    "input_schema": {
        "type": "object",
        "properties": {
            "command": {"type": "string", "description": "The command to run."},
            "timeout_ms": {"type": "integer", "minimum": 1, "description": "Deadline of this call."},
        },
        "required": ["command"],
    },
}


def bad_input(command: Any, timeout_ms: Any) -> str | None:
    """What is wrong with a call's ``command`` and ``timeout_ms``, or ``None``."""
    if not isinstance(command, str) or not command.strip():
        return "bash: command (a non-empty string) is required"
    if "\x00" in command:
        return "bash: the command contains a NUL byte; a shell command cannot"
    if timeout_ms is not None and (
        not isinstance(timeout_ms, int) or isinstance(timeout_ms, bool) or timeout_ms < 1
    ):
        return "bash: timeout_ms must be a positive integer (milliseconds)"
    return None


def bash_result(tool_use_id: str, done: CommandResult, *, timeout: float, note: str) -> dict[str, Any]:
    """The tool_result of a command that ran: its output, and why it stopped when it failed."""
    output = done.output or "(no output)"
    if done.stopped:  # the output says it passed the limit and the command was killed
        return error_result(tool_use_id, f"{output}{note}")
    if done.exit_code is None:
        return error_result(tool_use_id, f"{output}\n[bash: killed after {timeout:g} s]{note}")
    if done.exit_code != 0:
        return error_result(tool_use_id, f"{output}\n[bash: exit code {done.exit_code}]{note}")
    return {"type": "tool_result", "tool_use_id": tool_use_id, "content": output + note}


class Bash:
    """The ``bash`` tool of one job, in its workspace (``writable`` when the job may change it)."""

    name = "bash"
    definition = BASH_TOOL

    def __init__(self, workspace: str, *, writable: bool, limits: Limits):
        self.workspace = workspace
        self.writable = writable
        self.limits = limits

    async def run(self, tool_use_id: str, args: dict[str, Any]) -> dict[str, Any]:
        command: Any = args.get("command")  # a non-empty string once bad_input found nothing wrong
        timeout_ms = args.get("timeout_ms")
        wrong = bad_input(command, timeout_ms)
        if wrong is not None:
            return error_result(tool_use_id, wrong)
        # compared as integers: no overflow
        capped = isinstance(timeout_ms, int) and timeout_ms > MAX_TIMEOUT_S * 1000
        timeout = MAX_TIMEOUT_S if capped else (timeout_ms / 1000 if timeout_ms else BASH_DEFAULT_TIMEOUT)
        note = (
            f"\n[bash: timeout_ms capped at {MAX_TIMEOUT_S:g} s, the longest a call may run]"
            if capped
            else ""
        )
        try:
            done = await run_command(
                safe_text(command),
                workspace=self.workspace,
                writable=self.writable,
                network=self.limits.sandbox_network,
                sandbox=self.limits.sandbox,
                timeout_s=timeout,
            )
        except (OSError, ValueError) as e:
            return error_result(tool_use_id, safe_text(f"bash: could not start: {e}"))
        return bash_result(tool_use_id, done, timeout=timeout, note=note)
