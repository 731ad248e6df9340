"""The Message Batches API's routes, as the SDK's ``client.messages.batches`` calls them (and
``client.beta.messages.batches``: the same paths with ``?beta=true``).

``POST /v1/messages/batches`` (create), ``GET /v1/messages/batches`` (list), ``GET`` and ``DELETE
/v1/messages/batches/{id}``, ``POST /v1/messages/batches/{id}/cancel``, ``GET
/v1/messages/batches/{id}/results`` (JSONL). What a batch does is :mod:`.batches`.

Guarantees:
- Every route needs the API key and ``anthropic-version`` as ``POST /v1/messages`` does (401, 400).
- Create: a body over ``batches.max_request_bytes`` is a 413; then every problem in one 400
  ``invalid_request_error`` (the first :data:`MAX_PROBLEMS`, then how many more): ``requests`` a list
  of 1 to ``batches.max_requests`` objects ``{custom_id, params}``, each ``custom_id`` matching
  :data:`CUSTOM_ID` and unique in the batch, each ``params`` a valid ``POST /v1/messages`` body (the
  same validation, with the request's ``anthropic-beta`` header; no ``stream: true``). A problem
  names the request and the field: ``requests.2.params.messages.0.content: Field required``.
- An unknown batch id is a 404 ``not_found_error``. Results of a batch not ended, or a cancel of a
  batch that ended, are a 400; so is a delete of a batch not ended (cancel it first, as the API says).
- Results: as ``batches.hostile`` serves them when it picks the batch (see :mod:`.batches`).
- List: newest first, ``limit`` 1 to 1000 (default 20), ``after_id`` or ``before_id`` (a batch id) as
  cursors; the page has ``data``, ``has_more``, ``first_id`` and ``last_id``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from .batches import Batch, batch_object, create_batch, hostile_on, initiate_cancel, page, results_response
from .state import EmulatorState
from .validation import validate

CUSTOM_ID = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
MAX_PROBLEMS = 50
DEFAULT_LIMIT, MAX_LIMIT = 20, 1000
REQUEST_KEYS = ("custom_id", "params")

Refusal = Callable[[Request], Response | None]
Failure = Callable[[int, str], Response]


def betas_of(request: Request) -> set[str]:
    """The values of the request's ``anthropic-beta`` header."""
    return {b.strip() for b in request.headers.get("anthropic-beta", "").split(",") if b.strip()}


def batch_problems(body: Any, *, betas: Iterable[str], min_trigger: int, max_requests: int) -> list[str]:
    """Every problem of a create body (see the module's guarantees); an empty list: a valid one."""
    if not isinstance(body, dict):
        return ["The request body must be a JSON object."]
    problems = [f"{key}: Extra inputs are not permitted" for key in body if key != "requests"]
    requests = body.get("requests")
    if "requests" not in body:
        return [*problems, "requests: Field required"]
    if not isinstance(requests, list):
        return [*problems, "requests: Input should be a valid list"]
    if not requests or len(requests) > max_requests:
        bound = "at least 1 item" if not requests else f"at most {max_requests} items"
        return [*problems, f"requests: List should have {bound} after validation, not {len(requests)}"]
    seen: dict[str, int] = {}
    betas = set(betas)
    for i, item in enumerate(requests):
        problems += request_problems(i, item, seen, betas=betas, min_trigger=min_trigger)
    if len(problems) > MAX_PROBLEMS:
        problems = [*problems[:MAX_PROBLEMS], f"... and {len(problems) - MAX_PROBLEMS} more problems"]
    return problems


def request_problems(
    i: int, item: Any, seen: dict[str, int], *, betas: set[str], min_trigger: int
) -> list[str]:
    """The problems of ``requests[i]``; ``seen``: the custom_ids so far (updated)."""
    where = f"requests.{i}"
    if not isinstance(item, dict):
        return [f"{where}: Input should be a valid dictionary"]
    problems = [f"{where}.{key}: Extra inputs are not permitted" for key in item if key not in REQUEST_KEYS]
    problems += [f"{where}.{key}: Field required" for key in REQUEST_KEYS if key not in item]
    custom_id = item.get("custom_id")
    if "custom_id" in item and not isinstance(custom_id, str):
        problems.append(f"{where}.custom_id: Input should be a valid string")
    elif isinstance(custom_id, str) and not CUSTOM_ID.match(custom_id):
        problems.append(f"{where}.custom_id: String should match pattern '{CUSTOM_ID.pattern}'")
    elif isinstance(custom_id, str) and custom_id in seen:
        problems.append(
            f"{where}.custom_id: custom_id {custom_id!r} is not unique in the batch "
            f"(also requests.{seen[custom_id]})"
        )
    elif isinstance(custom_id, str):
        seen[custom_id] = i
    if "params" not in item:
        return problems
    params = item["params"]
    if not isinstance(params, dict):
        return [*problems, f"{where}.params: Input should be a valid dictionary"]
    if params.get("stream") is True:
        problems.append(f"{where}.params.stream: streaming is not supported in a Message Batch")
    for problem in validate(params, betas=betas, count_tokens=False, min_trigger=min_trigger):
        location, sep, _ = problem.partition(": ")
        located = sep and " " not in location
        problems.append(f"{where}.params.{problem}" if located else f"{where}.params: {problem}")
    return problems


class BatchRoutes:
    """The handlers, bound to one state; ``preflight`` and ``fail`` are the messages routes' own."""

    def __init__(self, state: EmulatorState, *, preflight: Refusal, fail: Failure):
        self.state = state
        self.preflight = preflight
        self.fail = fail

    def routes(self) -> list[Route]:
        return [
            Route("/v1/messages/batches", self.create, methods=["POST"]),
            Route("/v1/messages/batches", self.list_all, methods=["GET"]),
            Route("/v1/messages/batches/{batch_id}", self.retrieve, methods=["GET"]),
            Route("/v1/messages/batches/{batch_id}", self.delete, methods=["DELETE"]),
            Route("/v1/messages/batches/{batch_id}/cancel", self.cancel, methods=["POST"]),
            Route("/v1/messages/batches/{batch_id}/results", self.results, methods=["GET"]),
        ]

    def shown(self, request: Request, batch: Batch) -> Response:
        return JSONResponse(self.as_object(request, batch))

    def as_object(self, request: Request, batch: Batch) -> dict[str, Any]:
        return batch_object(batch, str(request.base_url), hostile_on(self.state.config, batch.number))

    def found(self, request: Request) -> Batch | Response:
        """The path's batch, or the refusal to answer (no key, no version, no such batch)."""
        refused = self.preflight(request)
        if refused is not None:
            return refused
        batch_id = request.path_params["batch_id"]
        batch = self.state.batches.get(batch_id)
        return batch if batch is not None else self.fail(404, f"No message batch with id {batch_id!r}.")

    async def create(self, request: Request) -> Response:
        refused = self.preflight(request)
        if refused is not None:
            return refused
        config = self.state.config
        raw = await request.body()
        limit = config.batches.max_request_bytes
        if len(raw) > limit:
            return self.fail(413, f"Request exceeds the maximum allowed number of bytes ({limit}).")
        try:
            body = json.loads(raw)
        except ValueError as e:
            return self.fail(400, f"There was an error parsing the body: {e}")
        problems = batch_problems(
            body,
            betas=betas_of(request),
            min_trigger=config.compaction_min_trigger,
            max_requests=config.batches.max_requests,
        )
        if problems:
            return self.fail(400, "; ".join(problems))
        for item in body["requests"]:
            self.state.record(item["params"])
        return self.shown(request, create_batch(self.state, body["requests"]))

    async def retrieve(self, request: Request) -> Response:
        batch = self.found(request)
        return batch if isinstance(batch, Response) else self.shown(request, batch)

    async def list_all(self, request: Request) -> Response:
        refused = self.preflight(request)
        if refused is not None:
            return refused
        query = request.query_params
        try:
            limit = int(query.get("limit", DEFAULT_LIMIT))
        except ValueError:
            limit = 0
        if not 1 <= limit <= MAX_LIMIT:
            return self.fail(400, f"limit: Input should be an integer from 1 to {MAX_LIMIT}")
        before_id, after_id = query.get("before_id"), query.get("after_id")
        if before_id is not None and after_id is not None:
            return self.fail(400, "before_id and after_id cannot both be given")
        newest_first = list(reversed(list(self.state.batches.values())))
        for name, cursor in (("before_id", before_id), ("after_id", after_id)):
            if cursor is not None and cursor not in self.state.batches:
                return self.fail(400, f"{name}: no message batch with id {cursor!r}")
        listed = page(newest_first, limit=limit, before_id=before_id, after_id=after_id)
        return JSONResponse({**listed, "data": [self.as_object(request, b) for b in listed["data"]]})

    async def cancel(self, request: Request) -> Response:
        batch = self.found(request)
        if isinstance(batch, Response):
            return batch
        if batch.status == "ended":
            return self.fail(400, f"Message batch {batch.id} has ended and cannot be canceled.")
        initiate_cancel(self.state, batch)
        return self.shown(request, batch)

    def ended(self, request: Request, otherwise: str) -> Batch | Response:
        """The path's batch when it has ended, else the refusal (``otherwise`` ends the message)."""
        batch = self.found(request)
        if isinstance(batch, Response) or batch.status == "ended":
            return batch
        return self.fail(
            400,
            f"Message batch {batch.id} has not finished processing (processing_status {batch.status}); "
            f"{otherwise}",
        )

    async def results(self, request: Request) -> Response:
        batch = self.ended(request, "its results are not available yet.")
        if isinstance(batch, Response):
            return batch
        return results_response(request, batch, hostile_on(self.state.config, batch.number))

    async def delete(self, request: Request) -> Response:
        batch = self.ended(request, "cancel it before deleting it.")
        if isinstance(batch, Response):
            return batch
        del self.state.batches[batch.id]
        return JSONResponse({"id": batch.id, "type": "message_batch_deleted"})
