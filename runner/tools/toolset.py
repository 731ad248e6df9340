"""A job's toolset: the registry of the tools one job may call, in the order the API is sent them, and
the dispatcher that runs a reply's calls. Each tool is a module of its own behind one protocol
(:class:`runner.tools.base.Tool`): ``bash`` (:mod:`runner.tools.bash`), the file tools ``read``,
``write``, ``edit``, ``glob`` (:mod:`runner.tools.file_calls`) and ``grep`` (:mod:`runner.tools.grep`),
``recall`` (:mod:`runner.tools.recall`), ``memory`` (:mod:`runner.tools.memory`), ``compact``
(:mod:`runner.tools.compact`), and ``task``, the job's subagents, handed in from the agent layer
(:mod:`runner.agent.subagents`).

Guarantees:

- The definitions are the same, in the same order, for the same tools: :data:`TOOL_ORDER`, the offered
  ones (those the job names, and :data:`ALWAYS`), each definition living with its tool.
- :meth:`Toolset.run` never raises for a model's mistake (unknown tool, input that is not an
  object, a repeated or missing id, bad arguments: each tool answers those): it returns an
  ``is_error`` tool_result the model can read.
- One reply's work is bounded: a batch runs at most the job's ``max_tool_calls_per_reply`` calls
  (its first ones); each call past them gets an error result saying it was not run and why, so every
  ``tool_use`` is still answered. A concurrent batch has at most :data:`BATCH_WORKERS` calls in flight
  (or the job's ``max_subagents``), each one's deadline counted from its start, and every batch yields
  the event loop at least every :data:`PAUSE_EVERY_S` of its own work. The calls of one batch run on
  the event loop (the small reads and globs, :mod:`runner.tools.file_calls`) share
  :data:`BATCH_INLINE_BUDGET_S`.
- A resumed job's toolset is told the calls its kept history made (:meth:`Toolset.replay`): the ids
  used, the repeat guard's counts, the results a caught repeat names and the memory's generation are
  as if it had run them, through the same bookkeeping as a live batch.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import anyio
import anyio.lowlevel

from .. import protocol
from ..config import Limits
from ..messages import Message, tool_results, tool_uses
from ..rundir.store import MAX_ID_CHARS, JobStore
from . import grep_pool
from .base import Tool, error_result
from .bash import Bash
from .compact import Compact
from .file_calls import FileTool, Workspace
from .grep import Grep
from .memory import MemoryTool
from .memory_files import WRITES as MEMORY_WRITES
from .recall import Recall, recall_page_chars
from .repeats import RepeatGuard, call_key
from .shares import JobShare, share_of

__all__ = ["ALWAYS", "TOOL_ORDER", "Toolset"]

BATCH_INLINE_BUDGET_S = 0.02  # all the reads and globs of one batch run on the loop; the rest go to threads
BATCH_WORKERS = 16  # a concurrent batch's calls in flight at once (at least the job's max_subagents)
PAUSE_EVERY_S = 0.005  # a batch's calls yield the event loop at least this often
READ_ONLY = frozenset({"read", "glob", "grep", "recall", "compact"})
CONCURRENT = READ_ONLY | {"task"}  # a batch of these runs at once (a subagent's writes are its own calls')
# the registry: every tool, in the order the API is sent them (the SDK's toolset's order first)
TOOL_ORDER = ("bash", "read", "write", "edit", "glob", "grep", "recall", "memory", "compact", "task")
ALWAYS = frozenset({"recall", "memory", "compact"})  # offered to every job, whatever its spec names
FILE_TOOLS = ("read", "write", "edit", "glob")


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


class Toolset:
    """The tools one job may call. Use as ``async with``: closing ends what its tools hold open."""

    def __init__(
        self,
        workspace: str,
        names: tuple[str, ...],
        store: JobStore,
        *,
        limits: Limits | None = None,
        task: Tool | None = None,
    ):
        self.store = store
        self.limits = limits or Limits()
        self.workspace = workspace
        self.page_chars = recall_page_chars(limits)
        self.repeats = RepeatGuard(self.limits.max_repeated_calls)
        self._ids: set[str] = set()  # every tool_use id of the job
        # tool_use id -> (turn, result) of the calls a caught repeat may name (those within the window)
        self._results: dict[str, tuple[int, dict[str, Any]]] = {}
        self._job_share: JobShare | None = None  # learned in the event loop, at the first call that needs it
        self.files = Workspace(workspace, self._share)  # what the file tools share
        self.memory = MemoryTool(str(store.dir), self.page_chars, self.limits.max_memory_entries)
        self.compact = Compact()
        self.task = task if "task" in names else None  # runs a task call: the job's subagents
        tools: list[Tool] = [
            Bash(workspace, writable=bool({"write", "edit"} & set(names)), limits=self.limits),
            *(FileTool(name, self.files) for name in FILE_TOOLS),
            Grep(self.files),
            Recall(store, self.page_chars, self._share),
            self.memory,
            self.compact,
            *([self.task] if self.task is not None else []),
        ]
        made = {tool.name: tool for tool in tools}
        self._tools = {n: made[n] for n in TOOL_ORDER if n in made and (n in names or n in ALWAYS)}

    def _share(self) -> JobShare:
        """This job's share of the loop's workers (its subagents', too: :mod:`runner.tools.shares`)."""
        if self._job_share is None:
            self._job_share = share_of(self.store.dir)
        return self._job_share

    def definitions(self) -> list[dict[str, Any]]:
        return [dict(tool.definition) for tool in self._tools.values()]

    @property
    def names(self) -> set[str]:
        return set(self._tools)

    @property
    def compact_requested(self) -> bool:
        """The model called ``compact``; the session compacts after the batch and sets it back."""
        return self.compact.requested

    @compact_requested.setter
    def compact_requested(self, value: bool) -> None:
        self.compact.requested = value

    @property
    def deadline_s(self) -> float | None:
        """A file tool's deadline (``grep``'s too); None: the default,
        :data:`runner.tools.file_calls.FILE_TOOL_DEADLINE_S`."""
        return self.files.deadline_s

    @deadline_s.setter
    def deadline_s(self, value: float | None) -> None:
        self.files.deadline_s = value

    async def __aenter__(self) -> Toolset:
        self._grep_workers = grep_pool.kept_while_open()  # kept for the next call while a job runs
        await self._grep_workers.__aenter__()
        return self

    async def __aexit__(self, *exc: object) -> None:
        # each call's process or thread ends with it; the job-long records go now
        self._ids.clear()
        self.repeats.close()
        await self._grep_workers.__aexit__(None, None, None)

    def stuck(self) -> str | None:
        """Why the job is stuck (a call the model keeps repeating after being told), or ``None``."""
        found = self.repeats.stuck()
        return protocol.STUCK.format(count=found[1], call=found[0][:300]) if found else None

    async def run_batch(
        self, calls: list[dict[str, Any]], turn: int = 0, *, refused: dict[str, str] | None = None
    ) -> list[dict[str, Any]]:
        """Run one assistant message's tool calls; one result per call, in the calls' order.

        A call the backend refused to pass on (``refused``: its id, and why: its input was too large)
        is never run; its result is an error that says why.

        A call whose id is missing, not a string, longer than ``MAX_ID_CHARS`` or repeats an id
        of this job is not run: its
        result says so (the request to the API carries a unique id in its place). A call already
        made ``max_repeated_calls`` times in the last turns is not run either, nor is one past the
        first ``max_tool_calls_per_reply`` of the batch. Read-only calls run concurrently; a batch
        with a mutating call (bash, write, edit, memory) runs in order. The calls run on the event
        loop (the small reads and globs) share one budget, :data:`BATCH_INLINE_BUDGET_S`.
        """
        if refused and any(_refused_id(c, refused) for c in calls):
            allowed = [c for c in calls if not _refused_id(c, refused)]
            ran = iter(await self.run_batch(allowed, turn) if allowed else [])
            return [
                error_result(c["id"], refused[c["id"]]) if _refused_id(c, refused) else next(ran)
                for c in calls
            ]
        pause = _Pause()
        results, runnable, keys = await self._admit(calls, turn, pause)

        async def one(i: int) -> None:
            await pause()
            result = results[i] = await self.run(calls[i])
            self._remember(keys[i], turn, calls[i]["id"], result=result)

        waiting = iter(runnable)

        async def worker() -> None:  # takes the batch's next call until none is left
            for i in waiting:
                await one(i)

        self.files.inline_left = BATCH_INLINE_BUDGET_S
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
            self.files.inline_left = None
        return [r for r in results if r is not None]

    async def replay(self, history: list[Message], *, turns: Mapping[int, int] | None = None) -> None:
        """Tell a resumed job's toolset the calls its kept ``history`` made (the ids used, the repeat
        guard, the results a caught repeat names, the memory's generation), as if it had run them:
        each batch goes through a live batch's bookkeeping, answered with the results on record.
        ``turns`` maps a message's index to the turn it was made at (each assistant message is the
        next turn after the last one otherwise); a batch whose results were all cut off is skipped."""
        turn = 0
        for i, message in enumerate(history):
            if message.get("role") != "assistant":
                continue
            turn = (turns or {}).get(i, turn + 1)
            calls = tool_uses(message)
            answer = history[i + 1] if i + 1 < len(history) else None
            recorded = {b.get("tool_use_id"): b for b in tool_results(answer)} if answer else {}
            if (
                calls
                and recorded
                and not all(str(b.get("content", "")).startswith(protocol.CUT_OFF) for b in recorded.values())
            ):
                await self._replay_batch(calls, turn, recorded)

    async def _replay_batch(
        self, calls: list[dict[str, Any]], turn: int, recorded: dict[Any, dict[str, Any]]
    ) -> None:
        _, runnable, keys = await self._admit(calls, turn, _Pause())
        for i in runnable:
            call = calls[i]
            got = recorded.get(call["id"])
            self._remember(
                keys[i], turn, call["id"], result=got or error_result(call["id"], "no result on record")
            )
            args = call.get("input")
            if (
                got
                and not got.get("is_error")
                and call.get("name") == "memory"
                and isinstance(args, dict)
                and args.get("command") in MEMORY_WRITES
            ):
                self.memory.generation += 1

    async def _admit(
        self, calls: list[dict[str, Any]], turn: int, pause: _Pause
    ) -> tuple[list[dict[str, Any] | None], list[int], list[str | None]]:
        """A batch's bookkeeping before it runs: the result of each call not run (its id, the cap, a
        caught repeat), the indices of those to run, and each call's key for the repeat guard."""
        results: list[dict[str, Any] | None] = [None] * len(calls)
        runnable: list[int] = []
        keys = [self._key(c) for c in calls[: self.limits.max_tool_calls_per_reply]]  # serialized once
        self._results = {k: v for k, v in self._results.items() if v[0] > turn - self.repeats.window}
        for i, call in enumerate(calls):
            await pause()
            refused = self._refused(call, i, len(calls))
            if refused is None:
                refused = await self._repeated(call, keys[i], turn)
            if refused is None:
                runnable.append(i)
            else:
                results[i] = refused
        return results, runnable, keys

    def _refused(self, call: Any, i: int, count: int) -> dict[str, Any] | None:
        """The result of the ``i``-th of ``count`` calls when its id or the cap keeps it from running,
        else ``None``; a usable id is taken either way."""
        tool_use_id = call.get("id") if isinstance(call, dict) else None
        if not isinstance(tool_use_id, str) or not tool_use_id:
            return error_result(
                str(tool_use_id or ""),
                "not run: the tool_use id is missing or not a "
                f"string ({type(tool_use_id).__name__}); give every call a unique id",
            )
        if len(tool_use_id) > MAX_ID_CHARS:
            return error_result(
                tool_use_id,
                f"not run: the tool_use id is {len(tool_use_id):,} characters, over {MAX_ID_CHARS}; "
                "give every call a short unique id",
            )
        if tool_use_id in self._ids:
            return error_result(
                tool_use_id,
                f"not run: the tool_use id {tool_use_id!r} was already used; give every call a unique id",
            )
        self._ids.add(tool_use_id)
        cap = self.limits.max_tool_calls_per_reply
        if i < cap:
            return None
        return error_result(
            tool_use_id,
            f"not run: this reply made {count:,} tool calls, over max_tool_calls_per_reply = "
            f"{cap:,}; only its first {cap:,} were taken. Make at most {cap:,} calls in one reply, "
            "and send this one again in a later reply if it is still needed",
        )

    def _remember(self, key: str | None, turn: int, tool_use_id: str, *, result: dict[str, Any]) -> None:
        """A call ran at ``turn``: the repeat guard counts it, and its result is kept for the window."""
        if key is not None:
            self.repeats.remember(key, turn, tool_use_id)
            self._results[tool_use_id] = (turn, result)

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
        """One call run by the tool it names; a malformed call or an unknown name is an error result."""
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
        tool = self._tools.get(name)
        if tool is None:
            return error_result(
                tool_use_id, f"unknown tool {name!r}; available: {', '.join(sorted(self.names))}"
            )
        return await tool.run(tool_use_id, args)


def _refused_id(call: dict[str, Any], refused: dict[str, str]) -> bool:
    return isinstance(call.get("id"), str) and call["id"] in refused
