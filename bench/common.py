"""Shared by the benchmarks: machine facts, result files, and sections of BENCHMARKS.md."""

from __future__ import annotations

import json
import os
import platform
import re
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
BENCHMARKS = ROOT / "BENCHMARKS.md"


def machine() -> str:
    mem_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return f"{os.cpu_count()} cores, {mem_gib:.0f} GiB, Python {platform.python_version()}, {platform.machine()}"


def write_result(name: str, data: dict) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps({"date": date.today().isoformat(), "machine": machine(), **data}, indent=2) + "\n")
    return path


def replace_section(name: str, body: str, command: str) -> None:
    """Put ``body`` between ``<!-- name:start -->`` and ``<!-- name:end -->`` in BENCHMARKS.md."""
    start, end = f"<!-- {name}:start -->", f"<!-- {name}:end -->"
    text = BENCHMARKS.read_text() if BENCHMARKS.exists() else "# Benchmarks\n"
    block = (f"{start}\n_{date.today().isoformat()}, {machine()}; command: `{command}`_\n\n{body.rstrip()}\n{end}")
    pattern = re.compile(re.escape(start) + ".*?" + re.escape(end), re.S)
    text = pattern.sub(lambda _: block, text) if pattern.search(text) else text.rstrip() + "\n\n" + block + "\n"
    BENCHMARKS.write_text(text)
