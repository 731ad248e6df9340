"""The file tools ``read``, ``write``, ``edit`` and ``glob``: the SDK's ``agent_toolset`` behaviour
(its outputs, limits and error wording), with every path opened beneath the workspace's directory
descriptor (:mod:`runner.tools.beneath`). ``grep`` runs in a child process (:mod:`runner.tools.grep_worker`).

Guarantees:

- Nothing outside the workspace is read, listed or written, whatever the tree holds or how it
  changes during a call: every open, listing and rename starts at a descriptor beneath the root, and
  a file is created or replaced as a temporary name in its directory (by descriptor) renamed over
  the name, never through a path string.
- A symlink that stays inside the workspace works as it did under the SDK (read and write go through
  it; ``glob`` follows it outside ``**``); one that leads out is "outside the session's working
  directory", without a word about what is there.
- FIFOs, devices and sockets are refused by ``read``, ``write`` and ``edit``, never opened blocking.
- A bad input (a wrong type, a NUL byte, a lone surrogate, a huge number) is a :class:`ToolFailure`
  with a readable text, never another exception.
- Every function here is plain Python run on a worker thread (``read`` and ``glob`` first on the event
  loop, under a budget of a few milliseconds: see :mod:`runner.tools.file_calls`), and never runs a
  model-chosen regular expression (``fnmatch`` patterns compile to linear ones); a walk checks its
  deadline (``stop_at``) and stops soon after it, so an abandoned call frees its thread.
- Every path the tools show is :func:`~runner.tools.beneath.shown` (one line, valid UTF-8: a byte
  that is not text or a control character as ``\\xNN``, a backslash as ``\\\\``), and every path or
  glob pattern a model gives is read back with :func:`~runner.tools.beneath.from_shown`: a name
  ``glob`` or ``grep`` showed reads, greps and globs that very file, whatever bytes its name holds.
- A directory walk skips, without failing, an entry it cannot open or list, and anything whose path
  beneath the root is longer than the kernel takes (``PATH_MAX``).
"""

from __future__ import annotations

import base64
import errno
import fnmatch
import os
import re
import secrets
import stat
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import suppress
from typing import Any

from .. import protocol
from .beneath import (
    PATH_MAX,
    BadPath,
    NotRegular,
    Outside,
    Root,
    from_shown,
    open_beneath,
    open_regular,
    parent_beneath,
    relative,
    shown,
)

# the SDK's limits (anthropic.lib.tools.agent_toolset), kept as they were
DEFAULT_MAX_FILE_BYTES = 256 * 1024  # a whole-file read and an edit
MAX_IMAGE_BASE64_BYTES = 5 * 1024 * 1024
MAX_PDF_BYTES = 20 * 1024 * 1024
GLOB_RESULT_LIMIT = 200
WALK_MAX_ENTRIES = 50_000
BINARY_MEDIA_TYPES = {
    ".png": "image/png",
    ".jpg": "image/jpeg",
    ".jpeg": "image/jpeg",
    ".gif": "image/gif",
    ".webp": "image/webp",
    ".pdf": "application/pdf",
}
READ_PAGE_BYTES = 64 * 1024  # a whole-file read of a large file returns its first lines up to this size
_CHUNK = 1 << 20
_ARGS = {
    "read": ("file_path", "view_range", "byte_range"),
    "write": ("file_path", "content"),
    "edit": ("file_path", "old_string", "new_string", "replace_all"),
    "glob": ("pattern", "path"),
    "grep": ("pattern", "path"),
}
OUTSIDE = "path {path!r} is outside the session's working directory"
NOT_REGULAR = "{op}: {path}: not a regular file (a FIFO, device or socket); refused"


class ToolFailure(Exception):
    """A call the model got wrong, or that cannot be done: its text is the error result."""

    def __init__(self, text: str):
        super().__init__(text)
        self.text = text


class OutOfTime(ToolFailure):
    """A call that passed its ``stop_at`` (it stops at its next check, having changed nothing)."""


_REASONS: tuple[tuple[type[OSError], str], ...] = (
    (NotRegular, "not a regular file"),
    (FileNotFoundError, "no such file or directory"),
    (NotADirectoryError, "not a directory"),
    (IsADirectoryError, "is a directory"),
    (PermissionError, "permission denied"),
    (FileExistsError, "file already exists"),
)
_ERRNO_REASONS = {errno.ELOOP: "too many levels of symbolic links", errno.ENAMETOOLONG: "file name too long"}


def reason(e: OSError) -> str:
    """The SDK's wording of a file system error (no host path, the same on every platform)."""
    found = next((text for kind, text in _REASONS if isinstance(e, kind)), None)
    return found or _ERRNO_REASONS.get(e.errno or 0) or (e.strerror or "i/o error").lower()


def check_args(op: str, args: dict[str, Any]) -> None:
    extra = sorted(str(k) for k in args if k not in _ARGS[op])
    if extra:
        raise ToolFailure(f"{op}: unexpected argument(s) {', '.join(extra)}; expected {', '.join(_ARGS[op])}")


def string_arg(op: str, args: dict[str, Any], key: str, *, optional: bool = False) -> str | None:
    value = args.get(key)
    if value is None and optional:
        return None
    if not isinstance(value, str):
        raise ToolFailure(f"{op}: {key} (a string) is required, got {type(value).__name__}")
    return value


def _required(op: str, args: dict[str, Any], key: str = "file_path") -> str:
    value = string_arg(op, args, key)
    assert value is not None
    return value


def target(op: str, root: Root, path: str, *also: str) -> str:
    """``path`` (a model's, escapes as :func:`~runner.tools.beneath.shown` makes them mapped back)
    relative to ``root``, or the error result's text for a path outside or not a path."""
    try:
        return relative(from_shown(path), root.real, *also)
    except Outside:
        raise ToolFailure(f"{op}: " + OUTSIDE.format(path=path)) from None
    except BadPath as e:
        raise ToolFailure(f"{op}: path {path!r} {e}") from None


def _opened(op: str, root: Root, rel: str, *, path: str) -> tuple[int, os.stat_result]:
    try:
        return open_regular(root, rel)
    except Outside:
        raise ToolFailure(f"{op}: " + OUTSIDE.format(path=path)) from None
    except NotRegular as e:
        if stat.S_ISDIR(e.mode):
            raise ToolFailure(f"{op}: {path}: not a regular file") from None
        raise ToolFailure(NOT_REGULAR.format(op=op, path=path)) from None
    except OSError as e:
        raise ToolFailure(f"{op}: {path}: {reason(e)}") from None


def encode(content: str) -> bytes:
    """``content`` as UTF-8; an undecodable byte carried as a surrogate goes back as that byte, any
    other lone surrogate is written as its escape (``\\ud800``)."""
    try:
        return content.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        return content.encode("utf-8", "backslashreplace")


# --- read -----------------------------------------------------------------------------------------


def _pair(args: dict[str, Any], key: str, unit: str) -> tuple[int, int] | None:
    """The two integers of a ``view_range`` or ``byte_range`` (None when it is absent or empty)."""
    value = args.get(key)
    if value is None or value == []:
        return None
    if (
        not isinstance(value, list)
        or len(value) != 2
        or not all(isinstance(v, int) and not isinstance(v, bool) for v in value)
    ):
        raise ToolFailure(f"read: {key} must be [start_{unit}, end_{unit}] (two integers)")
    return value[0], value[1]


def _view_range(args: dict[str, Any]) -> tuple[int, int] | None:
    """``(start, end)`` of a ``view_range``: start from 1 (0 taken as 1), end ``-1`` (or 0) for the end of
    the file, as the SDK took them; anything else is an error."""
    if (pair := _pair(args, "view_range", "line")) is None:
        return None
    start, end = pair
    if start < 0 or end < -1 or 0 < end < start:
        raise ToolFailure(
            f"read: view_range [{start}, {end}] is not a range of lines: start at 1 or later, "
            "end at the start or later (or -1 for the end of the file)"
        )
    cap = 1 << 62  # larger numbers mean the same and keep every sum an ordinary integer
    return min(start, cap), min(end, cap)


class LineRange:
    """Collects the bytes of lines ``[start, end]`` from a file's consecutive chunks, capped at
    ``limit`` (the SDK's ``LineRangeCollector``, with the lines of the file counted)."""

    def __init__(self, path: str, start_line: int, end_line: int, *, limit: int):
        self.path, self.start_line, self.end_line, self.limit = path, start_line, end_line, limit
        self.start = max(0, start_line - 1)
        self.end = end_line if end_line > 0 else sys.maxsize
        self.line = 0
        self.partial = False  # the last chunk ended inside a line
        self.collected = bytearray()

    def done(self) -> bool:
        return self.line >= self.end

    def feed(self, chunk: bytes) -> None:
        """The next chunk: the lines before the range skipped and the range's bytes taken a run at a
        time, by C-level searches (never a Python step per line, whatever the lines' lengths)."""
        at = 0
        while at < len(chunk) and not self.done():
            ahead = self.start - self.line if self.line < self.start else self.end - self.line
            newline = nth_newline(chunk, at, ahead)  # the newline ending the last line wanted here
            stop = len(chunk) if newline < 0 else newline
            if self.line >= self.start:
                if len(self.collected) + stop - at > self.limit:
                    raise ToolFailure(self._over())
                self.collected += chunk[at:stop]
            if newline < 0:
                self.line += chunk.count(b"\n", at)
                self.partial = not chunk.endswith(b"\n")
                break
            self.partial = False
            self.line += ahead
            at = newline + 1

    def lines(self) -> int:
        return self.line + (1 if self.partial else 0)

    def _over(self) -> str:
        if self.end - self.start == 1:
            return (
                f"read: line {self.start + 1} of {self.path} alone exceeds {self.limit}-byte limit. "
                "The read tool cannot return part of a line, so view_range cannot narrow this further."
            )
        return (
            f"read: view_range [{self.start_line}, {self.end_line}] of {self.path} exceeds {self.limit}-byte "
            "limit. Narrow the view_range to read a smaller portion."
        )


def nth_newline(data: bytes, start: int, k: int) -> int:
    """The index of the ``k``-th newline (``k >= 1``) of ``data`` at or after ``start``, or -1 when it
    has fewer: found by counts over halves (at most twice the bytes scanned, in C), then a few finds."""
    if data.count(b"\n", start) < k:
        return -1
    lo, hi, seen = start, len(data), 0  # the k-th is in [lo, hi); ``seen`` newlines lie in [start, lo)
    while k - seen > 16 and hi - lo > 64:
        mid = (lo + hi) // 2
        here = data.count(b"\n", lo, mid)
        if seen + here >= k:
            hi = mid
        else:
            seen, lo = seen + here, mid
    at = lo - 1
    for _ in range(k - seen):
        at = data.find(b"\n", at + 1)
    return at


def _past_the_end(path: str, start: int, end: int, *, lines: int) -> ToolFailure:
    return ToolFailure(
        f"read: view_range [{start}, {end}] starts after the last line: {path} has {lines} lines"
    )


def _chunks(f: Any, stop_at: float) -> Iterator[bytes]:
    while chunk := f.read(_CHUNK):
        if time.monotonic() > stop_at:
            raise OutOfTime("read: ran out of time")
        yield chunk


def _text(path: str, data: bytes, size: int) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise ToolFailure(protocol.BINARY_READ.format(path=path, size=size)) from None


def _range(f: Any, path: str, start: int, *, end: int, limit: int, stop_at: float, size: int) -> str:
    lines = LineRange(path, start, end, limit=limit)
    if lines.end <= lines.start:
        return ""
    for chunk in _chunks(f, stop_at):
        lines.feed(chunk)
        if lines.done():
            break
    if lines.lines() <= lines.start and lines.lines() > 0:
        raise _past_the_end(path, start, end, lines=lines.lines())
    return _text(path, bytes(lines.collected), size)


def _byte_range(args: dict[str, Any]) -> tuple[int, int] | None:
    if (pair := _pair(args, "byte_range", "byte")) is None:
        return None
    start, end = pair
    if start < 0 or end <= start:
        raise ToolFailure(
            f"read: byte_range [{start}, {end}] is not a range of bytes: start at 0 or later, "
            "end after the start"
        )
    return start, min(end, start + READ_PAGE_BYTES)


def _utf8_cut(data: bytes, at_start: bool) -> bytes:
    """``data`` without the partial characters at its ends (a continuation byte first, a lead byte
    whose character is cut last), so a slice of a UTF-8 file decodes."""
    start = 0
    while at_start and start < min(3, len(data)) and data[start] & 0xC0 == 0x80:
        start += 1
    end = len(data)
    for back in range(1, min(4, len(data)) + 1):
        byte = data[-back]
        if byte & 0xC0 == 0xC0:  # a lead byte: is its character whole?
            need = 2 if byte < 0xE0 else 3 if byte < 0xF0 else 4
            end = len(data) if back >= need else len(data) - back
            break
        if byte < 0x80:
            break
    return data[start:end]


def _bytes_page(f: Any, path: str, start: int, *, end: int, size: int, lines: int, why: str) -> str:
    """Bytes ``[start, end)`` of a file as text, cut at character boundaries, after a line saying so."""
    if start >= size > 0:
        raise ToolFailure(f"read: byte_range starts at byte {start}; {path} has {size} bytes")
    f.seek(start)
    data = _utf8_cut(f.read(end - start), at_start=start > 0)
    text = _text(path, data, size)
    stop = start + len(data) if data else min(end, size)
    if stop >= size:
        return protocol.READ_BYTES_END.format(start=start, end=stop, size=size, lines=lines) + "\n" + text
    return (
        protocol.READ_BYTES.format(
            start=start, end=stop, size=size, lines=lines, why=why, next_end=min(size, stop + READ_PAGE_BYTES)
        )
        + "\n"
        + text
    )


def first_page(f: Any, stop_at: float) -> tuple[int, int, int]:
    """``(lines in the file, last line of its first page, bytes of its first line)``: the page is at
    most READ_PAGE_BYTES (the lines that end within it; the first line at least). Lines end at a
    newline; each chunk is counted in C."""
    newlines = in_page = size = 0
    first_line = -1
    last = b""
    for chunk in _chunks(f, stop_at):
        if first_line < 0 and (found := chunk.find(b"\n")) >= 0:
            first_line = size + found + 1
        if size < READ_PAGE_BYTES:
            in_page += chunk.count(b"\n", 0, READ_PAGE_BYTES - size)
        newlines += chunk.count(b"\n")
        size += len(chunk)
        last = chunk[-1:]
    open_end = 1 if size and last != b"\n" else 0  # a last line without its newline
    page_end = in_page + (open_end if size <= READ_PAGE_BYTES else 0)
    return newlines + open_end, max(1, page_end), size if first_line < 0 else first_line


def read(workspace: str, args: dict[str, Any], stop_at: float) -> str | list[dict[str, Any]]:
    check_args("read", args)
    path = _required("read", args)
    view = _view_range(args)
    byte_range = _byte_range(args)
    if view and byte_range:
        raise ToolFailure("read: give view_range or byte_range, not both")
    with Root.open_exact(workspace) as root:
        rel = target("read", root, path, workspace)
        fd, st = _opened("read", root, rel, path=path)
    with os.fdopen(fd, "rb") as f:
        try:
            if byte_range:
                if BINARY_MEDIA_TYPES.get(os.path.splitext(rel)[1].lower()):
                    raise ToolFailure("read: byte_range is not supported for image/PDF files")
                return _bytes_page(
                    f, path, byte_range[0], end=byte_range[1], size=st.st_size, lines=-1, why="a byte range"
                )
            return _read_open(f, st, path, rel=rel, view=view, stop_at=stop_at)
        except OSError as e:
            raise ToolFailure(f"read: {path}: {reason(e)}") from None


def _read_open(
    f: Any, st: os.stat_result, path: str, *, rel: str, view: tuple[int, int] | None, stop_at: float
) -> str | list[dict[str, Any]]:
    media = BINARY_MEDIA_TYPES.get(os.path.splitext(rel)[1].lower())
    if media is not None:
        if view:
            raise ToolFailure("read: view_range is not supported for image/PDF files")
        limit = MAX_PDF_BYTES if media == "application/pdf" else MAX_IMAGE_BASE64_BYTES // 4 * 3
        if st.st_size > limit:
            raise ToolFailure(
                f"read: {path} is {st.st_size} bytes, exceeds {limit}-byte limit for image/PDF files."
            )
        raw = bytearray()
        for chunk in _chunks(f, stop_at):  # by chunks, the clock checked after each (up to 20 MiB)
            raw += chunk
            if len(raw) > limit:
                break
        data = base64.standard_b64encode(bytes(raw[: limit + 1])).decode("ascii")
        kind = "document" if media == "application/pdf" else "image"
        return [{"type": kind, "source": {"type": "base64", "media_type": media, "data": data}}]
    if st.st_size > DEFAULT_MAX_FILE_BYTES:
        if view:
            return _range(
                f, path, view[0], end=view[1], limit=DEFAULT_MAX_FILE_BYTES, stop_at=stop_at, size=st.st_size
            )
        lines, end, first_line = first_page(f, stop_at)
        if first_line > READ_PAGE_BYTES:  # its first line alone is more than a page: by bytes
            return _bytes_page(
                f,
                path,
                0,
                end=READ_PAGE_BYTES,
                size=st.st_size,
                lines=lines,
                why="its first line is longer than one read",
            )
        f.seek(0)
        text = _range(f, path, 1, end=end, limit=DEFAULT_MAX_FILE_BYTES, stop_at=stop_at, size=st.st_size)
        return (
            protocol.READ_PAGE.format(
                start=1,
                end=end,
                lines=lines,
                size=st.st_size,
                next_start=end + 1,
                next_end=min(lines, 2 * end),
            )
            + "\n"
            + text
        )
    text = _text(path, f.read(DEFAULT_MAX_FILE_BYTES + 1), st.st_size)
    if not view:
        return text or protocol.EMPTY_FILE
    start, end = view
    rows = text.split("\n")
    if start > len(rows) and text:
        raise _past_the_end(path, start, end, lines=protocol.line_count(text))
    return "\n".join(rows[max(0, start - 1) : end if end > 0 else len(rows)])


# --- write and edit -------------------------------------------------------------------------------


def _replace(op: str, path: str, dirfd: int, *, name: str, data: bytes) -> None:
    """Put ``data`` at ``name`` in the directory ``dirfd``: written to a new name there, then renamed
    over it (an existing file keeps its permissions and owner)."""
    try:
        old: os.stat_result | None = os.stat(name, dir_fd=dirfd, follow_symlinks=False)
    except FileNotFoundError:
        old = None
    if old is not None and stat.S_ISDIR(old.st_mode):
        raise IsADirectoryError(errno.EISDIR, "is a directory")
    if old is not None and not stat.S_ISREG(old.st_mode):
        raise ToolFailure(NOT_REGULAR.format(op=op, path=path))
    temp = f".{secrets.token_hex(8)}.{op}-tmp"
    fd = os.open(
        temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666, dir_fd=dirfd
    )
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            if old is not None:
                os.fchmod(fd, stat.S_IMODE(old.st_mode))
                with suppress(OSError):
                    os.fchown(fd, old.st_uid, old.st_gid)
        finally:
            os.close(fd)
        os.rename(temp, name, src_dir_fd=dirfd, dst_dir_fd=dirfd)
    except BaseException:
        with suppress(OSError):
            os.unlink(temp, dir_fd=dirfd)
        raise


def write_beneath(op: str, root: Root, rel: str, *, path: str, data: bytes, create: bool = True) -> None:
    """``data`` put at ``rel`` beneath ``root`` (its directories made unless ``create`` is false), as
    ``write`` does; raises :class:`ToolFailure` (``op`` and ``path`` name the call in its text)."""
    try:
        dirfd, name = parent_beneath(root, rel, create=create)
        try:
            _replace(op, path, dirfd, name=name, data=data)
        finally:
            os.close(dirfd)
    except Outside:
        raise ToolFailure(f"{op}: " + OUTSIDE.format(path=path)) from None
    except OSError as e:
        raise ToolFailure(f"{op}: {path}: {reason(e)}") from None


def write(workspace: str, args: dict[str, Any], stop_at: float) -> str:
    check_args("write", args)
    path = _required("write", args)
    content = _required("write", args, "content")
    with Root.open_exact(workspace) as root:
        write_beneath("write", root, target("write", root, path, workspace), path=path, data=encode(content))
    return f"wrote {len(content)} bytes to {path}"


def edit(workspace: str, args: dict[str, Any], stop_at: float) -> str:
    check_args("edit", args)
    path = _required("edit", args)
    old, new = _required("edit", args, "old_string"), _required("edit", args, "new_string")
    replace_all = args.get("replace_all")
    if replace_all is not None and not isinstance(replace_all, bool):
        raise ToolFailure(f"edit: replace_all must be true or false, got {type(replace_all).__name__}")
    with Root.open_exact(workspace) as root:
        rel = target("edit", root, path, workspace)
        fd, st = _opened("edit", root, rel, path=path)
        with os.fdopen(fd, "rb") as f:
            if st.st_size > DEFAULT_MAX_FILE_BYTES:
                raise ToolFailure(
                    f"edit: {path} is {st.st_size} bytes, exceeds {DEFAULT_MAX_FILE_BYTES}-byte limit. "
                    "The edit tool loads the whole file and cannot modify a file this large."
                )
            try:
                data = f.read(DEFAULT_MAX_FILE_BYTES + 1)
            except OSError as e:
                raise ToolFailure(f"edit: {path}: {reason(e)}") from None
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            raise ToolFailure(f"edit: {path}: not valid UTF-8 text (cannot edit binary files)") from None
        count = text.count(old)
        if count == 0:
            raise ToolFailure(f"edit: old_string not found in {path}")
        if not replace_all and count > 1:
            raise ToolFailure(f"edit: old_string appears {count} times in {path} (must be unique)")
        updated = text.replace(old, new) if replace_all else text.replace(old, new, 1)
        write_beneath("edit", root, rel, path=path, data=encode(updated), create=False)
    return f"edited {path} ({count if replace_all else 1} replacement(s))"


# --- glob -----------------------------------------------------------------------------------------


def _join(rel: str, name: str) -> str:
    return name if rel == "." else f"{rel}/{name}"


def _fits(rel: str) -> bool:
    return len(os.fsencode(rel)) < PATH_MAX - 1


class _Clock:
    def __init__(self, stop_at: float, op: str):
        self.stop_at, self.op, self.n = stop_at, op, 0

    def tick(self) -> None:
        self.n += 1
        if self.n % 256 == 0 and time.monotonic() > self.stop_at:
            raise OutOfTime(f"{self.op}: ran out of time")


def listing(root: Root, rel: str, clock: _Clock) -> list[os.DirEntry[str]]:
    """The entries of directory ``rel`` beneath ``root``; none when it cannot be opened or listed."""
    if not _fits(rel):
        return []
    try:
        fd = open_beneath(root, rel, os.O_RDONLY | os.O_DIRECTORY)
    except (OSError, ValueError):
        return []
    try:
        with os.scandir(fd) as it:
            found = []
            for entry in it:
                clock.tick()
                found.append(entry)
            return found
    except OSError:
        return []
    finally:
        os.close(fd)


def _is_dir(entry: os.DirEntry[str], root: Root, rel: str) -> bool:
    """Whether an entry is a directory, a symlink's target looked up beneath the root only."""
    try:
        if not entry.is_symlink():
            return entry.is_dir(follow_symlinks=False)
    except OSError:
        return False
    found = _stat_beneath(root, rel)
    return found is not None and stat.S_ISDIR(found.st_mode)


def _stat_beneath(root: Root, rel: str) -> os.stat_result | None:
    """What ``rel`` names (through a symlink that stays beneath), or None when it does not resolve
    beneath the root."""
    if not _fits(rel):
        return None
    try:
        fd = open_beneath(root, rel, os.O_PATH)
    except (OSError, ValueError):
        return None
    try:
        return os.fstat(fd)
    except OSError:
        return None
    finally:
        os.close(fd)


class _Glob:
    """pathlib's (Python 3.11) glob selectors over descriptors: ``**`` descends into directories but
    not into symlinks to them, a name or a wildcard follows a symlink that stays beneath the root."""

    def __init__(self, root: Root, parts: list[str], clock: _Clock):
        self.root, self.parts, self.clock = root, parts, clock
        self.matchers: dict[str, Callable[[str], Any]] = {}

    def match(self, pattern: str, name: str) -> bool:
        matcher = self.matchers.get(pattern)
        if matcher is None:
            matcher = self.matchers[pattern] = re.compile(fnmatch.translate(pattern)).fullmatch
        return matcher(name) is not None

    def select(self, i: int, rel: str) -> Iterator[str]:
        if i == len(self.parts) or self.parts[i] == "":
            yield rel
            return
        pattern, dironly = self.parts[i], i + 1 < len(self.parts)
        if pattern == "**":
            seen: set[str] = set()
            for start in self.directories(rel):
                for found in self.select(i + 1, start):
                    if found not in seen:
                        seen.add(found)
                        yield found
        elif any(c in pattern for c in "*?["):
            for entry in listing(self.root, rel, self.clock):
                child = _join(rel, entry.name)
                if dironly and not _is_dir(entry, self.root, child):
                    continue
                if self.match(pattern, entry.name):
                    yield from self.select(i + 1, child)
        else:
            child = _join(rel, pattern)
            st = _stat_beneath(self.root, child)
            if st is not None and (not dironly or stat.S_ISDIR(st.st_mode)):
                yield from self.select(i + 1, child)

    def directories(self, rel: str) -> Iterator[str]:
        """``rel`` and every directory under it, in pathlib's order (depth first, listing order)."""
        stack = [rel]
        while stack:
            here = stack.pop()
            yield here
            below = []
            for entry in listing(self.root, here, self.clock):
                with suppress(OSError):
                    if entry.is_dir(follow_symlinks=False):
                        below.append(_join(here, entry.name))
            stack.extend(reversed(below))


def glob_parts(pattern: str) -> list[str]:
    """The pattern's components as pathlib 3.11 parses them (a trailing ``/``: directories only)."""
    if not pattern:
        raise ToolFailure("glob: Unacceptable pattern: ''")
    if pattern.startswith("/"):
        raise ToolFailure(
            "glob: absolute pattern not permitted; pass a relative pattern (and optionally path)"
        )
    try:
        pattern = from_shown(pattern)
    except BadPath as e:
        raise ToolFailure(f"glob: the pattern {pattern!r} {e}") from None
    if "\x00" in pattern:
        raise ToolFailure("glob: the pattern contains a NUL byte")
    parts = [p for p in pattern.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise ToolFailure("glob: '..' is not permitted in the pattern")
    if any("**" in p and p != "**" for p in parts):
        raise ToolFailure("glob: Invalid pattern: '**' can only be an entire path component")
    if not parts:
        raise ToolFailure(f"glob: the pattern {pattern!r} names no files; use for example '*' or '**/*.py'")
    return parts + [""] if pattern.endswith("/") else parts


def glob(workspace: str, args: dict[str, Any], stop_at: float) -> str:
    check_args("glob", args)
    pattern = _required("glob", args, "pattern")
    path = string_arg("glob", args, "path", optional=True)
    parts = glob_parts(pattern)
    clock = _Clock(stop_at, "glob")
    with Root.open_exact(workspace) as top:
        rel = target("glob", top, path, workspace) if path else "."
        try:
            root = top.sub(rel)
        except Outside:
            raise ToolFailure("glob: " + OUTSIDE.format(path=path)) from None
        except OSError:
            return "no matches"  # pathlib's glob of what is not a directory
    cap = WALK_MAX_ENTRIES
    matches: list[tuple[float, str]] = []
    with root:
        for found in _Glob(root, parts, clock).select(0, "."):
            clock.tick()
            st = _stat_beneath(root, found)  # the match's modification time, through a symlink
            if st is not None:
                matches.append((st.st_mtime, found))
                if len(matches) >= cap:
                    break
    if not matches:
        return "no matches"
    newest = sorted(matches, key=lambda match: match[0], reverse=True)[:GLOB_RESULT_LIMIT]
    text = "\n".join(shown(root.real if rel == "." else f"{root.real}/{rel}") for _, rel in newest)
    if len(matches) > GLOB_RESULT_LIMIT:
        walk = protocol.GLOB_WALK.format(cap=cap) if len(matches) >= cap else ""
        text += "\n" + protocol.GLOB_CUT.format(shown=GLOB_RESULT_LIMIT, total=len(matches), walk=walk)
    return text


TOOLS: dict[str, Callable[[str, dict[str, Any], float], Any]] = {
    "read": read,
    "write": write,
    "edit": edit,
    "glob": glob,
}
