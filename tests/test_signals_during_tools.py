"""The batch always ends: SIGTERM or Ctrl-C (SIGINT) reaches the runner while a tool call is blocked,
and the runner exits 130 promptly, every job ``cancelled`` with its files written, and no process of
the blocked call left behind. Real subprocesses: the runner, the SDK over HTTP against the emulator
(which scripts the blocking call), the tool under bubblewrap."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from runner.emulator.config import EmulatorConfig, ScriptedReply
from runner.emulator.server import running_emulator
from runner.tools.sandbox import bwrap_problem

MARKER = "4242.17"  # sleep's argument: a process with it in its command line is the blocked call


def _blocking_call() -> ScriptedReply:
    use = {"type": "tool_use", "id": "toolu_block", "name": "bash", "input": {"command": f"sleep {MARKER}"}}
    return ScriptedReply(content=[use], stop_reason="tool_use")


def _leftovers(_parent: int | None = None) -> list[str]:
    found = subprocess.run(["pgrep", "-af", f"sleep {MARKER}"], capture_output=True, text=True).stdout
    return [line for line in found.splitlines() if "pgrep" not in line]


def _signal_while(
    tmp_path: Path, task: str, reply: ScriptedReply, running, signum: int
) -> tuple[subprocess.Popen, str, float]:
    """Run ``runner run`` on one job (``task``: its task file's text) against the emulator, which
    answers with ``reply``; once ``running()`` finds the blocked call, send ``signum``. Returns the
    ended process, its stderr and how long it took to end after the signal."""
    (tmp_path / "jobs").mkdir()
    (tmp_path / "jobs" / "j.toml").write_text(task)
    (tmp_path / "config.toml").write_text('[runner]\nbackend = "anthropic"\n')
    with running_emulator(EmulatorConfig(script=[reply])) as emu:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "RUNNER_"))}
        proc = subprocess.Popen(
            [sys.executable, "-m", "runner", "run", "jobs"],
            cwd=tmp_path,
            env={**env, "ANTHROPIC_BASE_URL": emu.base_url, "ANTHROPIC_API_KEY": "emulator"},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            deadline = time.monotonic() + 60
            while not running(proc.pid):  # the call is running (and blocked)
                assert proc.poll() is None, proc.communicate()
                assert time.monotonic() < deadline, "the blocking call never started"
                time.sleep(0.05)
            time.sleep(0.5)
            proc.send_signal(signum)
            sent = time.monotonic()
            _, err = proc.communicate(timeout=30)
            return proc, err, time.monotonic() - sent
        finally:
            if proc.poll() is None:
                proc.kill()


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_ends_the_batch_while_a_tool_blocks(tmp_path: Path, signum: int) -> None:
    problem = bwrap_problem()
    if problem:
        pytest.skip(f"bubblewrap cannot start here: {problem}")
    (tmp_path / "ws").mkdir()
    task = (
        f'workspace = "{tmp_path / "ws"}"\nprompt = "Wait."\ntools = ["read", "glob", "grep", "bash"]\n'
        "[limits]\ntimeout_s = 600\n"
    )
    proc, err, took = _signal_while(tmp_path, task, _blocking_call(), _leftovers, signum)
    assert proc.returncode == 130, err
    assert took < 15, f"the runner took {took:.1f} s to stop"  # a bound, not a benchmark: it is ~1 s
    [run_dir] = [p for p in (tmp_path / "runs").iterdir() if not p.is_symlink()]
    metrics = json.loads((run_dir / "j" / "metrics.json").read_text())
    assert metrics["status"] == "cancelled"
    assert json.loads((run_dir / "run.json").read_text())["state"] == "interrupted"
    assert (run_dir / "j" / "final.md").read_text().strip()
    deadline = time.monotonic() + 5
    while _leftovers() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _leftovers() == []  # the blocked call's process tree died with its job


def _grep_workers(parent: int | None = None) -> list[str]:
    """grep's child processes (of ``parent``, else of any process)."""
    found = subprocess.run(
        ["pgrep", "-af", *(["-P", str(parent)] if parent else []), "runner.tools.grep_worker"],
        capture_output=True,
        text=True,
    ).stdout
    return [line for line in found.splitlines() if "pgrep" not in line]


def test_sigterm_ends_the_batch_within_2_s_while_a_catastrophic_regex_runs(tmp_path: Path) -> None:
    """``(a+)+$`` over lines of a's ending in b backtracks for hours; the regex runs in a child
    process, so the runner answers SIGTERM at once and the child dies with its job."""
    (tmp_path / "ws").mkdir()
    (tmp_path / "ws" / "a.txt").write_text(("a" * 40 + "b\n") * 50)
    task = f'workspace = "{tmp_path / "ws"}"\nprompt = "Search."\n[limits]\ntimeout_s = 600\n'
    use = {"type": "tool_use", "id": "toolu_regex", "name": "grep", "input": {"pattern": "(a+)+$"}}
    seen: list[str] = []

    def started(parent: int) -> list[str]:
        seen.extend(line.split()[0] for line in _grep_workers(parent))
        return seen

    proc, err, took = _signal_while(
        tmp_path, task, ScriptedReply(content=[use], stop_reason="tool_use"), started, signal.SIGTERM
    )
    assert proc.returncode == 130, err
    assert took < 2, f"the runner took {took:.1f} s to stop"  # the bound for any tool call
    [run_dir] = [p for p in (tmp_path / "runs").iterdir() if not p.is_symlink()]
    assert json.loads((run_dir / "j" / "metrics.json").read_text())["status"] == "cancelled"
    deadline = time.monotonic() + 5
    while any(Path(f"/proc/{pid}").exists() for pid in seen) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert seen and not any(Path(f"/proc/{pid}").exists() for pid in seen)  # the regex's process died
