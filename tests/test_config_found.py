"""``config.toml`` is found where it lives (the nearest one walking up from the jobs directory), its
values are strict, and a FIFO named ``*.toml`` is refused instead of hanging. In this process, except the
FIFO (a real subprocess with a timeout: blocking on it must not hang the suite)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from conftest import run_cli_process
from scripted import ScriptedModel, play_instead_of_the_stand_in


def _nightly(tmp: Path) -> Path:
    srv = tmp / "srv" / "nightly"
    (srv / "jobs").mkdir(parents=True)
    (srv / "jobs" / "j.toml").write_text('workspace = "{stdlib}/json"\nprompt = "Survey."\n')
    (srv / "config.toml").write_text(
        '[runner]\nbackend = "offline"\noutput_dir = "out"\n[limits]\nmax_turns = 40\n'
    )
    return srv


def test_the_nearest_config_above_the_jobs_is_used_and_named(tmp_path: Path, run_cli, monkeypatch) -> None:
    srv = _nightly(tmp_path)
    model = ScriptedModel([("read", {"file_path": "decoder.py"})], final="json decodes.")
    play_instead_of_the_stand_in(monkeypatch, model)  # backend = "offline" is the config's
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    done = run_cli("run", str(srv / "jobs"), cwd=elsewhere)
    assert done.returncode == 0, done.stderr
    assert f"config: {srv / 'config.toml'}" in done.stderr
    assert not (elsewhere / "runs").exists() and not (elsewhere / "out").exists()
    [run_dir] = [
        p for p in (srv / "out").iterdir() if not p.is_symlink()
    ]  # output_dir is relative to the config file
    assert '"max_turns": 40' in (run_dir / "j" / "job.json").read_text()
    assert (run_dir / "j" / "final.md").read_text().strip() == "json decodes."
    assert len(model.requests) == 2


def test_the_current_directorys_config_when_none_is_above(tmp_path: Path, run_cli) -> None:
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    (jobs / "j.toml").write_text('workspace = "{stdlib}/json"\nprompt = "Survey."\n')
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    (cwd / "config.toml").write_text('[runner]\nbackend = "offline"\n')
    done = run_cli("validate", str(jobs), cwd=cwd)
    assert done.returncode == 0 and "config: config.toml" in done.stdout, done.stdout + done.stderr


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ('[runner]\nconcurrency = "8"\n', "runner.concurrency"),
        ('[limits]\ncache_aware = "yes"\n', "limits.cache_aware"),
        ("[limits]\nmax_turns = 8.0\n", "limits.max_turns"),
        ('[jobs.j]\nmax_turns = "8"\n', "jobs.j.max_turns"),
    ],
)
def test_config_values_are_not_coerced(tmp_path: Path, text: str, key: str, run_cli) -> None:
    srv = _nightly(tmp_path)
    (srv / "config.toml").write_text(text)
    for command in ("validate", "run"):
        done = run_cli(command, "jobs", cwd=srv)
        assert done.returncode == 2 and "Traceback" not in done.stderr
        [line] = done.stderr.strip().splitlines()
        assert line.startswith(f"error: config.toml: {key}: ") and "(got " in line, line


def test_a_task_files_limits_are_not_coerced(tmp_path: Path, run_cli) -> None:
    srv = _nightly(tmp_path)
    (srv / "jobs" / "j.toml").write_text(
        'workspace = "{stdlib}/json"\nprompt = "Survey."\n[limits]\ntimeout_s = "9"\n'
    )
    done = run_cli("validate", "jobs", cwd=srv)
    assert done.returncode == 2 and "limits.timeout_s" in done.stderr, done.stderr


def test_a_fifo_named_toml_is_refused_not_waited_on(tmp_path: Path) -> None:
    srv = _nightly(tmp_path)
    os.mkfifo(srv / "jobs" / "pipe.toml")
    for command in ("validate", "run"):
        # the 60 s timeout would fire if it blocked on the FIFO
        done = run_cli_process(command, "jobs", cwd=srv, timeout=60)
        assert "Traceback" not in done.stderr
        assert "pipe.toml: cannot read: a FIFO, not a regular file" in done.stderr, done.stderr
        assert done.returncode == 2 and not (srv / "out").exists()  # the run stopped before any job
    os.remove(srv / "config.toml")
    os.mkfifo(srv / "config.toml")
    done = run_cli_process("validate", "jobs", cwd=srv, timeout=60)
    assert done.returncode == 2 and "config.toml: cannot read: a FIFO" in done.stderr, done.stderr
