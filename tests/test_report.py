"""``runner report``: live statuses from the jobs' own checkpoints; never a traceback on damaged files."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from conftest import CliRunner

from runner.rundir.lock import hold_run_dir
from runner.ui.report import load_report


def _report(run_cli: CliRunner, run_dir: Path) -> subprocess.CompletedProcess[str]:
    return run_cli("report", str(run_dir), COLUMNS="200")


def _write(path: Path, data: object) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(data if isinstance(data, str) else json.dumps(data))


def test_a_running_run_shows_each_jobs_checkpoint(tmp_path: Path, run_cli) -> None:
    run_dir = tmp_path / "run"
    # run.json as written when the batch started; the jobs' checkpoints are newer
    _write(
        run_dir / "run.json",
        {
            "state": "running",
            "jobs": [
                {"job": "a", "status": "queued", "turns": 0},
                {"job": "b", "status": "queued", "turns": 0},
                {"job": "c", "status": "queued", "turns": 0},
            ],
        },
    )
    _write(run_dir / "a" / "metrics.json", {"job": "a", "status": "running", "turns": 17, "cost_usd": 0.4321})
    _write(run_dir / "b" / "metrics.json", {"job": "b", "status": "succeeded", "turns": 9, "cost_usd": 0.1})
    with hold_run_dir(run_dir):  # as the run's writer does while it runs
        document = load_report(run_dir)
        shown = _report(run_cli, run_dir)
    rows = {j["job"]: (j["status"], j["turns"], j["cost_usd"]) for j in document["jobs"]}
    assert rows == {"a": ("running", 17, 0.4321), "b": ("succeeded", 9, 0.1), "c": ("queued", 0, 0.0)}
    assert document["totals"]["turns"] == 26 and document["totals"]["cost_usd"] == pytest.approx(0.5321)
    assert shown.returncode == 1 and "Traceback" not in shown.stderr
    assert "running" in shown.stdout and "17" in shown.stdout and "0.4321" in shown.stdout


@pytest.mark.parametrize(
    "damage",
    [
        "[1, 2]",
        '{"jobs": 5}',
        '{"jobs": [3, null, "x"]}',
        '{"jobs": [{"job": "../../etc", "status": 5}]}',
        '{"jobs": [{"job": "a", "turns": "many", "usage": [1], "compactions": {"snip": "x"}, "cost_usd": '
        '"1$",'
        ' "wall_s": null, "persisted_bytes": {}}], "totals": "none", "state": 7}',
        "{not json",
        "\udcff".encode("utf-8", "surrogateescape").decode("latin-1"),
    ],
)
def test_a_damaged_run_json_never_tracebacks(tmp_path: Path, damage: str, run_cli) -> None:
    run_dir = tmp_path / "run"
    _write(run_dir / "run.json", damage)
    _write(run_dir / "a" / "metrics.json", "[]")
    shown = _report(run_cli, run_dir)
    assert "Traceback" not in shown.stderr, shown.stderr
    assert shown.returncode in (1, 2)
    if shown.returncode == 2:
        assert len(shown.stderr.strip().splitlines()) == 1 and "run.json" in shown.stderr


def test_every_status_has_a_style_and_a_colour():
    from runner.rundir.docs import Status
    from runner.ui.report import STATUS_STYLE
    from runner.ui.viewer.charts import STATUS_COLORS

    assert set(STATUS_STYLE) == set(Status) == set(STATUS_COLORS)  # the totals line lists STATUS_STYLE's


def test_a_run_whose_writer_is_gone_is_interrupted_and_a_live_one_is_not(tmp_path):
    from runner.rundir.docs import load_run, writer_alive

    run_dir = tmp_path / "run"
    (run_dir / "j").mkdir(parents=True)
    (run_dir / "run.json").write_text(
        json.dumps({"state": "running", "jobs": [{"job": "j", "status": "running"}]})
    )
    (run_dir / "j" / "metrics.json").write_text(json.dumps({"job": "j", "status": "running"}))
    with hold_run_dir(run_dir):  # the writer's exclusive lock
        assert writer_alive(run_dir)
        live = load_run(run_dir)
    assert live.state == "running" and live.jobs[0].metrics.status == "running"
    assert not writer_alive(run_dir)  # released as its holder let go (the kernel does it on any death)
    dead = load_run(run_dir)
    assert dead.state == "interrupted" and dead.jobs[0].metrics.status == "interrupted"
    assert any("runner resume" in p for p in dead.problems)
    assert (
        json.loads((run_dir / "j" / "metrics.json").read_text())["status"] == "running"
    )  # shown, not written


def test_a_job_with_subagents_has_their_rows_in_the_report_and_a_note_in_the_table(
    tmp_path: Path, run_cli
) -> None:
    from rich.console import Console
    from test_viewer import make_subagent_run

    from runner.ui.tables import fitting_table

    run_dir = make_subagent_run(tmp_path)
    metrics = json.loads((run_dir / "parent" / "metrics.json").read_text())
    assert sorted(r["status"] for r in metrics["subagents"]) == ["failed", "succeeded", "succeeded"]
    for document in (load_report(run_dir), json.loads(run_cli("report", str(run_dir), "--json").stdout)):
        (job,) = document["jobs"]
        assert job["subagents"] == metrics["subagents"]
        assert job["subagent_usage"] == metrics["subagent_usage"]
    shown = _report(run_cli, run_dir)
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    at = next(i for i, line in enumerate(lines) if "parent" in line)
    assert "3 subagents, 1 failed" in lines[at + 1]  # on the line under the job's name
    for width in (80, 200):  # either layout keeps its width, and names it the same way
        console = Console(width=width, record=True, color_system=None)
        console.print(fitting_table(load_report(run_dir)["jobs"], None, width))
        text = console.export_text()
        assert "3 subagents, 1 failed" in text and max(len(line) for line in text.splitlines()) <= width


def test_the_subagent_note_counts_failed_and_running_ones():
    from runner.ui.report import subagent_note

    assert subagent_note([]) == subagent_note(None) == subagent_note("x") == ""
    rows = [
        {"agent": "1-a", "status": "succeeded"},
        {"agent": "2-b", "status": "budget_exceeded"},
        {"agent": "3-c", "status": "running"},
    ]
    assert subagent_note(rows) == "3 subagents, 1 failed, 1 running"
    assert subagent_note(rows[:1]) == "1 subagent"
