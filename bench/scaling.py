"""How the runner's costs grow with the work: jobs per batch, turns per session, files per workspace, and
the viewer's page of a long job.

1. Jobs per batch: ``runner run`` of 1, 100, 1,000 and 3,000 tiny jobs (a two-file workspace, five turns
   each) on the embedded offline model, in its own process (so the runner's cost is not mixed with an
   emulator's or the SDK's); CPU seconds (user + system, the runner and the grep workers it reaped,
   exact, from ``wait4``) per job net of start-up, ``(CPU(N) - CPU(1)) / (N - 1)`` paired within a
   round, the marginal CPU per job between one size and the next, and the peak RSS per job.
2. Session length: one offline survey stopped at 3,000 turns (``max_turns``), the runner in a process of
   its own, instrumented: at every model call its process CPU, the CPU spent inside the model (the
   offline policy's, taken out: it is the model, not the runner), its RSS and the Python heap's
   allocated blocks; and, in a round of its own under ``tracemalloc``, the traced bytes.
3. Workspace size: the runner's ``glob`` (``file_tools.glob``), ``grep`` (``grep_worker.grep``, what a
   grep worker runs) and manifest (``rundir/manifest.build``) on generated trees of 10k and 300k files.
4. Viewer: ``write_view`` of the 3,000-turn job of table 2, the page sizes, and the real headless
   Chromium's time to open the job's page (``bench/viewer.py``'s measure).

Nothing the benchmark writes is deleted until its last table is measured (one scratch directory, removed
at the end): on a file system that delays reusing the inodes of deleted files (ext4 without a journal
skips every inode freed in the last 60 s, 360 s while its inode table is unwritten, scanning them one by
one at each file it creates), deleting one run's 36,000 files before the next run made that run's every
file creation slower, the more the bigger the run before it.

    python bench/scaling.py            # the four tables, 3 rounds; writes bench/results/scaling.json
                                       # and BENCHMARKS.md
    python bench/scaling.py --smoke    # tiny sizes, 1 round, no browser, seconds; writes nothing
    python bench/scaling.py --only jobs --source DIR   # table 1 of another checkout (DIR holds its
                                       # runner/); writes nothing
    python bench/scaling.py --render   # BENCHMARKS.md's section again from bench/results/scaling.json
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
import tracemalloc
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import replace_section, write_result  # noqa: E402

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
CONCURRENCY = 50
SESSION_FILES = 6_000  # modules of ~3 KB: more than 3,000 turns of survey at context_char_limit 20,000
SESSION_POINTS = (100, 1_000, 3_000)
WINDOW = 100  # turns over which the time per turn at a point is taken (the WINDOW turns ending there)
# what the session's heap is weighed without: this instrumentation's own allocations and the imports
OWN_TRACES = [tracemalloc.Filter(False, __file__), tracemalloc.Filter(False, "<frozen importlib.*")]
FLAT_KIB_PER_TURN = 0.1  # heap growth a turn that counts as flat (0.3 MiB over 3,000 turns)


def spread(values: list[float], digits: int = 1) -> str:
    """The median and, in brackets, the range: ``13.6 (13.2-14.1)``."""
    med = statistics.median(values)
    return f"{med:.{digits}f} ({min(values):.{digits}f}-{max(values):.{digits}f})"


def run_measured(cmd: list[str], *, env: dict[str, str] | None = None, cwd: Path | None = None) -> dict:
    """Run ``cmd``; its wall time, CPU (user + system of it and the children it reaped) and peak RSS."""
    started = time.perf_counter()
    proc = subprocess.Popen(
        cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, cwd=cwd, text=True
    )
    assert proc.stderr is not None
    err = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - started
    return {
        "returncode": proc.returncode,
        "wall_s": wall,
        "cpu_s": usage.ru_utime + usage.ru_stime,
        "user_s": usage.ru_utime,
        "sys_s": usage.ru_stime,
        "maxrss_kib": usage.ru_maxrss,
        "stderr": err[-2000:],
    }


def runner_env(source: Path | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RUNNER_") and k != "ANTHROPIC_API_KEY"}
    if source is not None:
        env["PYTHONPATH"] = str(source)
    return env


# --- 1. jobs per batch -------------------------------------------------------------------------------


def tiny_jobs(base: Path, n: int) -> Path:
    """``n`` task files of one two-file survey each."""
    ws = base / "ws"
    if not ws.exists():
        ws.mkdir(parents=True)
        (ws / "a.py").write_text('"""A."""\n\ndef a():\n    return 1\n')
        (ws / "notes.txt").write_text("plain notes\n")
    jobs = base / f"jobs-{n}"
    jobs.mkdir()
    for i in range(n):
        (jobs / f"j{i:05d}.toml").write_text(
            f'name = "j{i:05d}"\nworkspace = "{ws}"\nprompt = "Survey this workspace."\n'
        )
    return jobs


def measure_jobs(sizes: tuple[int, ...], rounds: int, source: Path | None, scratch: Path) -> dict:
    """Every run in an output directory of its own under ``scratch``, none deleted (see the module's
    docstring: a deletion would slow the runs after it)."""
    base = scratch / "jobs"
    base.mkdir()
    dirs = {n: tiny_jobs(base, n) for n in (1, *sizes)}
    runs: dict[int, list[dict]] = {n: [] for n in dirs}
    for i in range(rounds):
        for n, jobs in dirs.items():
            out = base / f"runs-{i}-{n}"
            cmd = [sys.executable, "-m", "runner", "run", str(jobs), "--backend", "offline"]
            cmd += ["--concurrency", str(CONCURRENCY), "--output-dir", str(out)]
            r = run_measured(cmd, env=runner_env(source), cwd=base)
            if r["returncode"] != 0:
                raise SystemExit(f"runner run of {n} jobs failed: {r['stderr']}")
            runs[n].append({k: v for k, v in r.items() if k != "stderr"})
    rows = []
    previous = 1
    for n in sizes:
        per_job_ms = [
            (r["cpu_s"] - s["cpu_s"]) / (n - 1) * 1e3 for r, s in zip(runs[n], runs[1], strict=True)
        ]
        # the CPU each job past the previous size adds: start-up and the batch's other fixed costs (a
        # grep pool of up to 8 workers at concurrency 50, against 1 for one job) cancel out
        marginal_ms = [
            (r["cpu_s"] - s["cpu_s"]) / (n - previous) * 1e3
            for r, s in zip(runs[n], runs[previous], strict=True)
        ]
        per_job_kib = [
            (r["maxrss_kib"] - s["maxrss_kib"]) / (n - 1) for r, s in zip(runs[n], runs[1], strict=True)
        ]
        rows.append(
            {
                "jobs": n,
                "cpu_s": [round(r["cpu_s"], 3) for r in runs[n]],
                "sys_s": [round(r["sys_s"], 3) for r in runs[n]],
                "wall_s": [round(r["wall_s"], 2) for r in runs[n]],
                "peak_rss_mib": [round(r["maxrss_kib"] / 1024, 1) for r in runs[n]],
                "cpu_ms_per_job": [round(v, 2) for v in per_job_ms],
                "marginal_from": previous,
                "marginal_cpu_ms_per_job": [round(v, 2) for v in marginal_ms],
                "rss_kib_per_job": [round(v, 1) for v in per_job_kib],
            }
        )
        previous = n
    start = runs[1]
    return {
        "concurrency": CONCURRENCY,
        "rounds": rounds,
        "source": str(source) if source else None,
        "file_system": file_system(scratch),
        "start_up": {
            "cpu_s": [round(r["cpu_s"], 3) for r in start],
            "peak_rss_mib": [round(r["maxrss_kib"] / 1024, 1) for r in start],
        },
        "rows": rows,
    }


def jobs_table(r: dict) -> str:
    rows = r["rows"]
    lines = [
        "## Scaling 1: jobs per batch",
        "",
        f"`runner run` of N tiny jobs (each a survey of a two-file workspace: 5 turns, 4 of them with tool "
        f"calls) on the embedded offline model, concurrency {r['concurrency']}, the display on a pipe "
        "(plain lines); the offline model keeps the emulator's and the SDK's CPU out of the runner's. CPU is "
        "user + system of the runner and the grep workers it reaped (`wait4`, exact); per job it is net of "
        "start-up, (CPU(N) - CPU(1)) / (N - 1), paired within each round, and so is the peak RSS per job. "
        f"{r['rounds']} rounds (every size once a round); median and, in brackets, the range. Start-up (one "
        f"job): {spread(r['start_up']['cpu_s'], 2)} s of CPU, "
        f"{spread(r['start_up']['peak_rss_mib'])} MiB peak RSS.",
        "",
        "Marginal CPU per job: what each job past the previous size adds, (CPU(N) - CPU(previous N)) / "
        "(N - previous N), paired within each round; start-up and the batch's other fixed costs (a grep pool "
        "of up to 8 workers at concurrency 50, one for a lone job) cancel out of it. Every run writes into "
        "an output directory of its own and nothing is deleted until the last table is measured: "
        f"{r['file_system']}.",
        "",
        "Target: flat or falling (nothing superlinear), the CPU per job at the largest size at most 1.1x "
        "the smallest's; a ratio under 1 is the smaller batches' fixed costs spread over fewer jobs.",
        "",
        "| jobs | CPU s | of it system s | wall s | CPU ms per job | marginal CPU ms per job | peak RSS MiB "
        "| RSS KiB per job |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        lines.append(
            f"| {row['jobs']:,} | {spread(row['cpu_s'], 2)} | {spread(row['sys_s'], 2)} | "
            f"{spread(row['wall_s'])} | {spread(row['cpu_ms_per_job'])} | "
            f"{spread(row['marginal_cpu_ms_per_job'])} (from {row['marginal_from']:,}) | "
            f"{spread(row['peak_rss_mib'])} | {spread(row['rss_kib_per_job'])} |"
        )

    def ratio(key: str, a: dict, b: dict) -> float:
        first, last = statistics.median(a[key]), statistics.median(b[key])
        return last / first if first > 0 else float("inf")

    def verdict(growth: float) -> str:
        return "met" if growth <= 1.10 else f"MISSED by {(growth - 1.10) * 100:.0f} points"

    def system_share(row: dict) -> float:
        return statistics.median(row["sys_s"]) / statistics.median(row["cpu_s"]) * 100

    growth = ratio("cpu_ms_per_job", rows[0], rows[-1])
    lines += [
        "",
        f"CPU per job at {rows[-1]['jobs']:,} jobs is {growth:.2f}x that at {rows[0]['jobs']:,} "
        f"({verdict(growth)}). System time is {system_share(rows[0]):.0f}% of the CPU at "
        f"{rows[0]['jobs']:,} jobs and {system_share(rows[-1]):.0f}% at {rows[-1]['jobs']:,}.",
    ]
    if len(rows) > 1:
        marginal = ratio("marginal_cpu_ms_per_job", rows[-2], rows[-1])
        lines[-1] += (
            f" The marginal CPU per job from {rows[-1]['marginal_from']:,} to {rows[-1]['jobs']:,} jobs is "
            f"{marginal:.2f}x that from {rows[-2]['marginal_from']:,} to {rows[-2]['jobs']:,} "
            f"({verdict(marginal)})."
        )
    return "\n".join(lines)


def file_system(path: Path) -> str:
    """The file system ``path`` is on, and for ext4 whether it has a journal (the delay on reusing
    deleted inodes is only without one)."""
    best, kind, source = "", "?", ""
    with open("/proc/self/mounts") as f:
        for line in f:
            fields = line.split()
            mount = fields[1]
            inside = str(path.resolve()).startswith(mount.rstrip("/") + "/") or mount == "/"
            if inside and len(mount) >= len(best):
                best, source, kind = mount, fields[0], fields[2]
    note = f"{kind} at {best}"
    journal = Path("/sys/fs/ext4") / Path(source).name / "journal_task"
    if kind == "ext4" and journal.exists():
        has = journal.read_text().strip() not in ("", "<none>")
        note += " (with a journal)" if has else " without a journal (freed inodes not reused for 60-360 s)"
    return note


# --- 2. session length -------------------------------------------------------------------------------


def session_workspace(base: Path, files: int) -> Path:
    ws = base / "ws"
    for i in range(files):
        d = ws / f"pkg{i // 100:02d}"
        d.mkdir(parents=True, exist_ok=True)
        body = "".join(
            f'def f{i}_{k}(x):\n    """Helper {k}."""\n    return x * {k} + {i}\n\n' for k in range(40)
        )
        todo = "# TODO: tidy\n" if i % 7 == 0 else ""
        (d / f"mod{i:05d}.py").write_text(f'"""Module {i}: helpers."""\n\n{body}{todo}')
    return ws


def session_child(args: argparse.Namespace) -> None:
    """In a process of its own: the runner's CLI on one job, every model call sampled."""
    import resource

    from runner import cli
    from runner.offline import model as offline

    if args.tracemalloc:
        tracemalloc.start()
    snapshots = {int(n) for n in args.snapshots.split(",")} if args.snapshots else set()
    points = {int(n) for n in args.points.split(",")} if args.points else set()
    spilled: dict[int, int] = {}
    settled: dict[int, int] = {}
    page = os.sysconf("SC_PAGE_SIZE")
    samples: list[list[float]] = []
    model_cpu = [0.0]
    original = offline.OfflineModel.create

    def rss_kib() -> int:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * page // 1024

    def spill_bytes() -> int:
        """The bytes of the spill files this process holds open (SQLite's private temporary databases,
        unlinked once opened: runner.rundir.spill)."""
        total = 0
        for fd in os.listdir("/proc/self/fd"):
            try:
                if os.readlink(f"/proc/self/fd/{fd}").endswith("(deleted)"):
                    total += os.fstat(int(fd)).st_size
            except OSError:
                pass
        return total

    async def create(self: Any, request: Any) -> Any:
        before = time.process_time()
        samples.append(
            [
                before,
                model_cpu[0],
                rss_kib(),
                sys.getallocatedblocks(),
                tracemalloc.get_traced_memory()[0] if args.tracemalloc else 0,
            ]
        )
        if len(samples) in points:  # after the sample: not counted in it
            spilled[len(samples)] = spill_bytes()
            if args.tracemalloc:  # the runner's heap
                snapshot = tracemalloc.take_snapshot()
                if len(samples) in snapshots:
                    snapshot.dump(f"{args.session_child}.{len(samples)}.snapshot")
                # less this instrumentation's own (its samples grow a list by a call) and the imports
                runner_only = snapshot.filter_traces(OWN_TRACES)
                settled[len(samples)] = sum(trace.size for trace in runner_only.traces)
        try:
            return await original(self, request)
        finally:
            model_cpu[0] += time.process_time() - before

    offline.OfflineModel.create = create  # type: ignore[method-assign]
    try:
        cli.main(["run", args.jobs, "--backend", "offline", "--output-dir", args.runs])
    except SystemExit:
        pass
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    Path(args.session_child).write_text(
        json.dumps(
            {
                "samples": samples,
                "children_cpu_s": children.ru_utime + children.ru_stime,
                "spill_bytes": spilled,
                "settled": settled,
            }
        )
    )


def measure_session(
    turns: int, files: int, rounds: int, scratch: Path, *, separate_trace: bool = True
) -> dict:
    """``separate_trace``: the traced round is one more (else the last timed one is traced: a smoke run).
    Every round's run stays under ``scratch`` (nothing deleted); ``run_dir`` is the first one's."""
    points = [p for p in SESSION_POINTS if p <= turns] or [turns]
    base = scratch / "session"
    base.mkdir()
    ws = session_workspace(base, files)
    jobs = base / "jobs"
    jobs.mkdir()
    (jobs / "long.toml").write_text(
        f'name = "long"\nworkspace = "{ws}"\nprompt = "Survey this package. Read every file."\n'
        f"[limits]\nmax_turns = {turns}\ntimeout_s = 3600\ncontext_char_limit = 20000\n"
    )
    results = []
    total = rounds + 1 if separate_trace else rounds
    for i in range(total):
        traced = i == total - 1  # the last round under tracemalloc: its heap bytes, not its times
        out = base / f"out-{i}.json"
        runs = base / f"runs-{i}"
        cmd = [sys.executable, str(HERE / "scaling.py"), "--session-child", str(out)]
        cmd += ["--jobs", str(jobs), "--runs", str(runs), "--points", ",".join(map(str, points))]
        if traced:
            cmd += ["--tracemalloc", "--snapshots", ",".join(map(str, points[-2:]))]
        r = run_measured(cmd, cwd=base, env=runner_env(None))
        if not out.exists():
            raise SystemExit(f"the session run failed: {r['stderr']}")
        data = json.loads(out.read_text())
        metrics = json.loads((runs / "latest" / "long" / "metrics.json").read_text())
        results.append({"traced": traced, "data": data, "metrics": metrics, "cpu_s": r["cpu_s"]})
        if i == 0:
            run_dir = (runs / "latest").resolve()
    timed = [r for r in results if not r["traced"]] or results
    traced = next(r for r in results if r["traced"])
    grows = growth_by_file(base / f"out-{total - 1}.json", points[-2:])
    rows = []
    for p in points:
        lo = max(p - WINDOW, 1)
        per_turn, rss, blocks = [], [], []
        for r in timed:
            s = r["data"]["samples"]
            if len(s) < p:
                raise SystemExit(f"the session made {len(s)} model calls, fewer than {p}")
            # sample k is taken as call k+1 starts: from call lo+1's start to call p's start
            runner_cpu = (s[p - 1][0] - s[lo - 1][0]) - (s[p - 1][1] - s[lo - 1][1])
            per_turn.append(runner_cpu / (p - lo) * 1e3)
            rss.append(s[p - 1][2] / 1024)
            blocks.append(s[p - 1][3])
        heap = traced["data"]["samples"][p - 1][4]
        rows.append(
            {
                "turn": p,
                "runner_cpu_ms_per_turn": [round(v, 3) for v in per_turn],
                "rss_mib": [round(v, 1) for v in rss],
                "allocated_blocks": blocks,
                "traced_mib": round(heap / 2**20, 2),
                "settled_mib": round(traced["data"].get("settled", {}).get(str(p), 0) / 2**20, 3),
                "spill_kib": [round(r["data"]["spill_bytes"].get(str(p), 0) / 1024, 1) for r in timed],
            }
        )
    growth = []
    for a, b in zip(rows, rows[1:], strict=False):
        turns_between = b["turn"] - a["turn"]
        growth.append(
            {
                "from": a["turn"],
                "to": b["turn"],
                "rss_kib_per_turn": [
                    round((y - x) * 1024 / turns_between, 2)
                    for x, y in zip(a["rss_mib"], b["rss_mib"], strict=True)
                ],
                "blocks_per_turn": [
                    round((y - x) / turns_between, 2)
                    for x, y in zip(a["allocated_blocks"], b["allocated_blocks"], strict=True)
                ],
                "traced_kib_per_turn": round((b["traced_mib"] - a["traced_mib"]) * 1024 / turns_between, 2),
                "settled_kib_per_turn": round(
                    (b["settled_mib"] - a["settled_mib"]) * 1024 / turns_between, 3
                ),
            }
        )
    first = timed[0]
    calls = len(first["data"]["samples"])
    total_runner = [
        (r["data"]["samples"][-1][0] - r["data"]["samples"][0][0])
        - (r["data"]["samples"][-1][1] - r["data"]["samples"][0][1])
        for r in timed
    ]
    return {
        "turns": first["metrics"]["turns"],
        "status": first["metrics"]["status"],
        "model_calls": calls,
        "files": files,
        "rounds": rounds,
        "compactions": first["metrics"].get("compactions", {}),
        "window": WINDOW,
        "rows": rows,
        "growth": growth,
        "runner_cpu_ms_per_turn_overall": [round(v / max(calls - 1, 1) * 1e3, 3) for v in total_runner],
        "grep_workers_cpu_ms_per_turn": [
            round(r["data"]["children_cpu_s"] / max(calls, 1) * 1e3, 3) for r in timed
        ],
        "process_cpu_s": [round(r["cpu_s"], 2) for r in timed],
        "growth_by_file": grows,
        "run_dir": str(run_dir),
    }


def growth_by_file(out: Path, points: list[int], top: int = 8) -> list[dict]:
    """What the traced heap gained between the two points, by the file that allocated the blocks (not
    the one that keeps them): the ``top`` files that gained most, in KiB per turn."""

    if len(points) < 2:
        return []
    # the instrumentation's own samples and the imports are not the runner's
    a, b = (tracemalloc.Snapshot.load(f"{out}.{p}.snapshot").filter_traces(OWN_TRACES) for p in points)
    turns = points[1] - points[0]
    rows = []
    gained = sorted(b.compare_to(a, "filename"), key=lambda stat: stat.size_diff, reverse=True)
    for stat in [stat for stat in gained if stat.size_diff > 0][:top]:
        name = stat.traceback[0].filename
        for prefix in (str(ROOT) + "/", *sorted((p + "/" for p in sys.path if p), key=len, reverse=True)):
            if name.startswith(prefix):
                name = name[len(prefix) :]
                break
        rows.append({"file": name, "kib_per_turn": round(stat.size_diff / 1024 / turns, 3)})
    return rows


def session_table(r: dict) -> str:
    rows, window = r["rows"], r["window"]
    compactions = ", ".join(f"{k} {v}" for k, v in sorted(r["compactions"].items())) or "none"
    lines = [
        "## Scaling 2: session length",
        "",
        f"One offline survey of {r['files']:,} generated modules (~3 KB each), `context_char_limit = 20000`, "
        f"stopped by `max_turns` at {r['turns']:,} turns ({r['status']}; {r['model_calls']:,} model calls; "
        f"compactions: {compactions}). The runner runs the job in a process of its own, instrumented "
        "at each model call: the runner's own CPU is the process's CPU (all its threads) less the CPU spent "
        f"inside the model (the offline policy is the model here), per turn over the {window} turns ending "
        "at the point; RSS from /proc; allocated blocks from `sys.getallocatedblocks()`; traced bytes from "
        f"`tracemalloc`, in a round of its own (it slows the run, so its times are not used). {r['rounds']} "
        "timed rounds; median and, in brackets, the range. Grep runs in worker processes: "
        f"{spread(r['grep_workers_cpu_ms_per_turn'], 2)} ms of their CPU per turn over the whole job, "
        "not in the columns.",
        "",
        "Targets: flat time per turn and flat memory per turn.",
        "",
        "| at turn | runner CPU ms per turn | RSS MiB | Python allocated blocks | traced heap MiB "
        "| traced heap MiB, spill maps emptied | spill files KiB |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        lines.append(
            f"| {row['turn']:,} | {spread(row['runner_cpu_ms_per_turn'], 2)} | {spread(row['rss_mib'])} | "
            f"{statistics.median(row['allocated_blocks']):,.0f} | {row['traced_mib']:.2f} | "
            f"{row.get('settled_mib', 0):.2f} | {statistics.median(row.get('spill_kib') or [0]):,.0f} |"
        )
    lines += [
        "",
        "| turns | RSS KiB per turn | allocated blocks per turn | traced KiB per turn | traced KiB per turn, "
        "spill maps emptied |",
        "|---|---:|---:|---:|---:|",
    ]
    for g in r["growth"]:
        lines.append(
            f"| {g['from']:,} to {g['to']:,} | {spread(g['rss_kib_per_turn'], 2)} | "
            f"{spread(g['blocks_per_turn'], 1)} | {g['traced_kib_per_turn']:.2f} | "
            f"{g.get('settled_kib_per_turn', g['traced_kib_per_turn']):.3f} |"
        )
    first = statistics.median(rows[0]["runner_cpu_ms_per_turn"])
    last = statistics.median(rows[-1]["runner_cpu_ms_per_turn"])
    ratio = last / first if first > 0 else float("inf")
    time_verdict = "met" if ratio <= 1.10 else f"MISSED by {(ratio - 1.10) * 100:.0f} points"
    lines += [
        "",
        f"Runner CPU per turn at turn {rows[-1]['turn']:,} is {ratio:.2f}x that at turn {rows[0]['turn']:,} "
        f"(flat time, at most 1.1x: {time_verdict}); over the whole job "
        f"{spread(r['runner_cpu_ms_per_turn_overall'], 2)} ms per turn.",
    ]
    if r["growth"]:
        g = r["growth"][-1]
        grows = g.get("settled_kib_per_turn", g["traced_kib_per_turn"])
        memory_verdict = (
            "met" if grows <= FLAT_KIB_PER_TURN else f"MISSED by {grows - FLAT_KIB_PER_TURN:.2f} KiB a turn"
        )
        lines.append(
            f"Memory from turn {g['from']:,} to {g['to']:,}: {grows:.3f} KiB of Python heap a turn (traced, "
            "with every spill map emptied into its file at both points: what a map holds in memory is "
            "bounded by it, and fills and empties in a sawtooth that a difference of two points would "
            f"catch at any phase; as the job left it: {g['traced_kib_per_turn']:.2f}), "
            f"{spread(g['rss_kib_per_turn'], 2)} KiB of RSS a turn (flat memory, at most "
            f"{FLAT_KIB_PER_TURN} KiB of heap a turn: {memory_verdict})."
        )
    if r.get("growth_by_file"):
        parts = ", ".join(f"`{g['file']}` {g['kib_per_turn']:.2f}" for g in r["growth_by_file"])
        lines.append(
            f"What the traced heap gained a turn from turn {r['growth'][-1]['from']:,} to "
            f"{r['growth'][-1]['to']:,}, in KiB, by the file that allocated it (not always the one that "
            f"keeps it: the model's tool_use ids are kept by the tools): {parts}. What a job keeps for "
            "all its length by what it promises (the repeat guard's record of every distinct call: a "
            "repeat is caught anywhere in the job; the store's name, owner and size of every saved output: "
            "the same result saved again gets the same name, recall checks a path against its owner; the "
            "toolset's every tool_use id: a reused id is refused) is held in plain dicts, about 0.2 KiB "
            "an output or a call (bench/job_records.py; the spill maps that once held it past 2,048 "
            "entries saved 4.6 MiB at 10,000 turns and cost 45-76 us a turn, and were removed; the last "
            "column, their files' bytes on disk, is 0 since). "
            "What only the window needs (the context recorder's) is forgotten as it leaves."
        )
    return "\n".join(lines)


# --- 3. workspace size -------------------------------------------------------------------------------


def make_tree(root: Path, files: int) -> None:
    """``files`` small files, 1,000 a directory (one in 1,000 holds the needle), and one ``needle.md``."""
    for i in range(files):
        d = root / f"d{i // 1000:04d}"
        if i % 1000 == 0:
            d.mkdir(parents=True)
        text = f"line one of file {i}\nvalue = {i * 7}\n" + ("NEEDLE here\n" if i % 1000 == 7 else "")
        (d / f"f{i:06d}.txt").write_text(text)
    (root / "d0000" / "needle.md").write_text("the one markdown file\n")


def tool_child(args: argparse.Namespace) -> None:
    """In a process of its own: one tool over one tree, its wall and CPU time."""
    from runner.rundir import manifest
    from runner.tools import file_tools, grep_worker

    ws, what = args.tool_child, args.tool
    started, cpu = time.perf_counter(), time.process_time()
    if what == "glob all":
        out = file_tools.glob(ws, {"pattern": "**/*"}, time.monotonic() + 3600)
        note = out.rsplit("\n", 1)[-1][:200]
    elif what == "glob one":
        out = file_tools.glob(ws, {"pattern": "**/*.md"}, time.monotonic() + 3600)
        note = f"{len(out.splitlines())} match"
    elif what == "grep":
        answer = grep_worker.grep(
            {"workspace": ws, "path": None, "pattern": "NEEDLE", "max_files": file_tools.WALK_MAX_ENTRIES}
        )
        note = f"{len(answer['text'].splitlines())} matches, cut {answer['cut']}"
    else:
        m = manifest.build(Path(ws))
        note = f"{m.files} files"
    print(
        json.dumps(
            {"wall_s": time.perf_counter() - started, "cpu_s": time.process_time() - cpu, "note": note}
        )
    )


TOOLS = ("glob all", "glob one", "grep", "manifest")


def measure_workspace(sizes: tuple[int, ...], rounds: int, scratch: Path) -> dict:
    """Each tree under ``scratch`` (deleted with it, after the last table)."""
    from runner.tools import file_tools

    rows = []
    for files in sizes:
        base = scratch / f"tree-{files}"
        started = time.perf_counter()
        make_tree(base / "ws", files)
        made_s = time.perf_counter() - started
        for tool in TOOLS:
            got = []
            for _ in range(rounds):
                cmd = [sys.executable, str(HERE / "scaling.py"), "--tool-child", str(base / "ws")]
                done = subprocess.run(
                    cmd + ["--tool", tool], capture_output=True, text=True, check=True, cwd=ROOT
                )
                got.append(json.loads(done.stdout))
            rows.append(
                {
                    "files": files + 1,
                    "tool": tool,
                    "wall_s": [round(g["wall_s"], 3) for g in got],
                    "cpu_s": [round(g["cpu_s"], 3) for g in got],
                    "note": got[0]["note"],
                    "tree_made_s": round(made_s, 1),
                }
            )
    return {"rounds": rounds, "cap": file_tools.WALK_MAX_ENTRIES, "rows": rows}


TOOL_NAMES = {
    "glob all": "glob `**/*`",
    "glob one": "glob `**/*.md` (1 match)",
    "grep": "grep `NEEDLE` (whole tree)",
    "manifest": "manifest (sha256 of every file)",
}


def workspace_table(r: dict) -> str:
    cap = r["cap"]
    lines = [
        "## Scaling 3: workspace size",
        "",
        "Generated trees of small files (1,000 a directory, 30-45 bytes each) in the scratch directory, "
        "deleted after the last table. "
        "Each tool runs in a fresh process (the files in the page cache after the first round): "
        "`file_tools.glob` as the glob tool calls it, `grep_worker.grep` as a grep worker runs it, "
        "`manifest.build` without git. Per file is over the files each one visited: glob and grep stop "
        f"at {cap:,} entries (`WALK_MAX_ENTRIES`), glob at {cap:,} matches, so a pattern that matches "
        f"few walks the whole tree. {r['rounds']} rounds; median and, in brackets, the range.",
        "",
        "| files | tool | wall s | CPU s | CPU µs per file visited | answer |",
        "|---:|---|---:|---:|---:|---|",
    ]
    for row in r["rows"]:
        visited = row["files"]
        if row["tool"] in ("glob all", "grep"):
            visited = min(row["files"], cap)
        per = [c / visited * 1e6 for c in row["cpu_s"]]
        note = row["note"].replace("|", "/")
        lines.append(
            f"| {row['files']:,} | {TOOL_NAMES[row['tool']]} | {spread(row['wall_s'], 3)} | "
            f"{spread(row['cpu_s'], 3)} | {spread(per, 1)} | {note} |"
        )
    return "\n".join(lines)


# --- 4. viewer ---------------------------------------------------------------------------------------


def measure_viewer(run_dir: Path, rounds: int, open_rounds: int) -> dict:
    import viewer as viewer_bench

    from runner.ui.viewer.render import write_view

    writes = []
    result = None
    for _ in range(rounds):
        started, cpu = time.perf_counter(), viewer_bench.cpu_s()
        result = write_view(run_dir, force=True)
        writes.append((time.perf_counter() - started, viewer_bench.cpu_s() - cpu))
    assert result is not None
    pages = result.pages_dir
    job_page = pages / "long.html"
    others = sorted(pages.glob("long.*.html"), key=lambda p: p.stat().st_size)
    transcript = run_dir / "long" / "transcript.jsonl"
    opened = opened_middle = None
    if open_rounds:  # none in a smoke run: the browser's start alone is seconds
        with tempfile.TemporaryDirectory(prefix="scaling-chromium-") as tmp:
            profile = Path(tmp) / "profile"
            opened = viewer_bench.open_s(job_page, profile, open_rounds)
            middle = pages / f"long.{max(2, (len(others) + 1) // 2)}.html"
            opened_middle = viewer_bench.open_s(middle, profile, open_rounds) if others else None
    return {
        "rounds": rounds,
        "open_rounds": open_rounds,
        "transcript_bytes": transcript.stat().st_size,
        "pages": 1 + len(others),
        "job_page_bytes": job_page.stat().st_size,
        "largest_transcript_page_bytes": others[-1].stat().st_size if others else 0,
        "all_pages_bytes": job_page.stat().st_size + sum(p.stat().st_size for p in others),
        "index_bytes": result.index.stat().st_size,
        "write_s": [round(w, 3) for w, _ in writes],
        "write_cpu_s": [round(c, 3) for _, c in writes],
        "middle_page": middle.name if others else None,
        "job_page_open_s": None if opened is None else [round(t, 2) for t in opened],
        "transcript_page_open_s": None if opened_middle is None else [round(t, 2) for t in opened_middle],
    }


def viewer_table(r: dict, turns: int) -> str:
    def mib(n: int) -> str:
        return f"{n / 2**20:.2f} MiB"

    def secs(v: list[float] | float | None) -> str:
        """The median open time and its range (an older result file holds the median alone)."""
        if v is None:
            return "(not opened: no chromium)"
        median, low, high = v if isinstance(v, list) else (v, v, v)
        return f"{median:.2f} ({low:.2f}-{high:.2f})"

    met = r["job_page_bytes"] < 5 * 2**20 and r["largest_transcript_page_bytes"] < 5 * 2**20
    return "\n".join(
        [
            "## Scaling 4: the viewer's page of a long job",
            "",
            f"`write_view` of table 2's {turns:,}-turn job as the runner left it "
            f"({mib(r['transcript_bytes'])} of transcript), {r['rounds']} rounds (every page rewritten "
            "each time); open: the real headless Chromium's `--dump-dom` wall time less an empty page's "
            "(bench/viewer.py), the median of "
            f"{r['open_rounds']} and, in brackets, the range. Target: no page over 5 MiB.",
            "",
            "| what | size | time s |",
            "|---|---:|---:|",
            f"| write every page (job page, {r['pages'] - 1} transcript pages, index): wall | "
            f"{mib(r['all_pages_bytes'])} in all | {spread(r['write_s'], 2)} |",
            f"| the same, CPU | | {spread(r['write_cpu_s'], 2)} |",
            f"| open the job's page (charts, compactions, report, transcript page 1) | "
            f"{mib(r['job_page_bytes'])} | {secs(r['job_page_open_s'])} |",
            f"| open a transcript page (the middle one, {r.get('middle_page', 'its name not recorded')}; the "
            f"largest is {mib(r['largest_transcript_page_bytes'])}) | | "
            f"{secs(r['transcript_page_open_s'])} |",
            "",
            f"Pages: {'met' if met else 'MISSED'}.",
        ]
    )


# --- main --------------------------------------------------------------------------------------------


def render() -> None:
    """BENCHMARKS.md's section again from the last measurement's results (its date's numbers, its load),
    after a change to how the tables are written."""
    from datetime import date

    import common

    saved = json.loads((common.RESULTS / "scaling.json").read_text())
    if saved["date"] != date.today().isoformat():  # the section is stamped with today's date
        raise SystemExit(f"the results are of {saved['date']}: measure again (python bench/scaling.py)")
    common.measured_at(saved)  # the load and code of those runs, not of now
    sections = [
        jobs_table(saved["jobs"]),
        session_table(saved["session"]),
        workspace_table(saved["workspace"]),
        viewer_table(saved["viewer"], saved["session"]["turns"]),
    ]
    print("\n\n".join(sections))
    replace_section("scaling", "\n\n".join(sections), saved["command"])


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--only", default="jobs,session,workspace,viewer")
    parser.add_argument("--source", type=Path, help="run table 1 with the runner of this checkout")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--render", action="store_true", help="write the tables again from bench/results/scaling.json"
    )
    parser.add_argument("--session-child", help=argparse.SUPPRESS)
    parser.add_argument("--jobs", help=argparse.SUPPRESS)
    parser.add_argument("--runs", help=argparse.SUPPRESS)
    parser.add_argument("--tracemalloc", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--snapshots", help=argparse.SUPPRESS)
    parser.add_argument("--points", help=argparse.SUPPRESS)
    parser.add_argument("--tool-child", help=argparse.SUPPRESS)
    parser.add_argument("--tool", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.session_child:
        session_child(args)
        return 0
    if args.tool_child:
        tool_child(args)
        return 0
    sys.path.insert(0, str(ROOT))
    if args.render:
        render()
        return 0
    only = set(args.only.split(","))
    rounds = 1 if args.smoke else args.rounds
    result: dict[str, Any] = {"command": "python bench/scaling.py"}
    sections = []
    # everything every table writes, deleted only once the last is measured (see the module's docstring)
    with tempfile.TemporaryDirectory(prefix="scaling-") as tmp:
        scratch = Path(tmp)
        if "jobs" in only:
            sizes = (4,) if args.smoke else (100, 1_000, 3_000)
            result["jobs"] = measure_jobs(sizes, rounds, args.source, scratch)
            sections.append(jobs_table(result["jobs"]))
            print(sections[-1], flush=True)
        long_run = None
        if "session" in only or "viewer" in only:
            turns, files = (40, 100) if args.smoke else (3_000, SESSION_FILES)
            result["session"] = measure_session(turns, files, rounds, scratch, separate_trace=not args.smoke)
            long_run = Path(result["session"].pop("run_dir"))
            if "session" in only:
                sections.append(session_table(result["session"]))
                print(sections[-1], flush=True)
        if "workspace" in only:
            sizes = (300,) if args.smoke else (10_000, 300_000)
            result["workspace"] = measure_workspace(sizes, rounds, scratch)
            sections.append(workspace_table(result["workspace"]))
            print(sections[-1], flush=True)
        if "viewer" in only and long_run is not None:
            result["viewer"] = measure_viewer(long_run, rounds, 0 if args.smoke else 3)
            sections.append(viewer_table(result["viewer"], result["session"]["turns"]))
            print(sections[-1], flush=True)
    if not args.smoke and args.source is None and only == {"jobs", "session", "workspace", "viewer"}:
        write_result("scaling", result)
        replace_section("scaling", "\n\n".join(sections), "python bench/scaling.py")
    return 0


if __name__ == "__main__":
    sys.exit(main())
