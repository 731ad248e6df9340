"""A full disk: every job's metrics.json and run.json end in a final state, no temporary file is
left, the table shows the real statuses, and starting on a full disk is one line and exit 2. The run
directory is a small tmpfs (real ENOSPC), mounted for the test; skipped where mounting is not allowed.

This holds with any model: the jobs are driven here by a scripted model (``tests/scripted.py``: it
reads the email package's modules one a turn, each result saved), in a real runner process."""

from __future__ import annotations

import json
import os
import subprocess
import sysconfig
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import mounted_tmpfs
from scripted import ScriptedModel, files_under, reads, scripted_runner

FINAL = {"succeeded", "failed", "timeout", "max_turns", "budget_exceeded", "cancelled", "not_started"}


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    with mounted_tmpfs(tmp_path / "disk", "400k") as mount:
        yield mount


def _jobs(tmp: Path, n: int) -> None:
    (tmp / "jobs").mkdir()
    for i in range(n):
        (tmp / "jobs" / f"j{i}.toml").write_text(
            f'workspace = "{{stdlib}}/email"\nprompt = "Survey ({i})."\n'
            "[limits]\nlarge_result_chars = 400\npreview_chars = 100\nbatch_char_limit = "
            "1000\ncontext_char_limit = 8000\n"
        )
    (tmp / "config.toml").write_text('[runner]\nbackend = "offline"\nconcurrency = 3\n')
    email = Path(sysconfig.get_paths()["stdlib"]) / "email"
    ScriptedModel(reads(files_under(email)), final="# Report").save(tmp / "script.json")


def _runner(tmp: Path, out: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "RUNNER_"))}
    return subprocess.run(
        scripted_runner(tmp / "script.json", "run", "jobs", "--output-dir", str(out)),
        cwd=tmp,
        env={**env, "COLUMNS": "250"},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_disk_that_fills_up_leaves_final_documents(tmp_path: Path, small_disk: Path) -> None:
    _jobs(tmp_path, 6)
    done = _runner(tmp_path, small_disk)
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    [run_dir] = [p for p in small_disk.iterdir() if not p.is_symlink()]
    metrics = {p.parent.name: json.loads(p.read_text()) for p in run_dir.glob("*/metrics.json")}
    assert metrics and all(m["status"] in FINAL for m in metrics.values()), metrics
    assert any(m["status"] == "failed" and "No space left" in (m["error"] or "") for m in metrics.values())
    run = json.loads((run_dir / "run.json").read_text())
    assert run["state"] == "finished"
    assert {j["status"] for j in run["jobs"]} <= FINAL
    # the table printed at the end shows what each job's own files say
    for name, m in metrics.items():
        # the job's row in the wide table (boxed) or the narrow one
        row = next(line for line in done.stdout.splitlines() if line.replace("│", " ").split()[:1] == [name])
        assert m["status"] in row, (row, m["status"])
    assert "queued" not in done.stdout and "running" not in done.stdout
    assert not [
        p for p in run_dir.rglob("*") if p.name.endswith((".tmp", ".spare")) or p.name.startswith(".reserve")
    ]


def test_starting_on_a_full_disk_is_one_line_and_exit_2(tmp_path: Path, small_disk: Path) -> None:
    _jobs(tmp_path, 2)
    fd = os.open(small_disk / "filler", os.O_WRONLY | os.O_CREAT)
    try:
        while os.write(fd, b"\0" * 4096):
            pass
    except OSError:
        pass
    finally:
        os.close(fd)
    done = _runner(tmp_path, small_disk)
    assert done.returncode == 2, done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "No space left" in errors[0], done.stderr
    assert "Traceback" not in done.stderr
