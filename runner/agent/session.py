"""One job's agent loop: compact, call the model, run the tool calls, append the results, repeat.

Every stop reason has one meaning (as in the SDK's tool runner):

| stop_reason                     | what the loop does                                               |
|---------------------------------|------------------------------------------------------------------|
| ``tool_use``                    | run the calls (the whole batch), append one result per call      |
| ``end_turn``, ``stop_sequence`` | done: the reply's text is the final answer                       |
| ``max_tokens``                  | answer its tool calls "not run: cut off", or ask it to continue  |
| ``pause_turn``, ``compaction``  | the turn is not finished: send it back as it is                  |
| ``model_context_window_exceeded`` | reactive compaction, then retry                                |
| ``refusal``                     | the job fails with that reason                                   |
| anything else                   | never reaches the loop: the backend fails the call (InvalidReply) |

A tool call whose input is over ``MAX_TOOL_INPUT_BYTES`` (the backend replaced it with ``{}`` and
named it in ``Reply.refused_calls``) is answered with an error result, never run.

Ends with a status: ``succeeded``, ``failed``, ``timeout``, ``max_turns``, ``budget_exceeded``,
``stuck`` (the model kept repeating one call after being told, or its compactions thrash), ``disk_quota`` (its files reached
``limits.max_job_bytes``) or ``cancelled``. Whatever the
ending, ``final.md`` and ``metrics.json`` are written (shielded from cancellation) and the
transcript holds every message that was added.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

import anyio

from ..compaction.compactor import HISTORY_STAGES, CompactionState, Compactor
from ..compaction.strategies import strategy_for
from ..compaction.window import Entry
from ..jobs import JobSpec
from ..messages import Message, merge_adjacent, one_line, text_of, tool_results, tool_uses
from ..models.base import BackendUnusable, Model, PromptTooLong, Reply, Request, Usage
from ..models.wire import CURRENT as WIRE
from ..models.wire import WireCounts
from ..pricing import DEFAULT_TABLE, PriceTable
from ..protocol import NO_TOOLS, OUT_OF_TURNS
from ..rundir.docs import (
    EVENTS,
    FINAL,
    JOB_JSON,
    METRICS,
    JobMetrics,
    LastCallEvent,
    ModelCallEvent,
    RetriesEvent,
    Status,
)
from ..rundir.reserve import final_write
from ..rundir.store import DiskQuotaExceeded, JobStore, dumps, in_thread
from ..services import Budget, RunBudget
from ..tools.memory import WRITES as MEMORY_WRITES
from ..tools.toolset import Toolset, error_result
from .continuation import Ledger, cut_spend, read_ledger, rebuild_memory
from .final_report import final_markdown
from .safe_request import api_valid

CHECKPOINT_INTERVAL_S = 1.0
REPORT_TOKENS = 1_000  # the output the budget's reserve plans for the report (max_output_tokens when smaller)
REPORT_SHARE = 0.1  # of max_cost_usd, kept for the report's output under a small budget
MIN_REPORT_TOKENS = 64  # a last call with less room than this is not made: the report is built without it
ESTIMATE_MARGIN = 1.05  # estimated costs are taken this much higher before a call is allowed
CUT_OFF = "not run: your reply was cut off"  # the results of calls in a reply cut at max_tokens (never run)
CONTINUE_AFTER_MAX_TOKENS = "Your reply was cut off by the output token limit. Continue from where you stopped."


class JobEnded(Exception):
    """Ends a job early with a status other than ``succeeded``; ``last_call``: the job is about to hit a
    limit it kept a reserve for, and gets one last call without tools for its report."""

    def __init__(self, status: str, error: str, last_call: bool = False):
        super().__init__(error)
        self.status = status
        self.error = error
        self.last_call = last_call


def time_reserve(timeout_s: float) -> float:
    """The part of a job's timeout kept for its last call: a tenth, at most a minute."""
    return min(60.0, timeout_s / 10)


@dataclass
class JobProgress:
    """What the live display shows for a job; updated by its session."""

    name: str
    status: str = Status.QUEUED
    turns: int = 0
    context_chars: int = 0
    compactions: int = 0
    cost_usd: float = 0.0
    started: float | None = None
    input_tokens: int = 0
    output_tokens: int = 0


@dataclass
class JobResult:
    name: str
    status: str
    turns: int = 0
    wall_s: float = 0.0
    usage: Usage = field(default_factory=Usage)
    summarizer_usage: Usage = field(default_factory=Usage)
    cost_usd: float = 0.0
    compactions: dict[str, int] = field(default_factory=dict)
    persisted_bytes: int = 0
    error: str | None = None
    estimated: bool = False
    model: str = ""
    worker: dict[str, Any] | None = None  # where the job ran: node and pid
    wire: WireCounts = field(default_factory=WireCounts)

    def metrics(self) -> JobMetrics:
        """The job's ``metrics.json`` (and its row in ``run.json``)."""
        return JobMetrics.model_validate({
            "job": self.name, "status": self.status, "model": self.model, "turns": self.turns,
            "wall_s": round(self.wall_s, 3), "usage": self.usage.to_json(),
            "summarizer_usage": self.summarizer_usage.to_json(), "usage_estimated": self.estimated,
            "cost_usd": round(self.cost_usd, 6), "compactions": dict(sorted(self.compactions.items())),
            "persisted_bytes": self.persisted_bytes, **self.wire.to_json(), "error": self.error,
            **({"worker": self.worker} if self.worker else {})})

    def to_json(self) -> dict[str, Any]:
        return self.metrics().to_json()


def model_call_event(result: JobResult, state: CompactionState, chars: int, reply: Reply, lines: int,
                     wall_s: float) -> dict[str, Any]:
    """The ``events.jsonl`` line of one answered model call: the context it carried (characters of the
    messages, and tokens as the reply's usage counted them), and the job's whole spend so far (its
    cost, usage, summaries' usage, compaction counts, persisted bytes, wall time); ``lines``: the
    transcript lines before the call's reply. A resumed job starts from such a line (:func:`~runner.agent.continuation.read_ledger`)."""
    return {**ModelCallEvent(turn=result.turns, chars=chars, tokens=reply.usage.context_tokens,
                             estimated=reply.estimated, cost_usd=round(result.cost_usd, 6)).line(),
            "lines": lines, "usage": result.usage.to_json(), "summarizer_usage": state.summarizer_usage.to_json(),
            "compactions": dict(sorted(state.compactions.items())), "persisted_bytes": state.persisted_bytes,
            "wall_s": round(wall_s, 3)}


class Session:
    """Runs one job to an ending. ``history`` continues a resumed job from its transcript."""

    def __init__(self, spec: JobSpec, model: Model, compactor: Compactor, store: JobStore, summary_model: str,
                 progress: JobProgress | None = None, history: list[Message] | None = None,
                 prior: JobMetrics | None = None, run_budget: Budget | None = None,
                 prices: PriceTable | None = None, result: JobResult | None = None):
        self.spec = spec
        self.model = model
        self.compactor = compactor
        self.store = store
        store.max_bytes = spec.limits.max_job_bytes
        self.summary_model = summary_model
        self.progress = progress or JobProgress(spec.name)
        self.state = CompactionState(store=store, limits=spec.limits, active_request=spec.prompt,
                                     strategy=strategy_for(spec.limits, model.server_compaction))
        self.history = history
        self.result = result or JobResult(spec.name, Status.RUNNING, model=spec.model)
        self.result.status, self.result.error = Status.RUNNING, None
        self.final_text: str | None = None
        self.run_budget: Budget = run_budget or RunBudget()
        self._last_checkpoint = float("-inf")
        self._reactive_retries = 0  # reactive compactions since the last call the API accepted
        self._tools: list[dict[str, Any]] = []
        self._most_output = 0  # the largest reply so far (output tokens): what the next call may write
        self._growth = 0  # characters the window grew by from the call before to the last one
        self._last_sent = 0  # characters of messages the last call carried
        self.prices = prices or DEFAULT_TABLE
        self._wall_before = 0.0  # wall time of the job's earlier segments (a resumed job's)
        self._started = time.monotonic()
        self._ledger: Ledger | None = None  # where a resumed job's spend was rebuilt from
        if prior is not None:  # a resumed job keeps what it already spent (rebuilt from events.jsonl at _begin)
            self._wall_before = prior.wall_s
            self.result.usage = Usage(**prior.usage.model_dump())
            self.state.summarizer_usage = Usage(**prior.summarizer_usage.model_dump())
            self.state.compactions.update(prior.compactions)
            self.state.persisted_bytes = prior.persisted_bytes
            self.result.estimated = prior.usage_estimated
            self.result.wire = WireCounts.from_json(prior.model_dump())
        self.wire = self.result.wire

    async def run(self) -> JobResult:
        self._started = time.monotonic()
        WIRE.set(self.wire)  # this task's model calls count into this job (see models/wire.py)
        self.progress.started = time.time()
        self.progress.status = Status.RUNNING
        result = self.result
        timeout = self.spec.limits.timeout_s
        try:
            try:
                with anyio.move_on_after(timeout - time_reserve(timeout)) as scope:
                    await self._loop()
                if scope.cancelled_caught:
                    raise JobEnded(Status.TIMEOUT, f"timed out after {timeout:g} s", last_call=True)
                result.status = Status.SUCCEEDED
            except JobEnded as e:
                result.status, result.error = e.status, e.error
                if e.last_call:
                    with anyio.move_on_after(time_reserve(timeout)):
                        try:
                            await self._last_call(e.error)
                        except (JobEnded, BackendUnusable):
                            raise
                        except Exception as x:  # the job's ending stands; the report is built without it
                            result.error = f"{result.error}; the last call failed: {one_line(f'{type(x).__name__}: {x}')}"
        except JobEnded as e:  # the last call itself went over a limit: the report is built without it
            result.error = f"{result.error}; {e.error}"
        except anyio.get_cancelled_exc_class():
            result.status, result.error = Status.CANCELLED, "cancelled before it finished"
            raise
        except DiskQuotaExceeded as e:  # its final documents are still written (exempt from the quota)
            result.status, result.error = Status.DISK_QUOTA, e.strerror
        except BackendUnusable as e:  # the batch stops; this job's files still say why
            result.status, result.error = Status.FAILED, str(e)
            raise
        except Exception as e:  # one job's failure is its own; the batch goes on
            result.status, result.error = Status.FAILED, one_line(f"{type(e).__name__}: {e}")
        finally:
            result.wall_s = self._wall()
            with anyio.CancelScope(shield=True):
                await self._write_outputs()
        return result

    async def _loop(self) -> None:
        """The agent loop: before every call the limits are checked and the history prepared; a reply
        is kept, its tool calls run and their results appended, until the model answers."""
        await self._begin()
        async with Toolset(str(self.spec.workspace), self.spec.tools, self.store, self.spec.limits) as toolset:
            if self.history:
                await rebuild_memory(self.store.dir, self.history)
                await self._replay_tools(toolset)
            self._offer(toolset)
            self.state.repeats = toolset.repeats  # told where the compactor saved each output
            while True:
                self._check_before_call()
                reply = await self._query()
                if reply is not None and await self._step(reply, toolset):
                    return
                self._checkpoint()

    async def _begin(self) -> None:
        """Record the job, and start its history: the prompt, or where a resumed job stopped."""
        spec, state = self.spec, self.state
        await self.store.write_json(JOB_JSON, spec.to_json())
        if self.history:
            await in_thread(cut_spend)(self.store.dir, len(self.history))  # as a resume's cut does (a no-op after one)
            await state.resume(self.history)
            self.result.turns = sum(1 for m in merge_adjacent(self.history) if m["role"] == "assistant")
            ledger = await in_thread(read_ledger)(self.store.dir, len(self.history))
            if ledger is not None:
                self._rebuild(ledger)
                self._unsee_after(ledger)
        else:
            await state.add({"role": "user", "content": spec.prompt})

    def _offer(self, toolset: Toolset) -> None:
        """The tool definitions every request carries (the strategy says whether ``compact`` is one)."""
        state = self.state
        strategy = state.strategy
        self._tools = [t for t in toolset.definitions() if t["name"] != "compact" or strategy.offers_compact_tool]
        state.overhead_chars = len(json.dumps([self.spec.system, self._tools], ensure_ascii=False))
        if self._ledger is not None and self._ledger.last is not None and self._ledger.last.tokens:
            last = self._ledger.last  # the token estimate as the last kept call measured it
            state.last_tokens, state.last_chars = last.tokens, last.chars + state.overhead_chars
        if self.history:
            self._check_budgets()  # a resumed job may already have spent its budget

    def _rebuild(self, ledger: Ledger) -> None:
        """A resumed job's spend as it stood at its last kept reply: cost, usage (its own and its
        summaries'), compactions, persisted bytes, turns, wall time of the earlier segments; and what
        the reserve and the thrash ladder had learned from the calls and compactions before it."""
        self._ledger = ledger
        result, state, last = self.result, self.state, ledger.last
        result.usage = Usage(**last.usage.model_dump()) if last and last.usage else Usage()
        state.summarizer_usage = Usage(**last.summarizer_usage.model_dump()) if last and last.summarizer_usage \
            else Usage()
        result.summarizer_usage = state.summarizer_usage
        state.compactions.clear()
        state.compactions.update(last.compactions or {} if last else {})
        state.persisted_bytes = last.persisted_bytes or 0 if last else 0
        result.turns = last.turn if last else 0
        result.estimated = any(c.estimated for c in ledger.calls)
        result.cost_usd = self._cost()
        self._wall_before = max(self._wall_before, last.wall_s or 0.0 if last else 0.0)
        outputs = [c.usage.output_tokens if c.usage else 0 for c in ledger.calls]
        self._most_output = max((b - a for a, b in zip([0, *outputs], outputs, strict=False)), default=0)
        if last:
            previous = ledger.calls[-2].chars if len(ledger.calls) > 1 else 0
            self._growth, self._last_sent = max(0, last.chars - previous), last.chars
        # the thrash ladder, from the history compactions kept (the turns as the compactor counted them)
        assistants = [i for i, m in enumerate(self.history or []) if m.get("role") == "assistant"]
        for event, before in ledger.compactions:
            if event.stage in HISTORY_STAGES:
                turns = sum(1 for i in assistants if before is not None and i <= before)
                freed = (event.chars_before - event.chars_after) / state.char_limit()
                state.thrash.record(turns, freed, self.spec.limits)

    def _unsee_after(self, ledger: Ledger) -> None:
        """The restored window as the model saw it: what the last kept call carried is seen, the reply
        and results written after it are not (the stages that act on seen messages decide alike)."""
        lines = ledger.last.lines if ledger.last and ledger.last.lines is not None else 0
        window = self.state.window
        window.replace([Entry(e.message, e.chars, e.seq, e.seen and not (e.seq is not None and e.seq > lines))
                        for e in window.entries])

    async def _replay_tools(self, toolset: Toolset) -> None:
        """Tell a resumed job's toolset the calls its kept history made (the repeat guard, the ids
        used, the results a caught repeat names, the memory's generation), as if it had run them: each
        batch goes through the toolset's own bookkeeping, answered with the results on record."""
        history = self.history or []
        turns = {c.lines: c.turn for c in self._ledger.calls if c.lines is not None} if self._ledger else {}
        turn = 0
        run = toolset.run
        try:
            for i, message in enumerate(history):
                if message.get("role") != "assistant":
                    continue
                turn = turns.get(i, turn + 1)
                calls = tool_uses(message)
                answer = history[i + 1] if i + 1 < len(history) else None
                recorded = {b.get("tool_use_id"): b for b in tool_results(answer)} if answer else {}
                if not calls or not recorded or all(str(b.get("content", "")).startswith(CUT_OFF)
                                                     for b in recorded.values()):
                    continue

                async def on_record(call: dict[str, Any], recorded: dict[Any, Any] = recorded) -> dict[str, Any]:
                    return recorded.get(call.get("id")) or error_result(str(call.get("id", "")), "no result on record")

                toolset.run = on_record  # type: ignore[method-assign]
                results = await toolset.run_batch(calls, turn)
                toolset.compact_requested = False
                toolset.memory.generation += sum(
                    1 for call, got in zip(calls, results, strict=False) if call.get("name") == "memory"
                    and isinstance(call.get("input"), dict) and call["input"].get("command") in MEMORY_WRITES
                    and got is recorded.get(call.get("id")) and not got.get("is_error"))
        finally:
            toolset.run = run  # type: ignore[method-assign]

    def _check_before_call(self) -> None:
        """Raise JobEnded when this call would go over a limit (the last turn is kept for the report)."""
        if self.result.turns + 1 >= self.spec.limits.max_turns:
            raise JobEnded(Status.MAX_TURNS, f"reached max_turns = {self.spec.limits.max_turns}", last_call=True)
        self._check_run_budget()

    async def _query(self) -> Reply | None:
        """Prepare the history and call the model. None when the API found the prompt too long and a
        reactive compaction made room: the call is made again."""
        spec, state = self.spec, self.state
        strategy = state.strategy
        messages = await self.compactor.prepare(state)
        if stuck := self.compactor.stuck(state):  # its compactions thrash: a report of what it has
            raise JobEnded(Status.STUCK, stuck, last_call=True)
        sent_chars = state.window.total
        self._check_reserve()  # on the window this call carries, compacted
        request = Request(model=spec.model, messages=api_valid(messages), tools=self._tools,
                          max_tokens=spec.limits.max_output_tokens, system=spec.system,
                          context_management=strategy.context_management(),
                          max_retries=spec.limits.max_retries, cache_points=strategy.cache_points(state.window))
        try:
            reply = await self._create(request)
        except PromptTooLong as e:
            await self._reactive(str(e))
            return None
        self._account(reply)
        self._growth, self._last_sent = max(0, sent_chars - self._last_sent), sent_chars
        self.store.queue_records(EVENTS, [model_call_event(self.result, state, sent_chars, reply, state.transcript_len,
                                                           self._wall())])
        state.observe_usage(reply.usage)
        state.window.mark_seen()
        if reply.stop_reason == "model_context_window_exceeded":
            self._check_budgets()
            await self._reactive("model context window exceeded")
            return None
        self._reactive_retries = 0
        return reply

    async def _step(self, reply: Reply, toolset: Toolset) -> bool:
        """Keep a reply and act on it; True when the job is done."""
        state = self.state
        compacted = any(b.get("type") == "compaction" for b in reply.content)
        # a reply with tool calls is written together with their results (one write a turn); if
        # the run dies in between, resume would drop the unanswered reply anyway
        deferred = bool(reply.content) and not compacted and reply.stop_reason in (
            "tool_use", "max_tokens") and bool(tool_uses(reply.message()))
        if reply.content and not deferred:
            await state.add(reply.message())
        try:
            self._check_budgets()
        except JobEnded:
            if deferred:  # what was paid for is kept
                await state.add(reply.message())
            raise
        if compacted:
            self.compactor.after_server_compaction(state)
        return await self._handle(reply, toolset, deferred)

    async def _create(self, request: Request) -> Reply:
        """One model call (the SDK's retries inside it), and a line in events.jsonl when it needed any."""
        seen = self.wire.copy()
        try:
            return await self.model.create(request)
        finally:
            self._wire_event(seen)

    def _wire_event(self, before: WireCounts) -> None:
        """One line in events.jsonl for a call that needed retries or met 429/529/5xx answers."""
        now = self.wire
        if now.requests - before.requests <= 1 and (now.rate_limited, now.overloaded, now.server_errors) == (
                before.rate_limited, before.overloaded, before.server_errors):
            return
        self.store.queue_records(EVENTS, [RetriesEvent(
            attempts=now.requests - before.requests, rate_limited_429=now.rate_limited - before.rate_limited,
            overloaded_529=now.overloaded - before.overloaded,
            server_errors_5xx=now.server_errors - before.server_errors).line()])

    async def _last_call(self, reason: str) -> None:
        """One call with the tools listed but none allowed: the model writes its report from what it has."""
        spec, state = self.spec, self.state
        self.store.queue_records(EVENTS, [LastCallEvent(reason=reason).line()])
        messages = await self.compactor.prepare(state)  # writes what the store has queued
        # the instruction goes with this request only: the transcript keeps alternating roles
        messages = merge_adjacent([*messages, {"role": "user", "content": OUT_OF_TURNS.format(reason=reason)}])
        max_tokens = self._report_tokens()
        if max_tokens < MIN_REPORT_TOKENS:  # the budget has no room for it: the report is built without it
            self.result.error = f"{self.result.error}; no room left in max_cost_usd for the last call"
            return
        request = Request(model=spec.model, messages=api_valid(messages), tools=self._tools,
                          max_tokens=max_tokens, system=spec.system,
                          context_management=state.strategy.context_management(),
                          max_retries=spec.limits.max_retries, tool_choice=NO_TOOLS)
        reply = await self._create(request)
        self._account(reply)
        self.store.queue_records(EVENTS, [model_call_event(self.result, state, state.window.total, reply,
                                                           state.transcript_len, self._wall())])
        if reply.content:
            await state.add(reply.message())
        self.final_text = text_of(reply.message())

    async def _handle(self, reply: Reply, toolset: Toolset, deferred: bool = False) -> bool:
        """Act on a reply; True when the job is done."""
        calls = tool_uses(reply.message())
        stop = reply.stop_reason
        if stop == "refusal":
            raise JobEnded(Status.FAILED, "the model refused to continue (stop_reason: refusal)")
        if stop in ("pause_turn", "compaction"):
            return False  # unfinished turn: sent back as it is (an empty one is simply asked again)
        if stop == "max_tokens" and not reply.content:
            raise JobEnded(Status.FAILED, f"the model produced no output within max_output_tokens = "
                                     f"{self.spec.limits.max_output_tokens}")
        if calls and stop == "max_tokens":  # the last call may be cut off: run none, say so in each result
            results = [error_result(str(c.get("id", "")), f"{CUT_OFF} by the output token limit, so this call may be incomplete; send it again") for c in calls]
            await self.state.add(*([reply.message()] if deferred else []), {"role": "user", "content": results})
            return False
        if calls and stop == "tool_use":
            results = await self._run_calls(toolset, calls, reply.refused_calls)
            await self.state.add(*([reply.message()] if deferred else []), {"role": "user", "content": results})
            if stuck := toolset.stuck():
                raise JobEnded(Status.STUCK, stuck)
            if toolset.compact_requested:
                toolset.compact_requested = False
                await self.compactor.compact(self.state)
            return False
        if stop == "max_tokens":
            await self.state.add({"role": "user", "content": CONTINUE_AFTER_MAX_TOKENS})
            return False
        self.final_text = text_of(reply.message())
        return True

    async def _run_calls(self, toolset: Toolset, calls: list[dict[str, Any]],
                         refused: dict[str, str]) -> list[dict[str, Any]]:
        """One result per call, in order: the toolset's, and an error result for each call the backend
        refused to pass on (its input was too large), which is never run."""
        def is_refused(call: dict[str, Any]) -> bool:
            return isinstance(call.get("id"), str) and call["id"] in refused

        if not any(is_refused(c) for c in calls):
            return await toolset.run_batch(calls, self.result.turns)
        allowed = [c for c in calls if not is_refused(c)]
        ran = iter(await toolset.run_batch(allowed, self.result.turns) if allowed else [])
        return [error_result(c["id"], refused[c["id"]]) if is_refused(c) else next(ran) for c in calls]

    async def _reactive(self, reason: str) -> None:
        """Compact after the API found the prompt too long; JobEnded when that keeps happening or
        there is nothing left to compact (``_reactive_retries`` counts back to 0 at an accepted call)."""
        if self._reactive_retries >= self.spec.limits.max_reactive_retries:
            raise JobEnded(Status.FAILED, f"prompt is too long even after reactive compaction ({one_line(reason)})")
        if not await self.compactor.reactive(self.state):
            raise JobEnded(Status.FAILED, f"prompt is too long and there is nothing left to compact ({one_line(reason)})")
        self._reactive_retries += 1

    def _account(self, reply: Reply) -> None:
        result = self.result
        result.turns += 1
        result.usage.add(reply.usage)
        result.estimated = result.estimated or reply.estimated
        result.summarizer_usage = self.state.summarizer_usage
        before = result.cost_usd
        result.cost_usd = self._cost()
        self._most_output = max(self._most_output, reply.usage.output_tokens)
        self.run_budget.charge(result.cost_usd - before)
        self._update_progress()

    def _cost(self) -> float:
        """The job's spend: its own calls on its model, its summaries on the summary model."""
        return (self.prices.cost(self.spec.model, self.result.usage)
                + self.prices.cost(self.summary_model, self.state.summarizer_usage))

    def _check_budgets(self) -> None:
        result = self.result
        limit = self.spec.limits.max_cost_usd
        if limit is not None and result.cost_usd >= limit:
            raise JobEnded(Status.BUDGET_EXCEEDED, f"spent ${result.cost_usd:.4f}, max_cost_usd is ${limit:g}")
        self._check_run_budget()

    def _check_reserve(self) -> None:
        """Before a call, on the window it carries: when this call (as much output as the largest reply
        so far) and then a short report (the window one turn larger, ``REPORT_TOKENS`` of output) could
        together reach the job's budget, this call is the last one: the report. The reserve is what
        the job's own calls cost, so a small budget still works until near its cap."""
        limit = self.spec.limits.max_cost_usd
        if limit is None:
            return
        this_call = self._next_call_cost()
        # the report's window: this one plus what the last turn added, compacted back to the limit
        window = self.state.window.total
        more = max(0, min(window + self._growth, max(window, self.state.char_limit())) - window)
        report = self._next_call_cost(output_tokens=self._report_floor(), more_chars=more)
        if self.result.cost_usd + ESTIMATE_MARGIN * (this_call + report) >= limit:
            raise JobEnded(Status.BUDGET_EXCEEDED, f"spent ${self.result.cost_usd:.4f} of max_cost_usd ${limit:g}, "
                                              f"keeping ${report:.4f} for the report", last_call=True)

    def _report_floor(self) -> int:
        """The report's output the reserve plans for: what ``REPORT_SHARE`` of the budget buys, at least
        ``MIN_REPORT_TOKENS``, at most ``REPORT_TOKENS`` (and ``max_output_tokens``)."""
        most = min(REPORT_TOKENS, self.spec.limits.max_output_tokens)
        per_token = self.prices.cost(self.spec.model, Usage(output_tokens=1_000_000)) / 1_000_000
        limit = self.spec.limits.max_cost_usd
        if limit is None or per_token <= 0:
            return most
        return max(MIN_REPORT_TOKENS, min(most, int(limit * REPORT_SHARE / per_token)))

    def _report_tokens(self) -> int:
        """The last call's ``max_tokens``: what the job's budget still affords after the call's input
        (so the report never takes the job over ``max_cost_usd``), at most ``max_output_tokens``; 0 when
        the input alone would."""
        limit, most = self.spec.limits.max_cost_usd, self.spec.limits.max_output_tokens
        if limit is None:
            return most
        left = limit - self.result.cost_usd - ESTIMATE_MARGIN * self._next_call_cost(output_tokens=0)
        per_token = self.prices.cost(self.spec.model, Usage(output_tokens=1_000_000)) / 1_000_000
        return max(0, min(most, int(left / per_token))) if per_token > 0 else most

    def _next_call_cost(self, output_tokens: int | None = None, more_chars: int = 0) -> float:
        """What a call carrying the current context (and ``more_chars``) would cost: its size in tokens
        from the last real usage (tokens per character), and as much output as the largest reply so far."""
        state = self.state
        if not state.last_tokens or not state.last_chars:
            return 0.0
        tokens = state.last_tokens * (state.window.total + state.overhead_chars + more_chars) / state.last_chars
        output = self._most_output if output_tokens is None else output_tokens
        return self.prices.cost(self.spec.model, Usage(input_tokens=int(tokens), output_tokens=output))

    def _check_run_budget(self) -> None:
        if self.run_budget.exceeded:
            raise JobEnded(Status.BUDGET_EXCEEDED, f"the run spent ${self.run_budget.spent:.4f}, "
                                              f"its max_cost_usd is ${self.run_budget.limit:g}")

    def _checkpoint(self) -> None:
        """Queue metrics.json as it stands (status ``running``), at most once a second: progress and
        spend survive a crash. Written by the next call's flush, after that turn's lines."""
        now = time.monotonic()
        if now - self._last_checkpoint < CHECKPOINT_INTERVAL_S:
            return
        self._last_checkpoint = now
        result = self.result
        result.compactions = dict(self.state.compactions)
        result.persisted_bytes = self.state.persisted_bytes
        result.wall_s = self._wall()
        self.store.queue(files={METRICS: dumps(result.to_json()) + "\n"})

    def _wall(self) -> float:
        """Wall time of every segment the job ran: the earlier ones' and this one's so far."""
        return self._wall_before + time.monotonic() - self._started

    def _update_progress(self) -> None:
        p = self.progress
        p.turns = self.result.turns
        p.context_chars = self.state.window.total
        p.compactions = sum(self.state.compactions.values())
        p.cost_usd = self.result.cost_usd
        p.input_tokens = self.result.usage.input_tokens + self.state.summarizer_usage.input_tokens
        p.output_tokens = self.result.usage.output_tokens + self.state.summarizer_usage.output_tokens

    async def _write_outputs(self) -> None:
        result, state = self.result, self.state
        result.compactions = dict(state.compactions)
        result.persisted_bytes = state.persisted_bytes
        result.summarizer_usage = state.summarizer_usage
        result.cost_usd = self._cost()
        self._update_progress()
        run_dir = self.store.dir.parent
        try:  # the last turn's queued lines (a cancelled or failed turn's too) go before the final files
            await self.store.flush()
        except DiskQuotaExceeded as e:  # the last turn is not on disk: not a success
            if result.status == Status.SUCCEEDED:
                result.status, result.error = Status.DISK_QUOTA, e.strerror
            else:
                result.error = (result.error or "") + f" (could not write the last turn's lines: {e.strerror})"
        except (OSError, ValueError) as e:
            result.error = (result.error or "") + f" (could not write the last turn's lines: {e})"
        if result.status != Status.SUCCEEDED or self.final_text is not None:
            text = final_markdown(result.status, result.error, self.final_text, state.window.messages)
            try:
                await final_write(run_dir, lambda: self.store.write_text(FINAL, text))
            except OSError as e:  # the disk failed us: say so in the result, do not hide the job's own outcome
                result.error = (result.error or "") + f" (could not write {FINAL}: {e})"
        try:  # written last: a job whose metrics say succeeded has its final.md
            await final_write(run_dir, lambda: self.store.write_json(METRICS, result.to_json()),
                              lambda: self.store.overwrite_json(METRICS, result.to_json()))
        except OSError as e:
            result.error = (result.error or "") + f" (could not write {METRICS}: {e})"
        # only now: run.json (written from the progress of running jobs) never calls a job ended
        # before its final.md and metrics.json are on disk
        self.progress.status = result.status

