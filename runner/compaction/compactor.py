"""The Compactor: one per batch, shared by every session; keeps each history inside its budget.

The session keeps the history (:class:`runner.agent.history.History` appends every message to
``transcript.jsonl`` and hands it to the window); the Compactor returns the view to send. Two verbs,
as a session uses it: :meth:`Compactor.prepare` before every model call (cheapest and most
recoverable stage first: tool_result_budget, snip, then, only when over the context limit,
micro_compact, fit_tool_results and, last, compact_history) returns the messages to send, its
outputs persisted through the job's writer it is handed; :meth:`Compactor.record` after it learns
from the reply (the token estimate calibrated from its usage, what was sent marked seen, the API's
context editing counted; :meth:`Compactor.server_compacted` adopts a server-side compaction once
the session has added the reply). :meth:`Compactor.reactive` answers a "prompt is too long" refusal;
:meth:`Compactor.compact` serves the ``compact`` tool.

Guarantees:
- Nothing removed from context is lost: every output is written to the job directory (through the
  writer each verb is handed) before the messages whose placeholders name it leave the Compactor (or
  reach a summarizer); every message is in ``transcript.jsonl``, written by the session's history,
  never by the Compactor. The writes are queued in the writer (:meth:`JobStore.queue`: the history's
  transcript lines, the stages' outputs, events and ``context.jsonl`` records) and ``prepare``
  writes all of them, the turn's transcript lines included, in one executor hop.
- Each stage that changes the history appends one line to ``events.jsonl`` and bumps
  ``compactions[stage]``.
- The Compactor writes no usage, cost or call count: each summary call's outcome, answered or failed
  (its usage, its wire counts, its batch), goes to the state's ``on_summary`` (the job's spend).
- ``prepare`` does work proportional to what changed since the last call: sizes are measured once
  per message and kept as a running total.
- The circuit breaker: after ``max_summary_failures`` consecutive summary failures, the job's
  summaries come from the deterministic fallback, without a model call.
- A summary (the model's or the fallback's) takes at most ``summary_share`` of the context limit.
- ``prepare(state, model_summary=False)`` (a job's last call, whose time reserve is one call's) never
  asks a model: a history compaction it needs takes the fallback summary.
- The memory files (:mod:`runner.tools.memory`) are never compacted; every history compaction's summary
  message ends with their index (names and sizes, at most ``MEMORY_INDEX_CHARS``), so the model
  knows what it kept outside the window.
- Thrashing: a history compaction (``compact_history``, ``reactive_compact``) within ``thrash_turns``
  turns of the one before, or one that frees less than ``thrash_freed_share`` of the limit, is a
  strike on the job's :class:`Thrash` ladder (the session's, handed to its state);
  ``thrash_strikes`` strikes in a row escalate: summaries of half the share, then summaries of the
  notes alone (memory-only carry-over), then :attr:`Thrash.reason` gives the reason (with the
  numbers) and the session, which consults the ladder before each call, ends the job ``stuck`` with
  a report of what it has.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..config import Limits
from ..messages import Message
from ..models.base import Reply
from ..models.wire import counts_of
from ..pricing import Usage
from ..protocol import COMPACTED, REACTIVE_COMPACT, THRASHING, memory_index
from ..rundir.docs import CONTEXT, EVENTS, TRANSCRIPT, CompactionEvent, JobMetrics, SummaryFailedEvent
from ..rundir.store import JobStore, dumps, in_thread, read_jsonl
from ..tools.memory_files import memory_files
from . import stages
from .context import Recorder
from .fallback import fallback_summary
from .stages import Outcome, Stage
from .strategies import Strategy, strategy_for
from .summarizer import Summarizer, Summary
from .window import Entry, Window

HISTORY_STAGES = (Stage.COMPACT_HISTORY, Stage.REACTIVE_COMPACT)  # the compactions the thrash ladder watches
LEVEL_HALF, LEVEL_NOTES, LEVEL_STUCK = 1, 2, 3


@dataclass
class Thrash:
    """The thrash ladder of one job: its level and the run of poor history compactions behind it."""

    level: int = 0  # 0: summaries of summary_share; 1: of half of it; 2: notes only; 3: stuck
    strikes: int = 0  # poor compactions in a row since the last step up
    last_turn: int | None = None
    run: list[tuple[int | None, float]] = field(
        default_factory=list
    )  # (turns since the one before, share freed)
    reason: str | None = None

    def observe(self, turn: int, freed: float, limits: Limits) -> None:
        gap = None if self.last_turn is None else turn - self.last_turn
        self.last_turn = turn
        if freed >= limits.thrash_freed_share and (gap is None or gap > limits.thrash_turns):
            self.strikes = 0
            self.run.clear()  # a good compaction: the level stays (going back would oscillate)
            return
        self.run.append((gap, freed))
        self.strikes += 1
        if self.strikes < limits.thrash_strikes or self.level >= LEVEL_STUCK:
            return
        self.level += 1
        self.strikes = 0
        if self.level >= LEVEL_STUCK:
            gaps = ", ".join("-" if g is None else str(g) for g, _ in self.run)
            freed_shares = ", ".join(f"{f:.0%}" for _, f in self.run)
            self.reason = THRASHING.format(
                compactions=len(self.run),
                turns=limits.thrash_turns,
                share=f"{limits.thrash_freed_share:.0%}",
                gaps=gaps,
                freed=freed_shares,
            )

    def why(self) -> str:
        return f"{len(self.run)} poor compactions in a row"


@dataclass
class CompactionState:
    """One session's compaction state; the session owns it, the shared Compactor works on it. It
    writes nothing itself: the window takes what the session's history added (:meth:`take`), and the
    Compactor's verbs write through the writer they are handed."""

    limits: Limits
    active_request: str
    window: Window = field(default_factory=Window)
    transcript_len: int = 0  # the transcript's messages the window has taken
    summary_failures: int = 0
    # the job's record: the Compactor counts compactions and persisted bytes in it
    record: JobMetrics = field(default_factory=JobMetrics)
    # told of each summary call, answered or failed (the job's spend charges it); None: counted nowhere
    on_summary: Callable[[Summary], None] | None = None
    # token-aware trigger: real usage of the last call, and the window size it was measured at
    last_tokens: int | None = None
    last_chars: int = 0

    # characters of everything a request carries besides the messages (system prompt, tool definitions)
    overhead_chars: int = 0
    recorder: Recorder = field(default_factory=Recorder)
    # the job's compaction strategy; by default the one its limits name
    strategy: Strategy = None  # type: ignore[assignment]
    turns: int = 0  # assistant messages taken (the thrash ladder's clock)
    # the job's thrash ladder: the session's, which it consults before each call
    thrash: Thrash = field(default_factory=Thrash)

    def __post_init__(self) -> None:
        if self.strategy is None:
            self.strategy = strategy_for(self.limits)

    def take(self, message: Message, seq: int, chars: int | None = None) -> None:
        """The window takes ``message``, the ``seq``-th of the transcript (``chars``: the length of
        its transcript line, its size in the window, when the history has serialized it).

        The window after a take is the window of the newest ``context.jsonl`` record plus the transcript
        lines written since (what :meth:`resume_from` rebuilds), so only a compaction writes a record."""
        self.turns += message.get("role") == "assistant"
        self.transcript_len = seq
        self.recorder.added(message, seq)
        self._append(message, chars)

    def context_record(self) -> dict[str, Any]:
        """The window as ``context.jsonl`` records it: by reference (see :mod:`.context`)."""
        record: dict[str, Any] = {
            "n": self.transcript_len,
            "entries": self.recorder.encode(self.window.entries),
        }
        if self.summary_failures:
            record["summary_failures"] = self.summary_failures
        if self.last_tokens:
            record["last_tokens"], record["last_chars"] = self.last_tokens, self.last_chars
        return record

    def resume_from(self, record: dict[str, Any], transcript: list[Message], writer: JobStore) -> None:
        """Continue from a ``context.jsonl`` record: its window, then the transcript lines written after
        it (``transcript`` is the whole transcript a resumed job keeps). Raises when they disagree."""
        n = int(record["n"])
        if not 0 < n <= len(transcript):
            raise ValueError(
                f"context record names {n} transcript messages, the transcript has {len(transcript)}"
            )
        entries = self.recorder.decode(
            record["entries"], transcript, writer, active_request=self.active_request
        )
        self.window.replace(entries)
        self.transcript_len = n
        self.summary_failures = int(record.get("summary_failures", 0))
        self.last_tokens, self.last_chars = record.get("last_tokens"), int(record.get("last_chars", 0))
        for message in transcript[n:]:
            self.transcript_len += 1
            self.recorder.added(message, self.transcript_len)
            self._append(message)
        if len(transcript) > n:  # calls were made after the record: the model saw all but new results
            self._mark_restored_seen()

    async def resume(self, transcript: list[Message], writer: JobStore) -> bool:
        """Continue a resumed job: from the newest ``context.jsonl`` record in ``writer``'s directory that
        fits ``transcript`` (the context the job had), else by loading the whole transcript. True when a
        record was used. Runs off the loop (it reads ``context.jsonl`` and the outputs the record names);
        the session waits."""
        self.turns = sum(1 for m in transcript if m.get("role") == "assistant")
        return await in_thread(self._resume_sync)(transcript, writer)

    def _resume_sync(self, transcript: list[Message], writer: JobStore) -> bool:
        records, _ = read_jsonl(writer.dir / CONTEXT)
        for record in reversed(records):
            if (
                not isinstance(record, dict)
                or not isinstance(record.get("n"), int)
                or record["n"] > len(transcript)
            ):
                continue
            try:
                self.resume_from(record, transcript, writer)
                return True
            except (KeyError, IndexError, TypeError, ValueError, OSError, AttributeError):
                self.window, self.recorder, self.transcript_len = Window(), Recorder(), 0
                break  # the newest fitting record is damaged: an older one would lose work silently
        for message in transcript:
            self.transcript_len += 1
            self.recorder.added(message, self.transcript_len)
            self._append(message)
        self._mark_restored_seen()
        return False

    def _mark_restored_seen(self) -> None:
        entries = self.window.entries
        unseen = entries[-1:] if entries and entries[-1].message["role"] == "user" else []
        self.window.replace(
            [Entry(e.message, e.chars, e.seq, True) for e in entries[: len(entries) - len(unseen)]] + unseen
        )

    def _append(self, message: Message, chars: int | None = None) -> None:
        """A message with the same role as the newest one (the continuation of a paused turn) is merged
        into it, so the request's roles keep alternating; the transcript keeps both as written."""
        entries = self.window.entries
        if entries and entries[-1].message["role"] == message["role"]:
            merged = stages.join(entries[-1:], [Entry.of(message, self.transcript_len)])
            self.window.replace([*entries[:-1], *merged])
        else:
            self.window.append(message, self.transcript_len, chars)

    def summarized(self, summary: Summary) -> None:
        """A summary call's outcome (a failed one: no text, no usage), handed to ``on_summary``."""
        if self.on_summary is not None:
            self.on_summary(summary)

    def calibrate(self, tokens: int, chars: int) -> None:
        """The token estimate's ratio: a request of ``chars`` characters (messages and overhead) was
        ``tokens`` tokens."""
        self.last_tokens, self.last_chars = tokens, chars

    def estimated_tokens(self, more_chars: int = 0) -> int | None:
        """The tokens of a request carrying the window (and ``more_chars``), at the ratio the last call
        measured; None before any measurement."""
        if not self.last_tokens or not self.last_chars:
            return None
        return int(
            self.last_tokens * (self.window.total + self.overhead_chars + more_chars) / self.last_chars
        )

    def char_limit(self) -> int:
        """The context limit in characters: the char limit, or tighter, the token limit converted
        with the ratio observed on the last call."""
        limit = self.limits.context_char_limit
        token_limit = self.limits.context_token_limit
        if token_limit and self.last_tokens and self.last_chars:
            ratio = self.last_tokens / self.last_chars  # tokens per character of the whole request
            whole = int(self.last_chars + (token_limit - self.last_tokens) / ratio)
            limit = min(limit, whole - self.overhead_chars)
        elif token_limit:  # no measurement yet: a cautious 3 chars per token
            limit = min(limit, token_limit * 3 - self.overhead_chars)
        return max(limit, 1)

    def summary_chars(self) -> int:
        """The most characters a summary may take now: ``summary_share`` of the context limit, half
        of that once the thrash ladder has stepped up."""
        share = self.limits.summary_share / (2 if self.thrash.level >= LEVEL_HALF else 1)
        return max(1, int(self.char_limit() * share))

    def apply(self, stage: str, outcome: Outcome | None, writer: JobStore) -> None:
        """Adopt a stage's outcome and queue its writes in ``writer``: the next ``prepare`` (or the job's
        end) writes them, before any model sees the window."""
        writes = Writes()
        self.adopt(stage, outcome, writes)
        writes.queue(self, writer)

    def adopt(self, stage: str, outcome: Outcome | None, writes: Writes) -> None:
        """Adopt a stage's outcome, queueing its outputs and its event line in ``writes``."""
        if outcome is None:
            return
        before = self.window.snapshot()
        old = self.window.entries
        first_change = next(
            (i for i, (a, b) in enumerate(zip(old, outcome.entries, strict=False)) if a is not b),
            min(len(old), len(outcome.entries)),
        )
        sent = sum(1 for e in old if e.seen)  # the prefix the last request sent, and may have cached
        self.window.replace(outcome.entries)
        after = self.window.snapshot()
        self.record.count(stage)
        self.record.persisted_bytes += sum(
            len(item.content.encode("utf-8", "surrogatepass")) for item in outcome.persist
        )
        writes.outputs += [(item.path, item.content) for item in outcome.persist]
        writes.events.append(
            CompactionEvent(
                stage=stage,
                messages_before=before["messages"],
                messages_after=after["messages"],
                chars_before=before["chars"],
                chars_after=after["chars"],
                paths=sorted(set(outcome.paths)),
                # a rewrite inside what was already sent costs the prompt cache from there on
                cache_invalidated_from=first_change if first_change < sent else None,
            ).line()
        )


@dataclass
class Writes:
    """Outputs and event lines of the stages of one call, queued together with the new window."""

    outputs: list[tuple[str, str]] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)

    def queue(self, state: CompactionState, writer: JobStore) -> None:
        """Queue outputs, the events that name them and the new window (``context.jsonl``) in the job's
        writer, for its next flush (which writes the outputs first)."""
        if self.outputs or self.events:
            outputs, events = self.outputs, self.events
            self.outputs, self.events = [], []
            writer.queue(
                outputs,
                {
                    EVENTS: [dumps(e) for e in events],
                    CONTEXT: [dumps(state.context_record())] if events else [],
                },
            )


class _StageRun:
    """The :class:`~runner.compaction.strategies.Stages` a strategy works through in one ``prepare``."""

    def __init__(
        self, compactor: Compactor, state: CompactionState, writer: JobStore, *, model_summary: bool
    ):
        self._compactor = compactor
        self._state = state
        self._writer = writer
        self._model_summary = model_summary
        self.window = state.window
        self.limits = state.limits
        self.writes = Writes()
        self.name_for = writer.reserve
        self.saved_for = writer.reserved_for
        self.char_limit = state.char_limit

    def adopt(self, stage: str, outcome: Outcome | None) -> None:
        self._state.adopt(stage, outcome, self.writes)

    async def summarize(self, stage: str) -> None:
        self.writes.queue(self._state, self._writer)
        await self._compactor.compact_history(
            self._state, self._writer, stage, model_summary=self._model_summary
        )


class Compactor:
    """Shared by all sessions of a batch. Holds no per-session state of its own."""

    def __init__(self, summarizer: Summarizer):
        self.summarizer = summarizer

    async def prepare(
        self, state: CompactionState, writer: JobStore, *, model_summary: bool = True
    ) -> list[Message]:
        """Let the job's strategy compact ``state``'s window as needed; return the view to send
        (``model_summary=False``: a summary it needs is the fallback's, without a model call).

        Everything ``writer`` (the job's) has queued (the transcript lines the history added since the
        last call, the session's event lines) and the stages' outputs and events are written in one
        executor hop before this returns (and before a summary is asked for), so nothing outside
        ``prepare`` ever sees a placeholder whose file is not on disk; a failed write fails the call,
        and with it the job."""
        run = _StageRun(self, state, writer, model_summary=model_summary)
        await state.strategy.prepare(run)
        run.writes.queue(state, writer)
        await writer.flush()
        return state.window.messages

    async def compact_history(
        self,
        state: CompactionState,
        writer: JobStore,
        stage: str = Stage.COMPACT_HISTORY,
        *,
        model_summary: bool = True,
    ) -> None:
        """5/7. Summarize everything but the trailing messages the model has not seen yet."""
        entries = state.window.entries
        tail_start = stages.unseen_tail_start(entries)
        if tail_start == 0:
            return
        await self._summarize_into(
            state, writer, stage, COMPACTED, tail_start=tail_start, model_summary=model_summary
        )

    async def compact(self, state: CompactionState, writer: JobStore) -> None:
        """7. The ``compact`` tool: runs after the whole tool batch, every tool_use answered."""
        await self.compact_history(state, writer, Stage.COMPACT_TOOL)

    async def reactive(self, state: CompactionState, writer: JobStore) -> bool:
        """6. After "prompt is too long": summarize all but the newest ``keep_recent_messages``
        (pair-safe). Returns False when there is nothing left to summarize."""
        entries = state.window.entries
        tail_start = stages.safe_tail_start(entries, max(0, len(entries) - state.limits.keep_recent_messages))
        while tail_start < len(entries) and entries[tail_start].message["role"] != "assistant":
            tail_start += 1  # the summary is a user message; the kept tail starts with the assistant
        if tail_start == 0:
            tail_start = stages.unseen_tail_start(entries)
        if tail_start == 0:
            return False
        await self._summarize_into(
            state, writer, Stage.REACTIVE_COMPACT, REACTIVE_COMPACT, tail_start=tail_start
        )
        return True

    async def _summarize_into(
        self,
        state: CompactionState,
        writer: JobStore,
        stage: str,
        label: str,
        *,
        tail_start: int,
        model_summary: bool = True,
    ) -> None:
        entries = state.window.entries
        old = [e.message for e in entries[:tail_start]]
        seqs = [e.seq for e in entries[:tail_start] if e.seq is not None]
        transcript = f"{TRANSCRIPT} (messages 1-{max(seqs)} of this session)" if seqs else TRANSCRIPT
        text = await self._summary(state, writer, old, transcript, model=model_summary)
        summary_path = writer.queue_summary(text)  # written with the compaction's event
        where = f"{transcript}; summary in {summary_path}"
        memory = memory_index(await in_thread(memory_files)(str(writer.dir)))
        message = stages.summary_message(label, state.active_request, text, where=where, memory=memory)
        state.recorder.summary(message, summary_path, label, where=where, memory=memory)
        outcome = Outcome(stages.replace_with_summary(entries, tail_start, message), paths=[summary_path])
        before = state.window.total
        state.apply(stage, outcome, writer)
        if stage in HISTORY_STAGES:
            state.thrash.observe(
                state.turns, (before - state.window.total) / state.char_limit(), state.limits
            )

    async def _summary(
        self,
        state: CompactionState,
        writer: JobStore,
        messages: list[Message],
        where: str = TRANSCRIPT,
        *,
        model: bool = True,
    ) -> str:
        budget = state.summary_chars()
        if state.thrash.level >= LEVEL_NOTES:  # memory-only carry-over: the notes alone, no model call
            return fallback_summary(messages, budget, notes_only=state.thrash.why())
        breaker_open = state.summary_failures >= state.limits.max_summary_failures
        if model and self.summarizer.available and not breaker_open:
            try:
                await writer.flush()  # the summarizer is a model: every file it may be shown is on disk
                summary = await self.summarizer.summarize(
                    messages,
                    state.active_request,
                    budget,
                    where=where,
                    delivery=state.limits.delivery,
                    caller=(state.record.job, state.record.turns + 1),
                )
            except Exception as e:  # counted for the breaker; this compaction still happens
                state.summarized(Summary("", Usage(), wire=counts_of(e)))  # what the call met
                state.summary_failures += 1
                writer.queue_records(
                    EVENTS,
                    [
                        SummaryFailedEvent(
                            error=f"{type(e).__name__}: {e}"[:300],
                            consecutive_failures=state.summary_failures,
                        ).line()
                    ],
                )
            else:
                state.summary_failures = 0
                state.summarized(summary)
                return summary.text
        return fallback_summary(messages, budget)

    def record(self, state: CompactionState, reply: Reply, writer: JobStore) -> None:
        """After a call: calibrate the token estimate from the reply's real usage (what the model saw
        as input, plus what the API's context editing cleared from it), mark what the call carried as
        seen, count and log the API's context editing (``tool_use_clearing``, the window unchanged: the
        API edits each request anew from the whole history). A reply the API compacted server-side is
        the session's to add to its history, then :meth:`server_compacted`'s to adopt."""
        if reply.usage.context_tokens:  # what the API's context editing cleared was sent all the same
            tokens = reply.usage.context_tokens + reply.cleared_input_tokens
            state.calibrate(tokens, state.window.total + state.overhead_chars)
        state.window.mark_seen()
        if reply.applied_edits:
            state.record.count(Stage.TOOL_USE_CLEARING)
            n, chars = len(state.window), state.window.total
            event = CompactionEvent(
                stage=Stage.TOOL_USE_CLEARING,
                messages_before=n,
                messages_after=n,
                chars_before=chars,
                chars_after=chars,
                applied_edits=reply.applied_edits,
            )
            writer.queue_records(EVENTS, [event.line()])

    def server_compacted(self, state: CompactionState, writer: JobStore) -> None:
        """The API compacted the last call server-side (its reply, when it has content, added to the
        history since): as the API ignores everything before its compaction block, the window keeps
        only the first user message and that reply (both in the transcript)."""
        entries = state.window.entries
        if len(entries) > 2 and entries[0].message["role"] == "user":
            state.apply(Stage.SERVER_COMPACTION, Outcome([entries[0], entries[-1]]), writer)
        else:
            state.record.count(Stage.SERVER_COMPACTION)
