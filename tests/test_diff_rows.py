"""``runner diff`` on any model's results: table rows of the report and lines of the declared outputs,
read inside the job directory only. Run directories are made by hand: no model is involved."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from runner.ui import rows
from runner.ui.diff import diff_runs


def job(run: Path, name: str, report: str, outputs: list, files: dict[str, str]) -> Path:
    d = run / name
    d.mkdir(parents=True)
    (d / "job.json").write_text(json.dumps({"name": name, "outputs": outputs}))
    (d / "final.md").write_text(report)
    for rel, text in files.items():
        (d / rel).parent.mkdir(parents=True, exist_ok=True)
        (d / rel).write_text(text)
    return d


REPORT = "# Findings\n\n## Summary\n\n| kind | count |\n|---|---:|\n| todo | 3 |\n| fixme | 1 |\n"


def test_rows_of_declared_outputs_and_report_tables_are_compared(tmp_path: Path) -> None:
    patterns = ["notes/*.jsonl", "agents/**/notes/*.jsonl"]
    job(
        tmp_path / "a",
        "j",
        REPORT,
        patterns,
        {
            "notes/1.jsonl": '# heading\n["a.py", 3]\n["b.py", 4]\n',
            "agents/1-x/notes/2.jsonl": '["c.py", 1]\n',
            "other/3.jsonl": '["not-declared.py", 1]\n',
        },
    )
    job(
        tmp_path / "b",
        "j",
        REPORT.replace("| todo | 3 |", "| todo | 4 |"),
        patterns,
        {
            "notes/1.jsonl": '["a.py", 5]\n["d.py", 1]\n',
            "agents/1-x/notes/2.jsonl": '["c.py", 1]\n',
            "other/3.jsonl": '["not-declared.py", 2]\n',
        },
    )
    [result] = diff_runs(tmp_path / "a", tmp_path / "b", warn=None).jobs
    assert (result.unit, result.added, result.removed, result.changed) == (
        "rows",
        ["d.py"],
        ["b.py"],
        ["a.py", "todo"],
    )
    assert result.problems == []


def test_a_report_with_no_table_and_no_outputs_is_compared_by_sections(tmp_path: Path) -> None:
    job(tmp_path / "a", "j", "## src/a.py\nuses eval\n## src/b.py\nok\n", [], {})
    job(tmp_path / "b", "j", "## src/a.py\nuses exec\n## src/c.py\nnew\n", [], {})
    [result] = diff_runs(tmp_path / "a", tmp_path / "b", warn=None).jobs
    assert (result.unit, result.added, result.removed, result.changed) == (
        "sections",
        ["src/c.py"],
        ["src/b.py"],
        ["src/a.py"],
    )


def test_outputs_are_read_inside_the_job_directory_only(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.jsonl").write_text('["SECRET.py", 1]\n')
    (outside / "sub").mkdir()
    (outside / "sub" / "x.jsonl").write_text('["SECRET-DIR.py", 1]\n')
    patterns = ["notes/*.jsonl", "notes/**/*.jsonl"]
    for side in ("a", "b"):
        d = job(tmp_path / side, "j", "report\n", patterns, {"notes/ok.jsonl": '["ok.py", 1]\n'})
    notes = tmp_path / "b" / "j" / "notes"
    (notes / "link.jsonl").symlink_to(outside / "secret.jsonl")
    (notes / "linked-dir").symlink_to(outside / "sub")
    with (notes / "huge.jsonl").open("wb") as f:  # sparse: takes no disk
        f.truncate(rows.MAX_OUTPUT_BYTES + 1)
    spec = json.loads((d / "job.json").read_text())  # a job.json edited to point out of the job
    (d / "job.json").write_text(
        json.dumps({**spec, "outputs": [*patterns, "../../outside/*.jsonl", "/etc/*"]})
    )

    [result] = diff_runs(tmp_path / "a", tmp_path / "b", warn=None).jobs
    shown = json.dumps(result.document())
    assert "SECRET" not in shown and "root:" not in shown
    problems = "\n".join(result.problems)
    assert f"{notes / 'link.jsonl'}: a symbolic link" in problems
    assert f"{notes / 'huge.jsonl'}: {rows.MAX_OUTPUT_BYTES + 1} bytes, more than" in problems
    assert "'../../outside/*.jsonl'" in problems and "'/etc/*'" in problems
    assert result.added == [] and result.removed == [] and result.changed == []


def test_a_damaged_job_json_is_said_and_the_report_still_compared(tmp_path: Path) -> None:
    job(tmp_path / "a", "j", "| k | v |\n|---|---|\n| x | 1 |\n", [], {})
    d = job(tmp_path / "b", "j", "| k | v |\n|---|---|\n| x | 2 |\n", [], {})
    (d / "job.json").write_text('{"outputs": "notes/*"}')
    [result] = diff_runs(tmp_path / "a", tmp_path / "b", warn=None).jobs
    assert result.changed == ["x"]
    assert any("job.json: outputs: expected a list" in p for p in result.problems), result.problems


@pytest.mark.parametrize(
    ("pattern", "path", "expected"),
    [
        ("memories/*.md", "memories/a.md", True),
        ("memories/*.md", "memories/x/a.md", False),
        ("**/memories/*.md", "memories/a.md", True),
        ("agents/**/memories/*.md", "agents/1-a/agents/2-b/memories/f.md", True),
        ("agents/**/memories/*.md", "agents/memories/f.md", True),
        ("agents/**/memories/*.md", "memories/f.md", False),
        ("*.md", "final.md", True),
        ("*.md", "FINAL.MD", False),
    ],
)
def test_output_patterns_match_part_by_part(pattern: str, path: str, expected: bool) -> None:
    assert rows.matches(pattern, path) is expected


def test_table_rows_skip_headers_and_key_a_repeated_first_cell_by_its_heading() -> None:
    text = (
        "## Python\n\n| file | lines |\n| --- | ---: |\n| a\\|b.py | 3 |\n| c.py | 4 |\n\n"
        "## Text\n\n| file | lines |\n|:---|---|\n| c.py | 9 |\n"
    )
    assert rows.table_rows(text) == {
        "a|b.py": "| a\\|b.py | 3 |",
        "c.py": "| c.py | 4 |",
        "c.py (Text)": "| c.py | 9 |",
    }


def test_line_keys() -> None:
    assert rows.line_key('["x.py", "text", 3]') == "x.py"
    assert rows.line_key("[3, 4]") == "3"
    assert rows.line_key("| y.py | 2 |") == "y.py"
    assert rows.line_key("[not json") == "[not json"
    assert rows.line_key("plain line") == "plain line"


def test_the_walk_does_not_enter_a_linked_directory(tmp_path: Path) -> None:
    (tmp_path / "job" / "notes").mkdir(parents=True)
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "f.jsonl").write_text('["far.py"]\n')
    os.symlink(tmp_path / "elsewhere", tmp_path / "job" / "notes" / "in")
    problems: list[str] = []
    assert rows.output_rows(tmp_path / "job", ["notes/**/*.jsonl"], problems) == {}
    assert problems == []
