"""Run every benchmark and rewrite BENCHMARKS.md: ``python bench/run_all.py`` (``--smoke`` for seconds).

Each benchmark runs in its own process, one after another, and stamps its table with the machine, the
1-minute load average when it started and its command (``bench/common.py``): run it on a quiet machine.

The peers run in interpreters of their own, as their authors ship them (``pip install -e '.[bench]'``
into a venv; OpenHands' SDK needs Python 3.12): ``RUNNER_PEER_PYTHON`` has inspect_ai (the peers'
cost rows, and its rows in the concurrency table), ``RUNNER_OPENHANDS_PYTHON`` has openhands-sdk.
A peer whose interpreter is not given is skipped, and says so; its table keeps its last results.

    python bench/run_all.py [--smoke] [--only NAME ... | --from NAME]

Each benchmark's wall time is printed as it ends, and the whole run's at the end (about two hours in
all on a quiet machine of 2 cores, half of it ray_scale and the two subagents runs); ``--from NAME``
goes on from a benchmark after an interrupted run. Before each benchmark
the run waits (at most :data:`SETTLE_MAX_S`) for the 1-minute load average to fall under
:data:`QUIET_LOAD`, so that the load a table is stamped with is not the previous benchmark's.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
QUIET_LOAD = 1.0  # the 1-minute load average a benchmark waits for before it starts
SETTLE_MAX_S = 240.0  # the longest it waits (a machine with other work may never get there)
INSPECT = "RUNNER_PEER_PYTHON"
OPENHANDS = "RUNNER_OPENHANDS_PYTHON"

# (name, script, its arguments, the interpreter's variable or None for this one, whether it has --smoke)
BENCHES: tuple[tuple[str, str, tuple[str, ...], str | None, bool], ...] = (
    ("replay", "replay.py", (), None, True),  # runs its peers' rows with both peer interpreters itself
    ("concurrency", "concurrency.py", (), None, True),
    ("ray_scale", "concurrency.py", ("--ray-scale",), None, False),
    ("ray_fault", "ray_fault.py", (), None, True),
    ("ratelimit", "ratelimit.py", (), None, True),
    ("cost", "cost.py", (), None, True),
    ("peers", "peers.py", (), INSPECT, True),
    ("peers_openhands", "peers_openhands.py", (), OPENHANDS, True),
    ("compactor", "compactor.py", (), None, True),
    ("viewer", "viewer.py", (), None, True),
    ("big_tree", "big_tree.py", ("--repeat", "2"), None, False),
    ("manifest", "manifest.py", (), None, True),
    ("subagents", "subagents.py", ("--latency", "2", "--repeat", "2"), None, False),
    ("subagents_site", "subagents.py", ("--site-packages", "--latency", "0.2"), None, False),
    ("nightly", "nightly.py", (), None, False),
    ("batch_delivery", "batch_delivery.py", (), None, True),
    ("scaling", "scaling.py", (), None, True),
)


def command(name: str, smoke: bool) -> list[str] | str:
    """The command line of one benchmark, or why it is skipped."""
    _, script, args, python_var, has_smoke = next(b for b in BENCHES if b[0] == name)
    if not (HERE / script).exists():
        return f"{script} is not in this checkout"
    python = sys.executable
    if python_var is not None:
        python = os.environ.get(python_var, "")
        if not python:
            return f"its peer's interpreter is not given (set {python_var})"
    extra = list(args)
    if name == "concurrency" and os.environ.get(INSPECT):
        extra += ["--peer-python", os.environ[INSPECT]]
    if smoke:
        if not has_smoke:
            return "no smoke size"
        extra.append("--smoke")
    return [python, str(HERE / script), *extra]


def settle(quiet: float = QUIET_LOAD, most_s: float = SETTLE_MAX_S) -> float:
    """Wait until the 1-minute load average is under ``quiet`` (at most ``most_s``); the load then."""
    waited = 0.0
    while os.getloadavg()[0] >= quiet and waited < most_s:
        time.sleep(5.0)
        waited += 5.0
    return os.getloadavg()[0]


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--smoke", action="store_true", help="each benchmark's smoke size (seconds)")
    names = [b[0] for b in BENCHES]
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--only", nargs="+", choices=names, help="these benchmarks only")
    which.add_argument("--from", dest="start", choices=names, help="this benchmark and those after it")
    args = parser.parse_args()
    sys.path.insert(0, str(HERE))
    from common import load_note, machine

    print(f"{machine()}; {load_note()}", flush=True)
    began = time.monotonic()
    for name in args.only or names[names.index(args.start) if args.start else 0 :]:
        line = command(name, args.smoke)
        if isinstance(line, str):
            print(f"== {name}: skipped: {line}", flush=True)
            continue
        if not args.smoke:
            print(f"== {name}: 1-minute load average {settle():.2f} at its start", flush=True)
        print(f"== {name}: {' '.join(line)}", flush=True)
        started = time.monotonic()
        done = subprocess.run(line, cwd=HERE.parent)
        took = f"{(time.monotonic() - started) / 60:.1f} min"
        if done.returncode != 0:
            print(f"== {name} failed (exit {done.returncode}) after {took}", flush=True)
            return done.returncode
        print(f"== {name}: done in {took}", flush=True)
    print(f"== all done in {(time.monotonic() - began) / 60:.1f} min", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
