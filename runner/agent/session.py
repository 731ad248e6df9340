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
``stuck`` (the model kept repeating one call after being told, or its compactions thrash), ``disk_quota`` (its
files reached ``limits.max_job_bytes``) or ``cancelled``. Whatever the
ending, ``final.md`` and ``metrics.json`` are written (shielded from cancellation) and the
transcript holds every message that was added.
"""

from __future__ import annotations

import json
import time
from dataclasses import replace

import anyio

from ..compaction.compactor import CompactionState, Thrash
from ..compaction.strategies import strategy_for
from ..jobs import JobSpec
from ..messages import Message, one_line, text_of, tool_uses
from ..models.base import BackendUnusable, PromptTooLong, Reply
from ..models.wire import ANSWER_BY
from ..protocol import CONTINUE_AFTER_MAX_TOKENS, CUT_OFF
from ..rundir.docs import JOB_JSON, METRICS, JobMetrics, Status
from ..rundir.store import DiskQuotaExceeded, JobStore, dumps
from ..services import Budget
from ..tools.base import error_result
from ..tools.toolset import Toolset
from . import incremental
from .calls import JobCalls
from .clock import JobClock, answer_within, time_reserve
from .final_report import write_final_documents
from .history import History
from .resumer import Resumer
from .shared import Services
from .spend import JobEnded, Spend
from .subagents import Subagents

CHECKPOINT_INTERVAL_S = 1.0


def new_record(spec: JobSpec) -> JobMetrics:
    """A queued job's record, before its session starts."""
    return JobMetrics(job=spec.name, status=Status.QUEUED, model=spec.model)


class Session:
    """Runs one job to an ending, in its ``record`` (mutated as it goes: the executor and the display
    read it). ``history`` continues a resumed job from its transcript, ``prior`` from its record.

    The session owns the job's history (:class:`History`: every message written to the transcript,
    taken into the compaction state's window), its thrash ladder (consulted before each call) and its
    writer, the store, which it hands to each of the Compactor's verbs."""

    def __init__(
        self,
        spec: JobSpec,
        *,
        services: Services,
        store: JobStore,
        record: JobMetrics | None = None,
        history: list[Message] | None = None,
        prior: JobMetrics | None = None,
    ):
        self.spec, self.services, self.store = spec, services, store
        self.model, self.compactor = services.model, services.compactor
        store.max_bytes = spec.limits.max_job_bytes
        self.record = record if record is not None else new_record(spec)
        self.record.error = None
        self.thrash = Thrash()  # the job's thrash ladder: the Compactor steps it, the session consults it
        self.state = CompactionState(
            limits=spec.limits,
            active_request=spec.prompt,
            strategy=strategy_for(spec.limits, self.model.server_compaction),
            record=self.record,
            thrash=self.thrash,
        )
        self.history = History(store, self.state)
        self.spend = Spend(
            self.record, spec.limits, spec.model, services.summary_model, services.prices, services.budget
        )
        if prior is not None:  # a resumed job keeps what it spent (rebuilt from events.jsonl at _begin)
            self.spend.carry_over(prior)
        self.state.on_summary = self.spend.charge_summary  # the compactor's summaries, charged
        self.spend.settle(charge=False)  # what an earlier segment spent is not this run's
        self.resumer = Resumer(history, into=self.history, spend=self.spend) if history else None
        # the run's deadline ends the job's timeout; the earlier segments' wall time is carried on
        self.clock = JobClock(spec.limits.timeout_s, services.deadline, prior.wall_s if prior else 0.0)
        self.final_text: str | None = None
        self._last_checkpoint = float("-inf")
        self._reactive_retries = 0  # reactive compactions since the last call the API accepted
        self.calls: JobCalls  # the job's model calls (made once the toolset is open: they carry its tools)

    async def run(self) -> JobMetrics:
        """The job to its ending; its final documents written whatever the ending."""
        self.clock.start()
        record = self.record
        record.started, record.status = time.time(), Status.RUNNING
        timeout, why = self.clock.segment()
        outer = ANSWER_BY.get()  # a parent's, for a subagent's session
        answer_by = ANSWER_BY.set(answer_within(timeout - time_reserve(timeout), outer))
        try:
            try:
                with anyio.move_on_after(timeout - time_reserve(timeout)) as scope:
                    await self._loop()
                if scope.cancelled_caught:
                    raise JobEnded(Status.TIMEOUT, why, last_call=True)
                record.status = Status.SUCCEEDED
            except JobEnded as e:
                record.status, record.error = e.status, e.error
                if e.last_call:
                    ANSWER_BY.set(answer_within(time_reserve(timeout), outer))
                    with anyio.move_on_after(time_reserve(timeout)):
                        await self._last_call(e.error)
        except JobEnded as e:  # the last call itself went over a limit: the report is built without it
            record.error = f"{record.error}; {e.error}"
        except anyio.get_cancelled_exc_class():
            record.status, record.error = Status.CANCELLED, "cancelled before it finished"
            raise
        except DiskQuotaExceeded as e:  # its final documents are still written (exempt from the quota)
            record.status, record.error = Status.DISK_QUOTA, e.strerror
        except BackendUnusable as e:  # the batch stops; this job's files still say why
            record.status, record.error = Status.FAILED, str(e)
            raise
        except Exception as e:  # one job's failure is its own; the batch goes on
            record.status, record.error = Status.FAILED, one_line(f"{type(e).__name__}: {e}")
        finally:
            with anyio.CancelScope(shield=True):
                await self._end()
            ANSWER_BY.reset(answer_by)
        return record

    async def _loop(self) -> None:
        """The agent loop: one :meth:`step` a turn until the model answers."""
        await self._begin()
        spec = self.spec
        subagents = None  # the task tool's (a subagent's spec never lists it)
        if "task" in spec.tools:
            subagents = await Subagents.of_job(
                spec,
                store=self.store,
                spend=self.spend,
                run_child=self._run_child,
                ends=self.clock.ends_working(),
                history=self.resumer.history if self.resumer else [],
            )
        async with Toolset(
            str(spec.workspace), spec.tools, self.store, limits=spec.limits, task=subagents
        ) as toolset:
            if self.resumer is not None:
                await self.resumer.ready_tools(toolset)
            self._offer(toolset)
            while not await self.step(toolset):
                self._checkpoint()

    async def step(self, toolset: Toolset) -> bool:
        """One turn: the limits checked, the history prepared and sent, the reply kept and acted on.
        True when the job is done."""
        self.spend.check_before_call()
        reply = await self._query()
        if reply is None:  # the prompt was too long and a reactive compaction made room: ask again
            return False
        deferred = self._keeps_with_results(reply)
        if reply.content and not deferred and not reply.compacted:
            self.history.add(reply.message())
        try:
            self.spend.check()
        except JobEnded:
            if deferred:  # what was paid for is kept
                self.history.add(reply.message())
            raise
        return await self._act(reply, toolset, kept=[] if not deferred else [reply.message()])

    async def _begin(self) -> None:
        """Record the job, and start its history: the prompt, or where a resumed job stopped."""
        spec = self.spec
        await self.store.write_json(JOB_JSON, spec.to_json())
        if self.resumer is not None:
            await self.resumer.restore()
            self.clock.wall_before = max(self.clock.wall_before, self.resumer.wall_before)
        else:  # an incremental job's note on its baseline follows the prompt (the window joins the two)
            self.history.add(
                {"role": "user", "content": spec.prompt},
                *await incremental.start(spec, self.store, self.record),
            )

    async def _run_child(
        self,
        spec: JobSpec,
        store: JobStore,
        record: JobMetrics,
        *,
        history: list[Message] | None,
        prior: JobMetrics | None,
        budget: Budget,
    ) -> JobMetrics:
        """A subagent's session, on this job's services (its share of the budget), to its ending."""
        services = replace(self.services, budget=budget)
        return await Session(
            spec, services=services, store=store, record=record, history=history, prior=prior
        ).run()

    def _offer(self, toolset: Toolset) -> None:
        """What every request carries: the model, the system prompt, the tool definitions (the strategy
        says whether ``compact`` is one), the job's retries and delivery."""
        spec, state = self.spec, self.state
        offers_compact = state.strategy.offers_compact_tool
        tools = [t for t in toolset.definitions() if t["name"] != "compact" or offers_compact]
        state.overhead_chars = len(json.dumps([spec.system, tools], ensure_ascii=False))
        self.calls = JobCalls.of_job(
            spec,
            tools=tools,
            model=self.model,
            spend=self.spend,
            history=self.history,
            compactor=self.compactor,
            clock=self.clock,
        )
        if self.resumer is not None:
            self.resumer.calibrate()
            self.spend.check()  # a resumed job may already have spent its budget

    async def _query(self) -> Reply | None:
        """Prepare the history and call the model. None when the API found the prompt too long and a
        reactive compaction made room: the call is made again."""
        state = self.state
        messages = await self.compactor.prepare(state, self.store)
        if stuck := self.thrash.reason:  # its compactions thrash: a report of what it has
            raise JobEnded(Status.STUCK, stuck, last_call=True)
        self.spend.check_reserve(state)  # on the window this call carries, compacted
        try:
            reply = await self.calls.turn(messages)
        except PromptTooLong as e:
            await self._reactive(str(e))
            return None
        if reply.stop_reason == "model_context_window_exceeded":
            self.spend.check()
            await self._reactive("model context window exceeded")
            return None
        self._reactive_retries = 0
        return reply

    async def _last_call(self, reason: str) -> None:
        """One call with the tools listed but none allowed: the model writes its report from what it
        has. Without it (no room in the budget, or a failure of its own) the job's ending stands and
        its report is built from the history."""
        record = self.record
        if not hasattr(self, "calls"):  # it ended before its tools were open: nothing to call with
            return
        try:
            reply = await self.calls.last(reason)
        except (JobEnded, BackendUnusable):
            raise
        except Exception as x:
            record.error = f"{record.error}; the last call failed: {one_line(f'{type(x).__name__}: {x}')}"
            return
        if reply is None:
            record.error = f"{record.error}; no room left in max_cost_usd for the last call"
            return
        if reply.content and not reply.compacted:
            self.history.add(reply.message())
        self.final_text = text_of(reply.message())

    @staticmethod
    def _keeps_with_results(reply: Reply) -> bool:
        """A reply with tool calls is written together with their results (one write a turn); if the
        run dies in between, resume would drop the unanswered reply anyway (a reply the API compacted
        is in the history already: JobCalls.send added it for Compactor.server_compacted)."""
        return (
            bool(reply.content)
            and not reply.compacted
            and reply.stop_reason in ("tool_use", "max_tokens")
            and bool(tool_uses(reply.message()))
        )

    async def _act(self, reply: Reply, toolset: Toolset, *, kept: list[Message]) -> bool:
        """Act on a reply by its stop reason (the table above); ``kept``: the reply, when it is written
        with its results. True when the job is done."""
        calls, stop = tool_uses(reply.message()), reply.stop_reason
        if stop == "refusal":
            raise JobEnded(Status.FAILED, "the model refused to continue (stop_reason: refusal)")
        if stop in ("pause_turn", "compaction"):
            return False  # unfinished turn: sent back as it is (an empty one is simply asked again)
        if stop == "max_tokens" and not reply.content:
            limit = self.spec.limits.max_output_tokens
            raise JobEnded(Status.FAILED, f"the model produced no output within max_output_tokens = {limit}")
        if calls and stop == "max_tokens":  # the last call may be cut off: run none, say so in each result
            cut = f"{CUT_OFF} by the output token limit, so this call may be incomplete; send it again"
            results = [error_result(str(c.get("id", "")), cut) for c in calls]
            self.history.add(*kept, {"role": "user", "content": results})
            return False
        if calls and stop == "tool_use":
            results = await toolset.run_batch(calls, self.record.turns, refused=reply.refused_calls)
            self.history.add(*kept, {"role": "user", "content": results})
            if stuck := toolset.stuck():
                raise JobEnded(Status.STUCK, stuck)
            if toolset.compact_requested:
                toolset.compact_requested = False
                await self.compactor.compact(self.state, self.store)
            return False
        if stop == "max_tokens":
            self.history.add({"role": "user", "content": CONTINUE_AFTER_MAX_TOKENS})
            return False
        self.final_text = text_of(reply.message())
        return True

    async def _reactive(self, reason: str) -> None:
        """Compact after the API found the prompt too long; JobEnded when that keeps happening or
        there is nothing left to compact (``_reactive_retries`` counts back to 0 at an accepted call)."""
        if self._reactive_retries >= self.spec.limits.max_reactive_retries:
            raise JobEnded(
                Status.FAILED, f"prompt is too long even after reactive compaction ({one_line(reason)})"
            )
        if not await self.compactor.reactive(self.state, self.store):
            raise JobEnded(
                Status.FAILED, f"prompt is too long and there is nothing left to compact ({one_line(reason)})"
            )
        self._reactive_retries += 1

    def _checkpoint(self) -> None:
        """Queue metrics.json as it stands (status ``running``), at most once a second: progress and
        spend survive a crash. Written by the next call's flush, after that turn's lines."""
        now = time.monotonic()
        if now - self._last_checkpoint < CHECKPOINT_INTERVAL_S:
            return
        self._last_checkpoint = now
        self.record.wall_s = self.clock.wall()
        self.store.queue(files={METRICS: dumps(self.record.document()) + "\n"})

    async def _end(self) -> None:
        """The job's last spend settled and its final documents written."""
        record = self.record
        record.wall_s = self.clock.wall()
        self.spend.settle()
        record.context_chars = self.state.window.total
        await write_final_documents(
            record, self.store, answer=self.final_text, history=self.state.window.messages
        )
