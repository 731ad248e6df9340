"""Bad credentials or a wrong base URL stop the batch at the first job that meets them: exit 2, one
line naming the base URL and the error; jobs not started are ``not_started`` and ``resume`` runs them.
Retries, 429s and 529s are counted per job. Real ``runner`` subprocesses, the real SDK, the emulator.

This holds with any model: each job plays a scripted model (``tests/scripted.py``) served by the
emulator: two turns of reads, then its report, so each job is exactly three requests."""

from __future__ import annotations

import json
import socket
import subprocess
import time
from pathlib import Path

from conftest import run_cli_process
from scripted import ScriptedModel, reads, scripted_api

from runner.emulator.config import Fault, Faults
from runner.rundir.store import read_jsonl

JOBS = 5
REPORT = "# Report\n\nThe json package: a decoder, an encoder and a scanner."
FILES = ["__init__.py", "decoder.py", "encoder.py", "scanner.py"]
CALLS = 3  # a job's requests: two turns of reads, then the report


def _model() -> ScriptedModel:
    return ScriptedModel(reads(FILES, per_turn=2), final=REPORT)


def _check_succeeded(run_dir: Path, name: str) -> None:
    """The job ran the whole script: its turns, its report the script's final text."""
    metrics = json.loads((run_dir / name / "metrics.json").read_text())
    assert metrics["status"] == "succeeded" and metrics["turns"] == CALLS, metrics
    assert (run_dir / name / "final.md").read_text().strip() == REPORT


def _setup(tmp: Path) -> None:
    (tmp / "jobs").mkdir()
    for i in range(JOBS):
        (tmp / "jobs" / f"j{i}.toml").write_text(f'workspace = "{{stdlib}}/json"\nprompt = "Survey ({i})."\n')
    (tmp / "config.toml").write_text('[runner]\nbackend = "anthropic"\nconcurrency = 2\n')


def _runner(tmp: Path, *argv: str, base_url: str, key: str) -> subprocess.CompletedProcess[str]:
    """A real process: what it prints as it exits (an unclosed session's warning) is checked too."""
    return run_cli_process(*argv, cwd=tmp, ANTHROPIC_BASE_URL=base_url, ANTHROPIC_API_KEY=key)


def _statuses(run_dir: Path) -> list[str]:
    return sorted(j["status"] for j in json.loads((run_dir / "run.json").read_text())["jobs"])


def _error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("error:")]


def test_a_bad_key_stops_the_batch_and_resume_runs_the_rest(tmp_path: Path) -> None:
    _setup(tmp_path)
    with scripted_api(_model(), api_key="the-right-key") as api:
        emu = api.emulator
        started = time.monotonic()
        done = _runner(tmp_path, "run", "jobs", base_url=emu.base_url, key="a-wrong-key")
        elapsed = time.monotonic() - started
        stats = emu.stats()
        rejected = stats["outcomes"].get("401", 0)  # the emulator's "requests" counts only those let in
        assert done.returncode == 2, done.stderr
        assert "Traceback" not in done.stderr
        [line] = _error_lines(done.stderr)
        assert emu.base_url in line and "401" in line and "AuthenticationError" in line
        assert elapsed < 30
        assert 1 <= rejected <= 2  # one per job that started (concurrency 2), not one per job and retry
        assert stats["outcomes"] == {"401": rejected} and stats["requests"] == 0  # none was answered
        run_dir = next((tmp_path / "runs").iterdir())
        statuses = _statuses(run_dir)
        assert "not_started" in statuses and "succeeded" not in statuses
        assert set(statuses) <= {"failed", "cancelled", "not_started"}
        resumed = _runner(tmp_path, "resume", str(run_dir), base_url=emu.base_url, key="the-right-key")
        assert resumed.returncode == 0, resumed.stderr
        assert _statuses(run_dir) == ["succeeded"] * JOBS
        # each job ran its whole script once, from its start (none had a turn before the 401)
        assert emu.stats()["outcomes"] == {"401": rejected, "ok": JOBS * CALLS}
        for i in range(JOBS):
            _check_succeeded(run_dir, f"j{i}")


def test_a_closed_port_is_one_line_and_exit_2(tmp_path: Path) -> None:
    _setup(tmp_path)
    (tmp_path / "config.toml").write_text(
        '[runner]\nbackend = "anthropic"\nconcurrency = 2\n[limits]\nmax_retries = 1\n'
    )
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    base_url = f"http://127.0.0.1:{port}"
    started = time.monotonic()
    done = _runner(tmp_path, "run", "jobs", base_url=base_url, key="any")
    assert done.returncode == 2, done.stderr
    assert time.monotonic() - started < 30
    [line] = _error_lines(done.stderr)
    assert base_url in line and "cannot connect" in line, line
    assert "Traceback" not in done.stderr and "Unclosed" not in done.stderr
    statuses = _statuses(next((tmp_path / "runs").iterdir()))
    assert statuses.count("not_started") >= JOBS - 2


def test_retries_429_and_529_are_counted_per_job(tmp_path: Path) -> None:
    _setup(tmp_path)
    (tmp_path / "config.toml").write_text(
        '[runner]\nbackend = "anthropic"\nconcurrency = 2\n[limits]\nmax_retries = 8\n'
    )
    faults = Faults(rate_limit=Fault(schedule=[2, 7]), overloaded=Fault(schedule=[4, 9, 12]))
    with scripted_api(_model(), faults=faults, retry_after_s=0.05) as api:
        emu = api.emulator
        done = _runner(tmp_path, "run", "jobs", base_url=emu.base_url, key="k")
        assert done.returncode == 0, done.stderr
        assert "Unclosed client session" not in done.stderr
        run_dir = next((tmp_path / "runs").iterdir())
        metrics = [json.loads(p.read_text()) for p in run_dir.glob("*/metrics.json")]
        events = [
            e for p in run_dir.glob("*/events.jsonl") for e in read_jsonl(p)[0] if e["stage"] == "retries"
        ]
        outcomes = emu.stats()["outcomes"]
    # every job ran its whole script: 15 answered requests, and the five faults among them
    assert outcomes == {"ok": JOBS * CALLS, "429": 2, "529": 3}, outcomes
    for i in range(JOBS):
        _check_succeeded(run_dir, f"j{i}")
    # ground truth: the faults the emulator was told to answer with, by request number
    assert sum(m["rate_limited_429"] for m in metrics) == 2
    assert sum(m["overloaded_529"] for m in metrics) == 3
    assert sum(m["retries"] for m in metrics) == 5
    assert sum(e["rate_limited_429"] for e in events) == 2 and sum(e["overloaded_529"] for e in events) == 3


def test_retries_of_the_last_call_are_an_event_too(tmp_path: Path) -> None:
    """The report call a limit leaves (no tools) goes through the same counting as every other call."""
    (tmp_path / "jobs").mkdir()
    (tmp_path / "jobs" / "j.toml").write_text('workspace = "{stdlib}/json"\nprompt = "Survey."\n')
    (tmp_path / "config.toml").write_text(
        '[runner]\nbackend = "anthropic"\nconcurrency = 1\n[limits]\nmax_turns = 2\nmax_retries = 3\n'
    )
    # request 1 is the job's first call; request 2, its last call (the report), is answered 529 once
    model = ScriptedModel(reads(FILES), final=REPORT)  # four turns: the limit stops it first
    with scripted_api(model, faults=Faults(overloaded=Fault(schedule=[2])), retry_after_s=0.05) as api:
        emu = api.emulator
        done = _runner(tmp_path, "run", "jobs", base_url=emu.base_url, key="k")
        outcomes = emu.stats()["outcomes"]
    run_dir = next((tmp_path / "runs").iterdir())
    assert done.returncode == 1, done.stderr  # max_turns is not a success
    assert outcomes == {"ok": 2, "529": 1}, outcomes
    # the model answered the first call with its first turn and the last call (no tools) with its report
    assert [(r.tool_choice or {}).get("type") for r in model.requests] == [None, "none"], model.requests
    assert REPORT in (run_dir / "j" / "final.md").read_text()
    events = read_jsonl(run_dir / "j" / "events.jsonl")[0]
    stages = [e["stage"] for e in events]
    assert stages.index("last_call") < stages.index("retries"), stages
    [retries] = [e for e in events if e["stage"] == "retries"]
    assert retries["overloaded_529"] == 1 and retries["attempts"] == 2
    metrics = json.loads((run_dir / "j" / "metrics.json").read_text())
    assert metrics["status"] == "max_turns" and metrics["overloaded_529"] == 1
