"""A job's toolset: the file tools ``read``, ``write``, ``edit``, ``glob`` and ``grep`` over the job's
workspace, a sandboxed ``bash``, plus ``recall``, ``compact`` and ``memory`` (:mod:`runner.tools.memory`).

Trust model: the file tools are ours (:mod:`runner.tools.file_tools`, :mod:`runner.tools.grep_worker`), with
the definitions (names, descriptions, input schemas) and the behaviour of the SDK's ``agent_toolset``,
whose implementation checked a path and then opened it by name again: a job that swapped a
directory for a symlink in between could make another job on the same workspace read or write
outside it. Ours open every path beneath a directory descriptor of the workspace
(:mod:`runner.tools.beneath`), so there is nothing between a check and a use. ``bash`` is ours too: the
SDK's keeps one persistent shell that runs as a plain child of the runner, which cannot be put in a
sandbox; ours runs every call in a fresh bubblewrap sandbox (see :mod:`runner.tools.sandbox`). ``recall``
reads only beneath the job directory, by the same descriptor rule.

Guarantees:

- No file tool (``recall`` included) opens, lists, creates or replaces anything outside its root
  (the workspace; the job directory for ``recall``), whatever the tree holds or how a concurrent job
  changes it: every lookup is ``openat2(RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS)`` from the root's
  descriptor on Linux 5.6 and later, and elsewhere a walk of one ``O_NOFOLLOW`` component at a time
  with symlinks resolved by hand; a write goes to a new name in the directory's descriptor, renamed
  over the name. Symlinks that stay inside keep working; a path that leads out gets an error result
  ("outside the session's working directory") that says nothing about what is there.
- ``recall`` holds at most :data:`RECALL_CHUNK_BYTES` of a file and its page in memory, however many
  calls read the same large file at once: it decodes the file a chunk at a time to find the page and
  count its characters (offsets stay characters of the whole file, undecodable bytes replaced), and
  refuses a file over :data:`RECALL_MAX_BYTES` with an error result that says so.
- :meth:`Toolset.run` never raises for a model's mistake (unknown tool, input that is not an
  object, a repeated or missing id, bad arguments: wrong types, NUL bytes, lone surrogates, huge or
  negative numbers, a path outside the workspace): it returns an ``is_error`` tool_result the model
  can read.
- No call blocks the event loop or outlives its job: ``read``, ``write``, ``edit`` and ``glob`` run on a
  worker thread under a deadline (:data:`FILE_TOOL_DEADLINE_S`, then an error result, the call is
  abandoned and its walk stops soon after; the thread is one of the job's few,
  :func:`runner.tools.shares.in_thread`: one job's flood of slow calls never holds another job's),
  and never run a model-chosen regular expression in this process. The small calls skip the thread:
  on a workspace on a local file system
  (:func:`runner.rundir.store.local_disk`), ``read`` and ``glob`` run first on the event loop with a
  budget of :data:`INLINE_BUDGET_S`, and all those of one batch together within
  :data:`BATCH_INLINE_BUDGET_S` (then the batch's other calls go straight to a thread); one that needs
  longer stops at its next clock check (after each 1 MiB chunk of a paged or image/PDF read, scanned
  in C, each 256 directory entries; a whole text file, at most 256 KiB, is one read), having changed
  nothing (both only read), and runs again from the start on a worker thread under the deadline. A
  thread hand-off costs the loop the GIL twice, more than most of these calls take. A network or
  FUSE workspace, which can hang, never runs a tool on the loop; ``grep``
  runs in a child process (``python -I``, :mod:`runner.tools.grep_worker`, kept for the next call by
  :mod:`runner.tools.grep_pool`, at most :data:`runner.tools.shares.JOB_GREPS` of them for one job at
  once) that is killed at the deadline or when the call is cancelled. ``read``,
  ``write`` and ``edit`` refuse non-regular files (FIFOs, devices, sockets) without blocking (looked at
  with ``O_PATH``, opened non-blocking). A cancelled ``bash`` call kills its process tree, and so does
  one whose output passes :data:`runner.tools.sandbox.READ_LIMIT` (its result says so);
  ``timeout_ms`` is capped at :data:`runner.tools.sandbox.MAX_TIMEOUT_S`, and the result says so.
- One reply's work is bounded: a batch runs at most the job's ``max_tool_calls_per_reply`` calls
  (its first ones); each call past them gets an error result saying it was not run and why, so every
  ``tool_use`` is still answered. A concurrent batch has at most :data:`BATCH_WORKERS` calls in flight
  (or the job's ``max_subagents``), each one's deadline counted from its start, and every batch yields
  the event loop at least every :data:`PAUSE_EVERY_S` of its own work.
- Every cut result says so and how to get the rest (texts in :mod:`runner.protocol`).
- Every result is valid UTF-8: undecodable file names and bytes are escaped (``\\xNN``).
"""

from __future__ import annotations

import codecs
import functools
import os
import time
from typing import Any, Protocol

import anyio
import anyio.lowlevel

from .. import protocol
from ..config import Limits
from ..rundir.docs import TOOL_RESULTS, TRANSCRIPT
from ..rundir.spill import SpillMap
from ..rundir.store import MAX_ID_CHARS, JobStore, local_disk
from . import file_tools, grep_pool
from .beneath import Outside, Root, open_regular, relative
from .file_tools import DEFAULT_MAX_FILE_BYTES, READ_PAGE_BYTES, ToolFailure
from .memory import MemoryTool
from .memory_files import MEMORY_TOOL
from .repeats import RepeatGuard, call_key
from .sandbox import MAX_TIMEOUT_S, run_command
from .shares import JobShare, in_thread, share_of

__all__ = ["DEFAULT_MAX_FILE_BYTES", "READ_PAGE_BYTES", "Toolset", "error_result", "safe_text"]

RECALL_PAGE_CHARS = 20_000
RECALL_MAX_BYTES = 256 << 20  # the largest file recall reads: each call decodes it from the start
RECALL_CHUNK_BYTES = 1 << 20  # recall reads and decodes this much at a time
FILE_TOOL_DEADLINE_S = 60.0
INLINE_BUDGET_S = 0.002  # how long a read or glob may hold the event loop before it goes to a thread
BATCH_INLINE_BUDGET_S = 0.02  # and all the reads and globs of one batch together; the rest go to threads
BATCH_WORKERS = 16  # a concurrent batch's calls in flight at once (at least the job's max_subagents)
PAUSE_EVERY_S = 0.005  # a batch's calls yield the event loop at least this often
INLINE_TOOLS = frozenset({"read", "glob"})  # read-only: stopped part-way, a call changed nothing
BASH_DEFAULT_TIMEOUT = 120.0  # seconds, the SDK's default
READ_ONLY = frozenset({"read", "glob", "grep", "recall", "compact"})
CONCURRENT = READ_ONLY | {"task"}  # a batch of these runs at once (a subagent's writes are its own calls')

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


class Task(Protocol):
    """What runs a ``task`` call (the job's subagents, :mod:`runner.agent.subagents`)."""

    definition: dict[str, Any]

    async def run(self, tool_use_id: str, args: dict[str, Any]) -> dict[str, Any]: ...


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
    return [
        {**b, "text": safe_text(b["text"])} if isinstance(b, dict) and isinstance(b.get("text"), str) else b
        for b in content
    ]


TOOL_ORDER = ("bash", "read", "write", "edit", "glob", "grep")  # the order of the SDK's toolset
FILE_TOOLS = ("read", "write", "edit", "glob", "grep")


@functools.lru_cache(maxsize=1)
def file_tool_definitions() -> dict[str, dict[str, Any]]:
    """The SDK's published definitions of its file tools (name, description, input schema), built
    once: the model sees the same tools (``read`` with one more optional input, ``byte_range``); only
    their implementation is ours. The SDK is imported here, at the first job's first request, not
    with this module (the tools themselves never need it)."""
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
    definitions: dict[str, dict[str, Any]] = {
        name: dict(factory(context).to_dict()) for name, factory in factories.items()
    }  # type: ignore[arg-type]
    schema = dict(
        definitions["read"]["input_schema"]
    )  # one addition: a byte range, for a line too long to read
    schema["properties"] = {**schema["properties"], "byte_range": BYTE_RANGE_SCHEMA}
    definitions["read"] = {**definitions["read"], "input_schema": schema}
    return definitions


BYTE_RANGE_SCHEMA: dict[str, Any] = {
    "anyOf": [{"items": {"type": "integer"}, "type": "array"}, {"type": "null"}],
    "default": None,
    "title": "Byte Range",
    "description": "[start_byte, end_byte): part of a file by bytes (at most 64 KiB), for a line too long "
    "for "
    "view_range; a read of such a file says so and where to go on",
}


def error_result(tool_use_id: str, text: str) -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": tool_use_id, "content": text, "is_error": True}


_NOT_INLINE = object()  # Toolset._inline: run the call on a worker thread


class _Pause:
    """A checkpoint at most every :data:`PAUSE_EVERY_S` of a batch's own work: a reply of thousands of
    calls that each end at once (errors, inline reads) still lets the loop run the other jobs, and a
    cancelled job stop, between them."""

    def __init__(self) -> None:
        self.since = time.monotonic()

    async def __call__(self) -> None:
        if time.monotonic() - self.since > PAUSE_EVERY_S:
            await anyio.lowlevel.checkpoint()
            self.since = time.monotonic()


def _run_file_tool(workspace: str, name: str, args: dict[str, Any], stop_at: float) -> Any:
    """One ``read``, ``write``, ``edit`` or ``glob`` call, on a worker thread."""
    return file_tools.TOOLS[name](workspace, args, stop_at)


class RecallTooLarge(Exception):
    """A saved file larger than recall reads (:data:`RECALL_MAX_BYTES`)."""

    def __init__(self, size: int):
        super().__init__(size)
        self.size = size


def _recall_page(job_dir: str, path: str, offset: int, limit: int) -> tuple[str, int]:
    """Characters ``[offset, offset + limit)`` of a saved output as it was written (no newline
    translation, undecodable bytes replaced, so offsets match its stated size) and its length in
    characters, opened beneath the job directory. Read and decoded :data:`RECALL_CHUNK_BYTES` at a time:
    never more than a chunk and the page in memory, whatever the file's size. Raises Outside,
    ValueError, OSError or RecallTooLarge."""
    with Root.open(job_dir) as root:
        fd, _ = open_regular(root, relative(path, root.real, job_dir))
    with os.fdopen(fd, "rb") as f:
        left = os.fstat(f.fileno()).st_size  # what is there now: a file that grows is read as it was
        if left > RECALL_MAX_BYTES:
            raise RecallTooLarge(left)
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        page: list[str] = []
        seen, end = 0, offset + limit  # characters decoded so far; the page's end
        while True:
            chunk = f.read(min(RECALL_CHUNK_BYTES, left))
            left -= len(chunk)
            text = decoder.decode(chunk, final=not chunk)
            if seen < end and seen + len(text) > offset:
                page.append(text[max(0, offset - seen) : end - seen])
            seen += len(text)
            if not chunk:
                return "".join(page), seen


def recall_page_chars(limits: Limits | None) -> int:
    """The largest recall page for a job: half of what compaction brings its context down to, so a
    page always fits beside the rest of the context and is never moved back to disk."""
    if limits is None:
        return RECALL_PAGE_CHARS
    return max(
        1_000, min(RECALL_PAGE_CHARS, int(limits.context_char_limit * limits.compact_target_ratio / 2))
    )


class Toolset:
    """The tools one job may call. Use as ``async with``: closing ends what its tools hold open."""

    def __init__(
        self,
        workspace: str,
        names: tuple[str, ...],
        store: JobStore,
        limits: Limits | None = None,
        task: Task | None = None,
    ):
        self.store = store
        self.task = task if "task" in names else None  # runs a task call: the job's subagents
        self.limits = limits or Limits()
        self.workspace = workspace
        self._files = tuple(name for name in TOOL_ORDER if name in names and name in FILE_TOOLS)
        self._bash = "bash" in names
        self._writable = bool({"write", "edit"} & set(names))
        self.compact_requested = False
        self.page_chars = recall_page_chars(limits)
        self.repeats = RepeatGuard(self.limits.max_repeated_calls)
        self.deadline_s: float | None = None  # a file tool's deadline; None: FILE_TOOL_DEADLINE_S
        self._ids = SpillMap()  # every tool_use id of the job (as keys), past a bound off the heap
        # tool_use id -> (turn, result) of the calls a caught repeat may name (those within the window)
        self._results: dict[str, tuple[int, dict[str, Any]]] = {}
        self.memory = MemoryTool(str(store.dir), self.page_chars, self.limits.max_memory_entries)
        self._inline_left: float | None = None  # the running batch's inline budget left (run_batch)
        self._job_share: JobShare | None = None  # learned in the event loop, at the first call that needs it

    def _share(self) -> JobShare:
        """This job's share of the loop's workers (its subagents', too: :mod:`runner.tools.shares`)."""
        if self._job_share is None:
            self._job_share = share_of(self.store.dir)
        return self._job_share

    def definitions(self) -> list[dict[str, Any]]:
        published = file_tool_definitions()
        files = [dict(published[name]) for name in self._files]
        task = [dict(self.task.definition)] if self.task is not None else []
        return [
            *([BASH_TOOL] if self._bash else []),
            *files,
            RECALL_TOOL,
            dict(MEMORY_TOOL),
            COMPACT_TOOL,
            *task,
        ]

    @property
    def names(self) -> set[str]:
        return {
            *self._files,
            *(("bash",) if self._bash else ()),
            "recall",
            "memory",
            "compact",
            *(("task",) if self.task is not None else ()),
        }

    async def __aenter__(self) -> Toolset:
        return self

    async def __aexit__(self, *exc: object) -> None:
        # each call's process or thread ends with it; the job-long records' spill files go now
        self._ids.close()
        self.repeats.close()

    def stuck(self) -> str | None:
        """Why the job is stuck (a call the model keeps repeating after being told), or ``None``."""
        found = self.repeats.stuck()
        return protocol.STUCK.format(count=found[1], call=found[0][:300]) if found else None

    async def run_batch(self, calls: list[dict[str, Any]], turn: int = 0) -> list[dict[str, Any]]:
        """Run one assistant message's tool calls; one result per call, in the calls' order.

        A call whose id is missing, not a string, longer than ``MAX_ID_CHARS`` or repeats an id
        of this job is not run: its
        result says so (the request to the API carries a unique id in its place). A call already
        made ``max_repeated_calls`` times in the last turns is not run either, nor is one past the
        first ``max_tool_calls_per_reply`` of the batch. Read-only calls run concurrently; a batch
        with a mutating call (bash, write, edit, memory) runs in order. The calls run on the event
        loop (the small reads and globs) share one budget, :data:`BATCH_INLINE_BUDGET_S`.
        """
        results: list[dict[str, Any] | None] = [None] * len(calls)
        runnable: list[int] = []
        cap = self.limits.max_tool_calls_per_reply
        pause = _Pause()
        keys = [self._key(c) for c in calls[:cap]]  # each call's input serialized once
        self._results = {k: v for k, v in self._results.items() if v[0] > turn - self.repeats.window}
        for i, call in enumerate(calls):
            await pause()
            tool_use_id = call.get("id") if isinstance(call, dict) else None
            if not isinstance(tool_use_id, str) or not tool_use_id:
                results[i] = error_result(
                    str(tool_use_id or ""),
                    "not run: the tool_use id is missing or not a "
                    f"string ({type(tool_use_id).__name__}); give every call a unique id",
                )
            elif len(tool_use_id) > MAX_ID_CHARS:
                results[i] = error_result(
                    tool_use_id,
                    f"not run: the tool_use id is {len(tool_use_id):,} characters, over {MAX_ID_CHARS}; "
                    "give every call a short unique id",
                )
            elif tool_use_id in self._ids:
                results[i] = error_result(
                    tool_use_id,
                    f"not run: the tool_use id {tool_use_id!r} was already used; give every call a unique id",
                )
            elif i >= cap:
                self._ids[tool_use_id] = True
                results[i] = error_result(
                    tool_use_id,
                    f"not run: this reply made {len(calls):,} tool calls, over max_tool_calls_per_reply = "
                    f"{cap:,}; only its first {cap:,} were taken. Make at most {cap:,} calls in one reply, "
                    "and send this one again in a later reply if it is still needed",
                )
            else:
                self._ids[tool_use_id] = True
                caught = await self._repeated(call, keys[i], turn)
                if caught is not None:
                    results[i] = caught
                else:
                    runnable.append(i)

        async def one(i: int) -> None:
            await pause()
            result = results[i] = await self.run(calls[i])
            key = keys[i]
            if key is not None:
                self.repeats.record(key, turn, calls[i]["id"])
                self._results[calls[i]["id"]] = (turn, result)

        waiting = iter(runnable)

        async def worker() -> None:  # takes the batch's next call until none is left
            for i in waiting:
                await one(i)

        self._inline_left = BATCH_INLINE_BUDGET_S
        try:
            if all(
                isinstance(calls[i].get("name"), str) and calls[i]["name"] in CONCURRENT for i in runnable
            ):
                async with anyio.create_task_group() as tg:
                    for _ in range(min(len(runnable), max(BATCH_WORKERS, self.limits.max_subagents))):
                        tg.start_soon(worker)
            else:
                await worker()
        finally:
            self._inline_left = None
        return [r for r in results if r is not None]

    def _key(self, call: Any) -> str | None:
        """A call's key for the repeat guard; a ``memory`` call's names the memory's generation (the
        writes made so far), so viewing memory that changed since is not a repeat."""
        if not isinstance(call, dict) or not isinstance(call.get("name"), str):
            return None
        key = call_key(call["name"], call.get("input"))
        return f"{key}#{self.memory.generation}" if call["name"] == "memory" else key

    async def _repeated(self, call: dict[str, Any], key: str | None, turn: int) -> dict[str, Any] | None:
        name = call.get("name")
        if key is None or name == "compact":
            return None
        caught = self.repeats.check(key, turn)
        if caught is None:
            return None
        count, first = caught
        earlier = self._results.get(first.tool_use_id)
        where = protocol.REPEATED_ABOVE
        if earlier is not None:
            text = earlier[1].get("content")
            rel = await self.store.persist_output(
                first.tool_use_id, text if isinstance(text, str) else str(text)
            )
            where = protocol.REPEATED_WHERE.format(path=rel)
        return error_result(
            call["id"],
            protocol.REPEATED_CALL.format(
                name=name, count=count, window=self.repeats.window, turn=first.turn, where=where
            ),
        )

    async def run(self, call: dict[str, Any]) -> dict[str, Any]:
        if not isinstance(call, dict):
            return error_result("", f"a tool call must be a JSON object, got {type(call).__name__}")
        tool_use_id = call.get("id", "")
        tool_use_id = tool_use_id if isinstance(tool_use_id, str) else str(tool_use_id)
        name = call.get("name")
        args = call.get("input")
        if not isinstance(name, str):
            return error_result(
                tool_use_id,
                f"the tool name must be a string, got {type(name).__name__}; "
                f"available: {', '.join(sorted(self.names))}",
            )
        if not isinstance(args, dict):
            return error_result(
                tool_use_id, f"{name}: input must be a JSON object, got {type(args).__name__}"
            )
        if name == "compact":
            self.compact_requested = True
            return {
                "type": "tool_result",
                "tool_use_id": tool_use_id,
                "content": "Compaction requested; it runs after this tool batch.",
            }
        if name == "recall":
            return await self._recall(tool_use_id, args)
        if name == "memory":
            return await self.memory.run(tool_use_id, args)
        if name == "bash" and self._bash:
            return await self._run_bash(tool_use_id, args)
        if name == "task" and self.task is not None:
            return await self.task.run(tool_use_id, args)
        if name not in self._files:
            return error_result(
                tool_use_id, f"unknown tool {name!r}; available: {', '.join(sorted(self.names))}"
            )
        deadline = self.deadline_s or FILE_TOOL_DEADLINE_S
        late = error_result(
            tool_use_id, f"{name}: did not finish within {deadline:g} s; abandoned (narrow the call)"
        )
        try:
            if name == "grep":
                file_tools.check_args("grep", args)
                file_tools.string_arg("grep", args, "pattern")
                file_tools.string_arg("grep", args, "path", optional=True)
                answer = await grep_pool.search(
                    {
                        "workspace": self.workspace,
                        "path": args.get("path"),
                        "pattern": args["pattern"],
                        "max_files": file_tools.WALK_MAX_ENTRIES,
                        "cpu_s": deadline + 5,
                    },
                    deadline,
                    job_slots=self._share().greps,
                )
                if answer is None:
                    return late
                if "error" in answer:
                    raise ToolFailure(str(answer["error"]))
                output: Any = str(answer.get("text", ""))
                if answer.get("cut"):
                    output += "\n" + protocol.GREP_WALK_CUT.format(cap=file_tools.WALK_MAX_ENTRIES)
            else:
                output = self._inline(name, args)
            if output is _NOT_INLINE:
                with anyio.move_on_after(deadline) as scope:
                    output = await in_thread(
                        self._share(),
                        _run_file_tool,
                        self.workspace,
                        name,
                        args,
                        time.monotonic() + deadline,
                        abandon_on_cancel=True,
                    )
                if scope.cancelled_caught:
                    return late
        except ToolFailure as e:
            return error_result(tool_use_id, safe_text(e.text[:2000]))
        except Exception as e:  # a tool bug must not crash the job; the model sees what happened
            return error_result(tool_use_id, safe_text(f"{name} failed: {type(e).__name__}: {e}"[:2000]))
        content: Any = output if isinstance(output, str) else list(output)
        if content == "" or content == []:
            content = "(no output)"
        return {"type": "tool_result", "tool_use_id": tool_use_id, "content": _safe_content(content)}

    def _inline(self, name: str, args: dict[str, Any]) -> Any:
        """The call's output, run on the event loop within :data:`INLINE_BUDGET_S` and what is left
        of its batch's :data:`BATCH_INLINE_BUDGET_S`; ``_NOT_INLINE`` when it may not run here (not
        read-only, not a local disk, the batch's budget spent) or needs longer."""
        if name not in INLINE_TOOLS or not local_disk(self.workspace):
            return _NOT_INLINE
        batch = self._inline_left
        if batch is not None and batch <= 0:
            return _NOT_INLINE
        start = time.monotonic()
        budget = INLINE_BUDGET_S if batch is None else min(INLINE_BUDGET_S, batch)
        try:
            return file_tools.TOOLS[name](self.workspace, args, start + budget)
        except file_tools.OutOfTime:
            return _NOT_INLINE
        finally:
            if self._inline_left is not None:
                self._inline_left -= time.monotonic() - start

    async def _run_bash(self, tool_use_id: str, args: dict[str, Any]) -> dict[str, Any]:
        command, timeout_ms = args.get("command"), args.get("timeout_ms")
        if not isinstance(command, str) or not command.strip():
            return error_result(tool_use_id, "bash: command (a non-empty string) is required")
        if "\x00" in command:
            return error_result(tool_use_id, "bash: the command contains a NUL byte; a shell command cannot")
        if timeout_ms is not None and (
            not isinstance(timeout_ms, int) or isinstance(timeout_ms, bool) or timeout_ms < 1
        ):
            return error_result(tool_use_id, "bash: timeout_ms must be a positive integer (milliseconds)")
        capped = (
            isinstance(timeout_ms, int) and timeout_ms > MAX_TIMEOUT_S * 1000
        )  # compared as integers: no overflow
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
                writable=self._writable,
                network=self.limits.sandbox_network,
                sandbox=self.limits.sandbox,
                timeout_s=timeout,
            )
        except (OSError, ValueError) as e:
            return error_result(tool_use_id, safe_text(f"bash: could not start: {e}"))
        output = done.output or "(no output)"
        if done.stopped:  # the output says it passed the limit and the command was killed
            return error_result(tool_use_id, f"{output}{note}")
        if done.exit_code is None:
            return error_result(tool_use_id, f"{output}\n[bash: killed after {timeout:g} s]{note}")
        if done.exit_code != 0:
            return error_result(tool_use_id, f"{output}\n[bash: exit code {done.exit_code}]{note}")
        return {"type": "tool_result", "tool_use_id": tool_use_id, "content": output + note}

    async def _recall(self, tool_use_id: str, args: dict[str, Any]) -> dict[str, Any]:
        path = args.get("path")
        offset = args.get("offset", 0) or 0
        limit = args.get("limit", self.page_chars) or self.page_chars
        if (
            not isinstance(path, str)
            or not isinstance(offset, int)
            or not isinstance(limit, int)
            or isinstance(offset, bool)
            or isinstance(limit, bool)
            or offset < 0
            or limit < 1
        ):
            return error_result(
                tool_use_id, "recall: expected path (string), offset >= 0, limit >= 1 (integers)"
            )
        limit = min(limit, self.page_chars)
        try:
            page, total = await in_thread(
                self._share(), _recall_page, str(self.store.dir), path, offset, limit
            )
        except RecallTooLarge as e:
            return error_result(
                tool_use_id,
                safe_text(
                    f"recall: {path}: {e.size} bytes, more than recall reads ({RECALL_MAX_BYTES} bytes); "
                    "not read"
                ),
            )
        except Outside:
            return error_result(tool_use_id, safe_text(f"recall: {path}: outside the job directory"))
        except ValueError as e:  # a NUL byte, a lone surrogate
            return error_result(tool_use_id, safe_text(f"recall: path {path!r} {e}"))
        except OSError:
            return error_result(tool_use_id, safe_text(f"recall: {path}: no such file in the job directory"))
        offset = min(offset, total)  # past the end: the empty last page (integers only: no overflow)
        end = offset + len(page)
        rest = protocol.RECALL_NEXT.format(end=end) if end < total else protocol.RECALL_END
        before = -(-offset // limit)  # pages before this one, at this page size
        pages = before + max(1, -(-(total - offset) // limit))
        footer = protocol.RECALL_PAGE.format(
            page=before + 1, pages=pages, start=offset, end=end, total=total, rest=rest
        )
        return {"type": "tool_result", "tool_use_id": tool_use_id, "content": safe_text(page) + "\n" + footer}
