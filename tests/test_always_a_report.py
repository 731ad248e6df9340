"""A job stopped by any limit still writes ``final.md``, partial and saying why at its top. The CLI in
this process; the timeout case a real ``runner`` subprocess against the emulator (real SDK, real HTTP)."""

from __future__ import annotations

import json
import os
import subprocess
import sysconfig
from pathlib import Path

import pytest
from conftest import CliRunner, run_cli_process, survey_rows

from runner.emulator import EmulatorConfig, running_emulator
from runner.emulator.config import Latency
from runner.rundir.store import read_jsonl

STDLIB = Path(sysconfig.get_paths()["stdlib"])


def _run(
    run: CliRunner, tmp: Path, limits: str, backend: str = "offline", **env: str
) -> tuple[subprocess.CompletedProcess, Path]:
    (tmp / "jobs").mkdir()
    (tmp / "jobs" / "j.toml").write_text(
        f'workspace = "{{stdlib}}/email"\nprompt = "Survey."\n[limits]\n{limits}\n'
    )
    (tmp / "config.toml").write_text(f'[runner]\nbackend = "{backend}"\n')
    done = run("run", "jobs", cwd=tmp, **env)
    return done, next((tmp / "runs").iterdir()) / "j"


@pytest.mark.parametrize(
    ("limits", "status"), [("max_turns = 4", "max_turns"), ("max_cost_usd = 0.3", "budget_exceeded")]
)
def test_a_job_stopped_by_a_limit_reports_what_it_had(
    tmp_path: Path, limits: str, status: str, run_cli: CliRunner
) -> None:
    done, job = _run(run_cli, tmp_path, limits)
    assert done.returncode == 1, done.stderr
    metrics = json.loads((job / "metrics.json").read_text())
    assert metrics["status"] == status
    final = (job / "final.md").read_text()
    assert final.startswith(f"> **Partial report** (status `{status}`: ")
    assert "# Survey of" in final  # the offline policy's report, written by the last call
    # ground truth: the files the report lists are exactly those the job's read calls returned
    transcript, _ = read_jsonl(job / "transcript.jsonl")
    read_ok = {
        b["tool_use_id"]
        for m in transcript
        if m["role"] == "user" and isinstance(m["content"], list)
        for b in m["content"]
        if b.get("type") == "tool_result" and not b.get("is_error")
    }
    paths = {
        os.path.relpath(b["input"]["file_path"], STDLIB / "email")
        if os.path.isabs(b["input"]["file_path"])
        else b["input"]["file_path"]
        for m in transcript
        if m["role"] == "assistant"
        for b in m["content"]
        if b.get("type") == "tool_use" and b["name"] == "read" and b["id"] in read_ok
    }
    texts = {p for p, row in survey_rows(final, job).items() if row[1] == "text"}
    assert paths and texts == paths
    assert len(paths) < len(list((STDLIB / "email").rglob("*.py")))  # it really was cut short
    # the last call had no tools: the transcript ends with its report, no tool call
    assert transcript[-1]["role"] == "assistant"
    assert not [b for b in transcript[-1]["content"] if b.get("type") == "tool_use"]
    if status == "max_turns":
        assert metrics["turns"] == 4  # the report's call came out of the limit, not on top of it
    else:
        assert metrics["cost_usd"] <= float(
            limits.split("=")[1]
        )  # the reserve kept the report inside the budget
    events, _ = read_jsonl(job / "events.jsonl")
    assert [e["stage"] for e in events if e["stage"] == "last_call"] == ["last_call"]


def test_a_timed_out_api_job_writes_its_report(tmp_path: Path) -> None:
    # 0.5 s a call: the survey (about 17 calls) cannot finish in 8 s; the report's call fits in the
    # tenth of the timeout kept for it (0.8 s)
    with running_emulator(EmulatorConfig(latency=Latency(seconds=0.5))) as emu:
        # a real process: the emulator in this one must not share its interpreter with the timed job
        done, job = _run(
            run_cli_process,
            tmp_path,
            "timeout_s = 8.0",
            backend="anthropic",
            ANTHROPIC_BASE_URL=emu.base_url,
            ANTHROPIC_API_KEY="emulator",
        )
    assert done.returncode == 1, done.stderr
    metrics = json.loads((job / "metrics.json").read_text())
    assert metrics["status"] == "timeout"
    final = (job / "final.md").read_text()
    assert final.startswith("> **Partial report** (status `timeout`: timed out after 8 s)")
    assert "# Survey of" in final  # the emulator's answer to the request without tools


def test_a_failed_job_still_leaves_a_report(tmp_path: Path, run_cli: CliRunner) -> None:
    (tmp_path / "ws").mkdir()  # beside the output directory: a workspace holding it is refused
    (tmp_path / "j.toml").write_text('workspace = "ws"\nprompt = "Run the tests."\ntools = ["bash"]\n')
    done = run_cli("run", "j.toml", "--backend", "offline", "--output-dir", "runs", cwd=tmp_path)
    assert done.returncode == 1
    final = next((tmp_path / "runs").glob("*/j/final.md")).read_text()
    assert final.startswith("> **Partial report** (status `failed`: RuntimeError: the offline model")
