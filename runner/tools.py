"""A job's toolset: the SDK's ``agent_toolset`` file tools bound to the job's workspace, a
sandboxed ``bash``, plus ``recall`` and ``compact``.

Trust model: ``read``, ``glob``, ``grep``, ``write`` and ``edit`` are the SDK's, confined to the
workspace (symlink-aware). ``bash`` is ours, not the SDK's: the SDK's keeps one persistent shell
that runs as a plain child of the runner, which cannot be put in a sandbox; ours runs every call in
a fresh bubblewrap sandbox (see :mod:`runner.sandbox`). ``recall`` reads only inside the job dir.

Guarantees:

- :meth:`Toolset.run` never raises for a model's mistake (unknown tool, input that is not an
  object, a repeated or missing id, bad arguments, a path outside the workspace): it returns an
  ``is_error`` tool_result the model can read.
- No call blocks the event loop or outlives its job: file tools run on a worker thread, on that
  thread's own event loop (the SDK's large-file path awaits ``anyio.to_thread``), under a
  deadline; an overrunning call gets an error result and is abandoned. ``read``, ``write`` and
  ``edit`` refuse non-regular files (FIFOs, devices, sockets) before opening them. A cancelled
  ``bash`` call kills its process tree.
- Every cut result says so and how to get the rest (texts in :mod:`runner.protocol`).
- Every result is valid UTF-8: undecodable file names and bytes are escaped (``\\xNN``).
"""

from __future__ import annotations

import asyncio
import functools
import math
import os
import shutil
import stat
import threading
import weakref
from itertools import islice
from pathlib import Path
from typing import Any

import anyio
from anthropic.lib.tools._beta_functions import ToolError, aclose_runnable_tool
from anthropic.lib.tools.agent_toolset import (
    _BINARY_MEDIA_TYPES,
    BASH_DEFAULT_TIMEOUT,
    DEFAULT_MAX_FILE_BYTES,
    GLOB_RESULT_LIMIT,
    WALK_MAX_ENTRIES,
    AgentToolContext,
    _confined,
    beta_edit_tool,
    beta_glob_tool,
    beta_grep_tool,
    beta_read_tool,
    beta_write_tool,
    resolve_path,
)

from . import protocol
from .config import Limits
from .repeats import RepeatGuard, call_key
from .rundocs import TOOL_RESULTS, TRANSCRIPT
from .sandbox import run_command
from .store import JobStore, in_thread

RECALL_PAGE_CHARS = 20_000
READ_PAGE_BYTES = 64 * 1024  # a whole-file read of a large file returns its first lines up to this size
FILE_TOOL_DEADLINE_S = 60.0
READ_ONLY = frozenset({"read", "glob", "grep", "recall", "compact"})
_RIPGREP = shutil.which("rg") is not None

RECALL_TOOL = {
    "name": "recall",
    "description": (
        "Read back a tool output or transcript that context compaction moved to disk. Pass the path "
        f"shown in a placeholder (for example {TOOL_RESULTS}/toolu_01.txt or {TRANSCRIPT}). Returns "
        "one page (at most `limit` characters) starting at character `offset`, and says which page "
        "it is and where the next page starts."
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

BASH_TOOL = {
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


def safe_text(text: str) -> str:
    """``text`` as valid UTF-8: a lone surrogate (an undecodable byte of a file name or file, or
    one from JSON) is escaped as ``\\xNN`` (the byte) or ``\\uNNNN``."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return "".join(_escape(c) for c in text)


def _escape(c: str) -> str:
    code = ord(c)
    if 0xDC80 <= code <= 0xDCFF:
        return f"\\x{code - 0xDC00:02x}"
    return f"\\u{code:04x}" if 0xD800 <= code <= 0xDFFF else c


def _safe_content(content: Any) -> Any:
    if isinstance(content, str):
        return safe_text(content)
    return [{**b, "text": safe_text(b["text"])} if isinstance(b, dict) and isinstance(b.get("text"), str) else b
            for b in content]


def _read_exact(path: Any) -> str:
    """A saved output as it was written: no newline translation, so offsets match its stated size."""
    with open(path, encoding="utf-8", errors="replace", newline="") as f:
        return f.read()


_read_exact_off_loop = in_thread(_read_exact)


TOOL_ORDER = ("bash", "read", "write", "edit", "glob", "grep")  # the order of the SDK's toolset
_FILE_TOOLS = {"read": beta_read_tool, "write": beta_write_tool, "edit": beta_edit_tool,
               "glob": beta_glob_tool, "grep": beta_grep_tool}


@functools.lru_cache(maxsize=64)
def _file_tools(workspace: str) -> dict[str, Any]:
    """The SDK's file tools for one workspace, built once and shared by every job on it.

    They hold no state beyond the workspace they are confined to, and building them costs about
    10 ms of schema generation each time: a batch of 500 jobs on one codebase would spend seconds
    on it before its first model call."""
    context = AgentToolContext(workdir=workspace)
    return {name: factory(context) for name, factory in _FILE_TOOLS.items()}


def error_result(tool_use_id: str, text: str) -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": tool_use_id, "content": text, "is_error": True}


def _stat_target(ctx: AgentToolContext, name: str, file_path: Any) -> os.stat_result | None:
    """What a file tool's path names, stat'ed before the SDK tool opens it; None when it cannot be
    (the SDK tool reports that). A FIFO, device or socket is refused before anything opens it (an
    open() can block forever). The path is taken as the SDK takes it (joined to the workspace, ``.``,
    ``..`` and a trailing ``/`` collapsed in the text, then every link followed), with one stat
    instead of the SDK's stat per component; a refusal is confirmed with the SDK's own confinement,
    so nothing is said about what a path outside the workspace is."""
    if not isinstance(file_path, str):
        return None
    try:
        found = os.stat(_as_the_sdk_joins(ctx, file_path))
    except (ValueError, OSError):
        return None
    if not stat.S_ISREG(found.st_mode) and not stat.S_ISDIR(found.st_mode):
        try:
            resolve_path(ctx, file_path)
        except ValueError:
            return None  # outside the workspace: the SDK tool says so, and nothing about what it is
        raise ToolError(f"{name}: {file_path}: not a regular file (a FIFO, device or socket); refused")
    return found


def _as_the_sdk_joins(ctx: AgentToolContext, path: str) -> str:
    """``path`` joined to the workspace and collapsed in its text, as the SDK's ``resolve_path``
    does before it follows links (``x/../f``, ``f/.`` and ``f/`` all name ``f``)."""
    return os.path.normpath(os.path.join(ctx.workdir, path))


_THREAD = threading.local()


def _drive(coroutine: Any) -> Any:
    """Run a file tool's coroutine to its end on this worker thread's event loop, made on the
    thread's first call and kept for the next ones (making and closing a loop per call costs an
    epoll instance and a socket pair each time). A thread runs one call at a time (an abandoned call
    keeps its thread until it returns), so the loop is never shared; it is closed when the thread
    object goes."""
    loop = getattr(_THREAD, "loop", None)
    if loop is None:
        loop = _THREAD.loop = asyncio.new_event_loop()
        # its epoll and socket pair go with the thread (not at exit: an abandoned call may still run it)
        weakref.finalize(threading.current_thread(), loop.close).atexit = False
    return loop.run_until_complete(coroutine)


def _first_page(path: Path) -> tuple[int, int]:
    """``(lines in the file, last line of its first page)``: the page is at most READ_PAGE_BYTES."""
    lines = page_end = size = 0
    last = b"\n"
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            for line in chunk.splitlines(keepends=True):
                if last.endswith(b"\n"):
                    lines += 1
                    size += len(line)
                    if size <= READ_PAGE_BYTES or page_end == 0:
                        page_end = lines
                else:  # the rest of a line cut by the chunk boundary
                    size += len(line)
                    if size > READ_PAGE_BYTES and page_end == lines and lines > 1:
                        page_end = lines - 1
                last = line
    return lines, max(1, page_end)


def _glob_total(ctx: AgentToolContext, args: dict[str, Any]) -> int:
    root = resolve_path(ctx, args["path"]) if args.get("path") else Path(ctx.workdir).resolve()
    return sum(1 for _ in _confined(islice(root.glob(args["pattern"]), WALK_MAX_ENTRIES), root))


def _walk_cut(ctx: AgentToolContext, args: dict[str, Any]) -> bool:
    """Whether the SDK's grep walk stopped at its cap (it walks as this does)."""
    if args.get("path") and not os.path.isdir(_as_the_sdk_joins(ctx, str(args["path"]))):
        return False  # one file (the usual narrow grep): no walk, and no confinement walk to find that out
    search = resolve_path(ctx, args["path"]) if args.get("path") else Path(ctx.workdir).resolve()
    if not search.is_dir():
        return False
    seen = 0
    for dirpath, dirnames, filenames in os.walk(search):
        dirnames[:] = [d for d in dirnames if d not in (".git", "node_modules") and not os.path.islink(
            os.path.join(dirpath, d))]
        seen += len(filenames)
        if seen > WALK_MAX_ENTRIES:
            return True
    return False


def _run_file_tool(ctx: AgentToolContext, tool: Any, name: str, args: dict[str, Any]) -> Any:
    """One file tool call, on a worker thread (on its event loop); adds the cut notices."""
    found = _stat_target(ctx, name, args.get("file_path")) if name in ("read", "write", "edit") else None
    if (name == "read" and not args.get("view_range") and found is not None and stat.S_ISREG(found.st_mode)
            and found.st_size > DEFAULT_MAX_FILE_BYTES):
        try:
            target = resolve_path(ctx, args["file_path"])  # confined before this reads it
            confirmed = target.stat()
        except (ValueError, OSError):
            target = None  # the SDK tool says why
        if target is not None and stat.S_ISREG(confirmed.st_mode) and target.suffix.lower() not in _BINARY_MEDIA_TYPES:
            size = confirmed.st_size
            lines, end = _first_page(target)
            text = _drive(tool.call({**args, "view_range": [1, end]}))
            return text + "\n" + protocol.READ_PAGE.format(start=1, end=end, lines=lines, size=size,
                                                           next_start=end + 1, next_end=min(lines, 2 * end))
    output = _drive(tool.call(args))
    if name == "glob" and isinstance(output, str) and output.count("\n") + 1 >= GLOB_RESULT_LIMIT:
        total = _glob_total(ctx, args)
        if total > GLOB_RESULT_LIMIT:
            walk = protocol.GLOB_WALK.format(cap=WALK_MAX_ENTRIES) if total >= WALK_MAX_ENTRIES else ""
            output += "\n" + protocol.GLOB_CUT.format(shown=GLOB_RESULT_LIMIT, total=total, walk=walk)
    if name == "grep" and isinstance(output, str) and _walk_cut(ctx, args):
        output += "\n" + protocol.GREP_WALK_CUT.format(cap=WALK_MAX_ENTRIES)
    return output


def recall_page_chars(limits: Limits | None) -> int:
    """The largest recall page for a job: half of what compaction brings its context down to, so a
    page always fits beside the rest of the context and is never moved back to disk."""
    if limits is None:
        return RECALL_PAGE_CHARS
    return max(1_000, min(RECALL_PAGE_CHARS, int(limits.context_char_limit * limits.compact_target_ratio / 2)))


class Toolset:
    """The tools one job may call. Use as ``async with``: closing ends what its tools hold open."""

    def __init__(self, workspace: str, names: tuple[str, ...], store: JobStore, limits: Limits | None = None):
        self.store = store
        self.limits = limits or Limits()
        self.workspace = workspace
        self.context = AgentToolContext(workdir=workspace)
        shared = _file_tools(workspace)
        self._sdk = {name: shared[name] for name in TOOL_ORDER if name in names and name != "bash"}
        self._bash = "bash" in names
        self._writable = bool({"write", "edit"} & set(names))
        self.compact_requested = False
        self.page_chars = recall_page_chars(limits)
        self.repeats = RepeatGuard(self.limits.max_repeated_calls)
        self._ids: set[str] = set()
        # tool_use id -> (turn, result) of the calls a caught repeat may name (those within the window)
        self._results: dict[str, tuple[int, dict[str, Any]]] = {}

    def definitions(self) -> list[dict[str, Any]]:
        sdk = [dict(t.to_dict()) for t in self._sdk.values()]
        return [*([BASH_TOOL] if self._bash else []), *sdk, RECALL_TOOL, COMPACT_TOOL]

    @property
    def names(self) -> set[str]:
        return {*self._sdk, *(("bash",) if self._bash else ()), "recall", "compact"}

    async def __aenter__(self) -> Toolset:
        return self

    async def __aexit__(self, *exc: object) -> None:
        with anyio.CancelScope(shield=True):
            for tool in self._sdk.values():
                await aclose_runnable_tool(tool)
            await self.context.close()

    def stuck(self) -> str | None:
        """Why the job is stuck (a call the model keeps repeating after being told), or ``None``."""
        found = self.repeats.stuck()
        return protocol.STUCK.format(count=found[1], call=found[0][:300]) if found else None

    async def run_batch(self, calls: list[dict[str, Any]], turn: int = 0) -> list[dict[str, Any]]:
        """Run one assistant message's tool calls; one result per call, in the calls' order.

        A call whose id is missing, not a string or repeats an id of this job is not run: its
        result says so (the request to the API carries a unique id in its place). A call already
        made ``max_repeated_calls`` times in the last turns is not run either. Read-only calls run
        concurrently; a batch with a mutating call (bash, write, edit) runs in order.
        """
        results: list[dict[str, Any] | None] = [None] * len(calls)
        runnable: list[int] = []
        keys = [call_key(c["name"], c.get("input")) if isinstance(c, dict) and isinstance(c.get("name"), str)
                else None for c in calls]  # each call's input serialized once
        self._results = {k: v for k, v in self._results.items() if v[0] > turn - self.repeats.window}
        for i, call in enumerate(calls):
            tool_use_id = call.get("id") if isinstance(call, dict) else None
            if not isinstance(tool_use_id, str) or not tool_use_id:
                results[i] = error_result(str(tool_use_id or ""), "not run: the tool_use id is missing or not a "
                                          f"string ({type(tool_use_id).__name__}); give every call a unique id")
            elif tool_use_id in self._ids:
                results[i] = error_result(tool_use_id, f"not run: the tool_use id {tool_use_id!r} was already "
                                                       "used; give every call a unique id")
            else:
                self._ids.add(tool_use_id)
                caught = await self._repeated(call, keys[i], turn)
                if caught is not None:
                    results[i] = caught
                else:
                    runnable.append(i)

        async def one(i: int) -> None:
            result = results[i] = await self.run(calls[i])
            key = keys[i]
            if key is not None:
                self.repeats.record(key, turn, calls[i]["id"])
                self._results[calls[i]["id"]] = (turn, result)

        if all(isinstance(calls[i].get("name"), str) and calls[i]["name"] in READ_ONLY for i in runnable):
            async with anyio.create_task_group() as tg:
                for i in runnable:
                    tg.start_soon(one, i)
        else:
            for i in runnable:
                await one(i)
        return [r for r in results if r is not None]

    async def _repeated(self, call: dict[str, Any], key: str | None, turn: int) -> dict[str, Any] | None:
        name = call.get("name")
        if key is None or name == "compact":
            return None
        caught = self.repeats.check(key, turn)
        if caught is None:
            return None
        count, first = caught
        earlier = self._results.get(first.tool_use_id)
        where = "is in the conversation above"
        if earlier is not None:
            text = earlier[1].get("content")
            rel = await self.store.persist_output(first.tool_use_id, text if isinstance(text, str) else str(text))
            where = f"is saved at {rel} (recall it with the recall tool)"
        return error_result(call["id"], protocol.REPEATED_CALL.format(
            name=name, count=count, window=self.repeats.window, turn=first.turn, where=where))

    async def run(self, call: dict[str, Any]) -> dict[str, Any]:
        if not isinstance(call, dict):
            return error_result("", f"a tool call must be a JSON object, got {type(call).__name__}")
        tool_use_id = call.get("id", "")
        tool_use_id = tool_use_id if isinstance(tool_use_id, str) else str(tool_use_id)
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
        if name == "bash" and self._bash:
            return await self._run_bash(tool_use_id, args)
        tool = self._sdk.get(name)
        if tool is None:
            return error_result(tool_use_id, f"unknown tool {name!r}; available: {', '.join(sorted(self.names))}")
        try:
            if name == "grep" and _RIPGREP:  # rg is a subprocess: awaited here, killed on cancel
                output = await tool.call(args)
            else:
                with anyio.move_on_after(FILE_TOOL_DEADLINE_S) as scope:
                    output = await anyio.to_thread.run_sync(
                        _run_file_tool, self.context, tool, name, args, abandon_on_cancel=True)
                if scope.cancelled_caught:
                    return error_result(tool_use_id, f"{name}: did not finish within {FILE_TOOL_DEADLINE_S:g} s; "
                                                     "abandoned (narrow the call)")
        except ToolError as e:
            return {"type": "tool_result", "tool_use_id": tool_use_id, "content": _safe_content(e.content),
                    "is_error": True}
        except ValueError as e:
            cause = f": {e.__cause__}" if e.__cause__ else ""
            return error_result(tool_use_id, safe_text(f"{e}{cause}"[:2000]))
        except Exception as e:  # a tool bug must not crash the job; the model sees what happened
            return error_result(tool_use_id, safe_text(f"{name} failed: {type(e).__name__}: {e}"[:2000]))
        content: Any = output if isinstance(output, str) else list(output)
        if content == "" or content == []:
            content = "(no output)"
        return {"type": "tool_result", "tool_use_id": tool_use_id, "content": _safe_content(content)}

    async def _run_bash(self, tool_use_id: str, args: dict[str, Any]) -> dict[str, Any]:
        command, timeout_ms = args.get("command"), args.get("timeout_ms")
        if not isinstance(command, str) or not command.strip():
            return error_result(tool_use_id, "bash: command (a non-empty string) is required")
        timeout = timeout_ms / 1000 if isinstance(timeout_ms, int) and timeout_ms > 0 else BASH_DEFAULT_TIMEOUT
        try:
            done = await run_command(command, workspace=self.workspace, writable=self._writable,
                                     network=self.limits.sandbox_network, sandbox=self.limits.sandbox,
                                     timeout_s=timeout)
        except OSError as e:
            return error_result(tool_use_id, f"bash: could not start: {e}")
        output = done.output or "(no output)"
        if done.exit_code is None:
            return error_result(tool_use_id, f"{output}\n[bash: killed after {timeout:g} s]")
        if done.exit_code != 0:
            return error_result(tool_use_id, f"{output}\n[bash: exit code {done.exit_code}]")
        return {"type": "tool_result", "tool_use_id": tool_use_id, "content": output}

    async def _recall(self, tool_use_id: str, args: dict[str, Any]) -> dict[str, Any]:
        path = args.get("path")
        offset = args.get("offset", 0) or 0
        limit = args.get("limit", self.page_chars) or self.page_chars
        if not isinstance(path, str) or not isinstance(offset, int) or not isinstance(limit, int) or offset < 0 \
                or limit < 1:
            return error_result(tool_use_id, "recall: expected path (string), offset >= 0, limit >= 1 (integers)")
        limit = min(limit, self.page_chars)
        try:
            target = self.store.resolve(path)
            text = await _read_exact_off_loop(target)
        except ValueError:
            return error_result(tool_use_id, f"recall: {path}: outside the job directory")
        except OSError:
            return error_result(tool_use_id, f"recall: {path}: no such file in the job directory")
        page = text[offset:offset + limit]
        end = offset + len(page)
        rest = protocol.RECALL_NEXT.format(end=end) if end < len(text) else protocol.RECALL_END
        before = math.ceil(offset / limit)  # pages before this one, at this page size
        footer = protocol.RECALL_PAGE.format(page=before + 1, pages=before + max(1, math.ceil((len(text) - offset) / limit)),
                                             start=offset, end=end, total=len(text), rest=rest)
        return {"type": "tool_result", "tool_use_id": tool_use_id, "content": safe_text(page) + "\n" + footer}
