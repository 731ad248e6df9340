"""What ``runner replay`` judges: anything that, given a history, returns the view it would send.

Two verbs, as inspect_ai's compaction has them: :meth:`Contestant.prepare` takes the history so far
(the caller keeps it) and returns the messages to send; :meth:`Contestant.record` learns from the
call's usage. :meth:`Contestant.reactive` answers a request over the window (the API's "prompt is
too long"), :meth:`Contestant.targets` says what each pointer in a view leads to.

:class:`CompactorContestant` is the runner's own Compactor with one of its strategies, driven as a
session drives it; peers (inspect_ai, OpenHands) are contestants written in ``bench/``.

Guarantees (of :class:`CompactorContestant`): the Compactor runs as in a job (its store writes every
saved output and summary into ``job_dir``, its events and context records included); a strategy
whose requests carry the API's context editing (``clear``) has its view edited as the API (and the
emulator) edits it, by :func:`runner.compaction.clearing.clear_tool_uses`, and what was cleared
counted as in a job (``tool_use_clearing``); a pointer is a
path of the job directory named in the view (a saved output, a summary, a memory file) or a range of
the transcript (``transcript.jsonl messages A-B``, the snip marker's and the summary's), and its
target is that file's text, or those transcript lines.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path
from typing import Any, Literal, Protocol

from ..agent.history import History
from ..billing import input_tokens
from ..compaction.clearing import apply_clear_edits
from ..compaction.compactor import CompactionState, Compactor
from ..compaction.fallback import fallback_summary
from ..compaction.summarizer import Summarizer, Summary
from ..config import Limits
from ..messages import Message
from ..models.base import Reply
from ..pricing import Usage
from ..rundir.docs import TRANSCRIPT
from ..rundir.store import JobStore, dumps
from ..tools.recall import RECALL_TOOL
from .facts import result_texts, said_texts

JOB_FILE = re.compile(r"\b(?:tool-results|summaries|memories)/[\w.@%+=-]+(?:/[\w.@%+=-]+)*")
TRANSCRIPT_RANGE = re.compile(re.escape(TRANSCRIPT) + r" \(?messages (\d+)-(\d+)")


class Contestant(Protocol):
    """One way of keeping a history inside a window, judged by :func:`runner.replay.engine.replay`."""

    name: str
    tools: list[dict[str, Any]]  # the tools it adds to the recorded agent's (ours: recall)

    @property
    def summary_usage(self) -> Usage:
        """Every summary call's usage so far."""

    @property
    def summaries(self) -> int:
        """Summary calls so far."""

    @property
    def compactions(self) -> Counter[str]:
        """Compactions so far, by stage."""

    async def start(self, system: str, tools: list[dict[str, Any]]) -> None:
        """Called once, before the first call: the request's system prompt and tools."""

    async def prepare(self, history: list[Message]) -> list[Message]:
        """The messages to send, given the whole history so far."""

    def cache_points(self) -> tuple[int, ...]:
        """Messages of the last prepared view after which a cache breakpoint goes (``()``: the newest)."""

    async def record(self, usage: Usage) -> None:
        """The call of the last prepared view was billed ``usage``."""

    async def reactive(self) -> bool:
        """The last view was over the window: make room; False when nothing can be done."""

    def targets(self, view: list[Message]) -> dict[str, str]:
        """Each pointer in ``view`` and the text it leads to."""


class DeterministicSummarizer(Summarizer):
    """The summarizer every strategy gets in a replay: the runner's deterministic fallback summary,
    billed as the summary call :class:`Summarizer` would send (its request's tokens in, the summary's
    tokens out, at ``model_name``'s prices)."""

    def __init__(self, model_name: str, tokens: Any):
        super().__init__(None, model_name)
        self._tokens = tokens

    @property
    def available(self) -> bool:
        return True

    async def summarize(
        self,
        messages: list[Message],
        active_request: str,
        max_chars: int | None = None,
        *,
        where: str = TRANSCRIPT,
        delivery: Literal["live", "batch"] | None = None,
        caller: tuple[str, int] | None = None,
    ) -> Summary:
        request = self.request(messages, active_request, max_chars)
        text = fallback_summary(messages, max_chars or 1_000_000)
        usage = Usage(
            input_tokens=self._tokens(request.system, request.messages, []),
            output_tokens=self._tokens(None, [{"role": "assistant", "content": text}], []),
        )
        self.calls += 1
        return Summary(text, usage)


class CompactorContestant:
    """The runner's Compactor with the strategy ``limits.compaction`` names, on a store in ``job_dir``."""

    def __init__(self, name: str, limits: Limits, job_dir: Path, *, summarizer: Summarizer):
        self.name = name
        self.tools = [RECALL_TOOL]
        self.compactor = Compactor(summarizer)
        self.store = JobStore(job_dir)
        self.limits = limits
        self.state: CompactionState | None = None
        self.history: History | None = None
        self.added: list[Message] = []
        self._lines: dict[int, str] = {}
        self._applied: list[dict[str, Any]] = []  # the API's context editing of the last view
        self._system: str | None = None
        self.summary_usage = Usage()  # its summaries' (CompactionState.on_summary)
        self._tools: list[dict[str, Any]] = []

    async def start(self, system: str, tools: list[dict[str, Any]]) -> None:
        await self.store.open()
        self._overhead = len(json.dumps([system, tools], ensure_ascii=False))
        self._system, self._tools = system or None, tools

    def _summarized(self, summary: Summary) -> None:
        self.summary_usage.add(summary.usage)

    @property
    def summaries(self) -> int:
        return self.compactor.summarizer.calls

    @property
    def compactions(self) -> Counter[str]:
        return Counter(self.state.record.compactions) if self.state else Counter()

    async def prepare(self, history: list[Message]) -> list[Message]:
        if self.state is None:
            first = history[0]
            active = "\n".join(said_texts(first))
            self.state = CompactionState(
                limits=self.limits, active_request=active, on_summary=self._summarized
            )
            self.state.overhead_chars = self._overhead
            self.history = History(self.store, self.state)
        new = history[len(self.added) :]
        if new:
            assert self.history is not None
            self.history.add(*new)
            self.added += new
        view = await self.compactor.prepare(self.state, self.store)
        view, applied = apply_clear_edits(
            view,
            self.state.strategy.context_management(),
            lambda messages: input_tokens(self._system, messages, self._tools),
        )
        self._applied = [edit.model_dump(mode="json") for edit in applied]
        return view

    def cache_points(self) -> tuple[int, ...]:
        assert self.state is not None
        return self.state.strategy.cache_points(self.state.window)

    async def record(self, usage: Usage) -> None:
        assert self.state is not None
        reply = Reply(content=[], stop_reason="end_turn", usage=usage, applied_edits=self._applied)
        self.compactor.record(self.state, reply, self.store)

    async def reactive(self) -> bool:
        assert self.state is not None
        return await self.compactor.reactive(self.state, self.store)

    def targets(self, view: list[Message]) -> dict[str, str]:
        found: dict[str, str] = {}
        for message in view:
            for text in said_texts(message) + result_texts(message):
                for rel in JOB_FILE.findall(text):
                    if rel not in found and (target := self._file(rel)) is not None:
                        found[rel] = target
                for first, last in TRANSCRIPT_RANGE.findall(text):
                    key = f"{TRANSCRIPT} messages {first}-{last}"
                    if key not in found:
                        found[key] = self._transcript(int(first), int(last))
        return found

    def _file(self, rel: str) -> str | None:
        try:
            path = self.store.resolve(rel.rstrip("."))
            return path.read_text(encoding="utf-8", errors="replace") if path.is_file() else None
        except (OSError, ValueError):
            return None

    def _transcript(self, first: int, last: int) -> str:
        lines = []
        for n in range(max(1, first), min(last, len(self.added)) + 1):
            if n not in self._lines:
                self._lines[n] = dumps(self.added[n - 1])
            lines.append(self._lines[n])
        return "\n".join(lines)
