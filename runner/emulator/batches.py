"""Message Batches as the emulator runs them: when each ends, what each request gets, the API's shapes.

A batch is created only with every request valid (see :mod:`.batch_routes`). Guarantees:
- It ends ``batches.turnaround_s`` seconds after it was created, or, with ``turnaround_max_s``, at a
  uniform time between the two seeded by ``(seed, batch number)``. One event-loop timer per batch
  (no thread): retrieving, listing and the stats only read, so polling costs nothing but the request.
- Until it ends: ``processing_status`` is ``in_progress`` (``canceling`` once a cancel was initiated),
  ``request_counts`` has every request ``processing``, and there is no ``ended_at`` or ``results_url``.
- A cancel, by the client or by the ``batches.canceling`` fault (which fires on the batch number and
  cancels at a seeded fraction in [0.25, 0.75) of its turnaround): the requests the batch had worked
  through by then (the first ``floor(n * elapsed / turnaround)``: it works through them in order,
  evenly over its turnaround) are answered, the rest are ``canceled``; it ends ``cancel_s`` later,
  never after its turnaround. A cancel of a batch already canceling changes nothing.
- When its time is up, each request not canceled is answered once, in order (by a task that lets
  other requests in every :data:`FINISH_SLICE` requests; a cancel then is too late to cancel any), as
  a live request with the same body would be then (:func:`answer_request`: the same context-window
  check, reply builder, token counting, prompt cache, script and summary counting), except that it
  is ``errored`` when ``batches.errored`` fires on its request number (an error response of
  ``errored_type``), or ``expired`` when ``batches.expired`` does, in that order. A prompt over the
  context window is ``errored`` with the live 400's ``invalid_request_error``; a scripted hostile
  reply is consumed and ``errored`` (``api_error``). Only a ``succeeded`` request is billed: in
  ``tokens`` and in ``batch_tokens``; its usage says ``service_tier: "batch"``.
- Results are made once, as the JSONL bytes of the results file, in an order seeded by the batch
  number (the API does not promise request order), and every fetch serves those same bytes.
- A batch lives until it is deleted or the emulator is reset (a timer of a reset batch does nothing).
- ``batches.hostile`` (:class:`.config.BatchHostile`), on the batches its ``on`` picks by number:
  ``escaped_id`` makes the batch's id ``msgbatch_emu_`` + an OSC window title and clear-screen escapes
  + hex digits (its ``results_url`` percent-encodes it, as every id); ``foreign_results_url`` puts the
  ``results_url`` on ``url`` (the same path); ``padded_results`` serves ``bytes`` bytes of result lines
  under other custom_ids (``padding-<n>``, each about ``line_bytes``, made as they are sent and no more
  once the client has left) before the batch's own; ``drip_results`` serves the results file one byte
  every ``interval_s`` seconds.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import random
import uuid
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import quote

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from .compaction import edited_view
from .config import BatchHostile, EmulatorConfig
from .faults import chance, drip, fires, new_request_id
from .replies import build_message
from .state import Batch, BatchRequest, EmulatorState
from .streaming import error_event
from .tokens import input_tokens, over_the_window

log = logging.getLogger("runner.emulator")

EXPIRES_AFTER = timedelta(hours=24)
RESULT_TYPES = ("succeeded", "errored", "canceled", "expired")
FINISH_SLICE = 50  # requests answered between two turns of the other requests (about 10 ms)
ESCAPES = "\x1b]0;batch owned\x07\x1b[2J\x1b[H"  # in an escaped_id batch's id: a window title, clear-screen
RESULTS_TYPE = "application/x-jsonl"


def rfc3339(moment: datetime | None) -> str | None:
    return None if moment is None else moment.isoformat(timespec="microseconds").replace("+00:00", "Z")


def turnaround_of(config: EmulatorConfig, number: int) -> float:
    settings = config.batches
    if settings.turnaround_max_s is None:
        return settings.turnaround_s
    spread = settings.turnaround_max_s - settings.turnaround_s
    return settings.turnaround_s + spread * chance(config.seed, "batch_turnaround", number)


def hostile_on(config: EmulatorConfig, number: int) -> BatchHostile | None:
    """``batches.hostile`` when it picks batch ``number``."""
    hostile = config.batches.hostile
    if hostile is not None and fires(hostile.on, config.seed, "batch_hostile", number):
        return hostile
    return None


def create_batch(state: EmulatorState, requests: list[dict[str, Any]]) -> Batch:
    """A new batch of ``requests`` (valid ``{custom_id, params}``), its timer started. Call on the loop."""
    config = state.config
    number, first = state.batch_created(len(requests))
    hostile = hostile_on(config, number)
    escaped = ESCAPES if hostile is not None and hostile.kind == "escaped_id" else ""
    batch = Batch(
        id="msgbatch_emu_" + escaped + uuid.uuid4().hex[:24],
        number=number,
        requests=[BatchRequest(r["custom_id"], r["params"], first + i) for i, r in enumerate(requests)],
        created_at=datetime.now(UTC),
        started=asyncio.get_running_loop().time(),
        turnaround_s=turnaround_of(config, number),
    )
    state.batches[batch.id] = batch
    if fires(config.batches.canceling, config.seed, "batch_canceling", number):
        at = batch.turnaround_s * (0.25 + 0.5 * chance(config.seed, "batch_canceling_at", number))
        schedule(batch, at, lambda: initiate_cancel(state, batch))
    else:
        schedule(batch, batch.turnaround_s, lambda: begin_finishing(state, batch))
    return batch


def schedule(batch: Batch, delay: float, callback: Callable[[], None]) -> None:
    if batch.timer is not None:
        batch.timer.cancel()
    batch.timer = asyncio.get_running_loop().call_later(max(0.0, delay), callback)


def initiate_cancel(state: EmulatorState, batch: Batch) -> None:
    """Initiate ``batch``'s cancellation (see the module's guarantees). Call on the loop."""
    if state.batches.get(batch.id) is not batch or batch.status != "in_progress":
        return
    if batch.finishing is not None:  # its requests are being answered: too late to cancel any
        batch.cancel_initiated_at = datetime.now(UTC)
        return
    elapsed = asyncio.get_running_loop().time() - batch.started
    n, turnaround = len(batch.requests), batch.turnaround_s
    batch.cancel_initiated_at = datetime.now(UTC)
    batch.answered = n if turnaround <= 0 else min(n, math.floor(n * elapsed / turnaround))
    ends_in = min(turnaround - elapsed, state.config.batches.cancel_s)
    schedule(batch, ends_in, lambda: begin_finishing(state, batch))


def begin_finishing(state: EmulatorState, batch: Batch) -> None:
    """Start answering ``batch``'s requests (a task on the loop, see :func:`finish`)."""
    if state.batches.get(batch.id) is batch and batch.finishing is None:
        batch.timer = None
        batch.finishing = asyncio.get_running_loop().create_task(finish(state, batch))


async def finish(state: EmulatorState, batch: Batch) -> None:
    """End ``batch``: answer its requests once and make its results file, giving the loop to other
    requests every :data:`FINISH_SLICE` requests; a batch reset meanwhile is dropped."""
    answered = len(batch.requests) if batch.answered is None else batch.answered
    lines = []
    for i, request in enumerate(batch.requests):
        if i and i % FINISH_SLICE == 0:
            await asyncio.sleep(0)
            if state.batches.get(batch.id) is not batch:
                return
        result = await answer_request(state, request) if i < answered else {"type": "canceled"}
        batch.counts[result["type"]] += 1
        lines.append(json.dumps({"custom_id": request.custom_id, "result": result}, ensure_ascii=False))
    random.Random(f"{state.config.seed}:batch_results:{batch.number}").shuffle(lines)
    batch.results = "".join(line + "\n" for line in lines).encode()
    batch.ended_at = datetime.now(UTC)
    state.batch_ended(batch.counts, canceled=batch.cancel_initiated_at is not None)


def errored(error: dict[str, Any]) -> dict[str, Any]:
    return {"type": "errored", "error": {**error, "request_id": new_request_id()}}


async def answer_request(state: EmulatorState, request: BatchRequest) -> dict[str, Any]:
    """One request's result, computed as a live request's answer (see the module's guarantees)."""
    config, body = state.config, request.params
    view, applied = edited_view(body)
    total = input_tokens(body.get("system"), view, body.get("tools") or [])
    too_long = over_the_window(total, config.context_window_tokens)
    if too_long:
        return errored({"type": "error", "error": {"type": "invalid_request_error", "message": too_long}})
    settings = config.batches
    if fires(settings.errored, config.seed, "batch_errored", request.number):
        return errored(error_event(settings.errored_type))
    if fires(settings.expired, config.seed, "batch_expired", request.number):
        return {"type": "expired"}
    scripted = config.script[state.script_position] if state.script_position < len(config.script) else None
    if scripted is not None and scripted.hostile is not None:
        state.script_position += 1
        return errored(error_event("api_error"))
    try:
        message, billed = await build_message(state, body, view, total, applied=applied)
    except Exception:  # an emulator bug: say so loudly, answer like the API would
        log.exception("the emulator failed to build a batch request's reply")
        return errored(error_event("api_error"))
    state.bill_batch(billed)
    message["usage"]["service_tier"] = "batch"
    return {"type": "succeeded", "message": message}


def batch_object(batch: Batch, base_url: str, hostile: BatchHostile | None = None) -> dict[str, Any]:
    """The ``message_batch`` object as the API shapes it; ``base_url`` ends with ``/``; ``hostile``: the
    batch's (:func:`hostile_on`), a ``foreign_results_url`` one moves its ``results_url``."""
    ended = batch.ended_at is not None
    if hostile is not None and hostile.url is not None:
        base_url = hostile.url.rstrip("/") + "/"
    counts = {kind: batch.counts[kind] if ended else 0 for kind in RESULT_TYPES}
    return {
        "id": batch.id,
        "type": "message_batch",
        "processing_status": batch.status,
        "request_counts": {"processing": 0 if ended else len(batch.requests), **counts},
        "created_at": rfc3339(batch.created_at),
        "expires_at": rfc3339(batch.created_at + EXPIRES_AFTER),
        "ended_at": rfc3339(batch.ended_at),
        "cancel_initiated_at": rfc3339(batch.cancel_initiated_at),
        "archived_at": None,
        "results_url": f"{base_url}v1/messages/batches/{quote(batch.id, safe='')}/results" if ended else None,
    }


def results_response(request: Request, batch: Batch, hostile: BatchHostile | None) -> Response:
    """An ended batch's results file, as ``hostile`` (the batch's, :func:`hostile_on`) serves it."""
    if hostile is not None and hostile.kind == "padded_results":
        return StreamingResponse(_padded(request, hostile, batch.results), media_type=RESULTS_TYPE)
    if hostile is not None and hostile.kind == "drip_results":
        return StreamingResponse(
            drip(batch.results, hostile.interval_s),
            media_type=RESULTS_TYPE,
            headers={"content-length": str(len(batch.results))},
        )
    return Response(batch.results, media_type=RESULTS_TYPE)


def _padding_line(n: int, size: int) -> bytes:
    """A well-formed succeeded result under ``padding-<n>``, about ``size`` bytes with its newline."""
    head = (
        f'{{"custom_id":"padding-{n:07d}","result":{{"type":"succeeded","message":{{"id":"msg_emu_pad",'
        '"type":"message","role":"assistant","model":"emu-model","content":[{"type":"text","text":"'
    ).encode()
    tail = (
        b'"}],"stop_reason":"end_turn","stop_sequence":null,'
        b'"usage":{"input_tokens":1,"output_tokens":1,"service_tier":"batch"}}}}\n'
    )
    return head + b"a" * max(0, size - len(head) - len(tail)) + tail


async def _padded(request: Request, hostile: BatchHostile, results: bytes) -> AsyncIterator[bytes]:
    sent, n = 0, 0
    while sent < hostile.bytes:
        if n % 16 == 0 and await request.is_disconnected():  # the client gave up: make no more of it
            return
        n += 1
        line = _padding_line(n, min(hostile.line_bytes, hostile.bytes - sent))
        sent += len(line)
        yield line
    yield results


def page(batches: list[Batch], *, limit: int, before_id: str | None, after_id: str | None) -> dict[str, Any]:
    """One page of ``batches`` (newest first; ids known), as the SDK's ``AsyncPage`` reads it: the
    ``limit`` batches right after ``after_id``, right before ``before_id``, or the newest."""
    ids = [b.id for b in batches]
    if after_id is not None:
        start = ids.index(after_id) + 1
        chosen, more = batches[start : start + limit], start + limit < len(batches)
    elif before_id is not None:
        end = ids.index(before_id)
        chosen, more = batches[max(0, end - limit) : end], end - limit > 0
    else:
        chosen, more = batches[:limit], limit < len(batches)
    return {
        "data": chosen,
        "has_more": more,
        "first_id": chosen[0].id if chosen else None,
        "last_id": chosen[-1].id if chosen else None,
    }
