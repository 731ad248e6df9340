"""``bench/run_all.py`` names every benchmark table, and runs each peer in its own interpreter; the
stamps and rerun notes of `bench/common.py`."""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

import run_all  # noqa: E402


def test_every_table_in_benchmarks_md_has_a_benchmark_that_writes_it():
    sections = set(re.findall(r"<!-- ([\w-]+):start -->", (ROOT / "BENCHMARKS.md").read_text()))
    written = set()
    for _, script, _, _, _ in run_all.BENCHES:
        assert (ROOT / "bench" / script).is_file(), script
        text = (ROOT / "bench" / script).read_text()
        written |= set(re.findall(r"replace_section\(\s*\"([\w-]+)\"", text))
        written |= set(re.findall(r"SECTION\w* = \"([\w-]+)\"", text))
    assert sections - written == set(), sections - written


def test_a_peer_without_its_interpreter_is_skipped_and_says_why(monkeypatch):
    monkeypatch.delenv(run_all.INSPECT, raising=False)
    monkeypatch.delenv(run_all.OPENHANDS, raising=False)
    assert "set RUNNER_PEER_PYTHON" in str(run_all.command("peers", smoke=False))
    assert "set RUNNER_OPENHANDS_PYTHON" in str(run_all.command("peers_openhands", smoke=False))
    monkeypatch.setenv(run_all.INSPECT, "/peer/bin/python")
    line = run_all.command("peers", smoke=True)
    assert isinstance(line, list) and line[0] == "/peer/bin/python" and line[-1] == "--smoke"
    concurrency = run_all.command("concurrency", smoke=False)
    assert isinstance(concurrency, list) and concurrency[-2:] == ["--peer-python", "/peer/bin/python"]
    assert run_all.command("big_tree", smoke=True) == "no smoke size"


def test_a_table_of_tokens_is_checked_against_its_previous_run(tmp_path, monkeypatch):
    """A one-round token table says how it compares with the last saved run: every row the same, or
    which rows and fields moved (a rerun is the spread of a deterministic table)."""
    import json

    import common

    monkeypatch.setattr(common, "RESULTS", tmp_path)
    rows = [
        {"strategy": "ours", "turns": 31, "input_tokens": 858, "cost_usd": 1.0936},
        {"strategy": "none", "turns": 23, "input_tokens": 785, "cost_usd": 3.8046},
    ]
    assert "No earlier saved run" in common.repeat_note("cost", rows)
    saved = {"date": "2026-12-01", "commit": "abc1234567", "machine": "m", "rows": rows}
    (tmp_path / "cost.json").write_text(json.dumps(saved))
    same = common.repeat_note("cost", rows)
    assert "2 of 2 rows the same" in same and "abc1234567" in same and "differ" not in same
    moved = common.repeat_note("cost", [dict(rows[0], turns=32), rows[1]])
    assert "1 of 2 rows the same" in moved and "ours (turns 31 -> 32)" in moved


def test_a_re_rendered_table_keeps_the_date_machine_load_and_commit_of_its_runs(tmp_path, monkeypatch):
    import common

    page = tmp_path / "BENCHMARKS.md"
    page.write_text("# Benchmarks\n\n<!-- t:start -->\nold\n<!-- t:end -->\n")
    monkeypatch.setattr(common, "BENCHMARKS", page)
    for name in ("START_LOAD", "START_COMMIT", "START_DATE", "MEASURED_ON"):
        monkeypatch.setattr(common, name, getattr(common, name))  # put back after the test
    common.measured_at({"date": "2026-11-30", "machine": "9 cores", "load_1min": 3.25, "commit": "c0ffee"})
    common.replace_section("t", "new body", "python bench/t.py")
    stamp = page.read_text().split("\n")[3]
    assert stamp.startswith("_2026-11-30, 9 cores; 1-minute load average at start 3.25 on ")
    assert "code at c0ffee; command: `python bench/t.py`_" in stamp
    assert "old" not in page.read_text()
