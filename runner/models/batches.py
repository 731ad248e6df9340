"""Model calls delivered as Message Batches (``[runner] delivery = "batch"``): the batch price, the
reply when the batch ends instead of at once.

A :class:`Batcher` collects the requests of every running job (their summaries too) into groups and
sends each group as one Message Batch through the SDK's public batches API (``client.messages.batches``,
or ``client.beta.messages.batches`` for a request that needs betas). :class:`BatchModel` is the
:class:`~runner.models.base.Model` each caller holds (one for the jobs, one for the summarizer); it
calls its ``live`` model instead when the deadline is near.

Guarantees:
- A request joins the open group of its betas. The group is sent when it holds ``max_requests``
  requests (or ``MAX_BATCH_BYTES`` of bodies), or ``window_s`` after its first request, by one of its
  own waiters (no background task): the first, or whichever still waits when that one is cancelled.
  A waiter cancelled before the send leaves the group; the send itself is shielded, so a batch that
  was created always has its id kept.
- Each request's body is the one the live backend would post (the same cache breakpoints, tools,
  system prompt and betas), its breakpoints with the TTL ``cache_ttl`` (``[runner] batch_cache_ttl``,
  1 hour by default, a call the deadline sends live too: a batch turn outlasts five minutes); a job
  whose delivery is live never reaches the batcher; its ``custom_id`` names the job and the turn asked
  (the request's ``caller``: plain values its session gives, never the job's record), and 12 hex
  digits of the body's sha256 without its cache breakpoints (a resumed job places them anew), within
  ``^[a-zA-Z0-9_-]{1,64}$`` and unique in its batch.
- A sent batch is polled with ``retrieve`` every ``poll_s`` seconds, doubling up to ``poll_max_s``;
  when it has ended its results are fetched once and each waiter gets its own by ``custom_id``.
  The batches API's HTTP requests are counted for no call (:func:`~.wire.uncounted`).
- The results file is the server's, and trusted no more than a reply (:func:`Batcher._download`):
  its ``results_url`` must be on the base URL's origin (scheme, host, port), else it is refused before
  any request, so the API key never leaves the configured host (the guard refuses a redirect elsewhere
  too); it is read as a stream through the HTTP guard within a byte cap (:data:`LINE_SLACK` more than
  ``max_reply_bytes`` for each request of the batch) and a total deadline (``request_timeout_s``, plus
  :data:`RESULT_S` for each request, never past the run's deadline), line by line, a line at most
  ``max_reply_bytes + LINE_SLACK`` (a longer one is skipped as it streams, never held). Only the
  first line of each of the batch's own ``custom_id``s is kept; every other line (another id, a
  repeat, one that is not a result) is dropped and counted (``foreign_results``). A download that
  fails (refused, over the cap or the deadline, the connection lost, an HTTP error) keeps the lines it
  read; the requests it has no line for go live, and the journal says why.
- Every batch id, status and error text a server sent is shown escaped (:func:`shown`) in what the
  batcher writes for a person (its status line, its errors).
- Outcomes: ``succeeded``: the reply, checked by :func:`~runner.models.anthropic.reply_of` exactly
  as a live one, naming its batch (``Reply.batch``: its caller, the job's spend, prices its usage at
  the batch discount); ``errored`` with a retryable error (overloaded, api_error, rate limit,
  timeout), ``expired``, and ``canceled`` while the run is not stopping: sent again in the next group,
  one more resend on the call's counts (``Reply.wire.resends``, or its exception's: a retry of the
  job's) (after the request's ``max_retries`` resends, live); a prompt too long: :class:`PromptTooLong`; any
  other error fails the call (:class:`BatchRequestFailed`) as it would fail live.
- The deadline governor: a call's answer is needed by its job's end (:data:`~runner.models.wire.ANSWER_BY`,
  which the run's deadline bounds: the session's loop ends before it, the report's reserve kept) or by
  the run's deadline, whichever is first; ``live_s`` before that is its cut-off. When ``now + window_s
  + the expected turnaround`` (the last batch's turnaround, or the age of the oldest batch in flight
  when larger) would pass the cut-off, the call goes live. A batch still in flight at the earliest
  cut-off of its requests is cancelled (no poll sleeps past it), and its requests not answered go live
  (also those of a batch that has not ended ``min(CANCEL_TIMEOUT_S, live_s / 2)`` after its cancel);
  its results download ends ``live_s / 2`` before their answer is needed, so a stalled download leaves
  the live call its time too.
- Crash-safe (with a journal, ``batches.jsonl`` in the run directory): every batch created is
  recorded (its id, betas, custom_ids, when) before anything waits on it. A request whose custom_id
  a recorded batch holds (the same job, turn and body: a resumed job asking again) is answered from
  that batch's results (awaited when it has not ended, fetched once per batch) when it succeeded there,
  so nothing is paid for twice; otherwise it is sent as usual.
- :meth:`Batcher.aclose` cancels every batch still in flight (best effort, shielded, at most
  ``CANCEL_TIMEOUT_S``); after it, a canceled request fails instead of being sent again.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
from collections.abc import AsyncIterator, Collection
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

import anyio
import httpx2  # the SDK's HTTP library: the streamed results file is its raw response

from ..config import RunnerSection, deadline_at
from ..messages import one_line
from .anthropic import AnthropicModel, reply_of, request_params
from .base import Model, PromptTooLong, Reply, Request
from .guard import download, same_origin
from .wire import ANSWER_BY, attach, counts_of, uncounted

RETRYABLE = frozenset({"overloaded_error", "api_error", "rate_limit_error", "timeout_error"})
MAX_BATCH_BYTES = 200_000_000  # of request bodies in one batch (the API takes 256 MB)
CANCEL_TIMEOUT_S = 5.0
LINE_SLACK = 16 * 1024  # a result line's bytes beyond its message's: its custom_id, result type, JSON
RESULT_S = 0.1  # the results download's time for each request of its batch, beyond request_timeout_s
PIECE = 64 * 1024  # the results file is read in pieces of at most this many bytes
LIVE = {"type": "live"}  # not the API's: the batch's results could not be read, the call goes live
NO_RESULT = {
    "type": "errored",
    "error": {
        "type": "error",
        "error": {"type": "api_error", "message": "the batch's results have no line for this request"},
    },
}


class BatchRequestFailed(Exception):
    """A batch answered a request with an error its live call would fail with too."""


class ResultsRefused(Exception):
    """A batch's ``results_url`` is not one the runner fetches (missing, or not on the base URL's origin)."""


def shown(text: object, limit: int = 200) -> str:
    """``text`` for a person: every character a terminal could act on (``str.isprintable`` is false:
    controls, escapes, bidi controls, separators, lone surrogates) as a visible ``\\xNN`` / ``\\uNNNN``,
    cut to ``limit`` characters. (:func:`runner.ui.terminal.printable`'s rule, here because models sit
    below ui.)"""
    out = "".join(
        c if c.isprintable() else f"\\x{ord(c):02x}" if ord(c) <= 0xFF else f"\\u{ord(c):04x}"
        for c in str(text)
    )
    return out if len(out) <= limit else out[: limit - 3] + "..."


async def result_lines(pieces: AsyncIterator[bytes], max_line: int) -> AsyncIterator[bytes | None]:
    """The lines of a stream of ``pieces`` (without their newline; empty ones left out), None for a line
    over ``max_line`` bytes: skipped as it streams, never held whole."""
    line = bytearray()
    skipping = False
    async for piece in pieces:
        start = 0
        while start < len(piece):
            end = piece.find(b"\n", start)
            stop = len(piece) if end < 0 else end
            if not skipping:
                line += piece[start:stop]
                if len(line) > max_line:
                    line.clear()
                    skipping = True
            if end < 0:
                break
            if skipping:
                skipping = False
                yield None
            elif line:
                yield bytes(line)
                line.clear()
            start = end + 1
    if skipping:
        yield None
    elif line:
        yield bytes(line)


def custom_id_of(job: str, turn: int, params: dict[str, Any]) -> str:
    """``<job>-t<turn>-<12 hex digits of the body's sha256>``, at most 64 characters of ``[a-zA-Z0-9_-]``;
    the body without its ``cache_control`` markers (they change what is billed, not the answer, and a
    resumed job places them from a cache memory it does not carry over)."""
    body = json.dumps(_without_cache_control(params), sort_keys=True, separators=(",", ":")).encode()
    digest = hashlib.sha256(body).hexdigest()[:12]
    tail = f"-t{turn}-{digest}"
    name = re.sub(r"[^a-zA-Z0-9_-]", "_", job)[: 64 - len(tail)] or "job"
    return name + tail


def _resent(reply: Reply, resends: int) -> Reply:
    """``reply`` with the number of times a batch was asked again for it."""
    return replace(reply, wire=replace(reply.wire, resends=resends)) if resends else reply


def _without_cache_control(value: Any) -> Any:
    """``value`` without ``cache_control`` keys, a message's lone text block as its text (a breakpoint
    on a string message puts it in that block form: the same message to the API)."""
    if isinstance(value, dict):
        out = {k: _without_cache_control(v) for k, v in value.items() if k != "cache_control"}
        content = out.get("content")
        if "role" in out and isinstance(content, list) and len(content) == 1:
            block = content[0]
            if isinstance(block, dict) and block.keys() == {"type", "text"} and block["type"] == "text":
                out["content"] = block["text"]
        return out
    if isinstance(value, list):
        return [_without_cache_control(v) for v in value]
    return value


@dataclass(eq=False)
class Waiter:
    params: dict[str, Any]
    result: dict[str, Any] | None = None  # the result line's ``result``, as the API sent it


@dataclass(eq=False)
class Group:
    """The requests of one batch, before and after it is sent."""

    betas: tuple[str, ...]
    opened: float  # monotonic: its first request
    poll_s: float
    waiters: dict[str, Waiter] = field(default_factory=dict)  # by custom_id
    answer_by: float | None = None  # epoch seconds: the earliest of its requests' (see Batcher.answer_by)
    size: int = 0  # bytes of request bodies
    closed: bool = False  # no request joins any more
    full: anyio.Event = field(default_factory=anyio.Event)
    batch_id: str | None = None
    sent: float | None = None  # monotonic
    cancel_sent: bool = False
    failed: BaseException | None = None  # the send or a poll failed: every waiter's call fails with it
    driving: bool = False
    driver_left: anyio.Event = field(default_factory=anyio.Event)


class Batcher:
    """The batch's open groups and its batches in flight, shared by every :class:`BatchModel`."""

    def __init__(
        self,
        backend: AnthropicModel,
        *,
        window_s: float = 2.0,
        max_requests: int = 10_000,
        poll_s: float = 1.0,
        poll_max_s: float = 60.0,
        deadline: float | None = None,
        max_retries: int = 4,
        live_s: float = 30.0,
    ):
        self.backend = backend
        self.window_s = window_s
        self.max_requests = max_requests
        self.poll_s = poll_s
        self.poll_max_s = poll_max_s
        self.deadline = deadline  # epoch seconds
        self.max_retries = max_retries
        self.live_s = live_s  # kept before a call's answer is needed, for it to go live
        self.open: dict[tuple[str, ...], Group] = {}
        self.in_flight: dict[str, Group] = {}
        self.last_turnaround: float | None = None
        self.last_batch: str | None = None
        self.batches_sent = 0
        self.stopping = False
        self.journal: Path | None = None
        self.recorded: dict[str, tuple[str, tuple[str, ...]]] = {}  # custom_id -> the batch and its betas
        self.recorded_results: dict[str, dict[str, dict[str, Any]]] = {}  # batch id -> custom_id -> result
        self.recorded_locks: dict[str, anyio.Lock] = {}
        self.journal_ids: dict[str, set[str]] = {}  # batch id -> the custom_ids the journal says it holds
        self.foreign_results = 0  # result lines dropped: another batch's id, a repeat, not a result
        self.failed_downloads = 0  # results files not read whole: their requests went live

    def open_journal(self, path: Path) -> None:
        """Record every batch created in ``path`` (JSON lines), and answer from the batches it holds."""
        self.journal = path
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return
        for line in text.splitlines():
            try:
                entry = json.loads(line)
                batch, betas, ids = str(entry["batch"]), tuple(entry.get("betas") or ()), entry["custom_ids"]
            except (ValueError, KeyError, TypeError):
                continue  # a line half written when the run died
            for custom_id in ids:
                self.recorded[str(custom_id)] = (batch, betas)
                self.journal_ids.setdefault(batch, set()).add(str(custom_id))

    def _append(self, entry: dict[str, Any], *, sync: bool = False) -> None:
        """``entry`` as a line of the journal, if there is one (``sync``: on disk before this returns)."""
        if self.journal is None:
            return
        with open(self.journal, "a", encoding="utf-8") as f:
            f.write(json.dumps(entry) + "\n")
            if sync:
                f.flush()
                os.fsync(f.fileno())

    def _record(self, batch_id: str, group: Group) -> None:
        entry = {"batch": batch_id, "betas": list(group.betas), "custom_ids": list(group.waiters)}
        self._append({**entry, "created": round(time.time(), 3)}, sync=True)

    def _note(self, batch_id: str, problem: str) -> None:
        """A line of the journal saying why ``batch_id``'s results were not read whole (no ``custom_ids``:
        :meth:`open_journal` passes over it)."""
        self._append({"batch": batch_id, "results_problem": problem, "at": round(time.time(), 3)})

    # --- what the deadline allows -----------------------------------------------------------------

    def expected_turnaround(self) -> float:
        now = time.monotonic()
        oldest = max((now - g.sent for g in self.in_flight.values() if g.sent is not None), default=0.0)
        return max(self.last_turnaround or 0.0, oldest)

    def answer_by(self) -> float | None:
        """When the calling job needs its answer (epoch seconds): its end or the run's deadline, the
        earlier; None when neither is set."""
        ends = [t for t in (ANSWER_BY.get(), self.deadline) if t is not None]
        return min(ends, default=None)

    def live_now(self, answer_by: float | None) -> bool:
        """Whether a call needed by ``answer_by`` goes live: a batch sent now would not end ``live_s``
        before it."""
        if answer_by is None:
            return False
        return time.time() + self.window_s + self.expected_turnaround() >= answer_by - self.live_s

    def _cut_off(self, group: Group) -> float | None:
        """When ``group``'s batch is cancelled if it is still in flight (epoch seconds)."""
        return None if group.answer_by is None else group.answer_by - self.live_s

    def status_line(self) -> str | None:
        """The live display's part: the batch in flight, requests waiting, the last turnaround, the
        projected end; None before the first request."""
        waiting = sum(len(g.waiters) for g in [*self.open.values(), *self.in_flight.values()])
        if not self.batches_sent and not waiting:
            return None
        parts = [f"batch {shown(self.last_batch or '-', 80)}", f"{waiting} waiting"]
        if self.foreign_results:
            parts.append(f"{self.foreign_results} foreign result lines dropped")
        if self.failed_downloads:
            parts.append(f"{self.failed_downloads} results unread (calls live)")
        if self.last_turnaround is not None:
            parts.append(f"turnaround {self.last_turnaround:.0f} s")
        sent = [g.sent for g in self.in_flight.values() if g.sent is not None]
        if sent and self.last_turnaround is not None:
            end = time.time() + max(0.0, min(sent) + self.last_turnaround - time.monotonic())
            parts.append(f"ends ~{datetime.fromtimestamp(end):%H:%M:%S}")
        if self.deadline is not None:
            parts.append(f"deadline {datetime.fromtimestamp(self.deadline):%H:%M}")
        return ", ".join(parts)

    # --- one call -------------------------------------------------------------------------------

    async def create(self, request: Request, *, live: Model) -> Reply:
        """``request`` answered by a batch (the reply's ``batch`` names it), or live when the deadline
        says so; the reply's ``wire.resends`` (a failed call's exception's, :func:`~.wire.counts_of`):
        how many times a batch was asked again for it, beside a live call's own counts."""
        params, betas = request_params(request)
        job, turn = request.caller if request.caller is not None else ("call", 0)
        custom_id = custom_id_of(job, turn, params)
        limit = self.max_retries if request.max_retries is None else request.max_retries
        resends = 0
        answer_by = self.answer_by()
        try:
            if custom_id in self.recorded:  # a resumed job asks again what a recorded batch was asked
                batch_id = self.recorded[custom_id][0]
                if (result := await self._recorded(custom_id)) is not None:
                    return self._reply(result, batch_id)
            while True:
                if self.live_now(answer_by) or resends > limit:
                    return _resent(await live.create(request), resends)
                group, key = self._join(custom_id, params, betas, answer_by=answer_by)
                result = await self._wait(group, key)
                kind = result.get("type")
                if result is LIVE:  # its batch's results could not be read
                    return _resent(await live.create(request), resends)
                if kind == "succeeded":
                    return _resent(self._reply(result, group.batch_id), resends)
                if failure := self._failure(result, group.batch_id, key):
                    raise failure
                resends += 1
        except BaseException as e:  # a live call's own counts kept (a batch's requests are no call's)
            attach(e, replace(counts_of(e), resends=resends))
            raise

    def _failure(self, result: dict[str, Any], batch_id: str | None, key: str) -> Exception | None:
        """What a result that is not a success means for its call: None when it is to be sent again
        (expired, canceled while the run goes on, a retryable error), else the exception it ends with."""
        kind = result.get("type")
        where = f"batch {shown(batch_id, 80)}: request {key}"
        if kind == "errored":
            error = (result.get("error") or {}).get("error") or {}
            etype, message = str(error.get("type")), str(error.get("message", ""))
            if "prompt is too long" in message.lower() or "prompt_too_long" in message.lower():
                return PromptTooLong(message)
            if etype not in RETRYABLE:
                return BatchRequestFailed(f"{where}: {shown(etype, 80)}: {shown(one_line(message, 200))}")
            return None
        if kind == "canceled" and self.stopping:
            return BatchRequestFailed(f"{where}: canceled (the run is stopping)")
        if kind not in ("expired", "canceled"):
            return BatchRequestFailed(f"{where}: result type {shown(repr(kind), 80)}")
        return None

    def _reply(self, result: dict[str, Any], batch: str | None) -> Reply:
        """A succeeded result as the call's reply, naming its batch (its caller bills it at the batch
        price)."""
        reply = reply_of(result.get("message") or {}, self.backend.guard.max_reply_bytes)
        reply.batch = batch
        return reply

    async def _recorded(self, custom_id: str) -> dict[str, Any] | None:
        """The succeeded result a recorded batch holds for ``custom_id`` (once: it is then forgotten)."""
        batch_id, betas = self.recorded.pop(custom_id)
        lock = self.recorded_locks.setdefault(batch_id, anyio.Lock())
        async with lock:
            if batch_id not in self.recorded_results:
                self.recorded_results[batch_id] = await self._results_when_ended(batch_id, betas)
        result = self.recorded_results[batch_id].pop(custom_id, None)
        return result if result is not None and result.get("type") == "succeeded" else None

    async def _results_when_ended(self, batch_id: str, betas: tuple[str, ...]) -> dict[str, dict[str, Any]]:
        """A recorded batch's results, polled until it has ended; none when it is unknown or fails."""
        group = Group(betas=betas, opened=time.monotonic(), poll_s=self.poll_s, batch_id=batch_id)
        api = self._api(group)
        try:
            with uncounted():
                while (
                    batch := await api.retrieve(batch_id, **self._betas(group))
                ).processing_status != "ended":
                    await anyio.sleep(group.poll_s)
                    group.poll_s = min(group.poll_s * 2, self.poll_max_s)
                found, _ = await self._download(
                    batch, betas, self.journal_ids.get(batch_id, set()), answer_by=self.deadline
                )
                return found
        except Exception:  # e.g. the batch was deleted or has expired: its requests are sent again
            return {}

    def _join(
        self, custom_id: str, params: dict[str, Any], betas: tuple[str, ...], *, answer_by: float | None
    ) -> tuple[Group, str]:
        size = len(json.dumps(params, separators=(",", ":")))
        group = self.open.get(betas)
        if group is None or group.size + size > MAX_BATCH_BYTES:
            if group is not None:
                self._close(group)
            group = self.open[betas] = Group(betas=betas, opened=time.monotonic(), poll_s=self.poll_s)
        if not group.waiters:  # every earlier waiter left before the send: the window starts again
            group.opened = time.monotonic()
        key, n = custom_id, 1
        while key in group.waiters:  # the same body asked twice at once (two subagents alike)
            n += 1
            key = f"{custom_id[:60]}-{n}"
        group.waiters[key] = Waiter(params)
        group.size += size
        if answer_by is not None:
            group.answer_by = answer_by if group.answer_by is None else min(group.answer_by, answer_by)
        if len(group.waiters) >= self.max_requests:
            self._close(group)
        return group, key

    def _close(self, group: Group) -> None:
        group.closed = True
        group.full.set()
        if self.open.get(group.betas) is group:
            del self.open[group.betas]

    async def _wait(self, group: Group, key: str) -> dict[str, Any]:
        """The result for ``key``; this waiter sends and polls the group while no other does."""
        waiter = group.waiters[key]
        try:
            while waiter.result is None:
                if group.failed is not None:
                    raise group.failed
                if group.driving:
                    await group.driver_left.wait()
                    continue
                group.driving, group.driver_left = True, anyio.Event()
                try:
                    await self._drive(group)
                except Exception as e:
                    group.failed = e
                    raise
                finally:
                    group.driving = False
                    group.driver_left.set()
        except BaseException:
            if group.batch_id is None and not group.closed:  # not sent: it leaves the group
                group.waiters.pop(key, None)
            raise
        return waiter.result

    async def _drive(self, group: Group) -> None:
        if group.batch_id is None:
            with anyio.move_on_after(max(0.0, group.opened + self.window_s - time.monotonic())):
                await group.full.wait()
            self._close(group)
            requests = [{"custom_id": key, "params": w.params} for key, w in group.waiters.items()]
            with anyio.CancelScope(shield=True), uncounted():
                batch = await self._api(group).create(requests=requests, **self._betas(group))
                group.batch_id, group.sent = batch.id, time.monotonic()
                await anyio.to_thread.run_sync(self._record, batch.id, group)
            self.in_flight[batch.id] = group
            self.last_batch = batch.id
            self.batches_sent += 1
        assert group.batch_id is not None
        canceled_at: float | None = None
        cancel_wait = min(CANCEL_TIMEOUT_S, self.live_s / 2)
        cut_off = self._cut_off(group)
        while True:
            wait = group.poll_s
            if cut_off is not None and not group.cancel_sent:  # no sleep past the cut-off
                wait = min(wait, max(0.0, cut_off - time.time()))
            await anyio.sleep(wait)
            group.poll_s = min(group.poll_s * 2, self.poll_max_s)
            with uncounted():
                batch = await self._api(group).retrieve(group.batch_id, **self._betas(group))
            if batch.processing_status == "ended":
                break
            if canceled_at is not None and time.monotonic() - canceled_at > cancel_wait:
                batch = None  # canceled at the cut-off and still not ended: every request goes live
                break
            if cut_off is not None and time.time() >= cut_off and not group.cancel_sent:
                group.cancel_sent = True  # what it has not answered goes live
                group.poll_s = min(self.poll_s, cancel_wait / 4)
                await self._cancel(group)
                canceled_at = time.monotonic()
        lines: dict[str, dict[str, Any]] = {}
        if batch is None:
            unended = f"it had not ended {cancel_wait:g} s after its cancel at the deadline's cut-off"
            await anyio.to_thread.run_sync(self._note, group.batch_id, unended)
            problem: str | None = unended
        else:
            with uncounted():
                lines, problem = await self._download(
                    batch, group.betas, group.waiters.keys(), answer_by=group.answer_by
                )
        if group.sent is not None:
            self.last_turnaround = time.monotonic() - group.sent
        self.in_flight.pop(group.batch_id, None)
        for key, waiter in group.waiters.items():
            waiter.result = lines.get(key, NO_RESULT if problem is None else LIVE)

    async def _download(
        self, batch: Any, betas: tuple[str, ...], wanted: Collection[str], *, answer_by: float | None
    ) -> tuple[dict[str, dict[str, Any]], str | None]:
        """The results the ended ``batch`` has for the custom_ids in ``wanted``, read as the module's
        guarantees say (ended ``live_s / 2`` before ``answer_by``), and why the file was not read whole
        (None: it was)."""
        guard = self.backend.guard
        max_line = guard.max_reply_bytes + LINE_SLACK
        cap = max(1, len(wanted)) * max_line
        seconds = guard.deadline_s + len(wanted) * RESULT_S
        if answer_by is not None:  # the calls it leaves unanswered go live in time
            seconds = min(seconds, answer_by - self.live_s / 2 - time.time())
        found: dict[str, dict[str, Any]] = {}
        problem: str | None = None
        try:
            url = self._results_url(batch)
            headers = {"Accept": "application/binary"}
            if betas:
                headers["anthropic-beta"] = ",".join(betas)
            with anyio.fail_after(max(0.0, seconds)), download(cap, seconds):
                response = await self.backend.client.get(
                    url, cast_to=httpx2.Response, stream=True, options={"headers": headers}
                )
                try:
                    async for line in result_lines(response.aiter_bytes(PIECE), max_line):
                        self._take(line, wanted, found)
                finally:
                    await response.aclose()
        except TimeoutError:
            problem = f"its results were not read within {max(0.0, seconds):.1f} s"
        except Exception as e:  # refused, over the cap, dripped past the deadline, an HTTP error
            problem = f"its results were not read whole: {type(e).__name__}: {shown(one_line(str(e)), 300)}"
        if problem is not None:
            self.failed_downloads += 1
            batch_id = str(getattr(batch, "id", "?"))
            await anyio.to_thread.run_sync(self._note, batch_id, problem)
        return found, problem

    def _results_url(self, batch: Any) -> str:
        """The ``results_url`` of ``batch`` when it is on the base URL's origin (a relative one is)."""
        url = getattr(batch, "results_url", None)
        base = self.backend.client.base_url
        if not isinstance(url, str) or not url:
            raise ResultsRefused(f"batch {shown(batch.id, 80)} has ended with no results_url")
        target = base.join(url)
        if not same_origin(target, base):
            raise ResultsRefused(
                f"batch {shown(batch.id, 80)}: its results_url {shown(url)} is not on the base URL's "
                f"origin ({shown(base.copy_with(path='/', query=None))}); not fetched: the API key goes "
                "to no other host"
            )
        return str(target)

    def _take(self, line: bytes | None, wanted: Collection[str], found: dict[str, dict[str, Any]]) -> None:
        """``line``'s result into ``found`` when it is the first for one of ``wanted``; else it is counted."""
        entry: Any = None
        if line is not None:
            try:
                entry = json.loads(line)
            except (ValueError, RecursionError):
                pass
        custom_id = entry.get("custom_id") if isinstance(entry, dict) else None
        result = entry.get("result") if isinstance(entry, dict) else None
        if (
            isinstance(custom_id, str)
            and isinstance(result, dict)
            and custom_id in wanted
            and custom_id not in found
        ):
            found[custom_id] = result
        else:
            self.foreign_results += 1

    def _api(self, group: Group) -> Any:
        client = self.backend.client
        return client.beta.messages.batches if group.betas else client.messages.batches

    @staticmethod
    def _betas(group: Group) -> dict[str, Any]:
        return {"betas": list(group.betas)} if group.betas else {}

    async def _cancel(self, group: Group) -> None:
        with anyio.CancelScope(shield=True), anyio.move_on_after(CANCEL_TIMEOUT_S), uncounted():
            try:
                await self._api(group).cancel(group.batch_id, **self._betas(group))
            except Exception:  # best effort: the batch ends by itself
                pass

    async def aclose(self) -> None:
        """Cancel every batch still in flight; canceled requests are not sent again after this."""
        self.stopping = True
        for group in list(self.in_flight.values()):
            if not group.cancel_sent:
                group.cancel_sent = True
                await self._cancel(group)


class BatchModel:
    """The :class:`~runner.models.base.Model` of batch delivery: each call of a job whose delivery is
    batch through the batcher (or ``live`` when the deadline is near), each call of a live job
    ``live``; a request's ``delivery`` is its job's, ``default`` (the run's) when the job sets none.
    ``cache_ttl``: the TTL of a batched call's cache breakpoints (``[runner] batch_cache_ttl``)."""

    def __init__(
        self,
        batcher: Batcher,
        live: Model,
        *,
        owns_live: bool = True,
        default: Literal["live", "batch"] = "batch",
        cache_ttl: Literal["5m", "1h"] = "1h",
    ):
        self.batcher = batcher
        self.live = live
        self.owns_live = owns_live
        self.default = default
        self.cache_ttl = cache_ttl
        self.name = live.name
        self.server_compaction = live.server_compaction

    async def create(self, request: Request) -> Reply:
        if (request.delivery or self.default) == "live":
            return await self.live.create(request)
        # a batch turn takes minutes to hours: the prefix is cached for an hour (by default), not five
        # minutes, also for the calls the deadline sends live (they read what the batched ones wrote)
        request = replace(request, cache_ttl=self.cache_ttl)
        return await self.batcher.create(request, live=self.live)

    async def aclose(self) -> None:
        await self.batcher.aclose()
        if self.owns_live:
            await self.live.aclose()


def batch_delivery(
    raw: AnthropicModel, live: Model, runner: RunnerSection, *, max_retries: int
) -> tuple[BatchModel, BatchModel]:
    """Batch delivery for the run's jobs whose delivery is batch (``[runner] delivery`` the default):
    the jobs' model (live: ``live``) and the summarizer's (live: ``raw``), sharing one batcher
    configured by ``[runner]``."""
    batcher = Batcher(
        raw,
        window_s=runner.batch_window_s,
        max_requests=runner.batch_max_requests,
        poll_s=runner.batch_poll_s,
        poll_max_s=runner.batch_poll_max_s,
        deadline=deadline_at(runner.deadline, runner.deadline_s),
        max_retries=max_retries,
        live_s=runner.batch_live_s,
    )
    ttl = runner.batch_cache_ttl
    return (
        BatchModel(batcher, live, default=runner.delivery, cache_ttl=ttl),
        BatchModel(
            batcher,
            raw,
            owns_live=False,
            default=runner.delivery,
            cache_ttl=ttl,
        ),
    )
