"""Benchmark 1: N sessions at once against the emulator in its own process, beside their floors and a peer.

Each session is a short survey job of the offline policy (its calls per session are the table's model
calls / N); every emulator call takes ``latency`` seconds. The runner runs as a real ``runner run``
subprocess with concurrency = N, on each executor (``local``; ``ray``: a local Ray instance started by the
runner, 2 workers). Beside it, in the same rounds, the same N sessions made by (bench/sdk_floor.py):
``sdk only`` (the runner's model client alone, no tools, files or display), ``raw http`` (a bare aiohttp
client posting the same bodies) and ``inspect_ai`` (the peer's own ``generate()`` loop over N samples with
``max_connections`` and ``max_samples`` = N and our read/glob/grep tools; needs inspect_ai in the Python
given by ``--peer-python``, else its rows say it is not installed).

Reported beside the ideal (the sequential calls of one session times the latency): wall time, CPU per
model call and the peak RSS of all the processes together (sampled from /proc). CPU of every row but
ray's is exact: the process's and its reaped children's user + system time from ``wait4``; ray's is
sampled from /proc over all its processes. CPU per call net of process start-up is
(CPU at N = 500 - CPU at N = 100) / (calls at 500 - calls at 100), per round.

    python bench/concurrency.py             # N = 10, 100, 500 local; the floors, the peer and ray at 100
                                            # and 500; 3 rounds; writes bench/results/concurrency.json
    python bench/concurrency.py --smoke     # N = 5, latency 0.2 s, local; writes nothing
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from datetime import date
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402
from common import replace_section, write_result  # noqa: E402

WORKSPACE_FILES = {  # 4 Python files and a text file: glob, 2 reads, compact, 4 outlines, todo, answer
    "alpha.py": '"""Alpha module."""\n\ndef a():\n    return 1\n',
    "beta.py": '"""Beta module."""\n\nclass B:\n    pass\n# TODO: more\n',
    "gamma.py": "# Gamma helpers\n\ndef g(x):\n    return x * 2\n",
    "delta.py": '"""Delta."""\n\nasync def d():\n    return None\n',
    "notes.txt": "plain notes\n",
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stats(base_url: str) -> dict[str, Any]:
    with urllib.request.urlopen(f"{base_url}/_emulator/stats", timeout=10) as r:
        return json.loads(r.read())


def stat_fields(pid: int) -> list[str]:
    """The fields of ``/proc/<pid>/stat`` after the command name (field 3, the state, is index 0)."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


class TreeSampler:
    """CPU seconds and summed RSS of a process and all its descendants, sampled from /proc every
    ``interval_s`` (written by hand: psutil is not a dependency). A process that exits between two
    samples loses at most one interval of its CPU time."""

    TICK = os.sysconf("SC_CLK_TCK")
    PAGE = os.sysconf("SC_PAGE_SIZE")

    def __init__(self, root: int, interval_s: float = 0.2):
        self.root = root
        self.interval_s = interval_s
        self.cpu: dict[int, float] = {}
        self.names: dict[
            int, str
        ] = {}  # pid -> its command line's first word (Ray names its actors' processes)
        self.peak_rss = 0
        self.processes: set[int] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _sample(self) -> None:
        parents: dict[int, int] = {}
        stats: dict[int, list[str]] = {}
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                fields = stat_fields(int(entry))
            except OSError:
                continue
            parents[int(entry)] = int(fields[1])
            stats[int(entry)] = fields
        tree, grew = {self.root}, True
        while grew:
            more = {pid for pid, ppid in parents.items() if ppid in tree} - tree
            tree |= more
            grew = bool(more)
        rss = 0
        for pid in tree & stats.keys():
            fields = stats[pid]
            self.cpu[pid] = (int(fields[11]) + int(fields[12])) / self.TICK
            if "JobWorker" not in self.names.get(pid, "") and "RunServices" not in self.names.get(pid, ""):
                try:  # read again: a Ray worker process takes its actor's name only when it becomes one
                    self.names[pid] = (
                        Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode(errors="replace")
                    )
                except OSError:
                    self.names[pid] = "?"
            rss += int(fields[21]) * self.PAGE
        self.processes |= tree
        self.peak_rss = max(self.peak_rss, rss)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._sample()

    def __enter__(self) -> TreeSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    @property
    def cpu_s(self) -> float:
        return sum(self.cpu.values())

    def cpu_by_role(self) -> dict[str, float]:
        """CPU seconds of the runner itself (the driver), Ray's job workers, its services actor, the rest."""
        roles: dict[str, float] = {}
        for pid, cpu in self.cpu.items():
            name = self.names.get(pid, "?")
            role = (
                "driver"
                if pid == self.root
                else "workers"
                if "JobWorker" in name
                else "services"
                if "RunServices" in name
                else "ray system"
            )
            roles[role] = roles.get(role, 0.0) + cpu
        return roles


def scale_files(k: int = 110) -> dict[str, str]:
    """A workspace of ``k`` small modules: the offline policy's survey of it takes about 20 calls."""
    return {f"m{i:03d}.py": f'"""Module {i}."""\n\ndef f{i}():\n    return {i}\n' for i in range(k)}


def survey_batch(
    n: int, latency: float, tmp: Path, jobs: Path, files: dict[str, str] | None = None
) -> tuple[str, subprocess.Popen[bytes]]:
    """``n`` survey jobs in ``jobs`` over one small workspace, a config whose summary gate is not the
    bottleneck (bench/ratelimit.py measures the gate), and an emulator in its own process answering
    after ``latency`` seconds, up and listening: its base URL and process (the caller stops it)."""
    workspace = tmp / "workspace"
    workspace.mkdir(exist_ok=True)
    for name, text in (files or WORKSPACE_FILES).items():
        (workspace / name).write_text(text)
    jobs.mkdir()
    for i in range(n):
        (jobs / f"s{i:04d}.toml").write_text(
            f'workspace = "{workspace}"\nprompt = "Survey this workspace ({i})."\n'
        )
    (tmp / "emulator.toml").write_text(f"[latency]\nseconds = {latency}\n")
    (tmp / "config.toml").write_text(  # the summary gate at its most (1,000): not the bottleneck
        f"[summarizer]\nmax_concurrent = {min(n, 1000)}\nrequests_per_minute = 100000\n"
    )
    port = free_port()
    base_url = f"http://127.0.0.1:{port}"
    emulator = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "runner",
            "emulate",
            "--port",
            str(port),
            "--config",
            str(tmp / "emulator.toml"),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    for _ in range(200):
        try:
            stats(base_url)
            break
        except OSError:
            time.sleep(0.05)
    return base_url, emulator


def cpu_s_of(pid: int) -> float:
    """CPU seconds a live process has used so far."""
    fields = stat_fields(pid)
    return (int(fields[11]) + int(fields[12])) / TreeSampler.TICK


FLOOR = "sdk only"  # the executor column of the floor rows (bench/sdk_floor.py --client sdk)
RAW = "raw http"  # bench/sdk_floor.py --client raw
PEER = "inspect_ai"  # bench/sdk_floor.py --client inspect, in the peer's Python
BEFORE = "local before"  # the local executor run from another source tree (--before: an A/B of a change)
CLIENT_OF = {FLOOR: "sdk", RAW: "raw", PEER: "inspect"}
NOT_INSTALLED = "not installed"
PAIRED = (100, 500)  # the sizes whose difference is CPU net of start-up
TARGET_OWN_MS = 1.0  # the runner's own work per call, net of start-up, over the SDK floor's
TARGET_WALL_OVER_FLOOR = 1.1  # the local runner's wall over the SDK floor's, at N = 500
TARGET_RAY_OVER_LOCAL = 1.1
TARGET_PEAK_RSS_MIB = 1536  # each executor's peak RSS at N = 500, over all its processes


def peer_installed(python: str) -> bool:
    try:
        return subprocess.run([python, "-c", "import inspect_ai"], capture_output=True).returncode == 0
    except OSError:  # no such Python
        return False


def run_one(
    n: int,
    latency: float,
    tmp: Path,
    executor: str = "local",
    calls_per_session: int = 5,
    peer_python: str = sys.executable,
    before: str | None = None,
    files: dict[str, str] | None = None,
) -> dict[str, Any]:
    """One row: N sessions on ``executor`` (or by a floor client or the peer, ``calls_per_session`` calls
    a session where the client is told how many) against a fresh emulator."""
    jobs = tmp / f"jobs-{n}-{executor.replace(' ', '_')}"
    base_url, emulator = survey_batch(n, latency, tmp, jobs, files)
    try:
        env = {**os.environ, "ANTHROPIC_BASE_URL": base_url, "ANTHROPIC_API_KEY": "bench-key"}
        if executor == BEFORE and before:  # its runner package first on the path
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [before, env.get("PYTHONPATH")]))
        elif executor == PEER:  # the peer's Python runs our glue, with this tree's runner package
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(common.ROOT), env.get("PYTHONPATH")]))
        command = (
            [
                peer_python if executor == PEER else sys.executable,
                str(Path(__file__).with_name("sdk_floor.py")),
                "--client",
                CLIENT_OF[executor],
                "--base-url",
                base_url,
                "--sessions",
                str(n),
                "--calls",
                str(calls_per_session),
                "--workspace",
                str(tmp / "workspace"),
            ]
            if executor in CLIENT_OF
            else [
                sys.executable,
                "-m",
                "runner",
                "run",
                str(jobs),
                "--backend",
                "anthropic",
                "--concurrency",
                str(n),
                "--output-dir",
                str(tmp / "runs"),
                "--executor",
                "local" if executor == BEFORE else executor,
            ]
        )
        emulator_cpu = cpu_s_of(emulator.pid)
        out, err = tmp / f"out-{n}", tmp / f"err-{n}"
        started = time.perf_counter()
        with out.open("w") as stdout, err.open("w") as stderr:
            proc = subprocess.Popen(command, env=env, stdout=stdout, stderr=stderr, text=True, cwd=tmp)
            with TreeSampler(proc.pid) as tree:
                # exact CPU: the process's own and its reaped children's (grep workers), from wait4
                _, status, usage = os.wait4(proc.pid, 0)
            wall = time.perf_counter() - started
        proc.returncode = os.waitstatus_to_exitcode(status)
        counted = stats(base_url)
        emulator_cpu = cpu_s_of(emulator.pid) - emulator_cpu
    finally:
        emulator.terminate()
        emulator.wait()
    if proc.returncode != 0:
        raise SystemExit(f"{executor} failed for N={n}: {err.read_text()[-2000:]}")
    calls = counted["outcomes"].get("ok", 0)
    sequential = calls / n
    # ray's processes are not the driver's children to reap: its CPU is the sampled tree's
    exact = executor != "ray"
    cpu_s = usage.ru_utime + usage.ru_stime if exact else tree.cpu_s
    return {
        "executor": executor,
        "sessions": n,
        "latency_s": latency,
        "model_calls": calls,
        "emulator_cpu_ms_per_call": round(emulator_cpu / calls * 1000, 2),
        **({"floor": json.loads(out.read_text().strip().splitlines()[-1])} if executor in CLIENT_OF else {}),
        "calls_per_session": sequential,
        "ideal_s": round(sequential * latency, 2),
        "wall_s": round(wall, 2),
        "wall_over_ideal": round(wall / (sequential * latency), 3),
        "cpu_s": round(cpu_s, 3),
        "cpu_exact": exact,
        "system_s": round(usage.ru_stime, 3) if exact else None,
        "kernel_share": round(usage.ru_stime / max(1e-9, usage.ru_utime + usage.ru_stime), 3)
        if exact
        else None,
        "cpu_s_per_call": round(cpu_s / calls, 5),
        "peak_rss_mib": round(tree.peak_rss / 2**20, 1),
        "processes": len(tree.processes),
        "peak_concurrent_at_emulator": counted.get("peak_concurrent"),
        "cpu_ms_per_call_by_role": {k: round(v / calls * 1000, 2) for k, v in tree.cpu_by_role().items()},
    }


def startup_s() -> float:
    """Wall time for a runner process to import what it runs with (the SDK above all)."""
    started = time.perf_counter()
    subprocess.run(
        [sys.executable, "-c", "import runner.cli, runner.execution.scheduler, anthropic"], check=True
    )
    return time.perf_counter() - started


def new_file_us(count: int = 300) -> float:
    """CPU microseconds (user + system, this process) to create one small file, write it and close it,
    in a fresh directory where the rows' run directories were (the system's temporary directory)."""
    with tempfile.TemporaryDirectory() as tmp:
        started = time.process_time()
        for i in range(count):
            fd = os.open(os.path.join(tmp, f"f{i}"), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
            os.write(fd, b"x" * 300)
            os.close(fd)
        return (time.process_time() - started) / count * 1e6


def median_row(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The run with the median wall time, with every run's wall/ideal and CPU per call beside it."""
    row = dict(sorted(runs, key=lambda r: r["wall_s"])[len(runs) // 2])
    row["runs"] = [
        {
            k: r[k]
            for k in (
                "wall_s",
                "wall_over_ideal",
                "cpu_s",
                "system_s",
                "cpu_s_per_call",
                "model_calls",
                "peak_rss_mib",
            )
            if k in r
        }
        for r in runs
    ]
    return row


def spread(row: dict[str, Any], key: str, form: str, scale: float = 1.0) -> str:
    values = [r[key] * scale for r in row["runs"]]
    return f"{form.format(min(values))}-{form.format(max(values))}" if len(values) > 1 else "1 run"


def median_range(values: list[float]) -> dict[str, Any]:
    ordered = sorted(values)
    return {
        "median": round(statistics.median(ordered), 4),
        "min": round(ordered[0], 4),
        "max": round(ordered[-1], 4),
        "values": [round(v, 4) for v in values],
    }


def floors(measured: dict[tuple[str, int], list[dict[str, Any]]]) -> dict[str, Any]:
    """Per round: each client's CPU per call net of start-up ((CPU at 500 - CPU at 100) / (calls at 500 -
    calls at 100)), the runner's own work over the SDK floor's, and wall ratios at N = 500; each as its
    median and range over the rounds."""
    small, big = PAIRED
    out: dict[str, Any] = {"net_ms_per_call": {}}
    per_round: dict[str, list[float]] = {}
    for executor in ("local", BEFORE, FLOOR, RAW, PEER, "ray"):
        a, b = measured.get((executor, small), []), measured.get((executor, big), [])
        nets = [
            (rb["cpu_s"] - ra["cpu_s"]) / (rb["model_calls"] - ra["model_calls"]) * 1000
            for ra, rb in zip(a, b, strict=False)
            if rb["model_calls"] > ra["model_calls"]
        ]
        if nets:
            per_round[executor] = nets
            out["net_ms_per_call"][executor] = median_range(nets)
    for executor, key in (("local", "own_ms_per_call"), (BEFORE, "own_ms_per_call_before")):
        if executor in per_round and FLOOR in per_round:
            out[key] = median_range(
                [x - y for x, y in zip(per_round[executor], per_round[FLOOR], strict=False)]
            )
    kernel: dict[str, list[float]] = {}  # system CPU per call net of start-up, the same way
    for executor in ("local", BEFORE, FLOOR):
        a, b = measured.get((executor, small), []), measured.get((executor, big), [])
        kernel[executor] = [
            (rb["system_s"] - ra["system_s"]) / (rb["model_calls"] - ra["model_calls"]) * 1000
            for ra, rb in zip(a, b, strict=False)
            if rb["model_calls"] > ra["model_calls"]
            and rb.get("system_s") is not None
            and ra.get("system_s") is not None
        ]
    if kernel["local"] and kernel[FLOOR] and "local" in per_round and FLOOR in per_round:
        own_kernel = [x - y for x, y in zip(kernel["local"], kernel[FLOOR], strict=False)]
        own = [x - y for x, y in zip(per_round["local"], per_round[FLOOR], strict=False)]
        out["own_kernel_ms_per_call"] = median_range(own_kernel)
        out["own_user_ms_per_call"] = median_range([x - y for x, y in zip(own, own_kernel, strict=False)])
    if kernel[BEFORE] and kernel[FLOOR] and BEFORE in per_round and FLOOR in per_round:
        out["own_user_ms_per_call_before"] = median_range(
            [
                (x - y) - (kx - ky)
                for x, y, kx, ky in zip(
                    per_round[BEFORE], per_round[FLOOR], kernel[BEFORE], kernel[FLOOR], strict=False
                )
            ]
        )
    for key, (num, den) in {
        "wall_local_over_floor": ("local", FLOOR),
        "wall_before_over_floor": (BEFORE, FLOOR),
        "wall_peer_over_floor": (PEER, FLOOR),
        "wall_ray_over_local": ("ray", "local"),
    }.items():
        a, b = measured.get((num, big), []), measured.get((den, big), [])
        if a and b:
            out[key] = median_range([x["wall_s"] / y["wall_s"] for x, y in zip(a, b, strict=False)])
    return out


def verdict(value: float, target: float) -> str:
    return "met" if value <= target else f"MISSED by {value / target - 1:.0%}"


def findings(
    rows: list[dict[str, Any]], startup: float, floor: dict[str, Any], peer_note: str, startups: int = 3
) -> str:
    n = max(r["sessions"] for r in rows)
    at = {r["executor"]: r for r in rows if r["sessions"] == n}
    local, ray, sdk = at.get("local"), at.get("ray"), at.get(FLOOR)
    net = floor.get("net_ms_per_call", {})

    def mr(d: dict[str, Any], form: str = "{:.2f}", unit: str = "") -> str:
        return f"{form.format(d['median'])}{unit} ({form.format(d['min'])}-{form.format(d['max'])})"

    parts = []
    if net:
        parts.append(
            "CPU per call net of process start-up ((N = 500 - N = 100) / the calls between them, paired "
            "within each round; CPU exact from wait4, ray's sampled; median and range over the rounds): "
            + ", ".join(f"{k} {mr(v, unit=' ms')}" for k, v in net.items())
            + "."
        )
    own = floor.get("own_ms_per_call")
    if own:
        parts.append(
            f"The runner's own work (local minus the SDK floor, net of start-up): {mr(own, unit=' ms')} per "
            f"call, target <= {TARGET_OWN_MS:g} ms: {verdict(own['median'], TARGET_OWN_MS)}"
            + (
                f"; of it, kernel time (local's system CPU minus the floor's, net of start-up, the same "
                f"way) {mr(floor['own_kernel_ms_per_call'], unit=' ms')}: the system calls of the files "
                "each job writes (its directory, transcript, events, context, checkpoint, memory, "
                "final.md and metrics.json; a new file here costs "
                + (
                    f"{floor['new_file_us']['median']:.0f} us ({floor['new_file_us']['min']:.0f}-"
                    f"{floor['new_file_us']['max']:.0f}) of CPU, measured after the rounds"
                    if floor.get("new_file_us")
                    else "tens of microseconds of kernel time"
                )
                + "), "
                "its grep workers' pipes and processes, and the loop's wake-ups; it moves with the "
                "machine's other load on the shared disk and cores (the floor's stays flat), so the "
                "user time, the runner's own Python, is the steadier measure: "
                + (
                    f"{mr(floor['own_user_ms_per_call'], unit=' ms')} per call, against the "
                    f"{TARGET_OWN_MS:g} ms target on it alone: "
                    f"{verdict(floor['own_user_ms_per_call']['median'], TARGET_OWN_MS)}"
                    if floor.get("own_user_ms_per_call")
                    else "not measured"
                )
                if floor.get("own_kernel_ms_per_call")
                else ""
            )
            + "."
        )
    before, before_wall = floor.get("own_ms_per_call_before"), floor.get("wall_before_over_floor")
    if before and before_wall:
        parts.append(
            f"The same runner before the levers ({BEFORE!r} rows, the runner from another source tree in the "
            f"same rounds): own work {mr(before, unit=' ms')} per call"
            + (
                f" (user time {mr(floor['own_user_ms_per_call_before'], unit=' ms')})"
                if floor.get("own_user_ms_per_call_before")
                else ""
            )
            + f", wall {mr(before_wall, unit='x')} the floor's."
        )
    wall = floor.get("wall_local_over_floor")
    if wall and local and sdk:
        parts.append(
            f"Wall at N = {n}: local {local['wall_over_ideal']:.2f}x ideal, the SDK floor "
            f"{sdk['wall_over_ideal']:.2f}x; local over the floor (per round, median and range) "
            f"{mr(wall, unit='x')}, target <= "
            f"{TARGET_WALL_OVER_FLOOR:g}x: {verdict(wall['median'], TARGET_WALL_OVER_FLOOR)}."
        )
    if local and local.get("kernel_share") is not None:
        parts.append(f"Of local's CPU at N = {n}, {local['kernel_share']:.0%} is kernel time.")
    rss = [(name, at[name]["peak_rss_mib"]) for name in ("local", "ray") if name in at]
    if rss:
        worst = max(mib for _, mib in rss)
        parts.append(
            f"Peak RSS at N = {n} over each executor's processes: "
            + ", ".join(f"{name} {mib} MiB" for name, mib in rss)
            + f", target <= {TARGET_PEAK_RSS_MIB / 1024:g} GiB: {verdict(worst, TARGET_PEAK_RSS_MIB)}."
        )
    if local and sdk:
        busy = (local["cpu_s"] + local["emulator_cpu_ms_per_call"] * local["model_calls"] / 1000) / local[
            "wall_s"
        ]
        if busy >= 1.5:
            why = ": the cores were full, so each second of CPU over the floor's is a second of wall."
        elif common.START_LOAD > 1.0:
            why = (
                ", with the machine's other load on the same 2 cores (the load average above): a ratio of "
                "walls here measures that contention as much as the runner, and CPU per call is the figure "
                "to trust."
            )
        else:
            why = (
                ": the cores were not full. The runner's Python runs on one event loop, and every "
                "session's reply arrives at about the same moment (one latency, all started together), so "
                "a turn's replies are handled one after another and its last session waits for the rest: "
                "the CPU per call on the loop, over the floor's, is what the wall over the floor's follows."
            )
        parts.append(
            f"What bounds local's wall: its {local['cpu_s']:.1f} s of CPU at N = {n} (the floor's "
            f"{sdk['cpu_s']:.1f} s) and the emulator's; runner and emulator together kept {busy:.2f} cores "
            f"busy over local's wall" + why
        )
    if RAW in at:
        parts.append(
            f"The raw client reaches {at[RAW]['wall_over_ideal']:.2f}x ideal at N = {n}: the bound of any "
            "client on these 2 cores, which the emulator shares (its own CPU per call is the last column)."
        )
    peer = at.get(PEER)
    peer_wall = floor.get("wall_peer_over_floor")
    if peer and PEER in net and peer_wall:
        parts.append(
            f"The peer, inspect_ai, at N = {n}: {peer['wall_over_ideal']:.2f}x ideal, "
            f"{mr(net[PEER], unit=' ms')} of CPU per call net of start-up, its wall "
            f"{mr(peer_wall, unit='x')} the SDK floor's (per round); peak RSS {peer['peak_rss_mib']} MiB."
        )
    parts.append(peer_note)
    if ray:
        roles = ray["cpu_ms_per_call_by_role"]
        parts.append(
            f"Ray at N = {n}: wall {ray['wall_over_ideal']:.2f}x ideal, "
            f"{ray['cpu_s_per_call'] * 1000:.1f} ms "
            f"of CPU per call over all its processes (sampled), peak RSS {ray['peak_rss_mib']} MiB over "
            f"{ray['processes']} processes; per call by process: "
            + ", ".join(f"{k} {v:.1f} ms" for k, v in sorted(roles.items()))
            + "."
        )
        rl = floor.get("wall_ray_over_local")
        if rl:
            parts.append(
                f"Ray's wall over local's at N = {n} (sessions of {ray['calls_per_session']:g} calls; per "
                f"round, median and range): {mr(rl, unit='x')}; the within-10% target is set at N = 2,000 "
                "sessions of 20 calls (the ray scale rows below)."
            )
    parts.append(
        f"Each wall time includes at least {startup:.1f} s of process start-up (importing the SDK: the "
        + (f"fastest of {startups} start-ups" if startups > 1 else "one start-up")
        + " measured after the rounds); the ray rows "
        "also include starting a local Ray instance and its workers."
    )
    return " ".join(parts)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--sizes", type=int, nargs="*")
    parser.add_argument("--executors", nargs="*", choices=["local", "ray", FLOOR, RAW, PEER, BEFORE])
    parser.add_argument("--before", help=f"a source tree whose runner the {BEFORE!r} rows run (an A/B)")
    parser.add_argument(
        "--repeat", type=int, default=3, help="runs of each row; the table shows the median and range"
    )
    parser.add_argument(
        "--peer-python",
        default=os.environ.get("RUNNER_PEER_PYTHON", sys.executable),
        help="a Python with inspect_ai installed (the peer rows); without it they say not installed",
    )
    parser.add_argument(
        "--profile",
        action="store_true",
        help="profile one local run at N = 500 and add where its time goes to the saved results' findings",
    )
    parser.add_argument(
        "--ray-scale",
        action="store_true",
        help="ray against local on sessions of about 20 calls (section ray_scale); --sizes, --repeat",
    )
    parser.add_argument(
        "--add",
        action="store_true",
        help="with --ray-scale --sizes: add these sizes to the saved ray_scale results (and the section)",
    )
    parser.add_argument(
        "--render", action="store_true", help="rewrite BENCHMARKS.md from bench/results/concurrency.json"
    )
    args = parser.parse_args()
    if args.profile:  # into the last full run's results, then rendered with them
        path = Path(__file__).parent / "results" / "concurrency.json"
        saved = json.loads(path.read_text())
        saved["profile"] = profile_local(PAIRED[1])
        path.write_text(json.dumps(saved, indent=2) + "\n")
        print(profile_text(saved["profile"]))
        args.render = True
    if args.render and not args.ray_scale:  # the tables and findings again, from the last run's results
        saved = json.loads((Path(__file__).parent / "results" / "concurrency.json").read_text())
        common.measured_at(saved)  # the load and code of those runs, not of now
        render(
            saved["rows"],
            saved["latency_s"],
            saved["repeat"],
            saved["startup_s"],
            saved["floors"],
            saved["peer_note"] + (" " + profile_text(saved["profile"]) if saved.get("profile") else ""),
            write=True,
            command=saved.get("command"),
        )
        return
    if args.ray_scale and args.render:
        saved = json.loads((Path(__file__).parent / "results" / "ray_scale.json").read_text())
        common.measured_at(saved)  # the load and code of those runs, not of now
        render_ray_scale(saved, write=True)
        return
    if args.ray_scale:
        ray_scale(
            tuple(args.sizes or (100, 500, SCALE_TARGET_N)),
            args.repeat,
            write=args.add or not args.sizes,
            add=args.add,
        )
        return
    sizes, latency = ((5,), 0.2) if args.smoke else (tuple(args.sizes or (10, 100, 500)), 2.0)
    executors = list(args.executors or (["local"] if args.smoke else ["local", FLOOR, RAW, PEER, "ray"]))
    if (
        "ray" in executors
        and subprocess.run([sys.executable, "-c", "import ray"], capture_output=True).returncode
    ):
        executors.remove("ray")  # the ray extra is not installed
    have_peer = PEER in executors and peer_installed(args.peer_python)
    peer_note = (
        f"inspect_ai ({args.peer_python}): its own generate() loop, max_connections = max_samples = N."
        if have_peer
        else f"inspect_ai: {NOT_INSTALLED} in {args.peer_python} (pass --peer-python): no peer rows."
        if PEER in executors
        else "inspect_ai: not run here."
    )
    if PEER in executors and not have_peer:
        executors.remove(PEER)
    if args.before and BEFORE not in executors:
        executors.insert(executors.index("local") + 1 if "local" in executors else 0, BEFORE)
    runs = [
        (e, n)
        for e in executors
        for n in sizes
        if (e == "local" or n in PAIRED or args.sizes) and not (e == "ray" and n < 100 and not args.sizes)
    ]
    measured: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for _ in range(1 if args.smoke else args.repeat):  # rounds: each row once a round, so they share the load
        for executor, n in runs:
            local = measured.get(("local", n))
            if executor == PEER and not have_peer:
                continue  # it failed in an earlier run: said in the findings
            with tempfile.TemporaryDirectory() as tmp:
                try:
                    row = run_one(
                        n,
                        latency,
                        Path(tmp),
                        executor,
                        round(local[-1]["calls_per_session"]) if local else 5,
                        args.peer_python,
                        args.before,
                    )
                except SystemExit as e:
                    if executor != PEER:
                        raise
                    have_peer = False  # the peer's failure is a finding, not the end of the benchmark
                    peer_note = f"inspect_ai failed at N = {n}: {str(e)[-600:]}"
                    print(peer_note, flush=True)
                    continue
            measured.setdefault((executor, n), []).append(row)
            print(row, flush=True)
    rows = [median_row(measured[run]) for run in runs if run in measured]
    startups = 1 if args.smoke else 3  # a smoke run prints the figure, it does not publish it
    startup = min(startup_s() for _ in range(startups))
    floor = floors(measured)
    floor["new_file_us"] = median_range([new_file_us() for _ in range(3)])
    write = not args.smoke and not args.sizes and not args.executors
    if write:
        write_result(
            "concurrency",
            {
                "rows": rows,
                "latency_s": latency,
                "repeat": args.repeat,
                "startup_s": startup,
                "floors": floor,
                "raw_rows": [r for runs in measured.values() for r in runs],  # every run, for a re-count
                "peer_note": peer_note,
                "command": " ".join(["python bench/concurrency.py", *sys.argv[1:]]),
            },
        )
    render(rows, latency, args.repeat, startup, floor, peer_note, write=write, startups=startups)


# where the local runner's time goes, by area: (label, file suffix, function) whose cumulative time counts
AREAS = (
    ("model calls (the SDK and its guard)", "runner/models/anthropic.py", "create"),
    ("tools (read, glob, grep, memory)", "runner/tools/toolset.py", "run_batch"),
    ("  of which the memory tool", "runner/tools/memory.py", "run"),
    ("  of which grep (its worker processes' pipes)", "runner/tools/grep_pool.py", "search"),
    ("compaction's prepare", "runner/compaction/compactor.py", "prepare"),
    ("the store's turn flushes", "runner/rundir/store.py", "flush"),
    ("a job's last files (final.md, metrics.json)", "runner/agent/session.py", "_write_outputs"),
    ("run.json rewrites", "runner/execution/core.py", "write"),
    ("progress lines", "runner/ui/display.py", "job_finished"),
    ("the final table", "runner/ui/console.py", "print_table"),
)


def profile_local(n: int, latency: float = 2.0) -> dict[str, Any]:
    """One local run of N sessions under cProfile (its own overhead inflates every figure about alike):
    each area's share of the event loop's busy time (the run's, ``cli.execute``, less its waits in
    epoll; the imports before it left out)."""
    import pstats

    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        jobs = tmp / "jobs"
        base_url, emulator = survey_batch(n, latency, tmp, jobs)
        out = tmp / "profile.out"
        try:
            env = {**os.environ, "ANTHROPIC_BASE_URL": base_url, "ANTHROPIC_API_KEY": "bench-key"}
            subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "cProfile",
                    "-o",
                    str(out),
                    "-m",
                    "runner",
                    "run",
                    str(jobs),
                    "--backend",
                    "anthropic",
                    "--concurrency",
                    str(n),
                    "--output-dir",
                    str(tmp / "runs"),
                ],
                env=env,
                cwd=tmp,
                check=True,
                capture_output=True,
            )
        finally:
            emulator.terminate()
            emulator.wait()
        table = pstats.Stats(str(out)).stats  # type: ignore[attr-defined]
    run = max(v[3] for (f, _, name), v in table.items() if f.endswith("runner/cli.py") and name == "execute")
    idle = sum(v[2] for (f, _, name), v in table.items() if "epoll" in name and "poll" in name)
    busy = run - idle  # the run's own time, imports and set-up before it left out
    shares = {}
    for label, suffix, function in AREAS:
        shares[label] = sum(
            v[3] for (f, _, name), v in table.items() if f.endswith(suffix) and name == function
        )
    return {
        "sessions": n,
        "busy_s": round(busy, 2),
        "shares": {k: round(v / busy, 3) for k, v in shares.items()},
    }


def profile_text(profile: dict[str, Any] | None) -> str:
    if not profile:
        return ""
    parts = ", ".join(f"{k.strip()} {v:.0%}" for k, v in profile["shares"].items())
    return (
        f"Where the local runner's time goes at N = {profile['sessions']} (one run under cProfile, the "
        f"share of the event loop's busy time after the imports, {profile['busy_s']:.1f} s under the "
        "profiler; areas nest: "
        f"the memory tool is part of the tools): {parts}."
    )


def cores_busy(row: dict[str, Any]) -> float:
    """Cores runner and emulator kept busy, on average, over the row's wall time."""
    return (row["cpu_s"] + row["emulator_cpu_ms_per_call"] * row["model_calls"] / 1000) / row["wall_s"]


SCALE_TARGET_N = 2000  # the size the ray-within-10%-of-local target is set at


def ray_scale(sizes: tuple[int, ...], repeat: int, write: bool, add: bool = False) -> None:
    """Ray against local on longer sessions (about 20 calls each, 2 s latency): wall, ideal and CPU per
    call at each size, ray's wall over local's per round (median and range). With ``add``, the sizes
    measured here join (or replace) those of the saved results, each size keeping when, at what load
    and in how many rounds it was measured."""
    files = scale_files()
    measured: dict[str, list[dict[str, Any]]] = {}
    for _ in range(repeat):
        for n in sizes:
            for executor in ("local", "ray"):
                with tempfile.TemporaryDirectory() as tmp:
                    row = run_one(n, 2.0, Path(tmp), executor, files=files)
                measured.setdefault(f"{executor} {n}", []).append(row)
                print(
                    {k: row[k] for k in ("executor", "sessions", "model_calls", "wall_s", "cpu_s")},
                    flush=True,
                )
    when = {
        "date": date.today().isoformat(),
        "load_1min": common.START_LOAD,
        "repeat": repeat,
        "commit": common.START_COMMIT,
    }
    saved = {
        "rows": measured,
        "sizes": list(sizes),
        "repeat": repeat,
        "files": len(files),
        "measured": {str(n): when for n in sizes},
        "command": " ".join(["python bench/concurrency.py", *sys.argv[1:]]),
    }
    if add:
        old = json.loads((Path(__file__).parent / "results" / "ray_scale.json").read_text())
        earlier = {
            str(n): old.get("measured", {}).get(
                str(n), {"date": old["date"], "load_1min": old["load_1min"], "repeat": old["repeat"]}
            )
            for n in old["sizes"]
        }
        saved = {
            **saved,
            "rows": {**old["rows"], **measured},
            "sizes": sorted({*old["sizes"], *sizes}),
            "repeat": max(old["repeat"], repeat),
            "measured": {**earlier, **saved["measured"]},
        }
    if write:  # first: a failure below loses no measurement
        write_result("ray_scale", saved)
    render_ray_scale(saved, write)


def render_ray_scale(saved: dict[str, Any], write: bool) -> None:
    measured, sizes, repeat = saved["rows"], saved["sizes"], saved["repeat"]
    lines = [
        "| sessions | calls a session | ideal s | local wall s | ray wall s | ray / local | local CPU ms per "
        "call | ray CPU ms per call (sampled) | ray peak RSS MiB |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    ratios = {}
    for n in sizes:
        local, ray = median_row(measured[f"local {n}"]), median_row(measured[f"ray {n}"])
        ratios[n] = median_range(
            [
                r["wall_s"] / lo["wall_s"]
                for lo, r in zip(measured[f"local {n}"], measured[f"ray {n}"], strict=False)
            ]
        )
        lines.append(
            f"| {n} | {local['calls_per_session']:.1f} | {local['ideal_s']} | {local['wall_s']} | "
            f"{ray['wall_s']} | {ratios[n]['median']:.2f}x ({ratios[n]['min']:.2f}-{ratios[n]['max']:.2f}) | "
            f"{local['cpu_s_per_call'] * 1000:.2f} | {ray['cpu_s_per_call'] * 1000:.2f} | "
            f"{ray['peak_rss_mib']} |"
        )
    big = max(sizes)
    local, ray = median_row(measured[f"local {big}"]), median_row(measured[f"ray {big}"])
    emulator_ms = local["emulator_cpu_ms_per_call"]
    calls = 2000 * local["calls_per_session"]
    ideal = local["calls_per_session"] * 2.0
    bound_local = calls * (local["cpu_s_per_call"] + emulator_ms / 1000) / 2
    bound_ray = calls * (ray["cpu_s_per_call"] + emulator_ms / 1000) / 2
    measured_at = saved.get("measured", {})
    when = (
        " Measured: "
        + "; ".join(
            f"N = {n:,} on {m['date']} at a 1-minute load of {m['load_1min']:.2f}, {m['repeat']} "
            f"round{'s' if m['repeat'] > 1 else ''}"
            for n in sizes
            if (m := measured_at.get(str(n)))
        )
        + " (each size at the code of its own run)."
        if len({(m["date"], m["load_1min"]) for m in measured_at.values()}) > 1
        else ""
    )
    if SCALE_TARGET_N in ratios:
        at = ratios[SCALE_TARGET_N]
        local, ray = (
            median_row(measured[f"local {SCALE_TARGET_N}"]),
            median_row(measured[f"ray {SCALE_TARGET_N}"]),
        )
        rounds = len(measured[f"local {SCALE_TARGET_N}"])
        text = (
            "Ray's wall over local's: "
            + ", ".join(f"N = {n:,}: {r['median']:.2f}x" for n, r in ratios.items())
            + f". Target: within 10% at N = 2,000 sessions of 20 calls: "
            f"{verdict(at['median'], TARGET_RAY_OVER_LOCAL)} at {at['median']:.2f}x ({rounds} "
            f"round{'s' if rounds > 1 else ''}"
            + ("" if rounds > 1 else ": no spread to judge the noise by")
            + "). Over these walls runner and emulator kept "
            + ", ".join(f"{e} {cores_busy(r):.2f}" for e, r in (("local", local), ("ray", ray)))
            + f" cores busy at N = {SCALE_TARGET_N:,}, with the machine's other load on the same 2 cores; "
            f"ray's CPU per call was {ray['cpu_s_per_call'] / local['cpu_s_per_call']:.1f}x local's. "
            "What bounds ray: its CPU per call over all its processes (the driver, Ray's own, the "
            "services actor every model call and summary goes through, the workers)"
            + (
                "; at this size the cores were full: the CPU of runner and emulator together (ray's "
                "over all its processes), not the 2 s latency, set both walls."
                if max(cores_busy(local), cores_busy(ray)) >= 1.5
                else "; the cores were not full over these walls: where that is well under 2, the "
                "machine's other load set the walls as much as either executor."
            )
            + when
        )
        print("\n".join(lines))
        print(text)
        if write:
            replace_section(
                "ray_scale",
                "## 1b. Ray against local at scale\n\n"
                f"N survey sessions over a workspace of {saved['files']} small modules (about 20 calls "
                "each), 2 s latency, the emulator in its own process, `runner run --executor local` and "
                "`--executor ray` (2 workers), in rounds (local then ray at each size). CPU: local's exact "
                "(wait4), ray's sampled from /proc over all its processes.\n\n"
                + "\n".join(lines)
                + "\n\n"
                + text,
                saved.get("command") or " ".join(["python bench/concurrency.py", *sys.argv[1:]]),
            )
        return
    text = (
        "Ray's wall over local's: "
        + ", ".join(f"N = {n}: {r['median']:.2f}x" for n, r in ratios.items())
        + ". Target: within 10% at N = 2,000 sessions of 20 calls: NOT MEASURED (the walls at "
        f"N = {big}, the largest measured, {repeat} round{'s' if repeat > 1 else ''}, would read "
        f"{verdict(ratios[big]['median'], TARGET_RAY_OVER_LOCAL)}, but under this load they measure the "
        "contention for the cores more than either executor). "
        f"N = 2,000 was not run (too long for these 2 shared cores): its CPU alone, at the CPU per call "
        f"measured at N = {big} plus the emulator's {emulator_ms:.1f} ms, keeps 2 cores busy for about "
        f"{bound_local:.0f} s on local and {bound_ray:.0f} s on ray, against an ideal of {ideal:.0f} s"
        + (
            f": both would be CPU-bound, so ray's wall there would be about {bound_ray / bound_local:.1f}x "
            "local's, its CPU per call's ratio, unless that falls."
            if bound_local > ideal
            else "."
        )
        + " Over these walls runner and emulator kept "
        + ", ".join(
            f"{e} {(r['cpu_s'] + r['emulator_cpu_ms_per_call'] * r['model_calls'] / 1000) / r['wall_s']:.2f}"
            for e, r in (("local", local), ("ray", ray))
        )
        + f" cores busy at N = {big}, with the machine's other load (the load average above) on the same 2"
        " cores: where that is well under 2, the other load set the walls, and the ratio of CPU per call "
        f"(ray {ray['cpu_s_per_call'] / local['cpu_s_per_call']:.1f}x local's) says more than the walls'."
        + " What bounds ray: its CPU per call over all its processes (the driver, Ray's own, the services "
        "actor every model call and summary goes through, the workers)."
    )
    print("\n".join(lines))
    print(text)
    if write:
        replace_section(
            "ray_scale",
            "## 1b. Ray against local at scale\n\n"
            f"N survey sessions over a workspace of {saved['files']} small modules (about 20 calls each), "
            "2 s latency, the emulator in its own process, `runner run --executor local` and "
            "`--executor ray` "
            f"(2 workers), each size {repeat} time(s), in rounds. CPU: local's exact (wait4), ray's sampled "
            "from /proc over all its processes.\n\n" + "\n".join(lines) + "\n\n" + text,
            "python bench/concurrency.py --ray-scale" + (f" --repeat {repeat}" if repeat != 3 else ""),
        )


def render(
    rows: list[dict[str, Any]],
    latency: float,
    repeat: int,
    startup: float,
    floor: dict[str, Any],
    peer_note: str,
    write: bool,
    command: str | None = None,
    startups: int = 3,
) -> None:
    """Print the table; with ``write``, put it and the findings in BENCHMARKS.md."""
    net = floor.get("net_ms_per_call", {})
    lines = [
        "| executor | sessions | model calls | ideal s | wall s | wall / ideal | CPU ms per call "
        "| CPU ms per call net of start-up | peak RSS MiB (processes) | emulator CPU ms per call |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        d = net.get(r["executor"]) if r["sessions"] == PAIRED[1] else None
        lines.append(
            f"| {r['executor']} | {r['sessions']} | {r['model_calls']} | {r['ideal_s']} | {r['wall_s']} | "
            f"{r['wall_over_ideal']:.2f}x ({spread(r, 'wall_over_ideal', '{:.2f}')}) | "
            f"{r['cpu_s_per_call'] * 1000:.2f} ({spread(r, 'cpu_s_per_call', '{:.2f}', 1000)})"
            f"{'' if r.get('cpu_exact', True) else ' sampled'} | "
            + (f"{d['median']:.2f} ({d['min']:.2f}-{d['max']:.2f})" if d else "")
            + f" | {r['peak_rss_mib']} ({r['processes']}) | {r['emulator_cpu_ms_per_call']:.1f} |"
        )
    if NOT_INSTALLED in peer_note and not any(r["executor"] == PEER for r in rows):
        lines.append(f"| {PEER} | {', '.join(map(str, PAIRED))} | {NOT_INSTALLED} |  |  |  |  |  |  |  |")
    print("\n".join(lines))
    print(findings(rows, startup, floor, peer_note, startups))
    if write:
        replace_section(
            "concurrency",
            (
                "## 1. Concurrency\n\n"
                "N sessions of one short survey each (model calls / N calls a session), emulator in its own "
                f"process with {latency:g} s latency per call, runner as a `runner run` subprocess with "
                "concurrency = N, on the local executor and on ray (a local Ray instance started by the "
                "runner, 2 workers). Beside them, in the same rounds (bench/sdk_floor.py): the floors "
                f"`{FLOOR}` (the runner's model client alone making the same calls, every tool call "
                f"answered with a fixed line, nothing written) and `{RAW}` (a bare aiohttp client posting "
                f"the same bodies), and the peer `{PEER}` (inspect_ai 0.3.285 as shipped: N samples of its "
                "`use_tools` + `generate()` loop, `max_connections` = `max_samples` = N, our glob/read/grep "
                "as its tools, its log written; pointed at the emulator by ANTHROPIC_BASE_URL only; its "
                "calls a session are its loop's). Ideal = calls per session x latency. CPU is exact "
                "(user + system from wait4, the process and its reaped children) for every row but ray's, "
                "sampled from /proc every 0.2 s over all its processes; peak RSS is sampled. CPU net of "
                "start-up = (CPU at N = 500 - CPU at N = 100) / (calls at 500 - calls at 100), per round. "
                f"Each row ran {repeat} times, in rounds (every row once a round); the table shows the run "
                "with the median wall time and, in brackets, the range over the runs; net figures are "
                "medians over the rounds with their range. The emulator shares the 2 cores: its CPU per "
                "call is in the last column.\n\n"
                f"Targets at N = 500: the runner's own work (local minus `{FLOOR}`, net of start-up) <= "
                f"{TARGET_OWN_MS:g} ms per call; local's wall <= {TARGET_WALL_OVER_FLOOR:g}x `{FLOOR}`'s; "
                "ray within 10% of local at N = 2,000 sessions of 20 calls; peak RSS <= 1.5 GiB.\n\n"
                + "\n".join(lines)
                + "\n\n"
                + findings(rows, startup, floor, peer_note)
            ),
            command or " ".join(["python bench/concurrency.py", *sys.argv[1:]]),
        )


if __name__ == "__main__":
    main()
