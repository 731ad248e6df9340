"""The concurrency benchmark's smoke run (test_bench_smoke.py leaves it to this test), with the peer named
but not installed: it runs, and its table says so."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent.parent / "bench"


def test_the_concurrency_table_says_the_peer_is_not_installed() -> None:
    before = (BENCH.parent / "BENCHMARKS.md").read_text()
    done = subprocess.run(
        [
            sys.executable,
            str(BENCH / "concurrency.py"),
            "--smoke",
            "--executors",
            "local",
            "inspect_ai",
            "--peer-python",
            "/nonexistent/python",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "| inspect_ai | 100, 500 | not installed |" in done.stdout, done.stdout[-2000:]
    assert "| local | 5 |" in done.stdout  # the smoke size's row
    assert (BENCH.parent / "BENCHMARKS.md").read_text() == before  # a smoke run writes nothing
