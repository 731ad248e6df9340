"""Benchmark: a worker killed mid-run on the ``ray`` executor.

200 survey jobs (the concurrency benchmark's) as a ``runner run --executor ray`` subprocess with 2
workers against the emulator in its own process; once every job has started, one worker process
gets SIGKILL. Reported: whether every job succeeded, how many jobs moved to another worker, and
how many model calls were made twice: recorded turns dropped after the last complete turn (the
``turns_rerun`` of the ``worker_lost`` events) and, from the emulator's count, every answered call
no job recorded (those in flight on the dead worker).

    python bench/ray_fault.py            # 200 jobs, latency 0.5 s; writes bench/results/ray_fault.json
    python bench/ray_fault.py --smoke    # 10 jobs, latency 0.2 s; writes nothing
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import replace_section, write_result  # noqa: E402
from concurrency import stats, survey_batch  # noqa: E402


def run(n: int, latency: float, tmp: Path) -> dict[str, Any]:
    jobs = tmp / "jobs"
    base_url, emulator = survey_batch(n, latency, tmp, jobs)
    killed = None
    try:
        env = {**os.environ, "ANTHROPIC_BASE_URL": base_url, "ANTHROPIC_API_KEY": "bench-key"}
        started = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "-m", "runner", "run", str(jobs), "--backend", "anthropic",
                                 "--concurrency", str(n), "--output-dir", str(tmp / "runs"), "--executor", "ray"],
                                env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=tmp)
        while proc.poll() is None and killed is None:
            time.sleep(0.1)
            transcripts = [t for t in tmp.glob("runs/*/*/transcript.jsonl") if not t.parent.parent.is_symlink()]
            if len(transcripts) < n:
                continue
            document = json.loads(next(tmp.glob("runs/*/run.json")).read_text())
            killed = document["workers"][0]["pid"]
            os.kill(killed, signal.SIGKILL)
        _, stderr = proc.communicate()
        wall = time.perf_counter() - started
        counted = stats(base_url)
    finally:
        emulator.terminate()
        emulator.wait()
    [run_dir] = [p for p in (tmp / "runs").iterdir() if not p.is_symlink()]
    document = json.loads((run_dir / "run.json").read_text())
    lost = [e for job in run_dir.iterdir() if job.is_dir()
            for e in map(json.loads, (job / "events.jsonl").read_text().splitlines() if (job / "events.jsonl").exists()
                         else []) if e.get("stage") == "worker_lost"]
    return {"jobs": n, "latency_s": latency, "killed_pid": killed, "exit_code": proc.returncode,
            "succeeded": document["totals"]["succeeded"], "turns": document["totals"]["turns"],
            "jobs_moved": len(lost), "turns_rerun": sum(e["turns_rerun"] for e in lost),
            # every call the emulator answered that no job recorded: in flight on the dead worker, or dropped
            "calls_made_twice": counted["outcomes"].get("ok", 0) - counted["summary_requests"]
            - document["totals"]["turns"],
            # requests the dead worker had in flight: the emulator saw their client leave; each is sent again
            "calls_cut_off": counted["outcomes"].get("disconnected", 0) + counted["outcomes"].get("dropped", 0),
            "restarted_from_scratch": sum(e["continue_from_message"] == 0 for e in lost), "wall_s": round(wall, 2),
            "stderr_tail": stderr[-500:] if proc.returncode else ""}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args()
    n, latency = (10, 0.2) if args.smoke else (200, 0.5)
    with tempfile.TemporaryDirectory() as tmp:
        row = run(n, latency, Path(tmp))
    print(row, flush=True)
    if row["killed_pid"] is None:
        raise SystemExit("the run ended before a worker could be killed")
    line = (f"| {row['jobs']} | {row['succeeded']} | {row['jobs_moved']} | {row['turns_rerun']} | "
            f"{row['calls_cut_off']} | {row['calls_made_twice']} of {row['turns']} | "
            f"{row['restarted_from_scratch']} | {row['wall_s']} |")
    print(line)
    if not args.smoke:
        write_result("ray_fault", row)
        replace_section("ray_fault", (
            "## A Ray worker killed mid-run\n\n"
            f"{n} survey jobs on `--executor ray` (2 workers, emulator latency {latency:g} s); once every job has "
            "started, one worker process gets SIGKILL. Its jobs continue on the other worker (and a replacement) "
            "from their last complete turn. Turns dropped: recorded replies after the last complete turn, "
            "run again; calls cut off: requests in flight on the dead worker (the emulator saw their client "
            "leave), sent again from another; calls answered twice: every call the emulator answered that no "
            "job recorded.\n\nTarget: every job succeeds.\n\n"
            "| jobs | succeeded | jobs moved | turns dropped | calls cut off | calls answered twice | restarted from scratch "
            "| wall s |\n|---:|---:|---:|---:|---:|---:|---:|---:|\n" + line), "python bench/ray_fault.py")


if __name__ == "__main__":
    main()
