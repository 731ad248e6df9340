"""Text from a report reaches the terminal (and a file it is redirected to) as written: rich's markup and
emoji codes are never applied to data (``b.py:100:`` is not 💯, ``:thumbs_up:`` is not 👍)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

TODO = "# TODO :thumbs_up: fix b.py:100: [bold]now[/bold]"


def test_runner_diff_prints_report_text_as_written(run_cli: Any, tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "b.py").write_text("x = 1\n")
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    (jobs / "survey.toml").write_text('workspace = "../ws"\nprompt = "Survey the workspace."\n')
    assert run_cli("run", "jobs", cwd=tmp_path).returncode == 0
    first = (tmp_path / "runs" / "latest").resolve()
    (ws / "b.py").write_text(f"x = 1\n{TODO}\n")
    assert run_cli("run", "jobs", cwd=tmp_path).returncode == 0
    done = run_cli("diff", str(first), str(tmp_path / "runs" / "latest"), cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    assert f"b.py:2: {TODO}" in done.stdout
    assert "\N{HUNDRED POINTS SYMBOL}" not in done.stdout and "\N{THUMBS UP SIGN}" not in done.stdout
