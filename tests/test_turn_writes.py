"""One batched write per turn: a job's files reach the disk in one executor hop before each model call,
and everything the model is shown is already on disk when it is shown.

This holds with any model: the jobs are driven here by a scripted model (``tests/scripted.py``: it reads
the email package's modules two a turn, taking notes, so outputs are saved to disk and the history is
summarized)."""

from __future__ import annotations

import email
import json
import re
from pathlib import Path
from typing import Any

import anyio
import pytest
from scripted import ScriptedModel, files_under, reads

import runner.rundir.store
from runner.agent.runjob import Services
from runner.agent.session import Session
from runner.compaction.compactor import Compactor
from runner.compaction.summarizer import Summarizer
from runner.config import Limits
from runner.jobs import JobSpec
from runner.rundir.store import JobStore, dumps, read_jsonl

pytestmark = pytest.mark.anyio

NAMED = re.compile(r"(tool-results/[A-Za-z0-9_.-]+\.txt|summaries/\d{4}\.md)")
EMAIL = Path(email.__file__).parent
SCRIPT = reads(files_under(EMAIL), per_turn=2)


class Watched:
    """The scripted model, with a look at the job directory at each call."""

    def __init__(self, job: Path, hops: list[int]):
        self.inner, self.job, self.hops = ScriptedModel(SCRIPT, final="# Report\n", notes=1500), job, hops
        self.seen: list[dict[str, Any]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def create(self, request: Any) -> Any:
        transcript, _ = read_jsonl(self.job / "transcript.jsonl")
        named = set(NAMED.findall(dumps(request.messages)))
        self.seen.append(
            {
                "hops": self.hops[0],
                "transcript": transcript,
                "named": named,
                "missing": {rel for rel in named if not (self.job / rel).is_file()},
            }
        )
        return await self.inner.create(request)


async def test_each_turn_is_one_write_and_the_model_sees_only_what_is_on_disk(tmp_path, monkeypatch):
    hops = [0]
    save = runner.rundir.store._save_in_thread

    async def counted(*args: Any, **kwargs: Any) -> None:
        hops[0] += 1
        await save(*args, **kwargs)

    monkeypatch.setattr(runner.rundir.store, "_save_in_thread", counted)
    inline = runner.rundir.store._save_sync

    def counted_inline(
        *args: Any, **kwargs: Any
    ) -> None:  # a small flush is written on the loop, not in a hop
        hops[0] += 1
        inline(*args, **kwargs)

    monkeypatch.setattr(runner.rundir.store, "_save_sync", counted_inline)
    job = tmp_path / "job"
    # tight limits: outputs are persisted and placeholders reach the model
    limits = Limits(context_char_limit=15_000, batch_char_limit=15_000, large_result_chars=4_000)
    spec = JobSpec(
        name="survey",
        source=Path("survey.toml"),
        prompt="Survey this package.",
        workspace=EMAIL,
        model="m",
        system=None,
        tools=("read", "glob", "grep"),
        limits=limits,
    )
    store = JobStore(job)
    await store.open()
    model = Watched(job, hops)
    result = await Session(
        spec,
        services=Services(model=model, compactor=Compactor(Summarizer(None, "none")), summary_model="none"),
        store=store,
    ).run()
    assert result.status == "succeeded", result.error
    calls = model.seen
    assert len(calls) == result.turns == len(SCRIPT) + 1  # every turn of the script, then its report
    final, _ = read_jsonl(job / "transcript.jsonl")
    named = set().union(*(call["named"] for call in calls))  # the check below is not vacuous:
    assert any(n.startswith("tool-results/") for n in named)  # outputs saved to disk were named
    assert any(n.startswith("summaries/") for n in named)  # and summaries
    for k, call in enumerate(calls):
        assert not call["missing"], (k, call["missing"])  # every output or summary named is on disk
        on_disk = call["transcript"]
        assert on_disk == final[: len(on_disk)]  # whole lines, in order
        assert on_disk[-1]["role"] == "user"  # the turn the request ends with is written
        assert sum(m["role"] == "assistant" for m in on_disk) == k  # every earlier reply too
    # one write (on the loop, or one executor hop) between two calls, whatever the turn wrote (transcript,
    # events, outputs, metrics)
    assert [b["hops"] - a["hops"] for a, b in zip(calls, calls[1:], strict=False)] == [1] * (len(calls) - 1)
    events, _ = read_jsonl(job / "events.jsonl")
    assert sum(e.get("stage") == "model_call" for e in events) == result.turns  # the last one too


async def test_queued_writes_land_at_flush_outputs_first_and_the_newest_whole_file(tmp_path):
    store = JobStore(tmp_path / "job")
    await store.open()
    rel = store.reserve("toolu_1", "output")
    store.queue([(rel, "output")], {"events.jsonl": [dumps({"n": 1})]}, {"metrics.json": "old\n"})
    store.queue_records("events.jsonl", [{"n": 2}])
    store.queue(files={"metrics.json": "new\n"})
    summary = store.queue_summary("a summary")
    assert not (store.dir / rel).exists() and not (store.dir / "events.jsonl").exists()
    assert not (store.dir / summary).exists()
    await store.flush()
    assert (store.dir / rel).read_text() == "output"
    assert (store.dir / summary).read_text() == "a summary"
    assert read_jsonl(store.dir / "events.jsonl")[0] == [{"n": 1}, {"n": 2}]
    assert (store.dir / "metrics.json").read_text() == "new\n"
    await store.flush()  # nothing queued: nothing written twice
    assert read_jsonl(store.dir / "events.jsonl")[0] == [{"n": 1}, {"n": 2}]


async def test_a_reopened_store_numbers_summaries_after_the_ones_on_disk(tmp_path):
    first = JobStore(tmp_path / "job")
    await first.open()
    names = [first.queue_summary("one"), first.queue_summary("two")]
    await first.flush()
    again = JobStore(tmp_path / "job")
    await again.open()
    third = again.queue_summary("three")
    await again.flush()
    assert names == ["summaries/0001.md", "summaries/0002.md"] and third == "summaries/0003.md"
    assert [(tmp_path / "job" / n).read_text() for n in [*names, third]] == ["one", "two", "three"]


async def test_an_output_that_cannot_be_placed_writes_nothing_of_its_batch(tmp_path):
    store = JobStore(tmp_path / "job")
    await store.open()
    store.queue([("../outside.txt", "x")], {"transcript.jsonl": [dumps({"role": "user", "content": "hi"})]})
    with pytest.raises(ValueError):
        await store.flush()
    assert not (tmp_path / "outside.txt").exists() and not (store.dir / "transcript.jsonl").exists()


async def test_a_cancelled_job_still_writes_what_its_last_turn_queued(tmp_path):
    job = tmp_path / "job"
    spec = JobSpec(
        name="survey",
        source=Path("survey.toml"),
        prompt="Survey this package.",
        workspace=EMAIL,
        model="m",
        system=None,
        tools=("read", "glob", "grep"),
        limits=Limits(),
    )
    store = JobStore(job)
    await store.open()
    model = Watched(job, [0])
    session = Session(
        spec,
        services=Services(model=model, compactor=Compactor(Summarizer(None, "none")), summary_model="none"),
        store=store,
    )
    with anyio.CancelScope() as scope:
        inner = model.create

        async def create(request: Any) -> Any:
            reply = await inner(request)
            if len(model.seen) == 3:
                scope.cancel()  # lands at the turn's next wait: its tools run, after the reply is counted
            return reply

        model.create = create  # type: ignore[method-assign]
        await session.run()
    assert scope.cancelled_caught and session.record.status == "cancelled"
    assert session.record.turns == 3
    events, _ = read_jsonl(job / "events.jsonl")
    assert (
        sum(e.get("stage") == "model_call" for e in events) == 3
    )  # the third was only queued when cancelled
    transcript, _ = read_jsonl(job / "transcript.jsonl")
    assert sum(m["role"] == "assistant" for m in transcript) == 2  # the third reply's tools never answered
    made = [
        [(b["name"], b["input"]) for b in m["content"] if b["type"] == "tool_use"] for m in transcript[1::2]
    ]
    assert made == SCRIPT[:2]  # the first two turns of the script, answered
    assert (job / "final.md").read_text().startswith("> **Partial report** (status `cancelled`")
    assert json.loads((job / "metrics.json").read_text())["status"] == "cancelled"
