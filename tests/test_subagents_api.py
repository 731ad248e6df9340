"""Subagents through the real SDK over HTTP against the emulator, and across a kill -9.

A scripted parent hands out eight parts of a tree at once, one to each of eight scripted subagents
that read their part's files with notes enough to be summarized: the batch's call limit and summary
gate must hold across a parent and its subagents together, and every subagent's report must reach the
parent; a run killed mid-subagent and resumed must end as an uninterrupted one.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import kill_runner_when
from scripted import (
    ScriptedModel,
    play_instead_of_the_stand_in,
    reads,
    scripted_api,
    scripted_runner,
    subagent_results,
)

from runner.compaction.compactor import Compactor
from runner.compaction.summarizer import Summarizer
from runner.config import Limits
from runner.emulator.config import Latency
from runner.execution.scheduler import Batch, run_batch
from runner.jobs import JobSpec
from runner.messages import tool_uses
from runner.models.adaptive import AdaptiveLimit, AdaptiveModel
from runner.models.anthropic import AnthropicModel
from runner.models.base import Request
from runner.rundir.store import read_jsonl

PARTS = 8
FILES = 6  # a part's files, each of 4,000 characters: a subagent's 6 reads, then its report
NOTES = 6000  # characters of notes a subagent writes a reply: its window is summarized


def tree(root: Path) -> Path:
    """Eight directories of six modules each."""
    for n in range(1, PARTS + 1):
        (root / f"p{n}").mkdir(parents=True)
        for k in range(FILES):
            (root / f"p{n}" / f"m{k}.py").write_text(f'"""Part {n}, module {k}."""\n' + f"x{k} = {n}\n" * 570)
    return root


def part_files(n: int) -> list[str]:
    return [f"p{n}/m{k}.py" for k in range(FILES)]


def parts_report(request: Request) -> str:
    """The parent's report: a row for each subagent's result as its call came back."""
    rows = "".join(f"| {h[0]} | {h[1]} | {h[2]} |\n" for h in subagent_results(request))
    return "# Parts\n\n| agent | status | report |\n|---|---|---|\n" + rows


def survey(final: Any = parts_report, notes: int = NOTES) -> ScriptedModel:
    """The parent: one turn of eight ``task`` calls, then ``final``; each part's subagent reads its six
    files (with ``notes`` characters of notes a reply) and reports ``# Part N``."""
    tasks = [
        ("task", {"description": f"part {n}", "prompt": f"Survey part {n}."}) for n in range(1, PARTS + 1)
    ]
    subagents = {
        f"Survey part {n}.": ScriptedModel(reads(part_files(n)), f"# Part {n}", notes=notes)
        for n in range(1, PARTS + 1)
    }
    return ScriptedModel([tasks], final, subagents=subagents)


def expected_results() -> list[tuple[str, str, str]]:
    """Each subagent's result head as its call came back: its directory, its status, its report."""
    return [
        (f"agents/{n}-part-{n}", "succeeded", f"agents/{n}-part-{n}/final.md") for n in range(1, PARTS + 1)
    ]


@pytest.mark.anyio
async def test_eight_subagents_four_at_once_hold_the_call_limit_and_the_gate(tmp_path: Path) -> None:
    root = tree(tmp_path / "ws")
    spec = JobSpec(
        name="survey",
        source=Path("survey.toml"),
        prompt="Survey this workspace.",
        workspace=root,
        model="claude-sonnet-5-5",
        system=None,
        tools=("read", "glob", "grep", "task"),
        limits=Limits(
            max_retries=4, max_subagents=4, context_char_limit=30_000, timeout_s=600, max_turns=400
        ),
    )
    script = survey()
    with scripted_api(script, latency=Latency(seconds=0.005, jitter_s=0.02)) as api:
        raw = AnthropicModel(base_url=api.emulator.base_url, api_key="k", max_retries=4)
        model = AdaptiveModel(raw, AdaptiveLimit(maximum=3))
        summarizer = Summarizer(raw, "claude-haiku-5-5", max_concurrent=1, requests_per_minute=10_000)
        batch = Batch(
            run_dir=tmp_path / "run",
            specs=[spec],
            model=model,
            compactor=Compactor(summarizer),
            summary_model="claude-haiku-5-5",
            concurrency=3,
            handle_signals=False,
        )
        try:
            result = await run_batch(batch)
        finally:
            await raw.aclose()
        stats = api.emulator.state.snapshot()
    record = result.results["survey"]
    job = tmp_path / "run" / "survey"
    assert (record.status, record.turns) == ("succeeded", 2), record.error  # the tasks, the report
    agents = sorted(p.name for p in (job / "agents").iterdir())
    assert agents == sorted(f"{n}-part-{n}" for n in range(1, PARTS + 1))
    assert [(r["status"], r["turns"]) for r in record.subagents] == [("succeeded", FILES + 1)] * PARTS
    summaries = []
    for n in range(1, PARTS + 1):  # each read its own part's files, in order, once
        transcript, _ = read_jsonl(job / "agents" / f"{n}-part-{n}" / "transcript.jsonl")
        assert [u["input"]["file_path"] for m in transcript for u in tool_uses(m)] == part_files(n)
        events, _ = read_jsonl(job / "agents" / f"{n}-part-{n}" / "events.jsonl")
        summaries += [e for e in events if e.get("stage") == "compact_history"]
        assert (job / "agents" / f"{n}-part-{n}" / "final.md").read_text().strip() == f"# Part {n}"
    # the call limit (3 job calls) and the summary gate (1 summary, outside the call limit, as
    # execution/backend.py builds it) held for the parent and its subagents together
    assert 2 <= stats["peak_concurrent"] <= 3 + 1, stats["peak_concurrent"]
    assert stats["summary_peak_concurrent"] <= 1
    assert stats["summary_requests"] == len(summaries) == PARTS  # one summary each, through the gate
    calls = record.turns + PARTS * (FILES + 1)
    assert len(script.requests) == calls
    assert stats["outcomes"] == {"ok": calls + len(summaries)}  # each call made once, none refused
    assert [h[:3] for h in subagent_results(script.requests[-1])] == expected_results()
    assert (job / "final.md").read_text() == parts_report(script.requests[-1])
    run_json = json.loads((tmp_path / "run" / "run.json").read_text())
    assert len(run_json["jobs"][0]["subagents"]) == PARTS
    assert (
        run_json["totals"]["input_tokens"] == record.usage_total("input_tokens") > record.usage.input_tokens
    )


def _job_dir(workdir: Path) -> Path | None:
    runs = workdir / "runs"
    dirs = [p for p in runs.iterdir() if p.is_dir() and not p.is_symlink()] if runs.is_dir() else []
    return dirs[0] / "survey" if dirs else None


def _child_calls(job: Path) -> int:
    total = 0
    for events in job.glob("agents/*/events.jsonl"):
        total += events.read_text().count('"model_call"')
    return total


def _agent_statuses(job: Path) -> list[str]:
    """The status each subagent's metrics.json gives (one being written: none)."""
    statuses = []
    for metrics in job.glob("agents/*/metrics.json"):
        try:
            statuses.append(json.loads(metrics.read_text()).get("status"))
        except (OSError, ValueError):
            pass
    return statuses


def _setup(workdir: Path, root: Path) -> None:
    (workdir / "jobs").mkdir(parents=True)
    (workdir / "jobs" / "survey.toml").write_text(
        f'prompt = "Survey this workspace."\nworkspace = "{root}"\ntools = ["read", "glob", "grep", "task"]\n'
        "[limits]\ncontext_char_limit = 30000\nmax_turns = 400\n"
    )
    (workdir / "config.toml").write_text('[runner]\noutput_dir = "runs"\nbackend = "offline"\n')


REPORT = "# Parts\n\nEight parts surveyed.\n"


def test_kill_9_mid_subagent_then_resume_matches_an_uninterrupted_run(
    tmp_path: Path, run_cli: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The script's run uninterrupted (in this process), and as a real process killed once some of
    its subagents have ended and some are running, then resumed: the same record, the same
    report, each subagent's six reads made once, the parent's report call given all eight results."""
    root = tree(tmp_path / "ws")
    whole = tmp_path / "whole"
    _setup(whole, root)
    play_instead_of_the_stand_in(monkeypatch, survey(REPORT, notes=0))
    done = run_cli("run", "jobs", cwd=whole)
    assert done.returncode == 0, done.stderr[-2000:]
    expected_job = _job_dir(whole)
    assert expected_job is not None
    total = _child_calls(expected_job)
    assert total == PARTS * (FILES + 1)

    script = survey(REPORT, notes=0).save(tmp_path / "script.json")
    argv = scripted_runner(script, "run", "jobs")
    for attempt in range(3):  # the last running subagents can end between the look and the kill: again
        killed = tmp_path / f"killed-{attempt}"
        _setup(killed, root)

        def some_ended_some_running(killed: Path = killed) -> bool:
            job = _job_dir(killed)
            return job is not None and {"succeeded", "running"} <= set(_agent_statuses(job))

        killed_mid_run = kill_runner_when(some_ended_some_running, cwd=killed, argv=argv, timeout_s=120)
        assert killed_mid_run, "the run ended before it could be killed"
        job = _job_dir(killed)
        assert job is not None
        statuses = _agent_statuses(job)
        if {"succeeded", "running"} <= set(statuses):
            break
    assert {"succeeded", "running"} <= set(statuses), statuses
    assert not (job / "final.md").exists()
    model = survey(REPORT, notes=0)
    play_instead_of_the_stand_in(monkeypatch, model)
    resumed = run_cli("resume", str(job.parent), cwd=killed)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    got, want = (json.loads((d / "metrics.json").read_text()) for d in (job, expected_job))
    assert got["status"] == want["status"] == "succeeded"
    assert (job / "final.md").read_text().strip() == (expected_job / "final.md").read_text().strip()
    assert (job / "final.md").read_text().strip() == REPORT.strip()
    for key in ("usage", "summarizer_usage", "subagent_usage", "cost_usd", "turns"):
        assert got[key] == want[key], key
    assert got["turns"] == 2
    assert [(r["agent"], r["status"], r["turns"]) for r in got["subagents"]] == [
        (r["agent"], r["status"], r["turns"]) for r in want["subagents"]
    ]
    assert [(r["status"], r["turns"]) for r in got["subagents"]] == [("succeeded", FILES + 1)] * PARTS
    for n in range(1, PARTS + 1):
        for run_job in (job, expected_job):
            transcript, _ = read_jsonl(run_job / "agents" / f"{n}-part-{n}" / "transcript.jsonl")
            assert [u["input"]["file_path"] for m in transcript for u in tool_uses(m)] == part_files(n)
    assert [h[:3] for h in subagent_results(model.requests[-1])] == expected_results()
