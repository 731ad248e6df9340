"""Per-job persistence: one directory per job; a turn's small flush on the loop, the rest through aiofiles.

Guarantees:
- Whole files (``metrics.json``, ``job.json``, ``final.md``, persisted outputs, summaries) are
  written to a temporary name in the same directory and renamed, so a reader (or a run killed
  with SIGKILL) sees the old file or the new one, never a torn one. The metrics checkpoint, rewritten
  up to once a second, swaps names with a spare file instead of making a new file each time
  (:func:`swap_in_sync`); the job's last write of it is a fresh file again, and removes the spare.
- JSONL files are append-only; each record is one whole line, and the lines a flush adds to a file
  go in one ``write``. A half-written last line (the process was killed mid-write) is skipped and
  reported by :func:`read_jsonl`.
- File names made from ids the model or API chose are sanitized and can never leave the job
  directory, nor overwrite another id's output.
- A turn's writes are queued (:meth:`JobStore.queue`) and written by one :meth:`JobStore.flush`: on the
  event loop itself when they make no new file (lines appended, the checkpoint swapped in: no
  persisted output or summary), are small (at most :data:`INLINE_FLUSH_CHARS` in all) and the job
  directory is on a local file system (:func:`local_disk`), else one hop to aiofiles' executor. Both
  ways run the same writes in the same order, so what a crash leaves is the same. A flush writes
  persisted outputs first, then the JSONL lines (each file's lines in one write, files in the order they
  were first queued), then whole files such as the metrics checkpoint; so a line on disk never names an
  output that is not. The owner flushes before anything it queued is shown to a model; a crash loses at
  most what was queued since.
- A disk quota per job (:attr:`JobStore.max_bytes`, the job's ``max_job_bytes``): the store keeps a
  running total of the bytes in its directory (seeded from what is there when it opens: a resumed
  job's files count, at any depth, walked without recursion by :func:`runner.rundir.trees.walk`)
  and refuses, before writing anything, a write that would pass the quota, with
  :class:`DiskQuotaExceeded`; from then on every write is refused (the job must end: a transcript
  with a hole in it would not reload), except the job's final documents (``final.md``,
  ``metrics.json``), which are always written.
- No file I/O on the event loop but that small flush (a few system calls into the page cache: 37-50 µs
  of CPU against 95-117 µs through a thread hop, at about the same wall time, bench/store_hops.py); a
  whole file (a new inode: an output, a summary, ``final.md``) goes to a thread, where it takes less
  wall time than on a loop that then cannot run (BENCHMARKS.md, "Inline file work"). What is already
  in ``tool-results/`` and ``summaries/`` is learned once, off the loop, by :meth:`JobStore.open`;
  naming an output or a summary touches no file. A network or FUSE mount, which can hang, is always
  written from a worker thread. Files that appear there later by other hands are not seen (a job
  directory has one writer).
"""

from __future__ import annotations

import errno
import functools
import hashlib
import itertools
import json
import os
import re
from collections.abc import Awaitable, Callable, Sequence
from contextlib import suppress
from pathlib import Path
from typing import Any, TypeVar

import aiofiles
import aiofiles.os
import anyio
import anyio.to_thread

from .docs import (
    FINAL,
    LATEST,
    METRICS,
    SPARE_SUFFIX,
    SUMMARIES,
    SUMMARY_SUFFIX,
    TOOL_RESULTS,
    output_path,
    summary_path,
)
from .trees import walk

T = TypeVar("T")
_SAFE = re.compile(r"[^A-Za-z0-9_-]")
# A flush of at most this many characters to a local disk is written on the event loop (see the Guarantees)
INLINE_FLUSH_CHARS = 64 * 1024
# File systems on which a small write lands in the page cache and cannot hang (not network, not FUSE)
LOCAL_FILE_SYSTEMS = frozenset(
    {"ext2", "ext3", "ext4", "xfs", "btrfs", "tmpfs", "ramfs", "overlay", "zfs", "f2fs", "bcachefs"}
)
_SURROGATE = re.compile("[\ud800-\udfff]")
_TMP_IDS = itertools.count()


def safe_name(raw: str) -> str:
    """A file stem for ``raw`` that is unique per ``raw``, short, and has no path separators."""
    cleaned = _SAFE.sub("_", raw)[:64]
    if cleaned == raw and cleaned:
        return cleaned
    digest = hashlib.sha256(raw.encode("utf-8", "surrogatepass")).hexdigest()[:12]
    return f"{cleaned}-{digest}" if cleaned.strip("_") else f"id-{digest}"


# the longest tool_use id a call may have (a request carries a fresh one in place of a longer one):
# the job-long records keep every id, so a hostile server's megabyte ids are not run, nor kept
MAX_ID_CHARS = 200


def id_key(tool_use_id: str) -> str:
    """How the job-long records hold ``tool_use_id``: itself, or, past :data:`MAX_ID_CHARS` (an id no
    request carries: a hostile server's), its sha256, so a record never holds a megabyte."""
    if len(tool_use_id) <= MAX_ID_CHARS:
        return tool_use_id
    return "sha256:" + hashlib.sha256(tool_use_id.encode("utf-8", "surrogatepass")).hexdigest()


def dumps(obj: Any) -> str:
    """One JSON text; a lone surrogate (which UTF-8 cannot encode) goes out as its ``\\udXXX`` escape,
    so the line is written and reads back as the same string."""
    text = json.dumps(obj, ensure_ascii=False)
    return text if text.isascii() or not _SURROGATE.search(text) else json.dumps(obj)


@functools.cache
def _mounts() -> tuple[dict[str, str], list[tuple[str, str]]]:
    """This process's mounts, read once from ``/proc/self/mountinfo``: file system type by device
    (``major:minor``), and (mount point, type) pairs."""
    by_device: dict[str, str] = {}
    points: list[tuple[str, str]] = []
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return by_device, points
    for line in lines:
        fields = line.split()
        if "-" not in fields or len(fields) < 5:
            continue
        kind = fields[fields.index("-") + 1]
        by_device.setdefault(fields[2], kind)
        points.append((fields[4].encode().decode("unicode_escape"), kind))  # octal escapes: "\040"
    return by_device, points


@functools.lru_cache(maxsize=4096)
def local_disk(path: str) -> bool:
    """Whether the directory ``path`` lies on a local file system (:data:`LOCAL_FILE_SYSTEMS`): the type
    of the mount its device is (one ``stat``), else of the mount with the longest mount point above it;
    False when that cannot be told. The mount table is read once per process (again for a device it
    does not name); the answer is kept per path."""
    by_device, points = _mounts()
    try:
        device = os.stat(path).st_dev
    except OSError:
        return False
    name = f"{os.major(device)}:{os.minor(device)}"
    if name not in by_device:  # mounted since the table was read? Read it again
        _mounts.cache_clear()
        by_device, points = _mounts()
    kind = by_device.get(name)
    if kind is None:  # a device no mount names (btrfs subvolumes): by the path
        real, best = os.path.realpath(path), ""
        for point, what in points:
            if (real == point or real.startswith(point.rstrip("/") + "/")) and len(point) >= len(best):
                best, kind = point, what
    return kind in LOCAL_FILE_SYSTEMS


def _write_file(path: Path, data: bytes, mode: int) -> None:
    """Write ``data`` to ``path`` (created if missing) opened with ``mode`` (``os.O_TRUNC`` or
    ``os.O_APPEND``), with bare system calls: open, write, close. A buffered text file would add an
    fstat, an isatty ioctl and seeks per open, each a release of the GIL the event loop then waits on."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC | mode, 0o666)
    try:
        _write_all(fd, data)
    finally:
        os.close(fd)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def write_atomic_sync(path: Path, text: str) -> None:
    """The blocking twin of :func:`write_atomic`, for code that runs before the event loop."""
    # a temporary name of its own per write: two writes of one file never share (and tear) one
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{next(_TMP_IDS)}.tmp")
    try:
        _write_file(tmp, text.encode("utf-8", "surrogatepass"), os.O_TRUNC)
        os.replace(tmp, path)
    except BaseException:  # a full disk, say: no temporary file is left behind
        _unlink_quietly(tmp)
        raise


RENAME_EXCHANGE = 2  # renameat2(2) flag: swap two names in one step
_AT_FDCWD = -100
_CANNOT_EXCHANGE = {errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.EXDEV}  # this system or file system


@functools.cache
def _renameat2() -> Any:
    """libc's ``renameat2``, or None where there is none (not Linux, an old libc); looked up on first use."""
    import ctypes

    try:
        function = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError, TypeError):
        return None
    function.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    function.restype = ctypes.c_int
    return function


_exchange_works = True  # until this system or file system says it cannot


def _exchange(a: Path, b: Path) -> bool:
    """Swap the names ``a`` and ``b`` in one step; False, with nothing done, when ``b`` does not exist
    yet or this system cannot (then it is not tried again in this process)."""
    global _exchange_works
    function = _renameat2() if _exchange_works else None
    if function is None:
        return False
    if function(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), RENAME_EXCHANGE) == 0:
        return True
    import ctypes

    if ctypes.get_errno() in _CANNOT_EXCHANGE:
        _exchange_works = False
    return False


def spare_of(path: Path) -> Path:
    """The file this process writes a checkpoint of ``path`` into before it takes ``path``'s name (a
    process of its own: a lost Ray worker still running never writes into the same spare as the
    worker that took its jobs over)."""
    return path.with_name(f".{path.name}.{os.getpid()}{SPARE_SUFFIX}")


def swap_in_sync(path: Path, text: str) -> None:
    """Checkpoint ``path``: write ``text`` into this process's spare of it and exchange the two names
    (``renameat2`` ``RENAME_EXCHANGE``); the old text becomes the spare, overwritten by the next
    checkpoint. A file rewritten every turn (the metrics checkpoint, at most once a second) so makes
    and frees no inode per write: on ext4 making one costs 0.1-0.5 ms of kernel time, an exchange
    about 10 µs. Where the exchange cannot be done (no ``renameat2``, no ``path`` yet) the spare is
    renamed over ``path`` instead and is gone.

    What a reader sees: the old file or the new, whole, at any moment, and after a SIGKILL. A reader
    that opened ``path`` and is still reading it when the next checkpoint (a second later) rewrites
    that inode as the spare could see a mix; :func:`retire_spare` makes the last write a fresh file,
    so the job's final documents never have that window. Like the rest of the store this does not
    fsync: after a power cut the newest text may be lost. One writer per job directory (the run's
    lock), each write awaited before the next."""
    spare = spare_of(path)
    data = text.encode("utf-8", "surrogatepass")
    try:
        fd = os.open(spare, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o666)
        try:
            _write_all(fd, data)
            # after the write: a failed write leaves the old spare's tail, not a hole
            os.ftruncate(fd, len(data))
        finally:
            os.close(fd)
        if not _exchange(spare, path):
            os.replace(spare, path)
    except BaseException:  # a full disk, say: the spare's text is not whole, so it goes
        _unlink_quietly(spare)
        raise


def retire_spare(path: Path, text: str) -> None:
    """The last write of ``path``: a fresh file renamed over it (:func:`write_atomic_sync`), then the
    spare a checkpoint left is removed."""
    write_atomic_sync(path, text)
    _unlink_quietly(spare_of(path))


def _unlink_quietly(path: Path) -> None:
    with suppress(OSError):
        os.unlink(path)


def _stale_spares(directory: Path) -> None:
    """Remove the spares an earlier process left in a job directory (killed before its last write)."""
    mine = f".{os.getpid()}{SPARE_SUFFIX}"
    with os.scandir(directory) as entries:
        for entry in entries:
            if (
                entry.name.startswith(".")
                and entry.name.endswith(SPARE_SUFFIX)
                and not entry.name.endswith(mine)
            ):
                _unlink_quietly(Path(entry.path))


class DiskQuotaExceeded(OSError):
    """A write the job's disk quota (``max_job_bytes``) does not allow; ``strerror`` says what."""

    def __init__(self, message: str):
        super().__init__(errno.EDQUOT, message)


QUOTA_EXEMPT = frozenset({FINAL, METRICS})  # a job's last words are written whatever its quota...
QUOTA_SLACK = 256 * 1024  # ...final.md cut to what is left of it plus this much (it says so)


def cut_to(text: str, room: int, why: str) -> str:
    """``text`` if it takes at most ``room`` bytes, else its head and one line saying it was cut and why."""
    data = text.encode("utf-8", "surrogatepass")
    if len(data) <= room:
        return text
    note = f"\n\n[cut: {len(data):,} bytes, the first {max(0, room - 400):,} kept; {why}]\n"
    return data[: max(0, room - 400)].decode("utf-8", "ignore") + note


def _tree_sizes(directory: Path) -> tuple[int, dict[Path, int]]:
    """The bytes of every file under ``directory`` (not following links), and each file's size."""
    sizes = {path: st.st_size for path, st in walk(directory)}  # any depth: no recursion
    return sum(sizes.values()), sizes


def _digest(content: str) -> str:
    return hashlib.sha256(content.encode("utf-8", "surrogatepass")).hexdigest()


def _open_sync(directory: Path) -> tuple[dict[str, str], int, Path, tuple[int, dict[Path, int]]]:
    """Create the job's directories; the outputs already saved (relative path -> content digest),
    the number of summaries already written, the resolved directory, and the bytes already there (in
    all, and per file). Run once per job, off the loop: a resumed job's files."""
    on_disk: dict[str, str] = {}
    for sub in (TOOL_RESULTS, SUMMARIES):
        (directory / sub).mkdir(parents=True, exist_ok=True)
    _stale_spares(directory)
    with os.scandir(directory / TOOL_RESULTS) as entries:
        for entry in entries:
            on_disk[f"{TOOL_RESULTS}/{entry.name}"] = ""  # taken, never the same: a link, a directory...
            if entry.is_file(follow_symlinks=False):
                with suppress(OSError, UnicodeDecodeError):
                    with open(entry.path, encoding="utf-8", errors="surrogatepass", newline="") as f:
                        on_disk[f"{TOOL_RESULTS}/{entry.name}"] = _digest(f.read())
    with os.scandir(directory / SUMMARIES) as entries:
        summaries = sum(1 for entry in entries if entry.name.endswith(SUMMARY_SUFFIX))
    # resolve() runs per persisted output; the root once
    return on_disk, summaries, directory.resolve(), _tree_sizes(directory)


def _same_text(path: Path, content: str) -> bool:
    """Whether the file at ``path`` holds exactly ``content``."""
    if not os.path.exists(path):  # the usual case; cheaper than a failed open
        return False
    try:
        with open(path, encoding="utf-8", errors="surrogatepass", newline="") as f:
            return f.read() == content
    except (OSError, UnicodeDecodeError):
        return False


def _save_sync(
    where: Callable[[str], Path],
    outputs: list[tuple[str, str]],
    appends: list[tuple[Path, str]],
    *,
    files: Sequence[tuple[Path, str]] = (),
) -> None:
    """Outputs ``(rel, content)`` at ``where(rel)``, then appends, then whole files (see JobStore.flush)."""
    targets = [(where(rel), content) for rel, content in outputs]  # all checked before anything is written
    for target, content in targets:  # whole files first: an appended record may name them
        if not _same_text(target, content):
            write_atomic_sync(target, content)
    for path, data in appends:
        _write_file(path, data.encode("utf-8"), os.O_APPEND)
    for path, text in files:  # last: a checkpoint never counts turns whose lines are not on disk
        swap_in_sync(path, text)


def _overwrite_sync(path: Path, text: str) -> None:
    data = text.encode("utf-8", "surrogatepass")
    with open(path, "r+b") as f:
        if len(data) > os.fstat(f.fileno()).st_blocks * 512:  # it would need new blocks, and could tear
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        f.write(data)
        f.truncate()


def in_thread(
    work: Callable[..., T], *, limiter: anyio.CapacityLimiter | None = None, abandon_on_cancel: bool = True
) -> Callable[..., Awaitable[T]]:
    """``work`` as a coroutine function that runs it on one of anyio's worker threads: the runner's one
    way to run blocking work off the event loop (every module's: the tools' shares, the sandbox's waits,
    the agent's reads); only the store's writes below go through aiofiles. ``limiter``: the places it
    takes one of (anyio's default limiter when None). Cancelled, the caller returns at once and the
    thread finishes by itself (``abandon_on_cancel``, the default), or waits for it."""

    async def run(*args: Any) -> T:
        return await anyio.to_thread.run_sync(
            work, *args, abandon_on_cancel=abandon_on_cancel, limiter=limiter
        )

    return run


# The store's writes (persisted outputs, the turn's lines, whole files) go through aiofiles' executor,
# each file operation one hop, not one per open/write/flush/close/replace: a hop costs 50-200 µs of
# thread hand-off, which dominated the Compactor's time (bench/compactor.py).
_write_atomic = aiofiles.os.wrap(write_atomic_sync)
_save_in_thread = aiofiles.os.wrap(_save_sync)
_overwrite = aiofiles.os.wrap(_overwrite_sync)
_open = in_thread(_open_sync)  # a read of what is there, not a write
_retire_spare = aiofiles.os.wrap(retire_spare)


async def _shielded(operation: Any, *args: Any, **kwargs: Any) -> None:
    """Await a file operation running in a worker thread. A thread cannot be stopped, so a cancelled
    caller still waits for its operation to land before the cancellation goes on: the next write of
    the same file (say, the final metrics.json after a cancelled checkpoint) cannot overtake it."""
    with anyio.CancelScope(shield=True):
        await operation(*args, **kwargs)


async def overwrite(path: Path, text: str) -> None:
    """Rewrite ``path`` over the blocks it already has; ENOSPC when ``text`` would need more."""
    await _shielded(_overwrite, path, text)


def _inline(path: Path, size: int) -> bool:
    """Whether a flush of ``size`` characters into ``path``'s directory, making no file, is made on the
    event loop."""
    return size <= INLINE_FLUSH_CHARS and local_disk(str(path.parent))


async def write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to a temporary name next to ``path``, then rename it over ``path`` (in a thread)."""
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
    """The files of one job under ``runs/<run-id>/<job>/``.

    Writes of a turn are queued by :meth:`queue` (no I/O) and written by :meth:`flush`; its owner (the
    job's session) flushes before each model call and once more when the job ends. Only one flush of a
    store runs at a time (the session awaits each), so its writes land in the order they were queued.
    The ``write_*`` and ``save`` methods write at once, each in one hop of its own."""

    def __init__(self, directory: Path):
        self.dir = directory
        # kept for the whole job (about 0.2 KiB an output: bench/job_records.py)
        self._names: dict[str, str] = {}  # id + content hash -> reserved path
        self._owners: dict[str, str] = {}  # reserved path -> its tool_use id (kept: reserve is O(1))
        self._on_disk: dict[str, str] = {}  # outputs saved before this store opened -> content digest
        self._summaries = 0  # summaries/ files written or named so far
        self._root: Path | None = None
        self._outputs: list[tuple[str, str]] = []  # queued persisted outputs (rel, content)
        self._lines: dict[str, list[str]] = {}  # queued JSONL lines per file, in first-queued order
        self._files: dict[str, str] = {}  # queued whole files (name -> text); the newest text wins
        self._checkpointed: set[str] = set()  # whole files queued here: checkpoints, with a spare each
        self.max_bytes: int | None = None  # the job's disk quota (max_job_bytes); None: none
        self.bytes_used = 0  # bytes in the job directory: what was there at open, plus what this store wrote
        # each whole file's size as far as the store knows it: a saved output's by its name relative to
        # the job directory (the string its reservation already holds: a long session keeps one entry
        # per output), any other file's by its path
        self._sizes: dict[str, int] = {}
        self.over_quota: str | None = None  # why a write was refused: every later write is refused too

    async def open(self) -> None:
        """Create the job's directories and learn, in one hop off the loop, which outputs and summaries
        are already there (a resumed job's), so naming a new one never touches the disk; and how many
        bytes the directory already holds (they count against the quota)."""
        opened = await _open(self.dir)
        self._on_disk, self._summaries, self._root, (self.bytes_used, sizes) = opened
        # whole files are named below the resolved root, and below dir
        sizes.update({self._root / p.relative_to(self.dir): n for p, n in sizes.items()})
        self._sizes = {str(p): n for p, n in sizes.items()}
        self._sizes.update(
            {str(p.relative_to(self.dir)): n for p, n in sizes.items() if p.is_relative_to(self.dir)}
        )

    def _charge(
        self, whole: Sequence[tuple[Path | str, str]] = (), appended: int = 0, exempt: bool = False
    ) -> None:
        """Count a write of whole files (``(path, text)``, replacing what is there; a saved output's
        path is its name relative to the job directory, a ``str``) and ``appended``
        bytes against the quota before it is made; :class:`DiskQuotaExceeded` when it would pass the
        quota, or when an earlier write already did (``exempt``: a final document, always allowed)."""
        sizes = {str(path): len(text.encode("utf-8", "surrogatepass")) for path, text in whole}
        delta = appended + sum(n - self._sizes.get(path, 0) for path, n in sizes.items())
        if not exempt and self.max_bytes is not None:
            if self.over_quota is None and self.bytes_used + delta > self.max_bytes:
                self.over_quota = (
                    f"the job's files would take {self.bytes_used + delta:,} bytes, over its disk "
                    f"quota max_job_bytes = {self.max_bytes:,} (a write of {delta:,} bytes was "
                    "refused)"
                )
            if self.over_quota is not None:
                raise DiskQuotaExceeded(self.over_quota)
        self.bytes_used += delta
        self._sizes.update(sizes)

    async def write_json(self, name: str, obj: Any) -> None:
        await self.write_text(name, json.dumps(obj, ensure_ascii=False, indent=2) + "\n")

    async def overwrite_json(self, name: str, obj: Any) -> None:
        """Rewrite an existing file over its own blocks (no temporary file, so no new space): only for
        a full disk, where the atomic write cannot be done. A crash in the middle could tear it."""
        text = dumps(obj) + "\n"
        await overwrite(self.dir / name, text)
        self._charge([(self.dir / name, text)], exempt=True)
        if name in self._checkpointed:  # its spare's space, too, goes back to the full disk
            await in_thread(_unlink_quietly)(spare_of(self.dir / name))

    async def write_text(self, name: str, text: str) -> None:
        """Write ``name`` whole (atomic): a fresh file renamed over it. A file this store checkpointed
        (see :meth:`queue`) loses its spare with it: this is its last write. Under a disk quota,
        ``final.md`` is cut to what the quota leaves plus :data:`QUOTA_SLACK`, saying so."""
        if name == FINAL and self.max_bytes is not None:
            room = (
                max(0, self.max_bytes - self.bytes_used + self._sizes.get(str(self.dir / name), 0))
                + QUOTA_SLACK
            )
            text = cut_to(
                text, room, f"the job's disk quota max_job_bytes = {self.max_bytes:,} has no room for more"
            )
        self._charge([(self.dir / name, text)], exempt=name in QUOTA_EXEMPT)
        if name in self._checkpointed:
            await _shielded(_retire_spare, self.dir / name, text)
        else:
            await write_atomic(self.dir / name, text)

    async def save(self, outputs: Sequence[tuple[str, str]]) -> None:
        """Persisted outputs ``(rel, content)``, each written whole (atomic) unless the same bytes are
        already there, in one hop to aiofiles' executor. Writes nothing queued by :meth:`queue`."""
        if outputs:
            self._charge(outputs)
            await _shielded(_save_in_thread, self._output_paths(outputs), list(outputs), [])

    def queue(
        self,
        outputs: Sequence[tuple[str, str]] = (),
        lines: dict[str, list[str]] | None = None,
        files: dict[str, str] | None = None,
    ) -> None:
        """Queue writes for the next :meth:`flush`: persisted outputs ``(rel, content)``, JSONL lines
        already serialized by :func:`dumps` (one JSON text each, no newline) per file, and whole files:
        checkpoints, rewritten through a spare (:func:`swap_in_sync`; only the newest text queued for a
        name is written)."""
        self._outputs.extend(outputs)
        for name, new in (lines or {}).items():
            if new:
                self._lines.setdefault(name, []).extend(new)
        if files:
            self._files.update(files)
            self._checkpointed.update(files)

    def queue_records(self, name: str, records: list[Any]) -> None:
        """Queue JSONL ``records`` for ``name`` (serialized now: later changes to them are not written)."""
        self.queue(lines={name: [dumps(r) for r in records]})

    async def flush(self) -> None:
        """Write everything queued, in one hop to aiofiles' executor (on the loop when it makes no new
        file and is small: the Guarantees): outputs first (each whole, atomic, skipped when the same
        bytes are there), then each file's lines in one append, then the whole files. Shielded: a
        cancelled caller still waits for the writes to land. The queue is emptied
        once the quota allows the writes, before they start, so a failed write is not retried by
        the next flush; what the quota refused (or could not count) stays queued."""
        if not (self._outputs or self._lines or self._files):
            return
        outputs = self._outputs
        appends = [
            (self.dir / name, "".join(line + "\n" for line in lines)) for name, lines in self._lines.items()
        ]
        files = [(self.dir / name, text) for name, text in self._files.items()]
        appended = sum(len(data.encode("utf-8")) for _, data in appends)
        self._charge([*outputs, *files], appended=appended)  # refused: still queued, nothing written
        self._outputs, self._lines, self._files = [], {}, {}
        size = appended + sum(len(text) for _, text in outputs) + sum(len(text) for _, text in files)
        if not outputs and _inline(self.dir / METRICS, size):  # makes no file; a name in the job directory
            _save_sync(self._output_paths(outputs), outputs, appends, files=files)  # no thread hand-off
        else:
            await _shielded(_save_in_thread, self._output_paths(outputs), outputs, appends, files=files)

    def _output_paths(self, outputs: Sequence[tuple[str, str]]) -> Callable[[str], Path]:
        """Where each of ``outputs`` is written: a function the writing thread calls (it may stat),
        made on the loop (which reservations hold is looked up here, not in that thread). A name
        :meth:`reserve` made is one sanitized file name in tool-results/, so it needs no realpath walk
        (tens of µs per output), only a check that tool-results/ is still a real directory; the rename
        never follows a symlink at the name. Any other name goes through :meth:`resolve`."""
        reserved = {rel for rel, _ in outputs if rel in self._owners}
        root = self._root

        def path(rel: str) -> Path:
            if rel in reserved and root is not None and not os.path.islink(root / TOOL_RESULTS):
                return root / rel
            return self.resolve(rel)

        return path

    def close(self) -> None:
        """Let go of the job-long records (the job ended: nothing is named after)."""
        for records in (self._names, self._owners, self._sizes):
            records.clear()

    def reserve(self, tool_use_id: str, content: str) -> str:
        """The path (relative to the job directory) that ``content`` of ``tool_use_id`` is saved under.

        Deterministic: the same id and content always get the same path, also in a store opened later
        on the same directory (a resumed job). A different id, or the same id with different content,
        never shares a path, even when ids sanitize alike. No file I/O: what is on disk was learned by
        :meth:`open`.
        """
        digest = _digest(content)
        owner = id_key(tool_use_id)
        key = f"{owner}\0{digest}"
        found = self._names.get(key)
        if found is not None:
            return found
        stem = safe_name(tool_use_id)
        rel = output_path(stem)
        n = 1
        while rel in self._owners or self._on_disk.get(rel, digest) != digest:
            n += 1
            rel = output_path(stem, n)
        self._names[key] = rel
        self._owners[rel] = owner
        return rel

    def claim(self, tool_use_id: str, rel: str) -> None:
        """``rel``, saved before this store opened, holds an output of ``tool_use_id`` (a resumed job's
        context record says so): from now on it counts as reserved here for it, as in the segment
        that saved it. Nothing for a name not saved on disk or reserved for another id. No file I/O."""
        digest = self._on_disk.get(rel)
        owner = id_key(tool_use_id)
        if not digest or self._owners.get(rel, owner) != owner:  # "": not a regular file
            return
        self._owners[rel] = owner
        self._names.setdefault(f"{owner}\0{digest}", rel)

    def reserved_for(self, tool_use_id: str, rel: str) -> bool:
        """Whether ``rel`` was reserved here for an output of ``tool_use_id`` (a path named inside a
        tool's output proves nothing: the output may merely look like a placeholder)."""
        return self._owners.get(rel) == id_key(tool_use_id)

    async def write_output(self, rel: str, content: str) -> None:
        """Save a persisted output whole (atomic), unless the same bytes are already there."""
        await self.save([(rel, content)])

    async def persist_output(self, tool_use_id: str, content: str) -> str:
        rel = self.reserve(tool_use_id, content)
        await self.write_output(rel, content)
        return rel

    def queue_summary(self, text: str) -> str:
        """Queue a summary as the next ``summaries/NNNN.md`` (written by the next :meth:`flush`, before
        any line that names it); its relative path."""
        self._summaries += 1
        rel = summary_path(self._summaries)
        self.queue(outputs=[(rel, text)])
        return rel

    def resolve(self, rel: str) -> Path:
        """The absolute path of ``rel`` inside the job directory; ValueError if it leaves it."""
        root = self._root or self.dir.resolve()
        target = (root / rel).resolve()
        if target != root and root not in target.parents:
            raise ValueError(f"{rel}: outside the job directory")
        return target


def link_latest(run_dir: Path) -> str | None:
    """Point ``<output_dir>/latest`` at ``run_dir`` (a relative symlink, replaced atomically). Best effort:
    the run goes on without it; what stood in the way (a ``latest`` that is no link, a file system
    without symlinks) is returned, to be said."""
    link = run_dir.parent / LATEST
    tmp = run_dir.parent / f".{LATEST}.{os.getpid()}.{next(_TMP_IDS)}"
    try:
        os.symlink(run_dir.name, tmp)
        os.replace(tmp, link)
    except OSError as e:
        _unlink_quietly(tmp)
        return f"{link}: not pointed at this run ({e.strerror or e}); it still names an earlier one or none"
    return None
