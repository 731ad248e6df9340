"""``bench/run_all.py`` names every benchmark table, and runs each peer in its own interpreter."""

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
