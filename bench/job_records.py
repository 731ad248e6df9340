"""What a job keeps for its whole length (the store's names, owners and sizes, the repeat guard's calls
and saved outputs, the toolset's tool_use ids), held in plain dicts against the spill map that held
them before (``runner/rundir/spill.py``: the newest 2,048 entries of each in memory, the rest in
SQLite's private temporary file), measured as a long job grows them.

    python bench/job_records.py                 # 10,000 and 100,000 turns, 3 rounds; writes
                                                # bench/results/job_records.json
    python bench/job_records.py --smoke         # 2,000 turns, 1 round; writes nothing

Each turn is the bookkeeping of one tool call through the runner's own code: a fresh tool_use id
admitted by the toolset (``Toolset._refused``: the id is kept), its call counted by the repeat guard
(a distinct ``read`` each turn: every call is new, the worst case for the guard's record), its output
reserved and charged by the store (``JobStore.reserve`` and ``_charge``: name, owner, size) and marked
saved for the guard (``RepeatGuard.saved``): every call's output persisted, the most a turn adds.
Each contestant runs twice per round, each time in a process of its own: once under ``tracemalloc``
for the traced bytes the records grew (nothing else grows), once without it for the growth of the
process's RSS and the CPU of the turns (tracemalloc slows every allocation and keeps its own
records). ``spill`` needs ``runner/rundir/spill.py``: that module is gone (removed on what this bench
measured: bench/results/job_records.json), so now only ``dict`` rows are made.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import common  # noqa: E402


class Plain(dict):
    """A plain dict with the map's ``close`` (the job's end lets it go)."""

    def close(self) -> None:
        self.clear()


ID_CHARS = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"


def tool_use_id(i: int) -> str:
    """An id shaped as the API's (``toolu_01`` and 22 base-62 characters), distinct per ``i``."""
    digits = []
    n = i * 2_654_435_761 + 12_345
    for _ in range(22):
        n, r = divmod(n, 62)
        digits.append(ID_CHARS[r])
    return "toolu_01" + "".join(digits)


def child(mode: str, turns: int, out: str, trace: bool) -> None:
    """One contestant in this process: ``turns`` turns of bookkeeping; with ``trace`` the traced bytes
    they grew, else the RSS and CPU (tracemalloc slows every allocation and keeps its own records)."""
    import tracemalloc

    import anyio

    from runner.rundir.store import JobStore
    from runner.tools.repeats import call_key
    from runner.tools.toolset import Toolset

    page = os.sysconf("SC_PAGE_SIZE")

    def rss() -> int:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * page

    async def run() -> dict:
        with tempfile.TemporaryDirectory(prefix="job-records-") as tmp:
            store = JobStore(Path(tmp) / "job")
            await store.open()
            async with Toolset(tmp, ("read",), store) as tools:
                guard = tools.repeats
                spilling = type(store._names).__name__ == "SpillMap"  # noqa: SLF001
                if mode == "dict" and spilling:  # the runner's spill maps, made plain dicts
                    store._names, store._owners, store._sizes = Plain(), Plain(), Plain()  # noqa: SLF001
                    guard._runs, guard._saved, tools._ids = Plain(), Plain(), Plain()  # noqa: SLF001
                elif mode == "spill" and not spilling:
                    raise SystemExit("spill: runner/rundir/spill.py is gone")
                content = "x" * 2_000
                if trace:
                    tracemalloc.start()
                traced0, rss0, cpu0 = tracemalloc.get_traced_memory()[0], rss(), time.process_time()
                for turn in range(1, turns + 1):
                    i = turn
                    tid = tool_use_id(i)
                    call = {
                        "type": "tool_use",
                        "id": tid,
                        "name": "read",
                        "input": {"file_path": f"/ws/m{i}.py"},
                    }
                    assert tools._refused(call, 0, 1) is None  # noqa: SLF001 - the id admitted and kept
                    guard.remember(call_key("read", call["input"]), turn, tid)
                    rel = store.reserve(tid, f"{content}{i}")
                    store._charge([(rel, content)])  # noqa: SLF001 - the size kept, nothing written
                    guard.saved(tid, rel)
                cpu = time.process_time() - cpu0
                traced = tracemalloc.get_traced_memory()[0] - traced0
                grown = rss() - rss0
                tracemalloc.stop()
            store.close()
            if trace:
                return {"traced_bytes": traced}
            return {"rss_bytes": grown, "cpu_s": cpu}

    Path(out).write_text(json.dumps(anyio.run(run, backend="asyncio")))


def one(mode: str, turns: int, trace: bool) -> dict | None:
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        done = subprocess.run(
            [sys.executable, __file__, "--child", mode, "--turns", str(turns), "--out", f.name]
            + (["--trace"] if trace else []),
            capture_output=True,
            text=True,
        )
        if done.returncode != 0:
            if "spill.py is gone" in done.stderr + done.stdout:
                return None
            raise RuntimeError(done.stderr)
        return json.loads(Path(f.name).read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, nargs="*")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--child")
    parser.add_argument("--out")
    parser.add_argument("--trace", action="store_true")
    args = parser.parse_args()
    if args.child:
        child(args.child, args.turns[0], args.out, args.trace)
        return
    sizes = args.turns or ([2_000] if args.smoke else [10_000, 100_000])
    rounds = 1 if args.smoke else args.rounds
    runs: dict[str, dict[int, list[dict]]] = {"spill": {}, "dict": {}}
    for r in range(rounds):
        for turns in sizes:
            order = ["spill", "dict"] if r % 2 == 0 else ["dict", "spill"]
            for mode in order:
                traced, plain = one(mode, turns, True), one(mode, turns, False)
                if traced is not None and plain is not None:
                    runs[mode].setdefault(turns, []).append({**traced, **plain})
    rows = []
    print(f"{common.machine()}; {common.load_note()}; {rounds} round(s), median (range)")
    print(f"{'records':<7} {'turns':>8} {'traced KiB/turn':>22} {'RSS KiB/turn':>22} {'CPU us/turn':>22}")
    for mode, by in runs.items():
        for turns, got in sorted(by.items()):

            def mr(key: str, scale: float, got: list[dict] = got) -> dict:
                values = [g[key] * scale for g in got]
                return {"median": statistics.median(values), "min": min(values), "max": max(values)}

            row = {
                "records": mode,
                "turns": turns,
                "traced_kib_per_turn": mr("traced_bytes", 1 / 1024 / turns),
                "rss_kib_per_turn": mr("rss_bytes", 1 / 1024 / turns),
                "cpu_us_per_turn": mr("cpu_s", 1e6 / turns),
                "traced_mib": mr("traced_bytes", 1 / 2**20),
                "rss_mib": mr("rss_bytes", 1 / 2**20),
            }
            rows.append(row)
            cells = [
                f"{row[k]['median']:.3f} ({row[k]['min']:.3f}-{row[k]['max']:.3f})"
                for k in ("traced_kib_per_turn", "rss_kib_per_turn", "cpu_us_per_turn")
            ]
            print(f"{mode:<7} {turns:>8,} " + " ".join(f"{c:>22}" for c in cells))
    if not args.smoke:
        path = common.write_result("job_records", {"rounds": rounds, "rows": rows})
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
