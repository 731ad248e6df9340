"""Per-job persistence: one directory per job, every write through aiofiles.

Guarantees:
- Whole files (``metrics.json``, ``job.json``, ``final.md``, persisted outputs, summaries) are
  written to a temporary name in the same directory and renamed, so a reader (or a run killed
  with SIGKILL) sees the old file or the new one, never a torn one.
- JSONL files are append-only; each record is one ``write`` of one line. A half-written last
  line (the process was killed mid-write) is skipped and reported by :func:`read_jsonl`.
- File names made from ids the model or API chose are sanitized and can never leave the job
  directory, nor overwrite another id's output.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path
from typing import Any

import aiofiles
import aiofiles.os

TOOL_RESULTS = "tool-results"
SUMMARIES = "summaries"
_SAFE = re.compile(r"[^A-Za-z0-9_-]")


def safe_name(raw: str) -> str:
    """A file stem for ``raw`` that is unique per ``raw``, short, and has no path separators."""
    cleaned = _SAFE.sub("_", raw)[:64]
    if cleaned == raw and cleaned:
        return cleaned
    digest = hashlib.sha256(raw.encode("utf-8", "surrogatepass")).hexdigest()[:12]
    return f"{cleaned}-{digest}" if cleaned.strip("_") else f"id-{digest}"


def dumps(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False)


async def write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    async with aiofiles.open(tmp, "w", encoding="utf-8", errors="surrogatepass", newline="") as f:
        await f.write(text)
        await f.flush()
    await aiofiles.os.replace(tmp, path)


def write_atomic_sync(path: Path, text: str) -> None:
    """The blocking twin of :func:`write_atomic`, for code that runs before the event loop."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w", encoding="utf-8", errors="surrogatepass", newline="") as f:
        f.write(text)
    os.replace(tmp, path)


def read_jsonl(path: Path) -> tuple[list[Any], list[str]]:
    """Records of a JSONL file, and a warning for each line that is not whole JSON."""
    records: list[Any] = []
    warnings: list[str] = []
    if not path.exists():
        return records, warnings
    lines = path.read_text(encoding="utf-8", errors="replace").split("\n")
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            last = number >= len(lines) - 1
            what = "half-written last line" if last else "unreadable line"
            warnings.append(f"{path}:{number}: {what} skipped")
    return records, warnings


class JobStore:
    """The files of one job under ``runs/<run-id>/<job>/``."""

    def __init__(self, directory: Path):
        self.dir = directory
        self._names: dict[str, str] = {}

    async def open(self) -> None:
        for sub in ("", TOOL_RESULTS, SUMMARIES):
            await aiofiles.os.makedirs(self.dir / sub, exist_ok=True)

    async def write_json(self, name: str, obj: Any) -> None:
        await write_atomic(self.dir / name, json.dumps(obj, ensure_ascii=False, indent=2) + "\n")

    async def write_text(self, name: str, text: str) -> None:
        await write_atomic(self.dir / name, text)

    async def append_jsonl(self, name: str, records: list[Any]) -> None:
        if not records:
            return
        data = "".join(dumps(r) + "\n" for r in records)
        async with aiofiles.open(self.dir / name, "a", encoding="utf-8") as f:
            await f.write(data)

    def reserve(self, tool_use_id: str, content: str) -> str:
        """The path (relative to the job directory) that ``content`` of ``tool_use_id`` is saved under.

        Deterministic: the same id and content always get the same path. A different id, or the same
        id with different content, never shares a path, even when ids sanitize alike.
        """
        key = f"{tool_use_id}\0{hashlib.sha256(content.encode('utf-8', 'surrogatepass')).hexdigest()}"
        if key in self._names:
            return self._names[key]
        stem = safe_name(tool_use_id)
        taken = set(self._names.values())
        rel = f"{TOOL_RESULTS}/{stem}.txt"
        n = 1
        while rel in taken or ((self.dir / rel).exists() and not self._same(rel, content)):
            n += 1
            rel = f"{TOOL_RESULTS}/{stem}.{n}.txt"
        self._names[key] = rel
        return rel

    async def write_output(self, rel: str, content: str) -> None:
        """Save a persisted output whole (atomic), unless the same bytes are already there."""
        target = self.resolve(rel)
        if not target.exists() or not self._same(rel, content):
            await write_atomic(target, content)

    async def persist_output(self, tool_use_id: str, content: str) -> str:
        rel = self.reserve(tool_use_id, content)
        await self.write_output(rel, content)
        return rel

    def _same(self, rel: str, content: str) -> bool:
        try:
            with open(self.dir / rel, encoding="utf-8", errors="surrogatepass", newline="") as f:
                return f.read() == content
        except (OSError, UnicodeDecodeError):
            return False

    async def write_summary(self, text: str) -> str:
        existing = len(list((self.dir / SUMMARIES).glob("*.md")))
        rel = f"{SUMMARIES}/{existing + 1:04d}.md"
        await write_atomic(self.dir / rel, text)
        return rel

    def resolve(self, rel: str) -> Path:
        """The absolute path of ``rel`` inside the job directory; ValueError if it leaves it."""
        root = self.dir.resolve()
        target = (root / rel).resolve()
        if target != root and root not in target.parents:
            raise ValueError(f"{rel}: outside the job directory")
        return target
