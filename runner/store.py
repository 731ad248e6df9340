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

import errno
import hashlib
import itertools
import json
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import aiofiles
import aiofiles.os
import anyio

from .rundocs import LATEST
from .rundocs import SUMMARIES as SUMMARIES
from .rundocs import TOOL_RESULTS as TOOL_RESULTS

_SAFE = re.compile(r"[^A-Za-z0-9_-]")
_TMP_IDS = itertools.count()


def safe_name(raw: str) -> str:
    """A file stem for ``raw`` that is unique per ``raw``, short, and has no path separators."""
    cleaned = _SAFE.sub("_", raw)[:64]
    if cleaned == raw and cleaned:
        return cleaned
    digest = hashlib.sha256(raw.encode("utf-8", "surrogatepass")).hexdigest()[:12]
    return f"{cleaned}-{digest}" if cleaned.strip("_") else f"id-{digest}"


def dumps(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False)


def write_atomic_sync(path: Path, text: str) -> None:
    """The blocking twin of :func:`write_atomic`, for code that runs before the event loop."""
    # a temporary name of its own per write: two writes of one file never share (and tear) one
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{next(_TMP_IDS)}.tmp")
    try:
        with open(tmp, "w", encoding="utf-8", errors="surrogatepass", newline="") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:  # a full disk, say: no temporary file is left behind
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _same_text(path: Path, content: str) -> bool:
    """Whether the file at ``path`` holds exactly ``content``."""
    if not os.path.exists(path):  # the usual case; cheaper than a failed open
        return False
    try:
        with open(path, encoding="utf-8", errors="surrogatepass", newline="") as f:
            return f.read() == content
    except (OSError, UnicodeDecodeError):
        return False


def _save_sync(outputs: list[tuple[Path, str]], appends: list[tuple[Path, str]]) -> None:
    for path, content in outputs:  # whole files first: an appended record may name them
        if not _same_text(path, content):
            write_atomic_sync(path, content)
    for path, data in appends:
        with open(path, "a", encoding="utf-8") as f:
            f.write(data)


def _overwrite_sync(path: Path, text: str) -> None:
    data = text.encode("utf-8", "surrogatepass")
    with open(path, "r+b") as f:
        if len(data) > os.fstat(f.fileno()).st_blocks * 512:  # it would need new blocks, and could tear
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        f.write(data)
        f.truncate()


# Each file operation is one hop to aiofiles' executor, not one per open/write/flush/close/replace:
# a hop costs 50-200 µs of thread hand-off, which dominated the Compactor's time (bench/compactor.py).
_write_atomic = aiofiles.os.wrap(write_atomic_sync)
_save_in_thread = aiofiles.os.wrap(_save_sync)
_overwrite = aiofiles.os.wrap(_overwrite_sync)


async def _shielded(operation: Any, *args: Any) -> None:
    """Await a file operation running in a worker thread. A thread cannot be stopped, so a cancelled
    caller still waits for its operation to land before the cancellation goes on: the next write of
    the same file (say, the final metrics.json after a cancelled checkpoint) cannot overtake it."""
    with anyio.CancelScope(shield=True):
        await operation(*args)


async def overwrite(path: Path, text: str) -> None:
    """Rewrite ``path`` over the blocks it already has; ENOSPC when ``text`` would need more."""
    await _shielded(_overwrite, path, text)


async def write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to a temporary name next to ``path``, then rename it over ``path``."""
    await _shielded(_write_atomic, path, text)


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
        self._names: dict[str, str] = {}  # id + content hash -> reserved path
        self._owners: dict[str, str] = {}  # reserved path -> its tool_use id (kept: reserve is O(1))
        self._root: Path | None = None

    async def open(self) -> None:
        for sub in ("", TOOL_RESULTS, SUMMARIES):
            await aiofiles.os.makedirs(self.dir / sub, exist_ok=True)
        self._root = self.dir.resolve()  # resolve() runs per persisted output; the root once

    async def write_json(self, name: str, obj: Any, pretty: bool = True) -> None:
        await write_atomic(self.dir / name, json.dumps(obj, ensure_ascii=False, indent=2 if pretty else None) + "\n")

    async def overwrite_json(self, name: str, obj: Any) -> None:
        """Rewrite an existing file over its own blocks (no temporary file, so no new space): only for
        a full disk, where the atomic write cannot be done. A crash in the middle could tear it."""
        await overwrite(self.dir / name, json.dumps(obj, ensure_ascii=False) + "\n")

    async def write_text(self, name: str, text: str) -> None:
        await write_atomic(self.dir / name, text)

    async def append_jsonl(self, name: str, records: list[Any]) -> None:
        await self.save(appends={name: records})

    async def append_lines(self, name: str, lines: list[str]) -> None:
        """Append records already serialized by :func:`dumps` (one JSON text each, no newline) to a JSONL
        file, in one write and one hop: a caller that also needs each record's size serializes it once."""
        if lines:
            await _shielded(_save_in_thread, [], [(self.dir / name, "".join(line + "\n" for line in lines))])

    async def save(self, outputs: Sequence[tuple[str, str]] = (), appends: dict[str, list[Any]] | None = None) -> None:
        """Persisted outputs ``(rel, content)``, each written whole (atomic) unless the same bytes are
        already there, then JSONL ``records`` appended to their files; in that order, in one hop to
        aiofiles' executor."""
        items = [(self._output_path(rel), content) for rel, content in outputs]
        lines = [(self.dir / name, "".join(dumps(r) + "\n" for r in records))
                 for name, records in (appends or {}).items() if records]
        if items or lines:
            await _shielded(_save_in_thread, items, lines)

    def _output_path(self, rel: str) -> Path:
        """Where output ``rel`` is written. A name :meth:`reserve` made is one sanitized file name in
        tool-results/, so it needs no realpath walk (tens of µs per output), only a check that
        tool-results/ is still a real directory; the rename never follows a symlink at the name.
        Any other name goes through :meth:`resolve`."""
        if rel in self._owners and self._root is not None and not os.path.islink(self._root / TOOL_RESULTS):
            return self._root / rel
        return self.resolve(rel)

    def reserve(self, tool_use_id: str, content: str) -> str:
        """The path (relative to the job directory) that ``content`` of ``tool_use_id`` is saved under.

        Deterministic: the same id and content always get the same path. A different id, or the same
        id with different content, never shares a path, even when ids sanitize alike.
        """
        key = f"{tool_use_id}\0{hashlib.sha256(content.encode('utf-8', 'surrogatepass')).hexdigest()}"
        if key in self._names:
            return self._names[key]
        stem = safe_name(tool_use_id)
        rel = f"{TOOL_RESULTS}/{stem}.txt"
        n = 1
        while rel in self._owners or ((self.dir / rel).exists() and not self._same(rel, content)):
            n += 1
            rel = f"{TOOL_RESULTS}/{stem}.{n}.txt"
        self._names[key] = rel
        self._owners[rel] = tool_use_id
        return rel

    def reserved_for(self, tool_use_id: str, rel: str) -> bool:
        """Whether ``rel`` was reserved here for an output of ``tool_use_id`` (a path named inside a
        tool's output proves nothing: the output may merely look like a placeholder)."""
        return self._owners.get(rel) == tool_use_id

    async def write_output(self, rel: str, content: str) -> None:
        """Save a persisted output whole (atomic), unless the same bytes are already there."""
        await self.save([(rel, content)])

    async def persist_output(self, tool_use_id: str, content: str) -> str:
        rel = self.reserve(tool_use_id, content)
        await self.write_output(rel, content)
        return rel

    def _same(self, rel: str, content: str) -> bool:
        return _same_text(self.dir / rel, content)

    async def write_summary(self, text: str) -> str:
        existing = len(list((self.dir / SUMMARIES).glob("*.md")))
        rel = f"{SUMMARIES}/{existing + 1:04d}.md"
        await write_atomic(self.dir / rel, text)
        return rel

    def resolve(self, rel: str) -> Path:
        """The absolute path of ``rel`` inside the job directory; ValueError if it leaves it."""
        root = self._root or self.dir.resolve()
        target = (root / rel).resolve()
        if target != root and root not in target.parents:
            raise ValueError(f"{rel}: outside the job directory")
        return target


def link_latest(run_dir: Path) -> None:
    """Point ``<output_dir>/latest`` at ``run_dir`` (a relative symlink, replaced atomically). Best effort:
    a file system without symlinks leaves no link, and the run goes on."""
    link = run_dir.parent / LATEST
    tmp = run_dir.parent / f".{LATEST}.{os.getpid()}.{next(_TMP_IDS)}"
    try:
        os.symlink(run_dir.name, tmp)
        os.replace(tmp, link)
    except OSError:
        try:
            os.unlink(tmp)
        except OSError:
            pass
