"""Run every benchmark and rewrite BENCHMARKS.md: ``python bench/run_all.py`` (``--smoke`` for seconds).

Each benchmark runs in its own process, one after another, and stamps its table with the machine, the
1-minute load average when it started and its command (``bench/common.py``): run it on a quiet machine."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

BENCHES = ("concurrency.py", "ray_fault.py", "ratelimit.py", "cost.py", "compactor.py", "viewer.py")


def main() -> int:
    here = Path(__file__).resolve().parent
    extra = sys.argv[1:]
    sys.path.insert(0, str(here))
    from common import load_note, machine

    print(f"{machine()}; {load_note()}", flush=True)
    for bench in BENCHES:
        print(f"== {bench} {' '.join(extra)}", flush=True)
        done = subprocess.run([sys.executable, str(here / bench), *extra])
        if done.returncode != 0:
            return done.returncode
    return 0


if __name__ == "__main__":
    sys.exit(main())
