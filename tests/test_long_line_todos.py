"""Issue 36, item 8: a TODO on a line of 2,000 bytes or more is one of the tree's TODO lines, and the
offline survey's report should count it. The SDK's grep skips such lines; ours shows a matching one cut
around its match (a line of 2,000 bytes or fewer as before), and the survey counts it, through a tree
search, a file's own grep or a file read whole."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from conftest import CliRunner

pytestmark = pytest.mark.stand_in


def test_a_todo_on_a_line_over_2000_bytes_is_counted(tmp_path: Path, run_cli: CliRunner) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "short.py").write_text("def f():\n    pass  # TODO: short\n")
    (ws / "long.js").write_text("var data = '" + "x" * 2500 + "'; // TODO: long\nvar y = 1;\n")
    (tmp_path / "j.toml").write_text('workspace = "ws"\nprompt = "Survey this workspace."\n')
    done = run_cli("run", "j.toml", "--backend", "offline", "--output-dir", "runs", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    final = next((tmp_path / "runs").glob("*/j/final.md")).read_text()
    todo = re.search(r"## TODO / FIXME / XXX \((\d+) lines in (\d+) files", final)
    assert todo, final
    assert (int(todo[1]), int(todo[2])) == (2, 2), todo[0]
