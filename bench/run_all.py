"""Run every benchmark and rewrite BENCHMARKS.md: ``python bench/run_all.py`` (``--smoke`` for seconds)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

BENCHES = ("concurrency.py", "ray_fault.py", "ratelimit.py", "cost.py", "compactor.py")


def main() -> int:
    here = Path(__file__).resolve().parent
    extra = sys.argv[1:]
    for bench in BENCHES:
        print(f"== {bench} {' '.join(extra)}", flush=True)
        done = subprocess.run([sys.executable, str(here / bench), *extra])
        if done.returncode != 0:
            return done.returncode
    return 0


if __name__ == "__main__":
    sys.exit(main())
