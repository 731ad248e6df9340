"""Subagents through the real SDK over HTTP against the emulator, and across a kill -9.

The emulator answers with the offline policy, which hands a big tree to one subagent per top-level
directory (and one for the top files): the batch's call limit and summary gate must hold across a
parent and its subagents together, and every file's row must be right.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from runner.compaction.compactor import Compactor
from runner.compaction.summarizer import Summarizer
from runner.config import Limits
from runner.emulator import EmulatorConfig, running_emulator
from runner.emulator.config import Latency
from runner.execution.scheduler import Batch, run_batch
from runner.jobs import JobSpec
from runner.models.adaptive import AdaptiveLimit, AdaptiveModel
from runner.models.anthropic import AnthropicModel
from runner.offline import delegation
from runner.offline.delegation import DELEGATE_ENTRIES
from tests.conftest import expected_row, kill_runner_when, regular_files, runner_env, survey_rows

PACKAGES = ("email", "asyncio", "importlib", "unittest", "json", "urllib", "wsgiref")  # 7 directories


def tree(root: Path) -> Path:
    """Seven stdlib packages and enough top-level files for the tree to be split: eight parts."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    for name in PACKAGES:
        shutil.copytree(
            stdlib / name, root / name, ignore=shutil.ignore_patterns("__pycache__", "test", "tests")
        )
    tops = sorted(p for p in stdlib.glob("*.py") if p.stat().st_size < 20_000)[:90]
    for p in tops:
        shutil.copy(p, root / p.name)
    entries = sum(len(d) + len(f) for _, d, f in os.walk(root))
    assert entries > DELEGATE_ENTRIES, entries
    return root


def check_rows(report: str, job: Path, root: Path) -> None:
    rows = survey_rows(report, job)
    truth = regular_files(root)
    assert set(rows) == set(truth), (sorted(set(truth) - set(rows))[:5], sorted(set(rows) - set(truth))[:5])
    wrong = [
        p
        for p, data in truth.items()
        if tuple(rows[p][1:3]) != expected_row(data)
        and not (rows[p][1] == "binary" and expected_row(data)[0] == "binary")
    ]
    assert not wrong, wrong[:5]


@pytest.mark.anyio
async def test_eight_subagents_four_at_once_hold_the_call_limit_and_the_gate(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(delegation, "PART_ENTRIES", 1)  # the policy's most parts (8), for a small tree
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
    with running_emulator(EmulatorConfig(latency=Latency(seconds=0.005, jitter_s=0.02))) as emu:
        raw = AnthropicModel(base_url=emu.base_url, api_key="k", max_retries=4)
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
        stats = emu.state.snapshot()
    record = result.results["survey"]
    assert record.status == "succeeded", record.error
    agents = sorted(p.name for p in (tmp_path / "run" / "survey" / "agents").iterdir())
    assert len(agents) == 8, agents
    assert {r["status"] for r in record.subagents} == {"succeeded"}
    # the call limit (3 job calls) and the summary gate (1 summary, outside the call limit, as
    # execution/backend.py builds it) held for the parent and its subagents together
    assert stats["peak_concurrent"] <= 3 + 1, stats["peak_concurrent"]
    assert stats["peak_concurrent"] >= 2, "subagents ran at once"
    assert stats["summary_peak_concurrent"] <= 1
    assert stats["summary_requests"] >= 1, (
        "the subagents' windows compacted (a summary went through the gate)"
    )
    calls = (
        sum(
            json.loads((tmp_path / "run" / "survey" / "agents" / a / "metrics.json").read_text())["turns"]
            for a in agents
        )
        + record.turns
    )
    assert stats["outcomes"]["ok"] >= calls
    check_rows((tmp_path / "run" / "survey" / "final.md").read_text(), tmp_path / "run" / "survey", root)
    run_json = json.loads((tmp_path / "run" / "run.json").read_text())
    assert len(run_json["jobs"][0]["subagents"]) == 8
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


def _setup(workdir: Path, root: Path) -> None:
    (workdir / "jobs").mkdir(parents=True)
    (workdir / "jobs" / "survey.toml").write_text(
        f'prompt = "Survey this workspace."\nworkspace = "{root}"\ntools = ["read", "glob", "grep", "task"]\n'
        "[limits]\ncontext_char_limit = 30000\nmax_turns = 400\n"
    )
    (workdir / "config.toml").write_text('[runner]\noutput_dir = "runs"\nbackend = "offline"\n')


def test_kill_9_mid_subagent_then_resume_matches_an_uninterrupted_run(tmp_path: Path) -> None:
    root = tree(tmp_path / "ws")
    whole, killed = tmp_path / "whole", tmp_path / "killed"
    _setup(whole, root)
    _setup(killed, root)
    env = runner_env()
    done = subprocess.run(
        [sys.executable, "-m", "runner", "run", "jobs"],
        cwd=whole,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    expected_job = _job_dir(whole)
    assert expected_job is not None
    total = _child_calls(expected_job)

    def half_the_calls_made() -> bool:  # about half the subagents' calls: some ended, some running
        job = _job_dir(killed)
        return job is not None and _child_calls(job) >= total // 2

    killed_mid_run = kill_runner_when(half_the_calls_made, "run", "jobs", cwd=killed, env=env, timeout_s=240)
    assert killed_mid_run, "the run ended before it could be killed"
    job = _job_dir(killed)
    assert job is not None
    statuses = [json.loads(m.read_text()).get("status") for m in job.glob("agents/*/metrics.json")]
    assert "running" in statuses, statuses
    resumed = subprocess.run(
        [sys.executable, "-m", "runner", "resume", str(job.parent)],
        cwd=killed,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    got, want = (json.loads((d / "metrics.json").read_text()) for d in (job, expected_job))
    assert got["status"] == want["status"] == "succeeded"
    assert (job / "final.md").read_text() == (expected_job / "final.md").read_text()
    for key in ("usage", "summarizer_usage", "subagent_usage", "cost_usd", "turns"):
        assert got[key] == want[key], key
    assert [(r["agent"], r["status"], r["turns"]) for r in got["subagents"]] == [
        (r["agent"], r["status"], r["turns"]) for r in want["subagents"]
    ]
    check_rows((job / "final.md").read_text(), job, root)
