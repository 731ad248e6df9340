"""Every benchmark still runs (a smoke size of each, seconds); the numbers live in BENCHMARKS.md."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"


# the rows each benchmark's smoke run must print (the like-with-like comparisons)
ROWS = {
    "cost": (
        "| none |",
        "| ours |",
        "| ours, tuned |",
        "| seed 000 |",
        "| seed 000 + our caching |",
        "| seed 001 @ 50k chars |",
        "| mask |",
        "| ours @ 50k tokens |",
        "| server |",
        "| seed 001 @ 200k chars |",
        "Where ours' $",
    ),
    "compactor": ("seed 000", "seed 001", "floor", "1-minute load average at start"),
    "batch_delivery": (
        "| long live |",
        "| long batch |",
        "| long batch, 5-minute cache |",
        "| nightly live |",
        "| nightly batch |",
        "| nightly batch, 5-minute cache |",
        "| nightly batch, deadline 0.6 |",
        "| long live, cache unscaled |",
        "| long batch, 5-minute cache, cache unscaled |",
        "| nightly live, cache unscaled |",
        "| nightly batch, 5-minute cache, cache unscaled |",
        "Long session: tokens equal",
        "5-job batch: tokens equal",
        "Long session, the 1-hour cache against the 5-minute one",
        "5-job batch, the 1-hour cache against the 5-minute one",
    ),
    "scaling": (
        "## Scaling 1: jobs per batch",
        "## Scaling 2: session length",
        "## Scaling 3: workspace size",
        "## Scaling 4: the viewer's page of a long job",
    ),
}


@pytest.mark.parametrize(
    "name",
    [  # concurrency's smoke run is test_bench_floors.py's (with a peer that is not installed)
        "ratelimit",
        "cost",
        "compactor",
        "viewer",
        "batch_delivery",
        "scaling",
        "store_hops",
        "job_records",
    ],
)
def test_benchmark_smoke(name: str) -> None:
    before = (BENCH.parent / "BENCHMARKS.md").read_text()
    done = subprocess.run(
        [sys.executable, str(BENCH / f"{name}.py"), "--smoke"], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert done.stdout.strip()  # it printed its table
    for row in ROWS.get(name, ()):
        assert row in done.stdout, row
    assert (BENCH.parent / "BENCHMARKS.md").read_text() == before  # a smoke run never rewrites the results
