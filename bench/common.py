"""Shared by the benchmarks: machine facts, result files, and sections of BENCHMARKS.md."""

from __future__ import annotations

import json
import os
import platform
import re
import subprocess
from datetime import date
from pathlib import Path

from runner.offline.memory_survey import TODO_HEAD

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
BENCHMARKS = ROOT / "BENCHMARKS.md"


# the 1-minute load average when this benchmark process started (each benchmark is its own process)
START_LOAD = os.getloadavg()[0]


def source_commit() -> str:
    """The commit of the code measured, with ``+changes`` when the runner or the benchmarks differ from it."""

    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=30)
        return done.stdout.strip() if done.returncode == 0 else ""

    head = git("rev-parse", "--short=10", "HEAD")
    if not head:
        return "no git checkout"
    return head + ("+changes" if git("status", "--porcelain", "--", "runner", "bench/*.py") else "")


# the code this benchmark process measures (set back from saved results when a table is only re-rendered)
START_COMMIT = source_commit()
START_DATE = date.today().isoformat()
MEASURED_ON: str | None = None  # the machine of re-rendered results (None: this one)


def measured_at(saved: dict) -> None:
    """Re-rendering saved results: stamp the table with the load and commit of the runs, not of now."""
    global START_LOAD, START_COMMIT, START_DATE, MEASURED_ON
    START_LOAD = saved["load_1min"]
    START_COMMIT = saved.get("commit", "not recorded")
    START_DATE = saved.get("date", START_DATE)
    MEASURED_ON = saved.get("machine")


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo (``platform.processor()`` is often empty on Linux)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine() -> str:
    """Cores, RAM, kernel, CPU model and Python: what a table's numbers were measured on."""
    mem_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return (
        f"{os.cpu_count()} cores, {mem_gib:.0f} GiB RAM, Linux {platform.release()}, {cpu_model()}, "
        f"Python {platform.python_version()}"
    )


def load_note(load: float | None = None) -> str:
    """The 1-minute load average at the start, next to the core count, so a reader can judge the noise."""
    value = START_LOAD if load is None else load
    return f"1-minute load average at start {value:.2f} on {os.cpu_count()} cores"


def write_result(name: str, data: dict) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    path.write_text(
        json.dumps(
            {
                "date": date.today().isoformat(),
                "machine": machine(),
                "load_1min": START_LOAD,
                "commit": START_COMMIT,
                **data,
            },
            indent=2,
        )
        + "\n"
    )
    return path


def replace_section(name: str, body: str, command: str, *, load: str | None = None) -> None:
    """Put ``body`` between ``<!-- name:start -->`` and ``<!-- name:end -->`` in BENCHMARKS.md (``load``:
    what to say of the load instead of this process's start, when the body says it of each run)."""
    start, end = f"<!-- {name}:start -->", f"<!-- {name}:end -->"
    text = BENCHMARKS.read_text() if BENCHMARKS.exists() else "# Benchmarks\n"
    block = (
        f"{start}\n_{START_DATE}, {MEASURED_ON or machine()}; {load or load_note()}; code at {START_COMMIT}; "
        f"command: `{command}`_\n\n"
        f"{body.rstrip()}\n{end}"
    )
    pattern = re.compile(re.escape(start) + ".*?" + re.escape(end), re.S)
    text = (
        pattern.sub(lambda _: block, text) if pattern.search(text) else text.rstrip() + "\n\n" + block + "\n"
    )
    BENCHMARKS.write_text(text)


def todo_counts(report: str, truth: int) -> dict:
    """What a survey's report says of its TODO lines, beside the tree's (``truth``)."""
    todo = TODO_HEAD.search(report)
    return {
        "todo_reported": int(todo[1]) if todo else 0,
        "todo_cut": bool(todo and todo[3]),
        "todo_truth": truth,
    }


def todo_cell(run: dict) -> str:
    """The TODO lines a report gives against the tree's (its search cut, when it says so)."""
    if "todo_truth" not in run:
        return "-"
    return f"{run['todo_reported']:,} of {run['todo_truth']:,}" + (" (search cut)" if run["todo_cut"] else "")


TOKEN_FIELDS = (
    "turns",
    "input_tokens",
    "output_tokens",
    "cache_creation_input_tokens",
    "cache_read_input_tokens",
    "summarizer_tokens",
    "cost_usd",
)


def repeat_note(
    name: str,
    rows: list[dict],
    *,
    decided_by: str = "the policy and the emulator",
    fields: tuple[str, ...] = TOKEN_FIELDS,
) -> str:
    """How a one-round table of token counts compares with its previous saved run (read before this run
    overwrites it): the rounds and spread of a deterministic table are its reruns."""
    head = (
        f"One round: {decided_by} decide every token, so a table of tokens has no spread within a run; "
        "a rerun is its check."
    )
    try:
        old = json.loads((RESULTS / f"{name}.json").read_text())
    except (OSError, ValueError):
        return head + " No earlier saved run to compare with."
    before = {row["strategy"]: row for row in old.get("rows", [])}
    same, differ = [], []
    for row in rows:
        was = before.get(row["strategy"])
        if was is None:
            continue
        changed = [f"{f} {was.get(f)} -> {row.get(f)}" for f in fields if was.get(f) != row.get(f)]
        if changed:
            differ.append(f"{row['strategy']} ({', '.join(changed)})")
        else:
            same.append(row)
    when = f"{old.get('date')}, code at {old.get('commit', 'not recorded')}, {old.get('machine')}"
    text = f"{head} Against the previous saved run ({when}): {len(same)} of {len(same) + len(differ)} rows"
    text += " the same in every token count and cost" + (f"; differ: {'; '.join(differ)}." if differ else ".")
    return text
