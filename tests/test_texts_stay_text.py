"""Text from a report reaches the terminal (and a file it is redirected to) as written: rich's markup and
emoji codes are never applied to data (``b.py:100:`` is not 💯, ``:thumbs_up:`` is not 👍)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from scripted import ScriptedModel, play_instead_of_the_stand_in

TODO = "# TODO :thumbs_up: fix b.py:100: [bold]now[/bold]"


def night(monkeypatch: pytest.MonkeyPatch, *todos: str) -> None:
    """The next run's model: it reads b.py and reports ``todos`` as a survey quotes them."""
    report = "# Survey\n\n" + "".join(f"- `{todo}`\n" for todo in todos)
    play_instead_of_the_stand_in(monkeypatch, ScriptedModel([("read", {"file_path": "b.py"})], final=report))


def test_runner_diff_prints_report_text_as_written(
    run_cli: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "b.py").write_text("x = 1\n")
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    (jobs / "survey.toml").write_text('workspace = "../ws"\nprompt = "Survey the workspace."\n')
    night(monkeypatch, "b.py:1: x = 1")
    assert run_cli("run", "jobs", cwd=tmp_path).returncode == 0
    first = (tmp_path / "runs" / "latest").resolve()
    (ws / "b.py").write_text(f"x = 1\n{TODO}\n")
    night(monkeypatch, "b.py:1: x = 1", f"b.py:2: {TODO}")
    assert run_cli("run", "jobs", cwd=tmp_path).returncode == 0
    done = run_cli("diff", str(first), str(tmp_path / "runs" / "latest"), cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    lines = done.stdout.splitlines()
    assert f"+- `b.py:2: {TODO}`" in lines, done.stdout  # the added line, character for character
    assert " - `b.py:1: x = 1`" in lines, done.stdout
    assert "\N{HUNDRED POINTS SYMBOL}" not in done.stdout and "\N{THUMBS UP SIGN}" not in done.stdout
