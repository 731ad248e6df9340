"""What a newcomer meets on a first night, each a test that would have caught it (issue: the first night
as a newcomer lives it)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def survey_project(root: Path) -> Path:
    ws = root / "ws"
    ws.mkdir()
    (ws / "a.py").write_text("x = 1\n")
    jobs = root / "jobs"
    jobs.mkdir()
    (jobs / "survey.toml").write_text('workspace = "../ws"\nprompt = "Survey the workspace."\n')
    return jobs


def test_resuming_through_runs_latest_keeps_the_run_id(run_cli: Any, tmp_path: Path) -> None:
    survey_project(tmp_path)
    assert run_cli("run", "jobs", cwd=tmp_path).returncode == 0
    run = (tmp_path / "runs" / "latest").resolve()
    done = run_cli("resume", "runs/latest", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads((run / "run.json").read_text())["run_id"] == run.name
    assert (tmp_path / "runs" / "latest").resolve() == run
