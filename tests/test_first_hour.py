"""Issue 19, item 6: what an operator's first hour hits, each in-process (``cli.main``) and fast."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

import pytest
from scripted import ScriptedModel, play_instead_of_the_stand_in

from runner import cli
from runner.ui.report import plural, totals_line

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def project(tmp_path: Path, monkeypatch: Any) -> Path:
    """A project directory as cwd: a tiny workspace, one job, an offline config."""
    monkeypatch.chdir(tmp_path)
    for key in ("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL"):
        monkeypatch.delenv(key, raising=False)
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "mod.py").write_text('"""A module."""\n\ndef f():\n    return 1  # TODO: more\n')
    (tmp_path / "jobs").mkdir()
    (tmp_path / "jobs" / "one.toml").write_text(
        'prompt = "Survey."\nworkspace = "../ws"\n[limits]\nmax_turns = 6\n'
    )
    (tmp_path / "config.toml").write_text('[runner]\nbackend = "offline"\nconcurrency = 2\n')
    return tmp_path


REPORT = "# Survey\n\nmod.py: one function, one TODO."


@pytest.fixture
def model(monkeypatch: Any) -> ScriptedModel:
    """What a run of the project plays instead of the stand-in: each job reads mod.py, then reports
    (2 turns)."""
    scripted = ScriptedModel([("read", {"file_path": "mod.py"})], final=REPORT)
    play_instead_of_the_stand_in(monkeypatch, scripted)
    return scripted


def errors_of(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("error:")]


# --- validate reports every problem at once ------------------------------------------------------------


def test_validate_reports_a_top_level_mistake_and_the_limits_errors_together(
    project: Path, capsys: Any
) -> None:
    (project / "config.toml").write_text(
        'concurency = 3\n[runner]\nconcurrency = "8"\n[limits]\nmax_turns = 0\n[jobs.one]\nmax_turns = -1\n'
    )
    assert cli.main(["validate"]) == 2
    errors = errors_of(capsys.readouterr().err)
    assert any("config.toml: concurency: unknown key" in e for e in errors), errors
    assert any("runner.concurrency:" in e for e in errors), errors
    assert any("limits.max_turns:" in e for e in errors), errors
    assert any("jobs.one.max_turns:" in e for e in errors), errors
    assert len(errors) == len(set(errors)) == 4, errors  # each once


def test_validate_reports_a_task_files_limits_and_workspace_beside_a_bad_field(
    project: Path, capsys: Any
) -> None:
    (project / "jobs" / "one.toml").write_text(
        'prompt = "p"\nworkspace = "../nowhere"\ntools = ["shell"]\n[limits]\nmax_turns = 0\n'
    )
    assert cli.main(["validate"]) == 2
    errors = errors_of(capsys.readouterr().err)
    assert any("jobs/one.toml: tools.0:" in e for e in errors), errors
    assert any("jobs/one.toml: limits.max_turns:" in e for e in errors), errors
    assert any("jobs/one.toml: workspace:" in e and "does not exist" in e for e in errors), errors


# --- a duplicate job name ------------------------------------------------------------------------------


@pytest.mark.parametrize("command", ["validate", "run"])
def test_a_duplicate_name_is_one_error_naming_both_files(project: Path, capsys: Any, command: str) -> None:
    (project / "more").mkdir()
    (project / "more" / "one.toml").write_text('prompt = "Again."\nworkspace = "../ws"\n')
    assert cli.main([command, "jobs", "more"]) == 2
    captured = capsys.readouterr()
    errors = errors_of(captured.err)
    assert len(errors) == 1, errors
    assert "more/one.toml: name:" in errors[0] and "jobs/one.toml" in errors[0] and "'one'" in errors[0]
    assert "@" not in captured.out + captured.err  # never a made-up name such as one@one
    assert not (project / "runs").exists()  # nothing started


# --- words and numbers ---------------------------------------------------------------------------------


def test_counts_are_printed_in_the_right_number() -> None:
    assert plural(1, "job") == "1 job" and plural(2, "job") == "2 jobs" and plural(0, "job") == "0 jobs"
    assert totals_line({"totals": {"jobs": 1, "succeeded": 1}}).startswith("1 job, 1 succeeded;")
    assert totals_line({"totals": {"jobs": 3, "failed": 3}}).startswith("3 jobs, 3 failed;")


def test_the_totals_line_says_how_much_of_the_tokens_were_summaries() -> None:
    jobs = [
        {
            "job": "a",
            "usage": {"input_tokens": 100, "output_tokens": 10},
            "summarizer_usage": {"input_tokens": 40, "output_tokens": 4},
        }
    ]
    line = totals_line(
        {"totals": {"jobs": 1, "succeeded": 1, "input_tokens": 140, "output_tokens": 14}, "jobs": jobs}
    )
    assert "140 in / 14 out tokens" in line and "summaries' 40 in / 4 out" in line
    assert "summaries" not in totals_line({"totals": {"jobs": 1}, "jobs": [{"usage": {"input_tokens": 1}}]})


# --- help texts, shipped files -------------------------------------------------------------------------


def test_help_texts(capsys: Any) -> None:
    for command, flags in (
        ("run", ["--config"]),
        ("resume", ["--concurrency"]),
        ("emulate", ["--host", "--port"]),
    ):
        with pytest.raises(SystemExit):
            cli.main([command, "--help"])
        text = " ".join(capsys.readouterr().out.split())
        for flag in flags:
            after = text.split(f" {flag} ", 1)[1]
            assert not after.startswith("-"), f"{command} {flag} has no help: {after[:60]}"
    with pytest.raises(SystemExit):
        cli.main(["run", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "default: ./config.toml" not in text and "nearest config.toml" in text


def test_the_shipped_config_names_every_compaction_mode() -> None:
    from typing import get_args

    from runner.config import Compaction

    line = next(ln for ln in (REPO / "config.toml").read_text().splitlines() if ln.startswith("compaction"))
    assert all(mode in line.split("#", 1)[1] for mode in get_args(Compaction)), line


def test_the_readme_uses_the_key_the_emulator_prints() -> None:
    readme = (REPO / "README.md").read_text()
    assert "ANTHROPIC_API_KEY=emulator " not in readme and "ANTHROPIC_API_KEY=emulator-key" in readme


def test_skipped_tests_show_their_reasons() -> None:
    options = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    assert "-rs" in options["addopts"].split()


# --- prices, and what the offline model will not do ----------------------------------------------------


def test_an_unknown_model_is_named_with_the_price_assumed(project: Path, capsys: Any) -> None:
    from runner.pricing import PriceTable

    (project / "jobs" / "one.toml").write_text('prompt = "p"\nworkspace = "../ws"\nmodel = "gpt-4o"\n')
    assert cli.main(["validate"]) == 0
    warnings = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("warning:")]
    assert len(warnings) == 1, warnings
    assert "'gpt-4o' has no price" in warnings[0] and "opus ($15 in / $75 out" in warnings[0]
    assert '[prices."gpt-4o"]' in warnings[0] and "job one" in warnings[0]
    (project / "config.toml").write_text(
        '[runner]\nbackend = "offline"\n[prices."gpt-4o"]\ninput = 2.5\noutput = 10\n'
    )
    assert cli.main(["validate"]) == 0
    assert "warning:" not in capsys.readouterr().err
    assert PriceTable().unpriced("claude-sonnet-5-5") is None and PriceTable().unpriced("gpt-4o")


def run_once(project: Path, capsys: Any, *args: str) -> tuple[int, str, str]:
    code = cli.main(["run", *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_a_run_on_the_offline_model_says_which_jobs_will_not_get_their_tools(
    project: Path, capsys: Any, model: ScriptedModel
) -> None:
    """The warning is the CLI's, from the task files, whatever the model then does: once, for the one
    job whose tools the offline model will not run, before both jobs run to the end."""
    (project / "jobs" / "acts.toml").write_text(
        'prompt = "Fix the bug and run the tests."\nworkspace = "../ws"\n'
        'tools = ["read", "glob", "grep", "bash", "write"]\n'
        '[limits]\nmax_turns = 4\nsandbox = "none"\n'
    )
    code, _, err = run_once(project, capsys)
    assert code == 0, err
    lines = [ln for ln in err.splitlines() if "only surveys" in ln]
    assert len(lines) == 1, err
    assert lines[0].startswith("warning: job acts (jobs/acts.toml):") and "bash, write" in lines[0]
    assert err.index(lines[0]) < err.index("start  ")  # said before any job starts
    assert len(model.requests) == 4  # two jobs, two turns each: the warning stopped nothing


# --- the end of a run on a pipe, and --json --------------------------------------------------------------


def test_the_end_of_a_run_on_a_pipe_fits_80_columns_and_names_the_run_directory(
    project: Path, capsys: Any, monkeypatch: Any, model: ScriptedModel
) -> None:
    from runner.ui import console

    assert console.out.width <= 100  # a pipe: rich's 80 columns (or $COLUMNS), not a 200-column box table
    monkeypatch.setattr(console.out, "width", 80)
    (project / "sub").mkdir()
    monkeypatch.chdir(project / "sub")  # run from elsewhere: the path printed is still the real one
    code, out, err = run_once(project, capsys, str(project / "jobs"), "--output-dir", "../runs")
    assert code == 0, err
    [run_dir] = [p for p in (project / "runs").iterdir() if not p.is_symlink()]
    assert f"files: {run_dir}" in out.splitlines()
    table = out.split("\n1 job, ")[0].splitlines()[1:]  # between the "run DIR" line and the totals
    assert table and max(len(line) for line in table) <= 80, out
    [row] = [line.split() for line in table if line.startswith("one ")]
    assert row[1:3] == ["ok", "2"], table  # the script's two turns
    assert "\n1 job, 1 succeeded; " in out


@pytest.mark.parametrize("command", ["run", "report"])
def test_json_names_the_run_directory(project: Path, capsys: Any, command: str, model: ScriptedModel) -> None:
    code, out, err = run_once(project, capsys, "--json")
    assert code == 0, err
    [run_dir] = [p for p in (project / "runs").iterdir() if not p.is_symlink()]
    if command == "report":
        assert cli.main(["report", "runs/" + run_dir.name, "--json"]) == 0
        out = capsys.readouterr().out
    document = json.loads(out)
    assert document["run_dir"] == str(run_dir) and Path(document["run_dir"]).is_absolute()
    assert document["run_id"] == run_dir.name and document["state"] == "finished"
    [job] = document["jobs"]
    assert (job["job"], job["status"], job["turns"]) == ("one", "succeeded", 2)
    assert (run_dir / "one" / "final.md").read_text().strip() == REPORT


def test_report_without_a_run_reports_the_latest(
    project: Path, capsys: Any, monkeypatch: Any, model: ScriptedModel
) -> None:
    assert cli.main(["report"]) == 2
    assert "no latest run" in capsys.readouterr().err
    assert run_once(project, capsys)[0] == 0
    [run_dir] = [p for p in (project / "runs").iterdir() if not p.is_symlink()]
    (project / "jobs" / "deeper").mkdir()
    monkeypatch.chdir(project / "jobs" / "deeper")  # found like `run` finds config.toml: walking up
    assert cli.main(["report"]) == 0
    captured = capsys.readouterr()
    assert f"report: {project / 'runs' / 'latest'} -> {run_dir}" in captured.err
    assert f"run {run_dir} (finished)" in captured.out.splitlines()
    assert "1 job, 1 succeeded; " in captured.out
    assert cli.main(["report", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["run_dir"] == str(run_dir)


# --- the live display ----------------------------------------------------------------------------------


def _tally_with_a_long_job() -> Any:
    from runner.rundir.docs import JobMetrics
    from runner.ui.display import ApiCounts, Tally

    tally = Tally(None, ApiCounts())
    progress = {n: JobMetrics(job=n, status="queued") for n in "abcdefg"}
    tally.start(progress)
    for n in "abcdef":  # six jobs end at once (bad task files, quick failures)
        progress[n].status = "failed"
        tally.finished(JobMetrics(job=n, status="failed", wall_s=0.2))
    progress["g"].status, progress["g"].turns, progress["g"].started = "running", 114, tally.started_wall
    tally.job_started(progress["g"])
    return tally, progress


def test_the_eta_is_not_a_guess_from_jobs_that_ended_at_once() -> None:
    tally, progress = _tally_with_a_long_job()
    line = tally.line(now=tally.started + 600)  # g has run 600 s, at turn 114 of 3,000
    assert "ETA ?" in line and "ETA 0:00" not in line, line
    assert tally.eta_s(now=tally.started + 600) is None


def test_the_eta_from_the_pace_when_it_can_be_estimated() -> None:
    from runner.rundir.docs import JobMetrics
    from runner.ui.display import ApiCounts, Tally

    tally = Tally(None, ApiCounts())
    progress = {n: JobMetrics(job=n, status="queued") for n in "abcd"}
    tally.start(progress)
    tally.finished(JobMetrics(job="a", status="succeeded", wall_s=30.0))
    progress["b"].status, progress["b"].started = "running", tally.started_wall + 20
    tally.job_started(progress["b"])
    # one of four done in 30 s: three more at that pace take 90 s (b, 10 s in, needs 20 s more of it)
    assert tally.eta_s(now=tally.started + 30) == pytest.approx(90)
    assert "ETA 1:30" in tally.line(now=tally.started + 30)


def test_the_counts_agree_with_the_rows_while_a_job_is_ending() -> None:
    from io import StringIO

    from rich.console import Console

    from runner.rundir.docs import JobMetrics
    from runner.ui.display import LiveDisplay

    console = Console(file=StringIO(), width=100, force_terminal=True, color_system=None)
    display = LiveDisplay(console)
    progress = {n: JobMetrics(job=n, status="running", turns=3) for n in ("first", "second", "third")}
    display.tally.start(progress)
    display.tally.finished(JobMetrics(job="first", status="succeeded"))
    progress["first"].status = "succeeded"
    progress["second"].status = "succeeded"  # its session set the status; its end is not reported yet
    line = display.tally.line()
    assert "1/3 done" in line and "1 succeeded" in line and "2 running" in line, line
    console.print(display._render())
    rows = console.file.getvalue().splitlines()
    assert sum(1 for r in rows if r.split()[:2][1:] == ["running"]) == 2, rows
    assert not any(r.startswith("first ") for r in rows), rows


def test_the_status_line_is_cut_to_the_terminal_width() -> None:
    from io import StringIO

    from rich.console import Console

    from runner.rundir.docs import JobMetrics
    from runner.ui.display import LiveDisplay

    console = Console(file=StringIO(), width=60, force_terminal=True, color_system=None)
    display = LiveDisplay(console)
    display.tally.start(
        {
            f"job-{i}": JobMetrics(job=f"job-{i}", status=s)
            for i, s in enumerate(["running", "queued", "running"])
        }
    )
    console.print(display._render())
    lines = console.file.getvalue().splitlines()
    assert "done" in lines[-1] and "…" in lines[-1] and len(lines[-1]) <= 60, lines
    assert max(len(line) for line in lines) <= 60


def test_paths_are_absolute_when_run_from_the_root(monkeypatch: Any, tmp_path: Path) -> None:
    from runner.ui.console import shown_path

    monkeypatch.chdir(tmp_path)
    assert shown_path(tmp_path / "runs" / "x") == "runs/x"
    monkeypatch.chdir("/")
    assert shown_path(tmp_path / "runs" / "x") == str(tmp_path / "runs" / "x")


# --- the emulator's script ------------------------------------------------------------------------------


def test_a_misspelled_key_in_a_scripted_block_is_one_line_naming_the_file_and_the_field(
    tmp_path: Path,
) -> None:
    from runner.config import ConfigError
    from runner.emulator.config import EmulatorConfig

    config = tmp_path / "emu.toml"
    config.write_text(
        '[[script]]\ncontent = "Looking."\n[[script]]\nstop_reason = "tool_use"\n'
        'content = [{type = "tool_use", id = "toolu_1", name = "bash", inputs = {command = "ls"}}]\n'
    )
    with pytest.raises(ConfigError) as raised:  # `runner emulate --config` prints each line and exits 2
        EmulatorConfig.from_toml(config)
    [err] = raised.value.problems
    assert err.startswith(f"{config}: script.1: content.0.inputs: unknown key in a tool_use block"), err
    assert "input" in err.split("expected", 1)[1] and "pydantic" not in err and "{" not in err, err
    # the values stay free (a hostile script sends any), only the keys are checked
    hostile = {"type": "tool_use", "id": None, "name": 5, "input": "not an object"}
    assert EmulatorConfig.model_validate({"script": [{"content": [hostile]}]}).script[0].content == [hostile]


def test_the_readme_shows_the_emulators_script() -> None:
    readme = (REPO / "README.md").read_text()
    assert "[[script]]" in readme and 'name = "bash", input = {command' in readme
