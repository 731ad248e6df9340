"""Issue 19, item 6: what an operator's first hour hits, each in-process (``cli.main``) and fast."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import pytest

from runner import cli
from runner.report import plural, totals_line

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
    (tmp_path / "jobs" / "one.toml").write_text('prompt = "Survey."\nworkspace = "../ws"\n[limits]\nmax_turns = 6\n')
    (tmp_path / "config.toml").write_text('[runner]\nbackend = "offline"\nconcurrency = 2\n')
    return tmp_path


def errors_of(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("error:")]


# --- validate reports every problem at once ------------------------------------------------------------


def test_validate_reports_a_top_level_mistake_and_the_limits_errors_together(project: Path, capsys: Any) -> None:
    (project / "config.toml").write_text('concurency = 3\n[runner]\nconcurrency = "8"\n[limits]\nmax_turns = 0\n'
                                         '[jobs.one]\nmax_turns = -1\n')
    assert cli.main(["validate"]) == 2
    errors = errors_of(capsys.readouterr().err)
    assert any("config.toml: concurency: unknown key" in e for e in errors), errors
    assert any("runner.concurrency:" in e for e in errors), errors
    assert any("limits.max_turns:" in e for e in errors), errors
    assert any("jobs.one.max_turns:" in e for e in errors), errors
    assert len(errors) == len(set(errors)) == 4, errors  # each once


def test_validate_reports_a_task_files_limits_and_workspace_beside_a_bad_field(project: Path, capsys: Any) -> None:
    (project / "jobs" / "one.toml").write_text('prompt = "p"\nworkspace = "../nowhere"\ntools = ["shell"]\n'
                                               '[limits]\nmax_turns = 0\n')
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
    jobs = [{"job": "a", "usage": {"input_tokens": 100, "output_tokens": 10},
             "summarizer_usage": {"input_tokens": 40, "output_tokens": 4}}]
    line = totals_line({"totals": {"jobs": 1, "succeeded": 1, "input_tokens": 140, "output_tokens": 14}, "jobs": jobs})
    assert "140 in / 14 out tokens" in line and "summaries' 40 in / 4 out" in line
    assert "summaries" not in totals_line({"totals": {"jobs": 1}, "jobs": [{"usage": {"input_tokens": 1}}]})


# --- help texts, shipped files -------------------------------------------------------------------------


def test_help_texts(capsys: Any) -> None:
    for command, flags in (("run", ["--config"]), ("resume", ["--concurrency"]), ("emulate", ["--host", "--port"])):
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
