"""A job's toolset: the SDK's ``agent_toolset`` tools bound to the job's workspace, plus ``recall``
and ``compact``.

Trust model (the SDK's, kept): ``read``, ``glob``, ``grep``, ``write`` and ``edit`` are confined to
the workspace (symlink-aware); ``bash`` is unrestricted and should run in a sandbox, which is why it
is only offered when a task file lists it. The bash environment has every ``ANTHROPIC_*`` variable
removed. ``recall`` reads only inside the job directory.

Guarantee: :meth:`Toolset.run` never raises for a model's mistake (unknown tool, input that is not
an object, bad arguments, a path outside the workspace): it returns an ``is_error`` tool_result the
model can read.
"""

from __future__ import annotations

import functools
import shutil
from typing import Any

import anyio
from anthropic.lib.tools._beta_functions import ToolError, aclose_runnable_tool
from anthropic.lib.tools.agent_toolset import (
    AgentToolContext,
    beta_bash_tool,
    beta_edit_tool,
    beta_glob_tool,
    beta_grep_tool,
    beta_read_tool,
    beta_write_tool,
)

from .protocol import recall_footer
from .store import JobStore

RECALL_PAGE_CHARS = 20_000
READ_ONLY = frozenset({"read", "glob", "grep", "recall", "compact"})
# SDK file tools do their file I/O synchronously inside ``async def``; run them on a worker thread
# so one job's large read never stalls the event loop that every other job shares.
_OFF_LOOP = frozenset({"read", "glob", "grep"})
_RIPGREP = shutil.which("rg") is not None

RECALL_TOOL = {
    "name": "recall",
    "description": (
        "Read back a tool output or transcript that context compaction moved to disk. Pass the path "
        "shown in a placeholder (for example tool-results/toolu_01.txt or transcript.jsonl). Returns "
        f"at most `limit` characters (default {RECALL_PAGE_CHARS}) starting at character `offset`, and "
        "says where the next page starts."
    ),
    "input_schema": {
        "type": "object",
        "properties": {
            "path": {"type": "string", "description": "Path relative to the job directory."},
            "offset": {"type": "integer", "minimum": 0, "description": "First character to return."},
            "limit": {"type": "integer", "minimum": 1, "description": "Characters to return."},
        },
        "required": ["path"],
    },
}

COMPACT_TOOL = {
    "name": "compact",
    "description": (
        "Summarize the earlier conversation to free context space. Use it after finishing a phase of "
        "work, when the next phase only needs a summary. It takes effect after this turn's other tool "
        "calls have run."
    ),
    "input_schema": {"type": "object", "properties": {}},
}


def _run_blocking(coroutine: Any) -> Any:
    """Run, on a worker thread, a tool coroutine that never awaits: the SDK's read and glob, and grep
    when it walks the tree itself, do their I/O synchronously, so the coroutine finishes on its first
    step and needs no event loop of its own."""
    try:
        coroutine.send(None)
    except StopIteration as done:
        return done.value
    coroutine.close()
    raise RuntimeError("the tool awaited where it was expected not to")


def _read_exact(path: Any) -> str:
    """A saved output as it was written: no newline translation, so offsets match its stated size."""
    with open(path, encoding="utf-8", errors="replace", newline="") as f:
        return f.read()


TOOL_ORDER = ("bash", "read", "write", "edit", "glob", "grep")  # the order of the SDK's toolset
_FILE_TOOLS = {"read": beta_read_tool, "write": beta_write_tool, "edit": beta_edit_tool,
               "glob": beta_glob_tool, "grep": beta_grep_tool}


@functools.lru_cache(maxsize=64)
def _file_tools(workspace: str) -> dict[str, Any]:
    """The SDK's file tools for one workspace, built once and shared by every job on it.

    They hold no state beyond the workspace they are confined to, and building them costs about
    10 ms of schema generation each time: a batch of 500 jobs on one codebase would spend seconds
    on it before its first model call. ``bash`` owns a shell, so every job gets its own."""
    context = AgentToolContext(workdir=workspace)
    return {name: factory(context) for name, factory in _FILE_TOOLS.items()}


def error_result(tool_use_id: str, text: str) -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": tool_use_id, "content": text, "is_error": True}


class Toolset:
    """The tools one job may call. Use as ``async with``: closing ends the bash subprocess."""

    def __init__(self, workspace: str, names: tuple[str, ...], store: JobStore):
        self.store = store
        self.context = AgentToolContext(workdir=workspace)
        shared = _file_tools(workspace)
        self._sdk = {name: beta_bash_tool(self.context) if name == "bash" else shared[name]
                     for name in TOOL_ORDER if name in names}
        self.compact_requested = False

    def definitions(self) -> list[dict[str, Any]]:
        return [*(dict(t.to_dict()) for t in self._sdk.values()), RECALL_TOOL, COMPACT_TOOL]

    @property
    def names(self) -> set[str]:
        return {*self._sdk, "recall", "compact"}

    async def __aenter__(self) -> Toolset:
        return self

    async def __aexit__(self, *exc: object) -> None:
        with anyio.CancelScope(shield=True):
            for tool in self._sdk.values():
                await aclose_runnable_tool(tool)
            await self.context.close()

    async def run_batch(self, calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Run one assistant message's tool calls; one result per call, in the calls' order.

        Read-only calls run concurrently; a batch with a mutating call (bash, write, edit) runs in
        order, one call at a time.
        """
        results: list[dict[str, Any] | None] = [None] * len(calls)

        async def one(i: int) -> None:
            results[i] = await self.run(calls[i])

        if all(isinstance(c, dict) and isinstance(c.get("name"), str) and c["name"] in READ_ONLY for c in calls):
            async with anyio.create_task_group() as tg:
                for i in range(len(calls)):
                    tg.start_soon(one, i)
        else:
            for i in range(len(calls)):
                await one(i)
        return [r for r in results if r is not None]

    async def run(self, call: dict[str, Any]) -> dict[str, Any]:
        if not isinstance(call, dict):
            return error_result("", f"a tool call must be a JSON object, got {type(call).__name__}")
        tool_use_id = str(call.get("id", ""))
        name = call.get("name")
        args = call.get("input")
        if not isinstance(name, str):
            return error_result(tool_use_id, f"the tool name must be a string, got {type(name).__name__}; "
                                             f"available: {', '.join(sorted(self.names))}")
        if not isinstance(args, dict):
            return error_result(tool_use_id, f"{name}: input must be a JSON object, got {type(args).__name__}")
        if name == "compact":
            self.compact_requested = True
            return {"type": "tool_result", "tool_use_id": tool_use_id,
                    "content": "Compaction requested; it runs after this tool batch."}
        if name == "recall":
            return await self._recall(tool_use_id, args)
        tool = self._sdk.get(name)  # type: ignore[arg-type]
        if tool is None:
            return error_result(tool_use_id, f"unknown tool {name!r}; available: {', '.join(sorted(self.names))}")
        try:
            if name in _OFF_LOOP and not (name == "grep" and _RIPGREP):  # rg is a subprocess: awaited here
                output = await anyio.to_thread.run_sync(lambda: _run_blocking(tool.call(args)))
            else:
                output = await tool.call(args)
        except ToolError as e:
            return {"type": "tool_result", "tool_use_id": tool_use_id, "content": e.content, "is_error": True}
        except ValueError as e:
            cause = f": {e.__cause__}" if e.__cause__ else ""
            return error_result(tool_use_id, f"{e}{cause}"[:2000])
        except Exception as e:  # a tool bug must not crash the job; the model sees what happened
            return error_result(tool_use_id, f"{name} failed: {type(e).__name__}: {e}"[:2000])
        content: Any = output if isinstance(output, str) else list(output)
        if content == "" or content == []:
            content = "(no output)"
        return {"type": "tool_result", "tool_use_id": tool_use_id, "content": content}

    async def _recall(self, tool_use_id: str, args: dict[str, Any]) -> dict[str, Any]:
        path = args.get("path")
        offset = args.get("offset", 0) or 0
        limit = args.get("limit", RECALL_PAGE_CHARS) or RECALL_PAGE_CHARS
        if not isinstance(path, str) or not isinstance(offset, int) or not isinstance(limit, int) or offset < 0 \
                or limit < 1:
            return error_result(tool_use_id, "recall: expected path (string), offset >= 0, limit >= 1 (integers)")
        try:
            target = self.store.resolve(path)
            text = await anyio.to_thread.run_sync(_read_exact, target)
        except ValueError:
            return error_result(tool_use_id, f"recall: {path}: outside the job directory")
        except OSError:
            return error_result(tool_use_id, f"recall: {path}: no such file in the job directory")
        page = text[offset:offset + limit]
        end = offset + len(page)
        return {"type": "tool_result", "tool_use_id": tool_use_id,
                "content": page + recall_footer(offset, end, len(text))}
