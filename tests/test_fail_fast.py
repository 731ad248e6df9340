"""Bad credentials or a wrong base URL stop the batch at the first job that meets them: exit 2, one
line naming the base URL and the error; jobs not started are ``not_started`` and ``resume`` runs them.
Retries, 429s and 529s are counted per job. Real ``runner`` subprocesses, the real SDK, the emulator."""

from __future__ import annotations

import json
import socket
import subprocess
import time
from pathlib import Path

from conftest import run_cli_process

from runner.emulator import EmulatorConfig, running_emulator
from runner.emulator.config import Fault, Faults
from runner.rundir.store import read_jsonl

JOBS = 5


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
    with running_emulator(EmulatorConfig(api_key="the-right-key")) as emu:
        started = time.monotonic()
        done = _runner(tmp_path, "run", "jobs", base_url=emu.base_url, key="a-wrong-key")
        elapsed = time.monotonic() - started
        requests = emu.stats()["requests"]
        assert done.returncode == 2, done.stderr
        assert "Traceback" not in done.stderr
        [line] = _error_lines(done.stderr)
        assert emu.base_url in line and "401" in line and "AuthenticationError" in line
        assert elapsed < 30
        assert requests <= 2  # one per job that started (concurrency 2), not one per job and retry
        run_dir = next((tmp_path / "runs").iterdir())
        statuses = _statuses(run_dir)
        assert "not_started" in statuses and "succeeded" not in statuses
        assert set(statuses) <= {"failed", "cancelled", "not_started"}
        resumed = _runner(tmp_path, "resume", str(run_dir), base_url=emu.base_url, key="the-right-key")
        assert resumed.returncode == 0, resumed.stderr
        assert _statuses(run_dir) == ["succeeded"] * JOBS


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
    with running_emulator(EmulatorConfig(faults=faults, retry_after_s=0.05)) as emu:
        done = _runner(tmp_path, "run", "jobs", base_url=emu.base_url, key="k")
        assert done.returncode == 0, done.stderr
        assert "Unclosed client session" not in done.stderr
        run_dir = next((tmp_path / "runs").iterdir())
        metrics = [json.loads(p.read_text()) for p in run_dir.glob("*/metrics.json")]
        events = [
            e for p in run_dir.glob("*/events.jsonl") for e in read_jsonl(p)[0] if e["stage"] == "retries"
        ]
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
    with running_emulator(
        EmulatorConfig(faults=Faults(overloaded=Fault(schedule=[2])), retry_after_s=0.05)
    ) as emu:
        done = _runner(tmp_path, "run", "jobs", base_url=emu.base_url, key="k")
    run_dir = next((tmp_path / "runs").iterdir())
    assert done.returncode == 1, done.stderr  # max_turns is not a success
    events = read_jsonl(run_dir / "j" / "events.jsonl")[0]
    stages = [e["stage"] for e in events]
    assert stages.index("last_call") < stages.index("retries"), stages
    [retries] = [e for e in events if e["stage"] == "retries"]
    assert retries["overloaded_529"] == 1 and retries["attempts"] == 2
    metrics = json.loads((run_dir / "j" / "metrics.json").read_text())
    assert metrics["status"] == "max_turns" and metrics["overloaded_529"] == 1
