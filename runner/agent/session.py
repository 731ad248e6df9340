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
from typing import Any

import anyio

from ..compaction.compactor import HISTORY_STAGES, CompactionState, Compactor
from ..compaction.strategies import strategy_for
from ..compaction.window import Entry
from ..jobs import JobSpec
from ..messages import Message, merge_adjacent, one_line, text_of, tool_uses
from ..models.base import BackendUnusable, Model, PromptTooLong, Reply, Request
from ..models.wire import ANSWER_BY, WireCounts, counts_of
from ..pricing import DEFAULT_TABLE, PriceTable
from ..protocol import CUT_OFF, NO_TOOLS, OUT_OF_TURNS
from ..rundir.docs import (
    BATCH_FIELDS,
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
from ..tools.base import error_result
from ..tools.toolset import Toolset
from . import incremental
from .continuation import Ledger, cut_spend, read_ledger, rebuild_memory
from .final_report import final_markdown
from .safe_request import api_valid
from .spend import MIN_REPORT_TOKENS, JobEnded, Spend, turns_spent
from .subagents import Subagents

CHECKPOINT_INTERVAL_S = 1.0
CONTINUE_AFTER_MAX_TOKENS = (
    "Your reply was cut off by the output token limit. Continue from where you stopped."
)


def time_reserve(timeout_s: float) -> float:
    """The part of a job's timeout kept for its last call: a tenth, at most a minute."""
    return min(60.0, timeout_s / 10)


def answer_within(seconds: float, outer: float | None) -> float:
    """When a session's calls must be answered (epoch seconds; :data:`~runner.models.wire.ANSWER_BY`,
    which a late delivery goes live in time for): ``seconds`` from now, never after ``outer`` (an
    enclosing session's, for a subagent)."""
    mine = time.time() + seconds
    return mine if outer is None else min(mine, outer)


def new_record(spec: JobSpec) -> JobMetrics:
    """A queued job's record, before its session starts."""
    return JobMetrics(job=spec.name, status=Status.QUEUED, model=spec.model)


def model_call_event(record: JobMetrics, chars: int, reply: Reply, lines: int) -> dict[str, Any]:
    """The ``events.jsonl`` line of one answered model call: the context it carried (characters of the
    messages, and tokens as the reply's usage counted them), and the job's whole spend so far (its
    cost, usage, summaries' usage, compaction counts, persisted bytes, wall time); ``lines``: the
    transcript lines before the call's reply. A resumed job starts from such a line
    (:func:`~runner.agent.continuation.read_ledger`)."""
    doc = record.document()
    return {
        **ModelCallEvent(
            turn=record.turns,
            chars=chars,
            tokens=reply.usage.context_tokens,
            estimated=reply.estimated,
            cost_usd=doc["cost_usd"],
            batch=getattr(reply, "batch", None),
        ).line(),  # models/batches.py BatchReply
        "lines": lines,
        **{
            k: doc[k]
            for k in ("usage", "summarizer_usage", "compactions", "persisted_bytes", "wall_s", *BATCH_FIELDS)
            if k in doc
        },
    }


class Session:
    """Runs one job to an ending, in its ``record`` (mutated as it goes: the executor and the display
    read it). ``history`` continues a resumed job from its transcript, ``prior`` from its record."""

    def __init__(
        self,
        spec: JobSpec,
        *,
        model: Model,
        compactor: Compactor,
        store: JobStore,
        summary_model: str,
        record: JobMetrics | None = None,
        history: list[Message] | None = None,
        prior: JobMetrics | None = None,
        run_budget: Budget | None = None,
        prices: PriceTable | None = None,
        deadline: float | None = None,
    ):
        self.spec = spec
        self.model = model
        self.compactor = compactor
        self.store = store
        store.max_bytes = spec.limits.max_job_bytes
        self.record = record if record is not None else new_record(spec)
        self.record.error = None
        self.state = CompactionState(
            store=store,
            limits=spec.limits,
            active_request=spec.prompt,
            strategy=strategy_for(spec.limits, model.server_compaction),
            record=self.record,
        )
        self.spend = Spend(
            self.record,
            spec.limits,
            spec.model,
            summary_model,
            prices or DEFAULT_TABLE,
            run_budget or RunBudget(),
        )
        if prior is not None:  # a resumed job keeps what it spent (rebuilt from events.jsonl at _begin)
            self.spend.carry_over(prior)
        self.state.on_summary = self.spend.charge_summary  # the compactor's summaries, charged
        self.spend.settle(charge=False)  # what an earlier segment spent is not this run's
        self.history = history
        self.deadline = deadline  # the run's (epoch seconds): the job's timeout ends by then
        self.final_text: str | None = None
        self._last_checkpoint = float("-inf")
        self._reactive_retries = 0  # reactive compactions since the last call the API accepted
        self._tools: list[dict[str, Any]] = []
        self._wall_before = prior.wall_s if prior is not None else 0.0  # the job's earlier segments'
        self._started = time.monotonic()
        self._ledger: Ledger | None = None  # where a resumed job's spend was rebuilt from

    async def run(self) -> JobMetrics:
        self._started = time.monotonic()
        record = self.record
        record.started, record.status = time.time(), Status.RUNNING
        timeout, why = self._timeout()
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
                        try:
                            await self._last_call(e.error)
                        except (JobEnded, BackendUnusable):
                            raise
                        except Exception as x:  # the job's ending stands; the report is built without it
                            record.error = (
                                f"{record.error}; the last call failed: "
                                f"{one_line(f'{type(x).__name__}: {x}')}"
                            )
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
            record.wall_s = self._wall()
            with anyio.CancelScope(shield=True):
                await self._write_outputs()
            ANSWER_BY.reset(answer_by)
        return record

    def _timeout(self) -> tuple[float, str]:
        """The seconds this segment may run and what it says when they are up: ``timeout_s``, or less
        when the run's deadline comes first (the report's reserve is then kept before the deadline)."""
        timeout = self.spec.limits.timeout_s
        if self.deadline is not None and self.deadline - time.time() < timeout:
            left = max(1.0, self.deadline - time.time())
            return (
                left,
                f"reached the run's deadline ({time.strftime('%H:%M:%S', time.localtime(self.deadline))})",
            )
        return timeout, f"timed out after {timeout:g} s"

    async def _loop(self) -> None:
        """The agent loop: before every call the limits are checked and the history prepared; a reply
        is kept, its tool calls run and their results appended, until the model answers."""
        await self._begin()
        async with Toolset(
            str(self.spec.workspace),
            self.spec.tools,
            self.store,
            self.spec.limits,
            task=await self._subagents(),
        ) as toolset:
            if self.history:
                await rebuild_memory(self.store.dir, self.history)
                await toolset.replay(self.history, turns=self._turns_made())
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
            await in_thread(cut_spend)(
                self.store.dir, len(self.history)
            )  # as a resume's cut does (a no-op after one)
            await state.resume(self.history)
            self.spend.resume_at(sum(1 for m in merge_adjacent(self.history) if m["role"] == "assistant"))
            ledger = await in_thread(read_ledger)(self.store.dir, len(self.history))
            if ledger is not None:
                self._rebuild(ledger)
                self._unsee_after(ledger)
        else:  # an incremental job's note on its baseline follows the prompt (the window joins the two)
            await state.add(
                {"role": "user", "content": spec.prompt},
                *await incremental.start(spec, self.store, self.record),
            )

    async def _subagents(self) -> Subagents | None:
        """The job's subagents, when it has the ``task`` tool (a subagent's spec never lists it)."""
        if "task" not in self.spec.tools:
            return None
        timeout, _ = self._timeout()
        subagents = Subagents(
            parent=self.spec,
            job_dir=self.store.dir,
            spend=self.spend,
            run_child=self._run_child,
            store=self.store,  # its subagents' files count against this job's max_job_bytes
            deadline=self._started + timeout - time_reserve(timeout),
        )
        await subagents.load()
        subagents.count = sum(1 for m in self.history or [] for c in tool_uses(m) if c.get("name") == "task")
        return subagents

    async def _run_child(
        self,
        spec: JobSpec,
        store: JobStore,
        record: JobMetrics,
        history: list[Message] | None,
        prior: JobMetrics | None,
        budget: Budget,
    ) -> JobMetrics:
        """A subagent's session, on this job's services, to its ending."""
        return await Session(
            spec,
            model=self.model,
            compactor=self.compactor,
            store=store,
            summary_model=self.spend.summary_model,
            record=record,
            history=history,
            prior=prior,
            run_budget=budget,
            prices=self.spend.prices,
            deadline=self.deadline,
        ).run()

    def _offer(self, toolset: Toolset) -> None:
        """The tool definitions every request carries (the strategy says whether ``compact`` is one)."""
        state = self.state
        strategy = state.strategy
        self._tools = [
            t for t in toolset.definitions() if t["name"] != "compact" or strategy.offers_compact_tool
        ]
        state.overhead_chars = len(json.dumps([self.spec.system, self._tools], ensure_ascii=False))
        if self._ledger is not None and self._ledger.last is not None and self._ledger.last.tokens:
            last = self._ledger.last  # the token estimate as the last kept call measured it
            state.calibrate(last.tokens, last.chars + state.overhead_chars)
        if self.history:
            self.spend.check()  # a resumed job may already have spent its budget

    def _rebuild(self, ledger: Ledger) -> None:
        """A resumed job's spend as it stood at its last kept reply: cost, usage (its own and its
        summaries'), compactions, persisted bytes, turns, wall time of the earlier segments; and what
        the reserve and the thrash ladder had learned from the calls and compactions before it."""
        self._ledger = ledger
        record, state, spend, last = self.record, self.state, self.spend, ledger.last
        record.compactions = dict(last.compactions or {} if last else {})
        record.persisted_bytes = last.persisted_bytes or 0 if last else 0
        spend.restore(ledger)  # usage, turns, batch parts, cost: spent by the earlier segments
        self._wall_before = max(self._wall_before, last.wall_s or 0.0 if last else 0.0)
        outputs = [c.usage.output_tokens if c.usage else 0 for c in ledger.calls]
        spend.most_output = max((b - a for a, b in zip([0, *outputs], outputs, strict=False)), default=0)
        if last:
            previous = ledger.calls[-2].chars if len(ledger.calls) > 1 else 0
            spend.growth, spend.last_sent = max(0, last.chars - previous), last.chars
        # the thrash ladder, from the history compactions kept (the turns as the compactor counted them)
        assistants = [i for i, m in enumerate(self.history or []) if m.get("role") == "assistant"]
        for event, before in ledger.compactions:
            if event.stage in HISTORY_STAGES:
                turns = sum(1 for i in assistants if before is not None and i <= before)
                freed = (event.chars_before - event.chars_after) / state.char_limit()
                state.thrash.record(turns, freed, self.spec.limits)

    def _turns_made(self) -> dict[int, int]:
        """The turn each kept call was made at, by the index of its reply in the kept history."""
        calls = self._ledger.calls if self._ledger else []
        return {c.lines: c.turn for c in calls if c.lines is not None}

    def _unsee_after(self, ledger: Ledger) -> None:
        """The restored window as the model saw it: what the last kept call carried is seen, the reply
        and results written after it are not (the stages that act on seen messages decide alike)."""
        lines = ledger.last.lines if ledger.last and ledger.last.lines is not None else 0
        window = self.state.window
        window.replace(
            [
                Entry(e.message, e.chars, e.seq, e.seen and not (e.seq is not None and e.seq > lines))
                for e in window.entries
            ]
        )

    def _check_before_call(self) -> None:
        """Raise JobEnded when this call would go over a limit (the last turn is kept for the report)."""
        if self.record.turns + 1 >= self.spec.limits.max_turns:
            raise JobEnded(Status.MAX_TURNS, turns_spent(self.spec.limits.max_turns), last_call=True)
        self.spend.check_run()

    def _request(
        self,
        messages: list[Message],
        *,
        max_tokens: int,
        tool_choice: dict[str, Any] | None = None,
        cache_points: tuple[int, ...] = (),
    ) -> Request:
        spec, strategy = self.spec, self.state.strategy
        return Request(
            model=spec.model,
            messages=api_valid(messages),
            tools=self._tools,
            max_tokens=max_tokens,
            system=spec.system,
            context_management=strategy.context_management(),
            max_retries=spec.limits.max_retries,
            cache_points=cache_points,
            tool_choice=tool_choice,
            delivery=spec.limits.delivery,
        )

    async def _query(self) -> Reply | None:
        """Prepare the history and call the model. None when the API found the prompt too long and a
        reactive compaction made room: the call is made again."""
        state = self.state
        messages = await self.compactor.prepare(state)
        if stuck := self.compactor.stuck(state):  # its compactions thrash: a report of what it has
            raise JobEnded(Status.STUCK, stuck, last_call=True)
        self.spend.check_reserve(state)  # on the window this call carries, compacted
        request = self._request(
            messages,
            max_tokens=self.spec.limits.max_output_tokens,
            cache_points=state.strategy.cache_points(state.window),
        )
        try:
            reply = await self._call(request)
        except PromptTooLong as e:
            await self._reactive(str(e))
            return None
        if reply.stop_reason == "model_context_window_exceeded":
            self.spend.check()
            await self._reactive("model context window exceeded")
            return None
        self._reactive_retries = 0
        return reply

    async def _call(self, request: Request) -> Reply:
        """One model call, and everything an answered one means: its spend charged, its line in
        events.jsonl, the compactor told (:meth:`Compactor.record`)."""
        state, record = self.state, self.record
        sent_chars = state.window.total
        reply = await self._create(replace(request, caller=(record.job, record.turns + 1)))
        self.spend.charge(reply)
        self.spend.sent(sent_chars)
        record.context_chars = sent_chars
        record.wall_s = self._wall()
        self.store.queue_records(EVENTS, [model_call_event(record, sent_chars, reply, state.transcript_len)])
        await self.compactor.record(state, reply)
        return reply

    async def _step(self, reply: Reply, toolset: Toolset) -> bool:
        """Keep a reply and act on it; True when the job is done."""
        state = self.state
        # a reply with tool calls is written together with their results (one write a turn); if
        # the run dies in between, resume would drop the unanswered reply anyway (a reply the API
        # compacted is in the window already: Compactor.record adopted it)
        deferred = (
            bool(reply.content)
            and not reply.compacted
            and reply.stop_reason in ("tool_use", "max_tokens")
            and bool(tool_uses(reply.message()))
        )
        if reply.content and not deferred and not reply.compacted:
            await state.add(reply.message())
        try:
            self.spend.check()
        except JobEnded:
            if deferred:  # what was paid for is kept
                await state.add(reply.message())
            raise
        return await self._handle(reply, toolset, deferred)

    async def _create(self, request: Request) -> Reply:
        """One model call (the SDK's retries inside it), and a line in events.jsonl when it needed any."""
        wire = WireCounts()
        try:
            reply = await self.model.create(request)
            wire = reply.wire  # charged with the reply (_call)
            return reply
        except BaseException as e:
            wire = counts_of(e)
            self.spend.count(wire)  # a failed call's
            raise
        finally:
            if wire.needed_retries:
                self.store.queue_records(
                    EVENTS,
                    [
                        RetriesEvent(
                            attempts=wire.requests,
                            rate_limited_429=wire.rate_limited_429,
                            overloaded_529=wire.overloaded_529,
                            server_errors_5xx=wire.server_errors_5xx,
                        ).line()
                    ],
                )

    async def _last_call(self, reason: str) -> None:
        """One call with the tools listed but none allowed: the model writes its report from what it has."""
        state = self.state
        self.store.queue_records(EVENTS, [LastCallEvent(reason=reason).line()])
        # writes what the store has queued; a summary it needs costs no call (the reserve is one call's)
        messages = await self.compactor.prepare(state, model_summary=False)
        # the instruction goes with this request only: the transcript keeps alternating roles
        messages = merge_adjacent(
            [*messages, {"role": "user", "content": OUT_OF_TURNS.format(reason=reason)}]
        )
        max_tokens = self.spend.report_tokens(state)
        if max_tokens < MIN_REPORT_TOKENS:  # the budget has no room for it: the report is built without it
            self.record.error = f"{self.record.error}; no room left in max_cost_usd for the last call"
            return
        reply = await self._call(self._request(messages, max_tokens=max_tokens, tool_choice=NO_TOOLS))
        if reply.content and not reply.compacted:
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
            raise JobEnded(
                Status.FAILED,
                f"the model produced no output within max_output_tokens = "
                f"{self.spec.limits.max_output_tokens}",
            )
        if calls and stop == "max_tokens":  # the last call may be cut off: run none, say so in each result
            results = [
                error_result(
                    str(c.get("id", "")),
                    f"{CUT_OFF} by the output token limit, so this call may be incomplete; send it again",
                )
                for c in calls
            ]
            await self.state.add(
                *([reply.message()] if deferred else []), {"role": "user", "content": results}
            )
            return False
        if calls and stop == "tool_use":
            results = await self._run_calls(toolset, calls, reply.refused_calls)
            await self.state.add(
                *([reply.message()] if deferred else []), {"role": "user", "content": results}
            )
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

    async def _run_calls(
        self, toolset: Toolset, calls: list[dict[str, Any]], refused: dict[str, str]
    ) -> list[dict[str, Any]]:
        """One result per call, in order: the toolset's, and an error result for each call the backend
        refused to pass on (its input was too large), which is never run."""

        def is_refused(call: dict[str, Any]) -> bool:
            return isinstance(call.get("id"), str) and call["id"] in refused

        if not any(is_refused(c) for c in calls):
            return await toolset.run_batch(calls, self.record.turns)
        allowed = [c for c in calls if not is_refused(c)]
        ran = iter(await toolset.run_batch(allowed, self.record.turns) if allowed else [])
        return [error_result(c["id"], refused[c["id"]]) if is_refused(c) else next(ran) for c in calls]

    async def _reactive(self, reason: str) -> None:
        """Compact after the API found the prompt too long; JobEnded when that keeps happening or
        there is nothing left to compact (``_reactive_retries`` counts back to 0 at an accepted call)."""
        if self._reactive_retries >= self.spec.limits.max_reactive_retries:
            raise JobEnded(
                Status.FAILED, f"prompt is too long even after reactive compaction ({one_line(reason)})"
            )
        if not await self.compactor.reactive(self.state):
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
        self.record.wall_s = self._wall()
        self.store.queue(files={METRICS: dumps(self.record.document()) + "\n"})

    def _wall(self) -> float:
        """Wall time of every segment the job ran: the earlier ones' and this one's so far."""
        return self._wall_before + time.monotonic() - self._started

    async def _write_outputs(self) -> None:
        record, state = self.record, self.state
        self.spend.settle()
        record.context_chars = state.window.total
        run_dir = self.store.dir.parent
        try:  # the last turn's queued lines (a cancelled or failed turn's too) go before the final files
            await self.store.flush()
        except DiskQuotaExceeded as e:  # the last turn is not on disk: not a success
            if record.status == Status.SUCCEEDED:
                record.status, record.error = Status.DISK_QUOTA, e.strerror
            else:
                record.error = (
                    record.error or ""
                ) + f" (could not write the last turn's lines: {e.strerror})"
        except (OSError, ValueError) as e:
            record.error = (record.error or "") + f" (could not write the last turn's lines: {e})"
        if record.status != Status.SUCCEEDED or self.final_text is not None:
            text = final_markdown(record.status, record.error, self.final_text, state.window.messages)
            try:
                await final_write(run_dir, lambda: self.store.write_text(FINAL, text))
            except (
                OSError
            ) as e:  # the disk failed us: say so in the record, do not hide the job's own outcome
                record.error = (record.error or "") + f" (could not write {FINAL}: {e})"
        try:  # written last: a job whose metrics say succeeded has its final.md
            await final_write(
                run_dir,
                lambda: self.store.write_json(METRICS, record.document()),
                lambda: self.store.overwrite_json(METRICS, record.document()),
            )
        except OSError as e:
            record.error = (record.error or "") + f" (could not write {METRICS}: {e})"
