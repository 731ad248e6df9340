"""Grep pool starvation (issue 40, part 6): four hostile jobs each grepping two catastrophic patterns a
turn held all eight grep workers, and a victim's plain-word grep came back "did not finish within
60 s". Now a job holds no more than its share while another waits: the victim's grep answers within
2 s while the hostile jobs' patterns still run.
"""

from __future__ import annotations

import time
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import pytest

from runner.agent.runjob import Services
from runner.agent.session import Session
from runner.compaction.compactor import Compactor
from runner.compaction.summarizer import Summarizer
from runner.config import Limits
from runner.jobs import JobSpec
from runner.messages import text_of, tool_results
from runner.models.base import Reply, Request
from runner.pricing import Usage
from runner.rundir.store import JobStore
from runner.tools import grep_pool
from runner.tools.grep_pool import MOST, _Slots
from runner.tools.shares import JOB_GREPS

CATASTROPHIC = ("(a+)+$", "(a|aa)+$")  # exponential on a long run of 'a's that ends in something else
VICTIM = "Find the greeting."
HOSTILE = "Grep the a's."


def workspace(root: Path) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "aaaa.txt").write_text("a" * 60 + "!\n")
    (root / "hello.txt").write_text("hello world\n")
    return root


def request(ws: Path, pattern: str, path: str) -> dict[str, Any]:
    return {"workspace": str(ws), "path": path, "pattern": pattern, "max_files": 1000, "cpu_s": 60}


@pytest.mark.anyio
async def test_a_victims_grep_gets_a_worker_while_four_jobs_hold_catastrophic_ones(tmp_path: Path) -> None:
    ws = workspace(tmp_path / "ws")
    hostile = [anyio.CapacityLimiter(JOB_GREPS) for _ in range(4)]  # each job's share, as the toolset's
    victim = anyio.CapacityLimiter(JOB_GREPS)
    slots = grep_pool._pool().slots
    async with anyio.create_task_group() as tg:
        for job in hostile:
            for pattern in CATASTROPHIC:
                tg.start_soon(
                    partial(grep_pool.search, request(ws, pattern, "aaaa.txt"), 60.0, job_slots=job)
                )
        await anyio.sleep(0.5)  # every hostile call is in: its worker runs, or it waits
        held = dict(slots.held)
        # each holds at most its two, and their second ones never took the last RESERVE workers
        assert all(n <= JOB_GREPS for n in held.values()) and sum(held.values()) <= MOST - 1
        assert len(slots.waiting) == 2 * len(hostile) - sum(held.values())
        started = time.monotonic()
        answer = await grep_pool.search(request(ws, "hello", "hello.txt"), 60.0, job_slots=victim)
        took = time.monotonic() - started
        tg.cancel_scope.cancel()  # the hostile workers are killed
    assert answer is not None and "hello world" in answer["text"], answer
    assert took < 2.0, f"the victim's grep took {took:.2f} s"
    assert slots.free == MOST and not slots.held and not slots.waiting


@pytest.mark.anyio
async def test_a_freed_worker_goes_to_the_job_holding_fewest() -> None:
    slots = _Slots(3)
    a, b = object(), object()
    await slots.acquire(a, 2)  # a holds 1; free 2, not more than the reserve: a's second waits
    order: list[str] = []

    async def take(job: object, name: str) -> None:
        await slots.acquire(job, 2)
        order.append(name)

    async with anyio.create_task_group() as tg:
        tg.start_soon(take, a, "a2")
        await anyio.sleep(0.01)
        assert order == [] and slots.free == 3 - 1
        tg.start_soon(take, b, "b1")  # b holds none: it takes a free one at once
        await anyio.sleep(0.01)
        assert order == ["b1"]
        slots.release(b)
        slots.release(a)  # now 3 free: a's second may take one (more than the reserve stay free)
        await anyio.sleep(0.01)
    assert order == ["b1", "a2"] and slots.held == {a: 1}


@pytest.mark.anyio
async def test_a_waiting_call_cancelled_at_its_deadline_holds_nothing() -> None:
    slots = _Slots(1)
    a, b = object(), object()
    await slots.acquire(a, 1)
    with anyio.move_on_after(0.05):
        await slots.acquire(b, 1)
    assert slots.waiting == [] and slots.held == {a: 1}
    slots.release(a)
    assert slots.free == 1 and slots.held == {}


class Greps:
    """The hostile jobs' model greps two catastrophic patterns a turn; the victim's waits until the
    hostile calls are running, then greps a plain word and reports what came back."""

    name = "greps"
    server_compaction = False

    def __init__(self) -> None:
        self.hostile_calls = 0
        self.hostile_in = anyio.Event()
        self.victim_asked: float | None = None
        self.victim_answered: float | None = None
        self.victim_result = ""

    async def create(self, request: Request) -> Reply:
        usage = Usage(input_tokens=100, output_tokens=10)
        messages = request.messages
        prompt = text_of(messages[0])
        turn = sum(1 for m in messages if m["role"] == "assistant")
        if prompt == HOSTILE:
            self.hostile_calls += 1
            if self.hostile_calls == 4:
                self.hostile_in.set()
            calls = [
                {
                    "type": "tool_use",
                    "id": f"toolu_h{id(request)}_{turn}_{i}",
                    "name": "grep",
                    "input": {"pattern": p, "path": "aaaa.txt"},
                }
                for i, p in enumerate(CATASTROPHIC)
            ]
            return Reply(calls, "tool_use", usage)
        if turn == 0:
            await self.hostile_in.wait()
            await anyio.sleep(0.5)  # the hostile greps are running
            self.victim_asked = time.monotonic()
            call = {"type": "tool_use", "id": "toolu_victim", "name": "grep", "input": {"pattern": "hello"}}
            return Reply([call], "tool_use", usage)
        self.victim_answered = time.monotonic()
        self.victim_result = str(tool_results(messages[-1])[0].get("content"))
        return Reply([{"type": "text", "text": "Found it."}], "end_turn", usage)

    async def aclose(self) -> None:
        return None


def spec(name: str, prompt: str, ws: Path, tmp_path: Path) -> JobSpec:
    return JobSpec(
        name=name,
        source=tmp_path / f"{name}.toml",
        prompt=prompt,
        workspace=ws,
        model="claude-sonnet-5-5",
        system=None,
        tools=("read", "grep"),
        limits=Limits(max_turns=10),
    )


@pytest.mark.anyio
async def test_a_victim_job_greps_within_2_s_while_four_hostile_jobs_grep_catastrophic_patterns(
    tmp_path: Path,
) -> None:
    ws = workspace(tmp_path / "ws")
    model = Greps()
    compactor = Compactor(Summarizer(None, "none"))
    records = {}

    async def job(name: str, prompt: str) -> None:
        store = JobStore(tmp_path / "run" / name)
        await store.open()
        session = Session(
            spec(name, prompt, ws, tmp_path),
            services=Services(model=model, compactor=compactor, summary_model="claude-haiku-4-5"),
            store=store,
        )
        records[name] = session.record
        await session.run()

    async with anyio.create_task_group() as tg:
        for i in range(4):
            tg.start_soon(job, f"hostile-{i}", HOSTILE)
        await job("victim", VICTIM)
        tg.cancel_scope.cancel()
    assert records["victim"].status == "succeeded", records["victim"].error
    assert "hello world" in model.victim_result, model.victim_result
    assert model.victim_asked is not None and model.victim_answered is not None
    took = model.victim_answered - model.victim_asked
    assert took < 2.0, f"the victim's grep came back after {took:.2f} s: {model.victim_result[:200]}"
    assert all(records[f"hostile-{i}"].status == "cancelled" for i in range(4))


@pytest.mark.anyio
async def test_among_many_waiters_a_freed_worker_goes_to_the_first_whose_job_holds_none() -> None:
    slots = _Slots(4)
    busy, other, third = object(), object(), object()
    for _ in range(2):
        await slots.acquire(busy, 4)
    await slots.acquire(other, 4)
    await slots.acquire(third, 4)  # none free now: every acquire below waits, in this order
    late_jobs = [object() for _ in range(50)]
    order: list[object] = []

    async def take(job: object) -> None:
        await slots.acquire(job, 4)
        order.append(job)

    async with anyio.create_task_group() as tg:
        for job in (busy, other, *late_jobs):  # the two holding jobs arrived first
            tg.start_soon(take, job)
            await anyio.sleep(0)
        await anyio.sleep(0.01)
        assert order == [] and len(slots.waiting) == 52
        slots.release(third)  # one free, not more than the reserve: only a job holding none may take it
        await anyio.sleep(0.01)
        assert order == [late_jobs[0]]
        for job in late_jobs[:1]:
            slots.release(job)
        await anyio.sleep(0.01)
        assert order == late_jobs[:2]
        tg.cancel_scope.cancel()


@pytest.mark.anyio
async def test_of_the_jobs_already_holding_the_one_holding_fewer_goes_first_though_it_came_later() -> None:
    slots = _Slots(6)
    first, second = object(), object()
    await slots.acquire(first, 4)
    await slots.acquire(first, 4)  # first holds 2
    await slots.acquire(second, 4)  # second holds 1
    others = [object() for _ in range(3)]
    for job in others:
        await slots.acquire(job, 4)  # none free
    order: list[object] = []

    async def take(job: object) -> None:
        await slots.acquire(job, 4)
        order.append(job)

    async with anyio.create_task_group() as tg:
        for job in (first, second):  # first waits longest
            tg.start_soon(take, job)
            await anyio.sleep(0)
        for job in others:  # three free at last: more than the reserve, so a holding job may take one
            slots.release(job)
        await anyio.sleep(0.01)
        assert order == [second]  # it holds fewer; then two are free, not more than the reserve
        tg.cancel_scope.cancel()
