"""A job stopped by any limit still writes ``final.md``, partial and saying why at its top. The CLI in
this process; the timeout case a real ``runner`` subprocess against the emulator (real SDK, real HTTP).

This holds with any model: the jobs are driven here by a scripted model (``tests/scripted.py``: it
reads the email package's modules one a turn; its report, asked for without tools, lists the files
whose reads it sees answered in that request), in place of the offline stand-in or the emulator's."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sysconfig
from pathlib import Path

import pytest
from conftest import CliRunner, run_cli_process
from scripted import (
    ScriptedModel,
    answered_reads,
    files_under,
    play_instead_of_the_stand_in,
    reads,
    scripted_api,
)

from runner.emulator.config import Latency
from runner.models.base import Request
from runner.rundir.store import read_jsonl

STDLIB = Path(sysconfig.get_paths()["stdlib"])


def report_of_reads(request: Request) -> str:
    """A report listing, one ``- path`` line each, the files whose read the request shows answered."""
    paths = answered_reads(request)
    return "# Report\n\nFiles read:\n" + "".join(f"- {p}\n" for p in paths)


def _model() -> ScriptedModel:
    return ScriptedModel(reads(files_under(STDLIB / "email")), final=report_of_reads)


@pytest.fixture
def scripted_cli(run_cli: CliRunner, monkeypatch: pytest.MonkeyPatch) -> CliRunner:
    """The CLI in this process, its offline model the scripted one."""
    play_instead_of_the_stand_in(monkeypatch, _model())
    return run_cli


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
    tmp_path: Path, limits: str, status: str, scripted_cli: CliRunner
) -> None:
    done, job = _run(scripted_cli, tmp_path, limits)
    assert done.returncode == 1, done.stderr
    metrics = json.loads((job / "metrics.json").read_text())
    assert metrics["status"] == status
    final = (job / "final.md").read_text()
    assert final.startswith(f"> **Partial report** (status `{status}`: ")
    assert "# Report" in final  # the model's report, written by the last call
    # ground truth: the files the report lists are exactly those the job's read calls returned (the
    # last call carried the job's history)
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
    listed = set(re.findall(r"^- (\S+)$", final, re.M))
    assert paths and listed == paths
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
    # 0.2 s a call: the script (29 reads, 5.8 s of latency alone) cannot finish in the 4.5 s of work
    # the 5 s timeout leaves; the report's call fits in the tenth of the timeout kept for it (0.5 s,
    # 0.3 s over its latency; calls took up to 0.2 s over theirs on a loaded machine)
    with scripted_api(_model(), latency=Latency(seconds=0.2)) as api:
        # a real process: the emulator in this one must not share its interpreter with the timed job
        done, job = _run(run_cli_process, tmp_path, "timeout_s = 5.0", backend="anthropic", **api.env)
    assert done.returncode == 1, done.stderr
    metrics = json.loads((job / "metrics.json").read_text())
    assert metrics["status"] == "timeout"
    final = (job / "final.md").read_text()
    assert final.startswith("> **Partial report** (status `timeout`: timed out after 5 s)")
    assert re.search(r"^- \S+$", final, re.M)  # the model's answer to the request without tools


def test_a_failed_job_still_leaves_a_report(
    tmp_path: Path, run_cli: CliRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The model's second call fails (after the backend's retries): the job fails, with its report."""
    failing = ScriptedModel([("read", {"file_path": "a.py"}), RuntimeError("500 after 4 retries")])
    play_instead_of_the_stand_in(monkeypatch, failing)
    (tmp_path / "ws").mkdir()  # beside the output directory: a workspace holding it is refused
    (tmp_path / "ws" / "a.py").write_text('"""A."""\n')
    (tmp_path / "j.toml").write_text('workspace = "ws"\nprompt = "Survey."\n')
    done = run_cli("run", "j.toml", "--backend", "offline", "--output-dir", "runs", cwd=tmp_path)
    assert done.returncode == 1
    final = next((tmp_path / "runs").glob("*/j/final.md")).read_text()
    assert final.startswith("> **Partial report** (status `failed`: RuntimeError: 500 after 4 retries")
    assert "a.py" in final  # what the job had done before it failed
