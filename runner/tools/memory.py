"""The memory tool: Anthropic's ``memory_20250818`` (commands ``view``, ``create``, ``str_replace``,
``insert``, ``delete``, ``rename`` on paths under ``/memories``), backed by the job directory's
``memories/`` folder. A place outside the window: compaction never touches these files, and after
every history compaction the window gets a short index of them (:func:`index`).

Guarantees:

- Nothing outside ``memories/`` is opened, listed, created, renamed or deleted: every lookup starts
  at a descriptor of that folder (:mod:`runner.tools.beneath`), the folder itself is opened without
  following a symlink, a ``..`` out, an absolute path not under ``/memories`` and a symlink leading
  out are refused with an error result; writes go to a temporary name renamed over the file.
- Sizes are capped: a memory file at most :data:`MAX_FILE_BYTES`, the folder at most
  :data:`MAX_TOTAL_BYTES`; a write past either is refused (an error result, nothing written).
- A ``view`` of a file returns at most ``page_chars`` characters of numbered lines and says which
  ``view_range`` holds the rest.
- Every command returns a tool_result; a model's mistake (a bad path, a missing file, a wrong type,
  a lone surrogate) is an ``is_error`` result, never an exception.
- ``generation`` counts the writes made, so the repeat guard can tell a ``view`` of changed memory
  from a repeated one.
- A command's file work runs on the event loop when the job directory is on a local file system
  (:func:`runner.rundir.store.local_disk`: a few system calls on files of at most
  :data:`MAX_FILE_BYTES`, cheaper than a hand-off to a thread and back), else on a worker thread.
"""

from __future__ import annotations

import os
import stat
from typing import Any

import anyio
from anthropic.lib.tools import BetaAsyncAbstractMemoryTool, ToolError
from anthropic.types.beta import (
    BetaMemoryTool20250818CreateCommand,
    BetaMemoryTool20250818DeleteCommand,
    BetaMemoryTool20250818InsertCommand,
    BetaMemoryTool20250818RenameCommand,
    BetaMemoryTool20250818StrReplaceCommand,
    BetaMemoryTool20250818ViewCommand,
)

from ..rundir.store import local_disk
from . import file_tools
from .beneath import BadPath, NotRegular, Outside, Root, open_beneath, open_regular, parent_beneath, relative
from .file_tools import ToolFailure

MEMORY_DIR = "memories"
PREFIX = "/memories"
MAX_FILE_BYTES = 256 * 1024
MAX_TOTAL_BYTES = 4 * 1024 * 1024
LINE_NUMBER_WIDTH = 6
MEMORY_TOOL: dict[str, Any] = {"type": "memory_20250818", "name": "memory"}
_ARGS = {
    "view": ("path", "view_range"),
    "create": ("path", "file_text"),
    "str_replace": ("path", "old_str", "new_str"),
    "insert": ("path", "insert_line", "insert_text"),
    "delete": ("path",),
    "rename": ("old_path", "new_path"),
}
WRITES = frozenset({"create", "str_replace", "insert", "delete", "rename"})


def _rel(path: Any) -> str:
    """A model's ``/memories/...`` path as a path relative to the folder (``.`` for the folder)."""
    if not isinstance(path, str):
        raise ToolError(f"path must be a string under {PREFIX}, got {type(path).__name__}")
    if path != PREFIX and not path.startswith(PREFIX + "/"):
        raise ToolError(f"path must start with {PREFIX}, got: {path[:200]!r}")
    try:
        return relative(path[len(PREFIX) :].lstrip("/"), "/")
    except Outside:
        raise ToolError(f"path {path[:200]!r} would leave the {PREFIX} directory") from None
    except BadPath as e:
        raise ToolError(f"path {path[:200]!r} {e}") from None


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


def split_lines(content: str) -> list[str]:
    """A memory file's lines (a trailing newline ends the last line; it does not start another)."""
    if not content:
        return []
    return content[:-1].split("\n") if content.endswith("\n") else content.split("\n")


class MemoryTool(BetaAsyncAbstractMemoryTool):
    """The memory tool of one job, on ``<job dir>/memories``. ``page_chars`` caps a view's text."""

    def __init__(self, job_dir: str, page_chars: int = 20_000):
        super().__init__()
        self.job_dir = job_dir
        self.page_chars = page_chars
        self.generation = 0

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
        args = {"path": None, "old_path": None, "new_path": None, **args}  # a missing path: _rel says so
        if command == "view":
            view_range = args.get("view_range")
            if view_range is not None and (
                not isinstance(view_range, list)
                or len(view_range) != 2
                or not all(isinstance(n, int) and not isinstance(n, bool) for n in view_range)
            ):
                raise ToolError("view_range must be a list of two integers [first line, last line or -1]")
            return await self.view(
                BetaMemoryTool20250818ViewCommand.model_construct(
                    command="view", path=args["path"], view_range=view_range
                )
            )
        if command == "create":
            return await self.create(
                BetaMemoryTool20250818CreateCommand.model_construct(
                    command="create", path=args["path"], file_text=_text(args.get("file_text"), "file_text")
                )
            )
        if command == "str_replace":
            return await self.str_replace(
                BetaMemoryTool20250818StrReplaceCommand.model_construct(
                    command="str_replace",
                    path=args["path"],
                    old_str=_text(args.get("old_str"), "old_str"),
                    new_str=_text(args.get("new_str"), "new_str"),
                )
            )
        if command == "insert":
            return await self.insert(
                BetaMemoryTool20250818InsertCommand.model_construct(
                    command="insert",
                    path=args["path"],
                    insert_line=_number(args.get("insert_line"), "insert_line"),
                    insert_text=_text(args.get("insert_text"), "insert_text"),
                )
            )
        if command == "delete":
            return await self.delete(
                BetaMemoryTool20250818DeleteCommand.model_construct(command="delete", path=args["path"])
            )
        return await self.rename(
            BetaMemoryTool20250818RenameCommand.model_construct(
                command="rename", old_path=args["old_path"], new_path=args["new_path"]
            )
        )

    async def _file_work(self, work: Any, *args: Any) -> Any:
        """``work(*args)``: here on the loop on a local disk, else on a worker thread (the Guarantees)."""
        if local_disk(self.job_dir):
            return work(*args)
        return await anyio.to_thread.run_sync(work, *args)

    # -- the SDK's interface -----------------------------------------------------------------------

    async def view(self, command: BetaMemoryTool20250818ViewCommand) -> str:
        rel = _rel(command.path)
        return await self._file_work(self._view, command.path, rel, command.view_range)

    async def create(self, command: BetaMemoryTool20250818CreateCommand) -> str:
        rel = _rel(command.path)
        await self._file_work(self._put, command.path, rel, command.file_text)
        return f"File created successfully at: {command.path}"

    async def str_replace(self, command: BetaMemoryTool20250818StrReplaceCommand) -> str:
        rel = _rel(command.path)

        def change(content: str) -> str:
            count = content.count(command.old_str) if command.old_str else 0
            if count != 1:
                raise ToolError(
                    f"no replacement was performed: old_str appears {count} times in {command.path} "
                    "(it must appear exactly once)"
                )
            return content.replace(command.old_str, command.new_str, 1)

        await self._file_work(self._change, command.path, rel, change)
        return f"The memory file {command.path} has been edited."

    async def insert(self, command: BetaMemoryTool20250818InsertCommand) -> str:
        rel = _rel(command.path)

        def change(content: str) -> str:
            lines = split_lines(content)
            if not 0 <= command.insert_line <= len(lines):
                raise ToolError(
                    f"invalid insert_line {command.insert_line}: it should be within [0, {len(lines)}]"
                )
            lines[command.insert_line : command.insert_line] = split_lines(command.insert_text) or [""]
            return "\n".join(lines) + "\n"

        await self._file_work(self._change, command.path, rel, change)
        return f"The file {command.path} has been edited."

    async def delete(self, command: BetaMemoryTool20250818DeleteCommand) -> str:
        rel = _rel(command.path)
        if rel == ".":
            raise ToolError(f"cannot delete the {PREFIX} directory itself")
        await self._file_work(self._delete, command.path, rel)
        return f"Successfully deleted {command.path}"

    async def rename(self, command: BetaMemoryTool20250818RenameCommand) -> str:
        old, new = _rel(command.old_path), _rel(command.new_path)
        if "." in (old, new):
            raise ToolError(f"cannot rename the {PREFIX} directory itself")
        await self._file_work(self._rename, command.old_path, old, command.new_path, new)
        return f"Successfully renamed {command.old_path} to {command.new_path}"

    # -- on a worker thread, beneath the folder's descriptor ----------------------------------------

    def _root(self, create: bool) -> Root:
        with Root.open(self.job_dir) as job:
            if create:
                try:
                    os.mkdir(MEMORY_DIR, 0o700, dir_fd=job.fd)
                except FileExistsError:
                    pass
            try:
                fd = open_beneath(job, MEMORY_DIR, os.O_RDONLY | os.O_DIRECTORY, no_symlinks=True)
            except FileNotFoundError:
                raise ToolError(f"{PREFIX} is empty (no memory file yet)") from None
            except OSError as e:
                raise ToolError(f"{PREFIX} is not a directory of the job ({file_tools.reason(e)})") from None
        return Root(fd, os.path.join(job.real, MEMORY_DIR))

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
            text += f"\n{page_footer(path, first, end, len(lines))}"
        return text

    def _listing(self, root: Root, path: str, rel: str) -> str:
        items = [(size, f"{path.rstrip('/')}/{name}") for name, size in files(root, rel, depth=2)]
        return (
            f"Here're the files and directories up to 2 levels deep in {path}, excluding hidden items:\n"
            + "\n".join([f"-\t{path}", *(f"{size}\t{p}" for size, p in items)])
        )

    def _put(self, path: str, rel: str, content: str) -> None:
        with self._root(create=True) as root:
            self._write(root, path, rel, content)

    def _write(self, root: Root, path: str, rel: str, content: str) -> None:
        data = content.encode("utf-8")
        if len(data) > MAX_FILE_BYTES:
            raise ToolError(
                f"{path}: {len(data)} bytes, over the {MAX_FILE_BYTES}-byte limit of a memory file"
            )
        try:
            old = os.stat(rel, dir_fd=root.fd, follow_symlinks=False).st_size
        except OSError:
            old = 0
        total = sum(size for _, size in files(root, ".", depth=100))
        if total - old + len(data) > MAX_TOTAL_BYTES:
            raise ToolError(
                f"{path}: the memory folder would hold {total - old + len(data)} bytes, over its "
                f"{MAX_TOTAL_BYTES}-byte limit; delete or shorten a memory file first"
            )
        file_tools.write_beneath("memory", root, rel, path, data)

    def _change(self, path: str, rel: str, change: Any) -> None:
        with self._root(create=False) as root:
            self._write(root, path, rel, change(self._read(root, path, rel)))

    def _delete(self, path: str, rel: str) -> None:
        with self._root(create=False) as root:
            try:
                dirfd, name = parent_beneath(root, rel)
            except Outside:
                raise ToolError(f"{path}: leads outside {PREFIX}") from None
            except OSError as e:
                raise ToolError(f"the path {path} does not exist ({file_tools.reason(e)})") from None
            try:
                _remove(dirfd, name, path)
            finally:
                os.close(dirfd)

    def _rename(self, old_path: str, old: str, new_path: str, new: str) -> None:
        with self._root(create=False) as root:
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


def page_footer(path: str, first: int, end: int, total: int) -> str:
    return f"[memory: lines {first}-{end} of {total} shown; view the rest with view_range [{end + 1}, -1]]"


def _remove(dirfd: int, name: str, path: str) -> None:
    """``name`` in ``dirfd`` removed: a file or link itself, a directory with everything in it (by
    descriptor, never following a link)."""
    try:
        mode = os.stat(name, dir_fd=dirfd, follow_symlinks=False).st_mode
    except FileNotFoundError:
        raise ToolError(f"the path {path} does not exist") from None
    if not stat.S_ISDIR(mode):
        os.unlink(name, dir_fd=dirfd)
        return
    fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dirfd)
    try:
        for entry in os.listdir(fd):
            _remove(fd, entry, path)
    finally:
        os.close(fd)
    os.rmdir(name, dir_fd=dirfd)


def files(root: Root, rel: str = ".", depth: int = 100) -> list[tuple[str, int]]:
    """``(path relative to rel, size)`` of the regular files (and, with a trailing ``/``, the
    directories) beneath ``rel``, sorted, hidden names left out, links not followed."""
    out: list[tuple[str, int]] = []

    def walk(fd: int, prefix: str, level: int) -> None:
        for name in sorted(os.listdir(fd)):
            if name.startswith("."):
                continue
            try:
                st = os.stat(name, dir_fd=fd, follow_symlinks=False)
            except OSError:
                continue
            if stat.S_ISREG(st.st_mode):
                out.append((prefix + name, st.st_size))
            elif stat.S_ISDIR(st.st_mode):
                out.append((prefix + name + "/", 0))
                if level < depth:
                    try:
                        sub = os.open(
                            name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd
                        )
                    except OSError:
                        continue
                    try:
                        walk(sub, prefix + name + "/", level + 1)
                    finally:
                        os.close(sub)

    top = open_beneath(root, rel, os.O_RDONLY | os.O_DIRECTORY)
    try:
        walk(top, "", 1)
    finally:
        os.close(top)
    return out


def memory_files(job_dir: str) -> list[tuple[str, int]]:
    """The job's memory files (``/memories/...`` path, bytes), for the index after a compaction and
    the viewer; empty when there are none. Never follows a link out."""
    try:
        with Root.open(job_dir) as job:
            fd = open_beneath(job, MEMORY_DIR, os.O_RDONLY | os.O_DIRECTORY, no_symlinks=True)
            with Root(fd, os.path.join(job.real, MEMORY_DIR)) as root:
                return [(f"{PREFIX}/{p}", size) for p, size in files(root) if not p.endswith("/")]
    except OSError:
        return []


__all__ = ["MEMORY_TOOL", "MemoryTool", "memory_files", "split_lines"]
