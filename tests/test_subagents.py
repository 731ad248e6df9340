"""Subagents (the ``task`` tool): a session of its own per task call, under the parent's limits.

These drive the runtime with a small model that answers by prompt (the parent's, or a subagent's),
so the counts are exact: files, concurrency, budget, failure, resume.
"""

from __future__ import annotations

import json
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
from runner.protocol import subagent_result
from runner.rundir.store import JobStore, read_jsonl
from runner.services import RunBudget

PARENT = "Split the work."


class ByPrompt:
    """A model: the parent hands out ``tasks`` task calls, then answers with what came back; a
    subagent reads one file per turn for ``child_turns`` turns, then reports."""

    name = "by-prompt"
    server_compaction = False

    def __init__(self, tasks: int, child_turns: int = 2, fail: str | None = None, delay: float = 0.05):
        self.tasks, self.child_turns, self.fail, self.delay = tasks, child_turns, fail, delay
        self.running = self.most = 0
        self.requests: list[Request] = []

    async def create(self, request: Request) -> Reply:
        self.requests.append(request)
        self.running += 1
        self.most = max(self.most, self.running)
        try:
            await anyio.sleep(self.delay)
            return self._answer(request)
        finally:
            self.running -= 1

    def _answer(self, request: Request) -> Reply:
        messages = request.messages
        prompt = text_of(messages[0])
        usage = Usage(input_tokens=1_000, output_tokens=100)
        if prompt == PARENT:
            if len(messages) == 1:
                calls = [
                    {
                        "type": "tool_use",
                        "id": f"toolu_task_{i}",
                        "name": "task",
                        "input": {"prompt": f"Read part {i}.", "description": f"part {i}", "tools": ["read"]},
                    }
                    for i in range(self.tasks)
                ]
                return Reply([{"type": "text", "text": "Handing out the parts."}, *calls], "tool_use", usage)
            answers = [str(r.get("content")) for r in tool_results(messages[-1])]
            return Reply([{"type": "text", "text": "All parts:\n" + "\n".join(answers)}], "end_turn", usage)
        if self.fail and self.fail in prompt:
            raise RuntimeError("the subagent's model failed")
        turns = sum(1 for m in messages if m["role"] == "assistant")
        if turns < self.child_turns:
            call = {
                "type": "tool_use",
                "id": f"toolu_{abs(hash(prompt)) % 10**8}_{turns}",
                "name": "read",
                "input": {"file_path": "a.py"},
            }
            return Reply([{"type": "text", "text": "Reading."}, call], "tool_use", usage)
        return Reply([{"type": "text", "text": f"Report on {prompt!r}: done."}], "end_turn", usage)

    async def aclose(self) -> None:
        return None


def job(tmp_path: Path, **limits: Any) -> JobSpec:
    ws = tmp_path / "ws"
    ws.mkdir(exist_ok=True)
    (ws / "a.py").write_text('"""A."""\nx = 1\n')
    return JobSpec(
        name="parent",
        source=tmp_path / "parent.toml",
        prompt=PARENT,
        workspace=ws,
        model="claude-sonnet-5-5",
        system=None,
        tools=("read", "glob", "task"),
        limits=Limits(**limits),
    )


async def run(spec: JobSpec, model: ByPrompt, out: Path, budget: RunBudget | None = None) -> Session:
    store = JobStore(out)
    await store.open()
    session = Session(
        spec,
        services=Services(
            model=model,
            compactor=Compactor(Summarizer(None, "none")),
            summary_model="claude-haiku-4-5",
            budget=budget or RunBudget(),
        ),
        store=store,
    )
    await session.run()
    return session


@pytest.mark.anyio
async def test_eight_subagents_four_at_once_each_a_session_of_its_own(tmp_path: Path) -> None:
    model = ByPrompt(tasks=8, child_turns=2)
    budget = RunBudget()
    session = await run(job(tmp_path, max_subagents=4), model, tmp_path / "parent", budget)
    record = session.record
    assert record.status == "succeeded", record.error
    agents = sorted(p.name for p in (tmp_path / "parent" / "agents").iterdir())
    assert agents == sorted(f"{i + 1}-part-{i}" for i in range(8))
    for name in agents:
        child = tmp_path / "parent" / "agents" / name
        metrics = json.loads((child / "metrics.json").read_text())
        assert metrics["status"] == "succeeded" and metrics["turns"] == 3
        assert (child / "final.md").read_text().startswith("Report on 'Read part")
        lines, _ = read_jsonl(child / "transcript.jsonl")
        assert lines[0] == {"role": "user", "content": f"Read part {name.split('-')[-1]}."}
        assert all(
            "task" not in {t["name"] for t in r.tools}
            for r in model.requests
            if text_of(r.messages[0]) != PARENT
        ), "a subagent has no task tool"
    # every call the model saw: the parent's 2 and 8 subagents' 3 each; at most 4 subagents at once
    assert len(model.requests) == 2 + 8 * 3
    assert model.most == 4
    # the parent's record: a row per subagent, its cost and tokens include theirs, and the run was charged
    # once
    rows = {r["agent"]: r for r in record.subagents}
    assert set(rows) == set(agents) and all(
        r["status"] == "succeeded" and r["turns"] == 3 for r in rows.values()
    )
    assert record.subagent_usage.input_tokens == 8 * 3 * 1_000
    assert record.usage.input_tokens == 2 * 1_000
    assert record.usage_total("input_tokens") == 26 * 1_000
    assert record.cost_usd == pytest.approx(budget.spent)
    assert record.cost_usd == pytest.approx(sum(r["cost_usd"] for r in rows.values()) + 2 * (0.003 + 0.0015))
    # each result names its subagent's report; the parent's answer carries them all
    transcript, _ = read_jsonl(tmp_path / "parent" / "transcript.jsonl")
    results = tool_results(transcript[2])
    heads = [subagent_result(str(r["content"])) for r in results]
    assert [h[0] for h in heads if h] == [f"agents/{i + 1}-part-{i}" for i in range(8)]
    assert all(not r.get("is_error") for r in results)
    written = json.loads((tmp_path / "parent" / "metrics.json").read_text())
    assert len(written["subagents"]) == 8 and written["subagent_usage"]["input_tokens"] == 24_000


@pytest.mark.anyio
async def test_a_failing_subagent_is_an_error_result_not_a_failed_job(tmp_path: Path) -> None:
    model = ByPrompt(tasks=3, fail="part 1")
    session = await run(job(tmp_path), model, tmp_path / "parent")
    assert session.record.status == "succeeded", session.record.error
    transcript, _ = read_jsonl(tmp_path / "parent" / "transcript.jsonl")
    results = tool_results(transcript[2])
    assert [bool(r.get("is_error")) for r in results] == [False, True, False]
    head = subagent_result(str(results[1]["content"]))
    assert head is not None and head[1] == "failed"
    assert (
        "the subagent's model failed"
        in (tmp_path / "parent" / "agents" / "2-part-1" / "final.md").read_text()
    )
    assert {r["agent"]: r["status"] for r in session.record.subagents}["2-part-1"] == "failed"


@pytest.mark.anyio
async def test_subagents_are_stopped_at_the_parents_budget(tmp_path: Path) -> None:
    # each call costs $0.0045 on sonnet: 8 subagents of 21 calls would spend $0.76; the parent has $0.2
    model = ByPrompt(tasks=8, child_turns=20, delay=0.0)
    budget = RunBudget()
    session = await run(job(tmp_path, max_cost_usd=0.2, max_turns=50), model, tmp_path / "parent", budget)
    record = session.record
    assert record.cost_usd <= 0.2 + 1e-9, record.cost_usd
    assert record.cost_usd == pytest.approx(budget.spent)
    statuses = [r["status"] for r in record.subagents]
    assert "budget_exceeded" in statuses, statuses
    assert len(model.requests) < 2 + 8 * 21


@pytest.mark.anyio
async def test_subagents_under_the_runs_budget_alone_end_budget_exceeded_saying_why(tmp_path: Path) -> None:
    """Only the run has a max_cost_usd ($0.1; the parent none): subagents running at once stop at the
    run's line with budget_exceeded and the run's numbers (a subagent's share of no parent limit could
    not be formatted, and its ending was a TypeError); the ones that repeat a read end stuck."""
    model = ByPrompt(tasks=8, child_turns=20, delay=0.01)
    budget = RunBudget(0.1)
    session = await run(job(tmp_path, max_turns=400), model, tmp_path / "parent", budget)
    record = session.record
    statuses = [r["status"] for r in record.subagents]
    assert "budget_exceeded" in statuses and set(statuses) <= {"budget_exceeded", "stuck"}, record.subagents
    errors = [r["error"] for r in record.subagents if r["status"] == "budget_exceeded"]
    assert all("the run spent" in e and "max_cost_usd is $0.1" in e for e in errors), errors
    assert budget.spent <= 0.1 + 1e-9 and budget.held < 1e-9, (budget.spent, budget.held)


@pytest.mark.anyio
async def test_bad_task_input_is_an_error_naming_the_field(tmp_path: Path) -> None:
    from runner.agent.subagents import Subagents

    spec = job(tmp_path)
    session = Session(
        spec,
        services=Services(
            model=ByPrompt(tasks=0), compactor=Compactor(Summarizer(None, "none")), summary_model="none"
        ),
        store=JobStore(tmp_path / "p"),
    )
    subagents = Subagents(
        parent=spec,
        job_dir=tmp_path / "p",
        spend=session.spend,
        run_child=session._run_child,
        deadline=float("inf"),
    )
    for args, field in (
        ({}, "prompt"),
        ({"prompt": "x", "tools": ["bash"]}, "tools"),
        ({"prompt": "x", "tools": ["task"]}, "tools"),
        ({"prompt": "x", "max_turns": 0}, "max_turns"),
    ):
        result = await subagents.run("toolu_x", args)
        assert result["is_error"] and str(result["content"]).startswith(f"task: {field}:"), result


@pytest.mark.anyio
async def test_cancelled_mid_subagent_then_resumed_matches_an_uninterrupted_run(tmp_path: Path) -> None:
    from runner.agent.continuation import cut_transcript
    from runner.rundir.docs import read_metrics

    whole = await run(job(tmp_path, max_subagents=2), ByPrompt(tasks=4, child_turns=3), tmp_path / "whole")
    model = ByPrompt(tasks=4, child_turns=3)
    inner = model.create
    with anyio.CancelScope() as scope:  # as Ctrl-C does: cancelled while subagents 3 and 4 run

        async def create(request: Request) -> Reply:
            if sum(1 for r in model.requests if text_of(r.messages[0]) != PARENT) == 12:
                scope.cancel()
            return await inner(request)

        model.create = create  # type: ignore[method-assign]
        await run(job(tmp_path, max_subagents=2), model, tmp_path / "cut")
    assert scope.cancelled_caught
    agents = tmp_path / "cut" / "agents"
    statuses = {p.name: json.loads((p / "metrics.json").read_text())["status"] for p in agents.iterdir()}
    assert sorted(statuses.values()) == ["cancelled", "cancelled", "succeeded", "succeeded"], statuses
    assert json.loads((tmp_path / "cut" / "metrics.json").read_text())["status"] == "cancelled"

    again = ByPrompt(tasks=4, child_turns=3)
    cut = cut_transcript(tmp_path / "cut", PARENT)
    store = JobStore(tmp_path / "cut")
    await store.open()
    resumed = Session(
        job(tmp_path, max_subagents=2),
        services=Services(
            model=again, compactor=Compactor(Summarizer(None, "none")), summary_model="claude-haiku-4-5"
        ),
        store=store,
        history=cut.history,
        prior=read_metrics(tmp_path / "cut"),
    )
    await resumed.run()
    assert resumed.record.status == "succeeded", resumed.record.error
    done_before = [n for n, s in statuses.items() if s == "succeeded"]
    asked = {text_of(r.messages[0]) for r in again.requests if text_of(r.messages[0]) != PARENT}
    assert not asked & {f"Read part {n.split('-')[-1]}." for n in done_before}, (
        "a finished subagent ran again"
    )
    assert (tmp_path / "cut" / "final.md").read_text() == (tmp_path / "whole" / "final.md").read_text()
    for key in ("input_tokens", "output_tokens"):
        assert resumed.record.usage_total(key) == whole.record.usage_total(key)
    assert resumed.record.cost_usd == pytest.approx(whole.record.cost_usd)
    assert [r["turns"] for r in resumed.record.subagents] == [r["turns"] for r in whole.record.subagents]


class Endless:
    """A model that reads forever, and writes a report when no tool may be called."""

    name = "endless"
    server_compaction = False

    async def create(self, request: Request) -> Reply:
        await anyio.sleep(0.1)
        usage = Usage(input_tokens=100, output_tokens=10)
        if request.tool_choice == {"type": "none"}:
            return Reply([{"type": "text", "text": "Report: stopped at the deadline."}], "end_turn", usage)
        turn = sum(1 for m in request.messages if m["role"] == "assistant")
        return Reply(
            [{"type": "tool_use", "id": f"toolu_r{turn}", "name": "glob", "input": {"pattern": f"*{turn}*"}}],
            "tool_use",
            usage,
        )

    async def aclose(self) -> None:
        return None


@pytest.mark.anyio
async def test_the_runs_deadline_ends_a_job_in_time_with_its_report(tmp_path: Path) -> None:
    import time

    spec = job(tmp_path, timeout_s=3_600, max_turns=10_000)
    store = JobStore(tmp_path / "parent")
    await store.open()
    deadline = time.time() + 3.0
    session = Session(
        spec,
        services=Services(
            model=Endless(),
            compactor=Compactor(Summarizer(None, "none")),
            summary_model="none",
            deadline=deadline,
        ),
        store=store,
    )
    await session.run()
    ended = time.time()
    assert session.record.status == "timeout" and "deadline" in (session.record.error or ""), (
        session.record.error
    )
    assert ended <= deadline + 0.5, ended - deadline
    assert "Report: stopped at the deadline." in (tmp_path / "parent" / "final.md").read_text()
