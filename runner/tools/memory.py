"""The memory tool: Anthropic's ``memory_20250818`` (commands ``view``, ``create``, ``str_replace``,
``insert``, ``delete``, ``rename`` on paths under ``/memories``), backed by the job directory's
``memories/`` folder. A place outside the window: compaction never touches these files, and after
every history compaction the window gets a short index of them (:func:`index`). The folder's names,
limits and listing are in :mod:`runner.tools.memory_files`; this module is the tool's commands, in the
wording of the SDK's memory tool (``anthropic.lib.tools``), with no import of the SDK.

Guarantees:

- Nothing outside ``memories/`` is opened, listed, created, renamed or deleted: every lookup starts
  at a descriptor of that folder (:mod:`runner.tools.beneath`), the folder itself is opened without
  following a symlink (``O_NOFOLLOW`` on its name in the job directory), a ``..`` out, an absolute path
  not under ``/memories`` and a symlink leading out are refused with an error result; writes go to a
  temporary name renamed over the file.
- Sizes are capped: a memory file at most :data:`MAX_FILE_BYTES`, the folder at most
  :data:`MAX_TOTAL_BYTES` of what is on disk (every entry's size, hidden names and directories
  included: :func:`runner.tools.memory_files.tally`) and at most ``max_entries`` entries (files and
  directories: the job's ``max_memory_entries``); a write past either is refused (an error result,
  nothing written). The folder is walked once (at the job's first command that opens it); from then
  on its bytes and entries are a running count, kept from what each write changed (the file, and
  the directories on its path, each looked at by ``lstat``), so a write costs the same in a folder of
  one file or of thousands.
- No hidden name is made: a ``create`` path or a ``rename`` destination with a component starting
  with ``.`` is refused (an error result), as the listing and the index would not show it.
- No path is deeper than :data:`MAX_DEPTH` components: a ``create`` deeper, or a ``rename`` that would
  put something deeper (a directory's own levels counted), is refused (an error result), so the
  folder's walkers, ``runner prune`` and a resume never meet a deep tree here.
- A ``view`` of a file returns at most ``page_chars`` characters of numbered lines and says which
  ``view_range`` holds the rest.
- Every command returns a tool_result; a model's mistake (a bad path, a missing file, a wrong type,
  a lone surrogate) is an ``is_error`` result, never an exception.
- ``generation`` counts the writes made, so the repeat guard can tell a ``view`` of changed memory
  from a repeated one.
- A command's file work runs on one of the job's worker threads (:func:`runner.tools.shares.in_thread`),
  never on the event loop, one command at a time: a reply of thousands of memory calls leaves the
  loop free between them, and a cancelled job waits for at most the one command in progress (a few
  system calls on files of at most :data:`MAX_FILE_BYTES`; the listing of a ``view`` walks at most
  the folder's ``max_entries``).
"""

from __future__ import annotations

import os
import stat
import threading
from contextlib import suppress
from functools import partial
from pathlib import Path
from typing import Any

from . import file_tools
from .beneath import (
    BadPath,
    NotRegular,
    Outside,
    Root,
    fd_path,
    open_beneath,
    open_regular,
    parent_beneath,
    relative,
)
from .file_tools import ToolFailure
from .memory_files import (
    MAX_DEPTH,
    MAX_FILE_BYTES,
    MAX_TOTAL_BYTES,
    MEMORY_DIR,
    PREFIX,
    WRITES,
    Tally,
    chain,
    files,
    levels,
    split_lines,
    tally,
)
from .shares import in_thread, share_of

MEMORY_TOOL: dict[str, Any] = {"type": "memory_20250818", "name": "memory"}  # the API's own definition
LINE_NUMBER_WIDTH = 6
MAX_ENTRIES = 1_000  # the default of a job's max_memory_entries
_ARGS = {
    "view": ("path", "view_range"),
    "create": ("path", "file_text"),
    "str_replace": ("path", "old_str", "new_str"),
    "insert": ("path", "insert_line", "insert_text"),
    "delete": ("path",),
    "rename": ("old_path", "new_path"),
}
_FOLDER_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class ToolError(Exception):
    """A command the model got wrong, or that cannot be done: its text (after ``memory: ``) is the
    error result (the SDK's memory tool raises its own ``ToolError`` for the same cases)."""


def _rel(path: Any, *, new: bool = False) -> str:
    """A model's ``/memories/...`` path as a path relative to the folder (``.`` for the folder); with
    ``new`` (a name a command makes: ``create``'s path, ``rename``'s new path), one with no hidden name."""
    if not isinstance(path, str):
        raise ToolError(f"path must be a string under {PREFIX}, got {type(path).__name__}")
    if path != PREFIX and not path.startswith(PREFIX + "/"):
        raise ToolError(f"path must start with {PREFIX}, got: {path[:200]!r}")
    try:
        rel = relative(path[len(PREFIX) :].lstrip("/"), "/")
    except Outside:
        raise ToolError(f"path {path[:200]!r} would leave the {PREFIX} directory") from None
    except BadPath as e:
        raise ToolError(f"path {path[:200]!r} {e}") from None
    if new:
        _check_new(path, rel)
    return rel


def _check_new(path: str, rel: str, below: int = 0) -> None:
    """Refuses a name a command would make that is hidden (a component starting with ``.``: the
    listing and the index leave hidden names out, so memory there would be memory no one sees) or
    deeper than :data:`MAX_DEPTH` components, counting the ``below`` levels a renamed directory holds."""
    if rel == ".":
        return
    parts = rel.split("/")
    hidden = next((part for part in parts if part.startswith(".")), None)
    if hidden is not None:
        raise ToolError(
            f"path {path[:200]!r} has a hidden name ({hidden[:100]!r}); "
            f"names in {PREFIX} may not start with '.'"
        )
    if len(parts) + below > MAX_DEPTH:
        held = f" (with the {below} levels of the directory moved there)" if below else ""
        raise ToolError(
            f"path {path[:200]!r} would be {len(parts) + below} components deep{held}, more than the "
            f"{MAX_DEPTH} a memory path may have; use a shallower path"
        )


def _text(value: Any, key: str) -> str:
    if not isinstance(value, str):
        raise ToolError(f"{key} (a string) is required, got {type(value).__name__}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ToolError(f"{key} is not valid text (a lone surrogate)") from None
    return value


def _number(value: Any, key: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise ToolError(f"{key} (an integer) is required, got {type(value).__name__}")
    return value


def _numbered(lines: list[str], start: int) -> str:
    return "\n".join(f"{str(i + start).rjust(LINE_NUMBER_WIDTH)}\t{line}" for i, line in enumerate(lines))


class MemoryTool:
    """The memory tool of one job, on ``<job dir>/memories``. ``page_chars`` caps a view's text,
    ``max_entries`` the entries the folder may hold."""

    name = "memory"
    definition = MEMORY_TOOL

    def __init__(self, job_dir: str, page_chars: int = 20_000, max_entries: int = MAX_ENTRIES):
        self.job_dir = job_dir
        self.page_chars = page_chars
        self.max_entries = max_entries
        self.generation = 0
        self._folder = os.path.join(job_dir, MEMORY_DIR)
        self._real: str | None = None  # the folder's real path, learned at its first open
        self._tally: Tally | None = None  # what the folder holds, walked once, then kept up to date
        self._lock = threading.Lock()  # one command's file work at a time (each on a worker thread)

    # -- the tool_result a session gets ----------------------------------------------------------

    async def run(self, tool_use_id: str, args: dict[str, Any]) -> dict[str, Any]:
        command = args.get("command")
        try:
            if command not in _ARGS:
                raise ToolError(f"unknown command {command!r}; expected one of {', '.join(_ARGS)}")
            extra = sorted(str(k) for k in args if k != "command" and k not in _ARGS[command])
            if extra:
                raise ToolError(
                    f"unexpected argument(s) {', '.join(extra)}; {command} takes {', '.join(_ARGS[command])}"
                )
            text = await self._dispatch(command, args)
        except ToolError as e:
            return _error(tool_use_id, f"memory: {e}")
        except ToolFailure as e:
            return _error(tool_use_id, e.text)
        except Exception as e:  # a bug must not crash the job; the model sees what happened
            return _error(tool_use_id, f"memory: {command} failed: {type(e).__name__}: {e}")
        if command in WRITES:
            self.generation += 1
        return {"type": "tool_result", "tool_use_id": tool_use_id, "content": text}

    async def _dispatch(self, command: str, args: dict[str, Any]) -> str:
        path = args.get("path")  # a missing path: _rel says so
        if command == "view":
            view_range = args.get("view_range")
            if view_range is not None and (
                not isinstance(view_range, list)
                or len(view_range) != 2
                or not all(isinstance(n, int) and not isinstance(n, bool) for n in view_range)
            ):
                raise ToolError("view_range must be a list of two integers [first line, last line or -1]")
            return await self.view(path=path, view_range=view_range)
        if command == "create":
            return await self.create(path=path, file_text=_text(args.get("file_text"), "file_text"))
        if command == "str_replace":
            return await self.str_replace(
                path=path,
                old_str=_text(args.get("old_str"), "old_str"),
                new_str=_text(args.get("new_str"), "new_str"),
            )
        if command == "insert":
            return await self.insert(
                path=path,
                insert_line=_number(args.get("insert_line"), "insert_line"),
                insert_text=_text(args.get("insert_text"), "insert_text"),
            )
        if command == "delete":
            return await self.delete(path=path)
        return await self.rename(old_path=args.get("old_path"), new_path=args.get("new_path"))

    async def _file_work(self, work: Any, *args: Any) -> Any:
        """``work(*args)`` on one of the job's worker threads, one command at a time (the Guarantees)."""
        return await in_thread(share_of(Path(self.job_dir)), self._locked, work, *args)

    def _locked(self, work: Any, *args: Any) -> Any:
        with self._lock:
            return work(*args)

    def _held(self, root: Root) -> Tally:
        """The folder's running count: walked the first time, then kept by each write."""
        if self._tally is None:
            self._tally = tally(root)
        return self._tally

    def _room(self, path: str, held: Tally, made: int) -> None:
        """Refuses a command that would make ``made`` new entries past ``max_entries``."""
        if made > 0 and held.entries + made > self.max_entries:
            raise ToolError(
                f"{path}: the memory folder would hold {held.entries + made} entries (files and "
                f"directories), over its limit of {self.max_entries} (max_memory_entries); delete or "
                "merge memory files first"
            )

    # -- the commands (the SDK memory tool's, with its results' wording) ----------------------------

    async def view(self, *, path: Any, view_range: list[int] | None) -> str:
        rel = _rel(path)
        return await self._file_work(self._view, path, rel, view_range)

    async def create(self, *, path: Any, file_text: str) -> str:
        rel = _rel(path, new=True)
        await self._file_work(self._put, path, rel, file_text)
        return f"File created successfully at: {path}"

    async def str_replace(self, *, path: Any, old_str: str, new_str: str) -> str:
        rel = _rel(path)

        def change(content: str) -> str:
            count = content.count(old_str) if old_str else 0
            if count != 1:
                raise ToolError(
                    f"no replacement was performed: old_str appears {count} times in {path} "
                    "(it must appear exactly once)"
                )
            return content.replace(old_str, new_str, 1)

        await self._file_work(self._change, path, rel, change)
        return f"The memory file {path} has been edited."

    async def insert(self, *, path: Any, insert_line: int, insert_text: str) -> str:
        rel = _rel(path)

        def change(content: str) -> str:
            lines = split_lines(content)
            if not 0 <= insert_line <= len(lines):
                raise ToolError(f"invalid insert_line {insert_line}: it should be within [0, {len(lines)}]")
            lines[insert_line:insert_line] = split_lines(insert_text) or [""]
            return "\n".join(lines) + "\n"

        await self._file_work(self._change, path, rel, change)
        return f"The file {path} has been edited."

    async def delete(self, *, path: Any) -> str:
        rel = _rel(path)
        if rel == ".":
            raise ToolError(f"cannot delete the {PREFIX} directory itself")
        await self._file_work(self._delete, path, rel)
        return f"Successfully deleted {path}"

    async def rename(self, *, old_path: Any, new_path: Any) -> str:
        old, new = _rel(old_path), _rel(new_path, new=True)
        if "." in (old, new):
            raise ToolError(f"cannot rename the {PREFIX} directory itself")
        await self._file_work(partial(self._rename, new=new), old_path, old, new_path)
        return f"Successfully renamed {old_path} to {new_path}"

    # -- the file work, beneath the folder's descriptor ---------------------------------------------

    def _root(self, create: bool) -> Root:
        """The folder, opened by its name in the job directory without following a link at that name
        (the job directory is the runner's own, its path trusted as :meth:`Root.open` trusts it); made
        first when ``create`` and missing. One ``open`` (and a ``mkdir`` the first time)."""
        try:
            fd = self._open_folder(create)
        except FileNotFoundError:
            if create:  # no job directory: a bug, said as one
                raise
            raise ToolError(f"{PREFIX} is empty (no memory file yet)") from None
        except OSError as e:  # a link at the name (ELOOP), a file (ENOTDIR)
            raise ToolError(f"{PREFIX} is not a directory of the job ({file_tools.reason(e)})") from None
        if self._real is None:  # used only to map an absolute link that points back inside
            self._real = fd_path(fd) or os.path.realpath(self._folder)
        return Root(fd, self._real)

    def _open_folder(self, create: bool) -> int:
        try:
            return os.open(self._folder, _FOLDER_FLAGS)
        except FileNotFoundError:
            if not create:
                raise
        with suppress(FileExistsError):
            os.mkdir(self._folder, 0o700)
        return os.open(self._folder, _FOLDER_FLAGS)

    def _read(self, root: Root, path: str, rel: str) -> str:
        try:
            fd, st = open_regular(root, rel)
        except Outside:
            raise ToolError(f"{path}: leads outside {PREFIX}") from None
        except NotRegular:
            raise ToolError(f"{path}: not a file") from None
        except OSError as e:
            raise ToolError(f"{path}: {file_tools.reason(e)}") from None
        with os.fdopen(fd, "rb") as f:
            if st.st_size > MAX_FILE_BYTES:
                raise ToolError(
                    f"{path}: {st.st_size} bytes, over the {MAX_FILE_BYTES}-byte limit of a memory file"
                )
            return f.read(MAX_FILE_BYTES + 1).decode("utf-8", errors="replace")

    def _view(self, path: str, rel: str, view_range: list[int] | None) -> str:
        with self._root(create=rel == ".") as root:
            try:
                probe = open_beneath(root, rel, os.O_PATH)
            except Outside:
                raise ToolError(f"{path}: leads outside {PREFIX}") from None
            except OSError as e:
                raise ToolError(f"the path {path} does not exist ({file_tools.reason(e)})") from None
            try:
                is_dir = stat.S_ISDIR(os.fstat(probe).st_mode)
            finally:
                os.close(probe)
            if is_dir:
                return self._listing(root, path, rel)
            lines = split_lines(self._read(root, path, rel))
        first = max(1, view_range[0]) if view_range else 1
        last = len(lines) if not view_range or view_range[1] == -1 else min(view_range[1], len(lines))
        if first > max(1, len(lines)):
            raise ToolError(f"view_range starts at line {first}; {path} has {len(lines)} lines")
        shown: list[str] = []
        used = 0
        for line in lines[first - 1 : last]:
            if shown and used + len(line) + LINE_NUMBER_WIDTH + 2 > self.page_chars:
                break
            shown.append(line)
            used += len(line) + LINE_NUMBER_WIDTH + 2
        end = first + len(shown) - 1
        text = f"Here's the content of {path} with line numbers:\n{_numbered(shown, first)}"
        if end < last:
            text += (
                f"\n[memory: lines {first}-{end} of {len(lines)} shown; "
                f"view the rest with view_range [{end + 1}, -1]]"
            )
        return text

    def _listing(self, root: Root, path: str, rel: str) -> str:
        items = [(size, f"{path.rstrip('/')}/{name}") for name, size in files(root, rel, depth=2)]
        return (
            f"Here're the files and directories up to 2 levels deep in {path}, excluding hidden items:\n"
            + "\n".join([f"-\t{path}", *(f"{size}\t{p}" for size, p in items)])
        )

    def _put(self, path: str, rel: str, content: str) -> None:
        with self._root(create=True) as root:
            self._write(root, path, rel, content=content)

    def _write(self, root: Root, path: str, rel: str, *, content: str) -> None:
        data = content.encode("utf-8")
        if len(data) > MAX_FILE_BYTES:
            raise ToolError(
                f"{path}: {len(data)} bytes, over the {MAX_FILE_BYTES}-byte limit of a memory file"
            )
        before = chain(root, rel)  # the directories on the way that exist now
        try:
            old, new = os.stat(rel, dir_fd=root.fd, follow_symlinks=False).st_size, 0
        except OSError:
            old, new = 0, 1
        held = self._held(root)  # everything there, hidden names and directories included
        if held.bytes - old + len(data) > MAX_TOTAL_BYTES:
            raise ToolError(
                f"{path}: the memory folder would hold {held.bytes - old + len(data)} bytes, over its "
                f"{MAX_TOTAL_BYTES}-byte limit; delete or shorten a memory file first"
            )
        self._room(path, held, rel.count("/") - len(before) + new)
        wrote = False
        try:
            file_tools.write_beneath("memory", root, rel, path=path, data=data)
            wrote = True
        finally:  # the directories made on the way (even by a write that failed), and the file
            after = chain(root, rel)
            held.bytes += sum(after.values()) - sum(before.values())
            held.entries += len(after) - len(before)
            if wrote:
                held.bytes += len(data) - old
                held.entries += new

    def _change(self, path: str, rel: str, change: Any) -> None:
        with self._root(create=False) as root:
            self._write(root, path, rel, content=change(self._read(root, path, rel)))

    def _delete(self, path: str, rel: str) -> None:
        with self._root(create=False) as root:
            held = self._held(root)
            before = chain(root, rel)
            try:
                dirfd, name = parent_beneath(root, rel)
            except Outside:
                raise ToolError(f"{path}: leads outside {PREFIX}") from None
            except OSError as e:
                raise ToolError(f"the path {path} does not exist ({file_tools.reason(e)})") from None
            gone = Tally()
            try:
                _remove(dirfd, name, path, gone=gone)
            finally:  # what went, even when a failure stopped the removal part-way
                os.close(dirfd)
                after = chain(root, rel)
                held.bytes += sum(after.values()) - sum(before.values()) - gone.bytes
                held.entries -= gone.entries

    def _rename(self, old_path: str, old: str, new_path: str, *, new: str) -> None:
        with self._root(create=False) as root:
            _check_new(new_path, new, levels(root, old))
            held = self._held(root)
            before = {**chain(root, old), **chain(root, new)}
            self._room(new_path, held, new.count("/") - len(chain(root, new)))  # directories to make
            try:
                self._move(old_path, old, new_path, new=new, root=root)
            finally:  # a move keeps what it moves; the directories made on the way are new
                after = {**chain(root, old), **chain(root, new)}
                held.bytes += sum(after.values()) - sum(before.values())
                held.entries += len(after) - len(before)

    def _move(self, old_path: str, old: str, new_path: str, *, new: str, root: Root) -> None:
        """``old`` renamed to ``new``, the directories on the way to ``new`` made."""
        try:
            src, src_name = parent_beneath(root, old)
            try:
                dst, dst_name = parent_beneath(root, new, create=True)
            except BaseException:
                os.close(src)
                raise
        except Outside:
            raise ToolError("the path leads outside " + PREFIX) from None
        except OSError as e:
            raise ToolError(f"{old_path} -> {new_path}: {file_tools.reason(e)}") from None
        try:
            try:
                os.stat(dst_name, dir_fd=dst, follow_symlinks=False)
                raise ToolError(f"the destination {new_path} already exists")
            except FileNotFoundError:
                pass
            try:
                os.rename(src_name, dst_name, src_dir_fd=src, dst_dir_fd=dst)
            except OSError as e:
                raise ToolError(f"{old_path} -> {new_path}: {file_tools.reason(e)}") from None
        finally:
            os.close(src)
            os.close(dst)


def _error(tool_use_id: str, text: str) -> dict[str, Any]:
    """An error result, valid UTF-8 whatever the model sent (a lone surrogate is escaped)."""
    safe = text[:2000].encode("utf-8", "backslashreplace").decode("utf-8")
    return {"type": "tool_result", "tool_use_id": tool_use_id, "content": safe, "is_error": True}


def _remove(dirfd: int, name: str, path: str, *, gone: Tally) -> None:
    """``name`` in ``dirfd`` removed: a file or link itself, a directory with everything in it (by
    descriptor, never following a link); ``gone`` counts each entry removed (its ``lstat`` size)."""
    try:
        st = os.stat(name, dir_fd=dirfd, follow_symlinks=False)
    except FileNotFoundError:
        raise ToolError(f"the path {path} does not exist") from None
    if stat.S_ISDIR(st.st_mode):
        fd = os.open(name, _FOLDER_FLAGS, dir_fd=dirfd)
        try:
            for entry in os.listdir(fd):
                _remove(fd, entry, path, gone=gone)
        finally:
            os.close(fd)
        os.rmdir(name, dir_fd=dirfd)
    else:
        os.unlink(name, dir_fd=dirfd)
    gone.bytes += st.st_size
    gone.entries += 1
