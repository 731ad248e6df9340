"""What a newcomer meets on a first night, each a test that would have caught it (issue: the first night
as a newcomer lives it)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from scripted import ScriptedModel, play_instead_of_the_stand_in, scripted_runner

REPORT = "# Survey\n\na.py sets x = 1."


@pytest.fixture
def model(monkeypatch: pytest.MonkeyPatch) -> ScriptedModel:
    """What a run in this process plays instead of the stand-in: a read of a.py, then the report."""
    scripted = ScriptedModel([("read", {"file_path": "a.py"})], final=REPORT)
    play_instead_of_the_stand_in(monkeypatch, scripted)
    return scripted


def survey_project(root: Path) -> Path:
    ws = root / "ws"
    ws.mkdir()
    (ws / "a.py").write_text("x = 1\n")
    jobs = root / "jobs"
    jobs.mkdir()
    (jobs / "survey.toml").write_text('workspace = "../ws"\nprompt = "Survey the workspace."\n')
    return jobs


def test_resuming_through_runs_latest_keeps_the_run_id(
    run_cli: Any, tmp_path: Path, model: ScriptedModel
) -> None:
    survey_project(tmp_path)
    assert run_cli("run", "jobs", cwd=tmp_path).returncode == 0
    run = (tmp_path / "runs" / "latest").resolve()
    assert len(model.requests) == 2
    done = run_cli("resume", "runs/latest", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads((run / "run.json").read_text())["run_id"] == run.name
    assert (tmp_path / "runs" / "latest").resolve() == run
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == sorted(["latest", run.name])
    assert len(model.requests) == 2  # the finished job is not called again
    assert (run / "survey" / "final.md").read_text().strip() == REPORT


def test_a_resume_prints_json_as_a_run_does(run_cli: Any, tmp_path: Path, model: ScriptedModel) -> None:
    """A max_turns night raised and resumed from a script: ``resume --json`` gives the run's document."""
    jobs = survey_project(tmp_path)
    (jobs / "survey.toml").write_text(
        'workspace = "../ws"\nprompt = "Survey the workspace."\n[limits]\nmax_turns = 1\n'
    )
    first = run_cli("run", "jobs", "--json", cwd=tmp_path)
    assert first.returncode == 1
    assert [(j["job"], j["status"]) for j in json.loads(first.stdout)["jobs"]] == [("survey", "max_turns")]
    (jobs / "survey.toml").write_text('workspace = "../ws"\nprompt = "Survey the workspace."\n')
    done = run_cli("resume", "runs/latest", "--limits-from-config", "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    run = (tmp_path / "runs" / "latest").resolve()
    assert document["run_dir"] == str(run) and document["state"] == "finished"
    assert [(j["job"], j["status"], j["turns"]) for j in document["jobs"]] == [("survey", "succeeded", 2)]
    assert (run / "survey" / "final.md").read_text().strip() == REPORT


def readme_nightly_script() -> str:
    text = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    start = text.index("```sh\n#!/bin/sh\n# /srv/analysis/nightly.sh") + len("```sh\n")
    return text[start : text.index("```\n", start)]


def test_the_readme_nightly_recipe_runs_under_crons_environment(tmp_path: Path) -> None:
    """The recipe as written, under cron's environment (``env -i PATH=/usr/bin:/bin``), two nights: the
    runner found by its path, ``last-run.json`` whole each night, the diff written when a report changed.
    The recipe's runner is the installed one, except that its ``run`` plays each night's script (the
    second night's report differs from the first's by one line)."""
    runner = Path(sys.executable).parent / "runner"
    if not runner.exists():
        pytest.skip(f"no runner script beside {sys.executable} (not installed with pip)")
    jobs = survey_project(tmp_path)
    night_script = tmp_path / "night.json"
    scripted_run = " ".join(scripted_runner(night_script))
    wrapper = tmp_path / "runner"
    wrapper.write_text(f'#!/bin/sh\ncase "$1" in run) exec {scripted_run} "$@" ;; esac\nexec {runner} "$@"\n')
    wrapper.chmod(0o755)
    script = tmp_path / "nightly.sh"
    body = readme_nightly_script().replace("/srv/analysis/.venv/bin/runner", str(wrapper))
    script.write_text(body.replace("/srv/analysis", str(tmp_path)))
    script.chmod(0o755)

    def night(report: str) -> subprocess.CompletedProcess[str]:
        ScriptedModel([("read", {"file_path": "a.py"})], final=report).save(night_script)
        return subprocess.run(
            ["env", "-i", "PATH=/usr/bin:/bin", str(script)], capture_output=True, text=True, timeout=300
        )

    def jobs_of_the_night() -> list[tuple[str, str, int]]:
        document = json.loads((tmp_path / "last-run.json").read_text())
        assert document["run_dir"] == str((tmp_path / "runs" / "latest").resolve())
        return [(j["job"], j["status"], j["turns"]) for j in document["jobs"]]

    first = night(REPORT)
    assert first.returncode == 0, first.stderr
    assert jobs_of_the_night() == [("survey", "succeeded", 2)]
    assert not (tmp_path / "last-diff.txt").exists()
    assert not (tmp_path / "last-run.json.new").exists()
    second = night(REPORT.replace("x = 1", "x = 2"))
    assert second.returncode == 0, second.stderr
    assert jobs_of_the_night() == [("survey", "succeeded", 2)]
    diff = (tmp_path / "last-diff.txt").read_text().splitlines()
    assert diff[0] == "job survey: report changed", diff
    assert "-a.py sets x = 1." in diff and "+a.py sets x = 2." in diff, diff
    assert diff[-1] == "1 job, 1 with a changed report", diff
    assert "not found" not in second.stderr.replace("mail: not found", "")
    assert jobs.is_dir()


def test_view_and_report_default_to_the_latest_run_of_the_config_given(
    run_cli: Any, tmp_path: Path, model: ScriptedModel
) -> None:
    survey_project(tmp_path)
    (tmp_path / "nightly.toml").write_text('[runner]\noutput_dir = "elsewhere"\n')
    assert run_cli("run", "jobs", "--config", "nightly.toml", cwd=tmp_path).returncode == 0
    run = (tmp_path / "elsewhere" / "latest").resolve()
    report = run_cli("report", "--config", "nightly.toml", cwd=tmp_path)
    assert report.returncode == 0 and run.name in report.stderr + report.stdout, report.stderr
    view = run_cli("view", "--config", "nightly.toml", cwd=tmp_path)
    assert view.returncode == 0, view.stderr
    assert (run / "index.html").is_file() and f"{run.name} (the latest run)" in view.stderr
