"""Subagents: the ``task`` tool. A subagent is a session of its own (its own history, the job's
Compactor and strategy, its own files), whose report comes back to its parent as one tool result.

Guarantees:
- A subagent's files are under its parent's job directory, in ``agents/<n>-<slug>/`` (``n`` counts
  the job's ``task`` calls): its ``job.json``, transcript, events, context records, outputs, memory
  and ``final.md``, written as any job's are. Its workspace is its parent's; it has no ``task``
  tool of its own (depth 1) and at most its parent's other tools.
- At most ``limits.max_subagents`` of a job's subagents run at once, and at most
  ``limits.max_subagents_total`` are started in all (a resumed job's included): a ``task`` call past
  that is an error result, not a subagent. They share the batch's model (its call limit) and
  Compactor (its summary gate) like any job.
- Every per-job limit is the whole job's, its subagents' included: its ``max_turns`` (a subagent's
  calls are its job's turns, :meth:`runner.agent.spend.Spend.grant_turn`; a ``task`` call when none
  is left is an error result), its ``max_job_bytes`` (a subagent's files, ``memories/`` included,
  count in its job's store: :class:`SharedStore`; a ``task`` call when the job's files are at the
  quota is an error result), and its sandboxes (:mod:`runner.tools.job_budget`: at most
  ``limits.max_sandboxes`` of the job's ``bash`` calls at once, in one memory and process budget).
- Its spend counts against its parent's ``max_cost_usd`` and the run's: it is stopped (its report
  written) once the parent's whole spend (its own and every subagent's) reaches the parent's budget
  less the parent's report share; it ends before its parent's timeout does.
- A subagent's failure is an error result for its parent, never the parent's failure; a bad ``task``
  input is an error result naming the field.
- Its result carries its report cut to fit the parent's window: at most a tenth of the parent's
  context limit, and the task calls of one reply together at most half of it; the header names
  the whole report's path for ``recall``.
- Resume: a subagent that ended is not run again (its report is the result again); one that did not
  continues from its own last complete turn, with the spend it had.
- An incremental job's copy of a baseline subagent (``BASELINE_AGENTS``, :mod:`.incremental`) whose
  task (prompt and tools) a ``task`` call gives again is removed when the new subagent starts: the new
  one's files supersede it, so the job's directory never holds two answers to one task.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Protocol

import anyio

from ..jobs import JobSpec
from ..messages import Message, tool_uses
from ..protocol import SUBAGENT_CUT, SUBAGENT_FAILED, SUBAGENT_RESULT
from ..rundir.docs import (
    AGENTS,
    BASELINE_AGENTS,
    FINAL,
    JOB_JSON,
    LIVE_STATUSES,
    JobMetrics,
    Status,
    read_json,
    read_metrics,
)
from ..rundir.store import JobStore, in_thread
from ..rundir.trees import remove_tree, tree_bytes
from ..services import Budget
from ..tools.job_budget import JobBudget
from ..tools.memory_files import MEMORY_DIR
from ..tools.sandbox import CALL_MEMORY_BYTES, MAX_PROCESSES
from .continuation import cut_transcript
from .spend import REPORT_SHARE, ShareBudget, Spend

TASK_TOOL = {
    "name": "task",
    "description": (
        "Hand a piece of work to a subagent: a fresh agent with its own context window and the same "
        "workspace, which works on `prompt` alone (it sees nothing of this conversation) and answers "
        "with a report, returned as this call's result. Several task calls in one reply run at the "
        "same time. Give it everything it needs in the prompt."
    ),
    "input_schema": {
        "type": "object",
        "properties": {
            "prompt": {"type": "string", "description": "The whole task, as the subagent will read it."},
            "description": {"type": "string", "description": "A few words naming the task."},
            "tools": {
                "type": "array",
                "items": {"type": "string"},
                "description": "The tools it may use (a subset of yours; default: yours but task).",
            },
            "max_turns": {"type": "integer", "minimum": 1, "description": "At most this many turns."},
        },
        "required": ["prompt"],
    },
}
SLUG_CHARS = 40
MIN_TIME_S = 5.0  # a subagent is not started with less time than this left
# the report a result carries: at most this share of the parent's context limit (the rest by recall),
# and the results of the task calls of one reply together at most REPLY_SHARE of it
RESULT_SHARE = 0.1
REPLY_SHARE = 0.5
RESULT_MIN_CHARS = 1_000


class RunChild(Protocol):
    """A subagent's session run to its ending (the parent's ``Session._run_child``)."""

    async def __call__(
        self,
        spec: JobSpec,
        store: JobStore,
        record: JobMetrics,
        *,
        history: list[Message] | None,
        prior: JobMetrics | None,
        budget: Budget,
    ) -> JobMetrics: ...


def slug(text: str) -> str:
    """A short directory-name form of ``text``: lower-case words joined by ``-``."""
    words = re.findall(r"[a-z0-9]+", text.lower())
    return "-".join(words)[:SLUG_CHARS].strip("-") or "task"


class SharedStore(JobStore):
    """A subagent's store: its writes count in its job's store (``job``), against the job's quota
    (``max_job_bytes``), which then also refuses the job's own writes past it. What the subagent's
    directory holds when it opens is in the job's count already (the job's store counted its whole
    directory when it opened). Its ``memories/`` folder, written by the memory tool beside the store,
    is measured at each flush (before each of its calls) and at its end: what it grew by is the
    job's too, so a subagent past the quota ends ``disk_quota`` at its next call."""

    def __init__(self, directory: Path, job: JobStore):
        self.job = job
        self.opened = False
        self.memory_bytes = 0  # its memories/ folder as last measured (counted in the job's)
        super().__init__(directory)

    @property  # type: ignore[override]
    def bytes_used(self) -> int:
        return self.job.bytes_used

    @bytes_used.setter
    def bytes_used(self, value: int) -> None:
        if self.opened:
            self.job.bytes_used = value

    async def open(self) -> None:
        await super().open()
        self.memory_bytes = await in_thread(tree_bytes)(self.dir / MEMORY_DIR)
        self.opened = True

    async def count_memory(self) -> None:
        """Charge the job with what the memories/ folder grew (or shrank) by since last measured."""
        now = await in_thread(tree_bytes)(self.dir / MEMORY_DIR)
        self.job.bytes_used += now - self.memory_bytes
        self.memory_bytes = now

    async def flush(self) -> None:
        await self.count_memory()
        await super().flush()


@dataclass
class Subagents:
    """The subagents of one job: started by its ``task`` calls, counted in its spend."""

    parent: JobSpec
    job_dir: Path
    spend: Spend
    run_child: RunChild
    deadline: float  # time.monotonic() by which every subagent has ended
    count: int = 0  # task calls made so far (a resumed job's included)
    store: JobStore | None = None  # the job's: its subagents' files count in it (None: they count alone)
    started: int = 0  # subagents started so far (a resumed job's included), or about to be
    limiter: anyio.CapacityLimiter = field(init=False)
    budget: JobBudget = field(init=False)  # the sandboxes of its subagents' bash calls
    name: ClassVar[str] = "task"  # a tool of its job's toolset (runner.tools.base.Tool)
    definition: dict[str, Any] = field(default_factory=lambda: dict(TASK_TOOL))
    running: int = 0  # task calls being run now (those of one reply start together)
    together: int = 0  # the most that ran together since none was running: the reply's task calls

    def __post_init__(self) -> None:
        self.limiter = anyio.CapacityLimiter(self.parent.limits.max_subagents)
        self.budget = JobBudget.for_limits(self.parent.limits, CALL_MEMORY_BYTES, MAX_PROCESSES)

    @classmethod
    async def of_job(
        cls,
        parent: JobSpec,
        *,
        store: JobStore,
        spend: Spend,
        run_child: RunChild,
        ends: float,
        history: list[Message],
    ) -> Subagents:
        """A job's subagents, ``ends`` (``time.monotonic()``) by the end of its work: a resumed job's
        so far loaded, its task calls in ``history`` counted. Its subagents' files count in ``store``."""
        subagents = cls(
            parent=parent, job_dir=store.dir, spend=spend, run_child=run_child, deadline=ends, store=store
        )
        await subagents.load()
        subagents.count = sum(1 for m in history for c in tool_uses(m) if c.get("name") == "task")
        return subagents

    async def load(self) -> None:
        """A resumed job's subagents so far, from their directories: their spend is the job's."""
        root = self.job_dir / AGENTS
        if not await anyio.Path(root).is_dir():
            return
        for child in sorted([p async for p in anyio.Path(root).iterdir()]):
            record = await in_thread(read_metrics)(Path(child))
            if record is not None:
                self.spend.children[child.name] = record
        self.started = len(self.spend.children)
        self.spend.settle(charge=False)

    async def run(self, tool_use_id: str, args: dict[str, Any]) -> dict[str, Any]:
        """One ``task`` call: its subagent run to an ending; its report as the tool result."""
        self.count += 1
        self.running += 1
        self.together = max(self.together, self.running)
        try:
            return await self._run_task(tool_use_id, args)
        finally:
            self.running -= 1
            if not self.running:
                self.together = 0

    async def _run_task(self, tool_use_id: str, args: dict[str, Any]) -> dict[str, Any]:
        problem = self._problem(args)
        if problem:
            return _result(tool_use_id, f"task: {problem}", error=True)
        spec = self._spec(args)
        # a resumed job's subagent of this name was counted when loaded (this call may continue it)
        counted = spec.name not in self.spend.children
        if problem := self._spent(counted):
            return _result(tool_use_id, f"task: {problem}", error=True)
        self.started += counted  # taken now: the task calls of one reply are counted in their order
        ran = False
        try:
            async with self.limiter:
                left = self.deadline - time.monotonic()
                if left < MIN_TIME_S:
                    return _result(
                        tool_use_id,
                        SUBAGENT_FAILED.format(error="no time left before the job's timeout"),
                        error=True,
                    )
                if problem := self._spent(False):
                    return _result(tool_use_id, f"task: {problem}", error=True)
                ran = True
                timeout_s = min(spec.limits.timeout_s, left)
                record = await self._run(
                    spec.model_copy(
                        update={"limits": spec.limits.model_copy(update={"timeout_s": timeout_s})}
                    )
                )
                if record is None:  # the job's other subagents took its turns meanwhile
                    ran = False
                    return _result(tool_use_id, f"task: {self._no_turns()}", error=True)
        finally:
            if not ran:
                self.started -= counted
        return await self._answer(tool_use_id, spec, record)

    def _spent(self, counted: bool) -> str | None:
        """Why no subagent may start now, or None: the job's count of them (``counted``: this one would
        be one more), its turns or its files."""
        limits = self.parent.limits
        if counted and self.started >= limits.max_subagents_total:
            return (
                f"not started: this job has started its max_subagents_total = {limits.max_subagents_total} "
                "subagents; do the rest of the work yourself, or in fewer, larger tasks"
            )
        if self.spend.turns_left() < 1:
            return self._no_turns()
        store = self.store
        if store is not None and store.max_bytes is not None and store.bytes_used >= store.max_bytes:
            return (
                f"not started: the job's files take {store.bytes_used:,} bytes, its max_job_bytes = "
                f"{store.max_bytes:,} (its subagents' files count in it)"
            )
        return None

    def _no_turns(self) -> str:
        limit = self.parent.limits.max_turns
        return (
            f"not started: the job's max_turns = {limit} has no turn left for a subagent (its turns and "
            f"its subagents' together: {self.spend.job_turns()}; its last turn is kept for its report)"
        )

    def _problem(self, args: dict[str, Any]) -> str | None:
        prompt = args.get("prompt")
        if not isinstance(prompt, str) or not prompt.strip():
            return "prompt: expected the task as a non-empty string"
        tools = args.get("tools")
        if tools is not None:
            allowed = set(self.parent.tools) - {"task"}
            if not isinstance(tools, list) or not all(isinstance(t, str) for t in tools):
                return "tools: expected a list of tool names"
            if unknown := sorted(set(tools) - allowed):
                return f"tools: {', '.join(unknown)} not among this job's ({', '.join(sorted(allowed))})"
        turns = args.get("max_turns")
        if turns is not None and (isinstance(turns, bool) or not isinstance(turns, int) or turns < 1):
            return "max_turns: expected a whole number of at least 1"
        if args.get("description") is not None and not isinstance(args.get("description"), str):
            return "description: expected a string"
        return None

    def _spec(self, args: dict[str, Any]) -> JobSpec:
        parent = self.parent
        name = f"{self.count}-{slug(str(args.get('description') or args['prompt']))}"
        tools = tuple(
            t for t in parent.tools if t != "task" and (args.get("tools") is None or t in args["tools"])
        )
        limit = parent.limits.max_cost_usd
        turns = min(parent.limits.max_turns, args.get("max_turns") or parent.limits.max_turns)
        limits = parent.limits.model_copy(
            update={
                "max_turns": turns,
                "max_cost_usd": (
                    None
                    if limit is None
                    else max(1e-6, limit * (1 - REPORT_SHARE) - self.spend.record.cost_usd)
                ),
            }
        )
        return parent.model_copy(
            update={"name": name, "prompt": args["prompt"], "tools": tools, "limits": limits}
        )

    async def _run(self, spec: JobSpec) -> JobMetrics | None:
        """Run (or continue, or take the ending of) the subagent ``spec`` names; None when the job has
        no turn left for it."""
        child_dir = self.job_dir / AGENTS / spec.name
        prior = await in_thread(read_metrics)(child_dir)
        same = await in_thread(_same_task)(child_dir, spec)
        k = 1
        while not same and await anyio.Path(child_dir).exists():  # another task had this number: a new one
            k += 1
            spec = spec.model_copy(update={"name": f"{spec.name.split('~')[0]}~{k}"})
            child_dir = self.job_dir / AGENTS / spec.name
            prior = await in_thread(read_metrics)(child_dir)
            same = await in_thread(_same_task)(child_dir, spec)
        if prior is not None and same and prior.status not in (*LIVE_STATUSES, Status.CANCELLED):
            self.spend.children[spec.name] = prior
            return prior  # it ended before: not run again
        history = None
        if prior is not None and same:
            history = (await in_thread(cut_transcript)(child_dir, spec.prompt)).history
        made = prior.turns if history and prior is not None else 0  # its turns count in its job's
        # the turns the job's other subagents left it (a resumed one's own on top), counted now, after
        # the waits above (in them, the subagents already running made calls), and held from here on
        before = self.spend.children.get(spec.name)
        turns = self.spend.turns_left() + (before.turns if before is not None else 0)
        if turns < 1:
            return None
        spec = spec.model_copy(
            update={"limits": spec.limits.model_copy(update={"max_turns": min(spec.limits.max_turns, turns)})}
        )
        record = self.spend.children[spec.name] = JobMetrics(
            job=spec.name, status=Status.QUEUED, model=spec.model, turns=made
        )
        if made + 1 >= spec.limits.max_turns:  # its first call is its last, made without asking its job
            self.spend.granted[spec.name] = made + 1
        await in_thread(_remove_superseded)(self.job_dir, spec)
        store = JobStore(child_dir) if self.store is None else SharedStore(child_dir, self.store)
        await store.open()
        limit = self.parent.limits.max_cost_usd
        budget = ShareBudget(
            self.spend.run_budget, self.spend, None if limit is None else limit * (1 - REPORT_SHARE)
        )
        try:
            with self.budget.entered():
                return await self.run_child(
                    spec, store, record, history=history, prior=prior if history else None, budget=budget
                )
        finally:
            self.spend.granted.pop(spec.name, None)
            self.spend.settle(charge=False)
            store.close()  # its job-long records
            if isinstance(store, SharedStore):  # its memory files' last changes
                with anyio.CancelScope(shield=True):
                    await store.count_memory()

    async def _answer(self, tool_use_id: str, spec: JobSpec, record: JobMetrics) -> dict[str, Any]:
        where = f"{AGENTS}/{spec.name}"
        path = f"{where}/{FINAL}"
        try:
            report = await anyio.Path(self.job_dir / path).read_text(encoding="utf-8", errors="replace")
        except OSError as e:
            return _result(
                tool_use_id, SUBAGENT_FAILED.format(error=f"{path}: {e.strerror or e}"), error=True
            )
        limit = self.parent.limits.context_char_limit
        share = min(RESULT_SHARE, REPLY_SHARE / max(1, self.together))
        most = max(RESULT_MIN_CHARS, int(limit * share))
        shown = report[:most]
        head = SUBAGENT_RESULT.format(
            dir=where,
            status=record.status,
            turns=record.turns,
            cost=record.cost_usd,
            path=path,
            chars=len(report),
            cut=SUBAGENT_CUT if len(shown) < len(report) else "",
        )
        return _result(tool_use_id, head + shown, error=record.status != Status.SUCCEEDED)


def _same_task(child_dir: Path, spec: JobSpec) -> bool:
    """Whether ``child_dir`` holds the subagent ``spec`` describes (same prompt and tools)."""
    data, _ = read_json(child_dir / JOB_JSON)
    return (
        isinstance(data, dict) and data.get("prompt") == spec.prompt and data.get("tools") == list(spec.tools)
    )


def _remove_superseded(job_dir: Path, spec: JobSpec) -> None:
    """The job's copies of baseline subagents whose task ``spec`` gives again, removed (links not
    followed: a link in their place is removed, never what it leads to)."""
    copies = job_dir / BASELINE_AGENTS
    if copies.is_symlink() or not copies.is_dir():
        return
    for copy in copies.iterdir():
        if not copy.is_symlink() and copy.is_dir() and _same_task(copy, spec):
            remove_tree(copy, ignore_errors=True)


def _result(tool_use_id: str, text: str, *, error: bool = False) -> dict[str, Any]:
    return {
        "type": "tool_result",
        "tool_use_id": tool_use_id,
        "content": text,
        **({"is_error": True} if error else {}),
    }
