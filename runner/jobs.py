"""Task files (``jobs/*.toml``) to validated :class:`JobSpec` objects.

A task file holds one job::

    prompt = "Survey this package ..."          # required
    workspace = "{stdlib}/email"                # required; absolute, or relative to the task file
    name = "email-survey"                       # optional, default: the file stem
    model = "claude-sonnet-5-5"                 # optional, default: [runner] model
    system = "You are ..."                      # optional
    tools = ["read", "glob", "grep"]            # optional; bash, write, edit only when listed
    incremental = true                          # optional: start from the last successful run
                                                # (limits.incremental)
    delivery = "batch"                          # optional: "live" or "batch" (limits.delivery;
                                                # default: [runner] delivery)
    [limits]                                    # optional, overrides any limit for this job
    max_turns = 80

``{stdlib}`` in ``workspace`` is replaced by this Python's standard library directory, so demo
jobs can survey a large real codebase on every machine.

Loading never raises for one bad file: each problem becomes a :class:`JobError` naming the file
and the field, and the other files still load.
"""

from __future__ import annotations

import hashlib
import os
import re
import sys
import sysconfig
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, StrictBool, ValidationError, field_validator

from .config import ConfigError, Limits, Settings, describe_errors, read_toml
from .rundir.docs import BATCHES, INDEX, RUN_JSON, VIEW

ToolName = Literal["read", "glob", "grep", "bash", "write", "edit", "task"]
DEFAULT_TOOLS: tuple[ToolName, ...] = ("read", "glob", "grep")
MAX_PROMPT_CHARS = 200_000
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"
MAX_OUTPUTS = 16  # output patterns of one job
# the names the run directory's own files and folders take beside its jobs' directories (its dot files,
# .lock and the like, are no job's name anyway): run.json, batches.jsonl, the viewer's index.html and view/
RESERVED_NAMES = frozenset({RUN_JSON, BATCHES, INDEX, VIEW})
T = TypeVar("T")
SandboxProbe = Callable[[], str | None]  # why bash's sandbox cannot start here, or None


class TaskFile(BaseModel):
    """The fields a task file may hold, as written."""

    model_config = ConfigDict(extra="forbid")

    prompt: str = Field(min_length=1, max_length=MAX_PROMPT_CHARS)
    workspace: str = Field(min_length=1)
    name: str | None = Field(None, pattern=NAME_PATTERN)
    model: str | None = Field(None, min_length=1)
    system: str | None = None
    tools: list[ToolName] = list(DEFAULT_TOOLS)
    incremental: StrictBool | None = None  # limits.incremental, for this job (over [jobs.<name>])
    delivery: Literal["live", "batch"] | None = None  # limits.delivery, for this job (over [jobs.<name>])
    outputs: list[str] = Field(default_factory=list, max_length=MAX_OUTPUTS)
    limits: dict[str, Any] = {}

    @field_validator("prompt")
    @classmethod
    def _not_blank(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("must not be blank")
        return v

    @field_validator("outputs")
    @classmethod
    def _relative_patterns(cls, v: list[str]) -> list[str]:
        for pattern in v:
            problem = output_pattern_problem(pattern)
            if problem:
                raise ValueError(f"{pattern!r}: {problem}")
        return v

    @field_validator("tools")
    @classmethod
    def _unique(cls, v: list[str]) -> list[str]:
        if len(set(v)) != len(v):
            raise ValueError("lists a tool twice")
        return v


class JobSpec(BaseModel):
    """One job, resolved: limits merged, workspace absolute and existing.

    It is also the schema of a job's ``job.json``: :meth:`to_json` writes it (these keys, in this
    order) and ``JobSpec.model_validate`` reads it back, so a resumed job gets the spec it ran with.
    Keys it does not know are ignored (a ``job.json`` of a later version still reads)."""

    model_config = ConfigDict(frozen=True)

    name: str
    source: Path
    prompt: str
    workspace: Path
    model: str
    system: str | None = None
    tools: tuple[ToolName, ...]
    # the job's structured results: files of its directory (patterns, ``**`` for any depth), one row a
    # line, that ``runner diff`` compares by their first column beside the report
    outputs: tuple[str, ...] = ()
    limits: Limits
    # `runner run --fresh`: no baseline for this run (not in job.json)
    fresh: bool = Field(False, exclude=True)

    def to_json(self) -> dict[str, Any]:
        """``job.json``'s content; a job without ``outputs`` leaves the key out, so a ``job.json``
        written before the field existed writes back unchanged."""
        return self.model_dump(mode="json", exclude={"outputs"} if not self.outputs else set())

    def run_fresh(self) -> JobSpec:
        """This job for a run that starts it without a baseline (``--fresh``)."""
        return self.model_copy(update={"fresh": True})


@dataclass(frozen=True)
class JobError:
    """A task file that could not become a job."""

    name: str
    source: Path
    problems: tuple[str, ...]
    # its workspace would expose the system or the run's own files: `run` refuses to start
    unsafe: bool = False
    duplicate: bool = False  # its name is another task file's: `run` refuses to start

    @property
    def message(self) -> str:
        return "; ".join(self.problems)


def _as_written(raw: str, task_file: Path) -> Path:
    """The workspace path as written: ``{stdlib}`` replaced, ``~`` expanded, relative to the task file."""
    path = Path(raw.replace("{stdlib}", sysconfig.get_paths()["stdlib"])).expanduser()
    return path if path.is_absolute() else task_file.parent / path


def expand_workspace(raw: str, task_file: Path) -> Path:
    """The workspace as an absolute path; OSError or ValueError for a path that cannot exist."""
    if "\0" in raw:
        raise ValueError("contains a NUL character")
    return _as_written(raw, task_file).resolve()


def output_pattern_problem(pattern: str) -> str | None:
    """Why ``pattern`` is not an output pattern (a relative path of the job's directory, parts that
    are names or ``fnmatch`` patterns, ``**`` for any number of directories), or None."""
    if not pattern or len(pattern) > 256 or "\0" in pattern or "\\" in pattern:
        return "expected a relative path pattern of at most 256 characters (no NUL, no backslash)"
    if pattern.startswith("/") or any(part in ("", ".", "..") for part in pattern.split("/")):
        return "expected a path relative to the job's directory, without '.', '..' or empty parts"
    return None


def valid_name(name: str) -> bool:
    return bool(re.match(NAME_PATTERN, name)) and not reserved_name(name)


def reserved_name(name: str) -> bool:
    """Whether ``name`` is one the run directory's own files take (whatever its case)."""
    return name.lower() in RESERVED_NAMES


def safe_job_name(raw: str) -> str:
    """A usable job (and directory) name for a task file that could not say its own."""
    if valid_name(raw):
        return raw
    cleaned = re.sub(r"[^A-Za-z0-9._-]", "_", raw).lstrip("._-")[:48] or "job"
    digest = hashlib.sha256(raw.encode("utf-8", "surrogatepass")).hexdigest()[:8]
    return f"{cleaned}-{digest}"


def repository_link(raw: str, task_file: Path) -> tuple[Path, Path, str] | None:
    """A symbolic link on the workspace's path, as written, below a directory that holds a ``.git``:
    ``(repository, link, its target)``, or None. Inside a repository a link is the repository's
    content, which whoever may commit there chooses; above it, the operator's own directories."""
    path = _as_written(raw, task_file)
    here = Path(path.anchor)
    repository: Path | None = None
    for part in path.parts[1:]:
        if part == "..":
            here = here.parent
            continue
        here = here / part
        if repository is not None and here.is_symlink():
            return repository, here, os.readlink(here)
        if here.is_symlink():
            here = here.resolve()
        if repository is None and os.path.lexists(here / ".git"):
            repository = here
    return None


def _check_workspace(raw: str, task_file: Path) -> tuple[Path | None, str | None]:
    try:
        workspace = expand_workspace(raw, task_file)
        if workspace.is_dir() and (link := repository_link(raw, task_file)) is not None:
            repository, at, target = link
            return None, (
                f"{task_file}: workspace: {raw!r} passes through {str(at)!r}, a symbolic link (to "
                f"{target!r}) inside the repository {str(repository)!r}: a link any commit can point "
                "elsewhere; name the directory it points to, if that is what you mean"
            )
        if workspace.is_dir():
            return workspace, None
        if workspace.exists():
            return None, f"{task_file}: workspace: {str(workspace)!r} is not a directory"
        return None, f"{task_file}: workspace: directory {str(workspace)!r} does not exist"
    except (OSError, ValueError, RuntimeError) as e:
        reason = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
        shown = raw if len(raw) <= 80 else raw[:77] + "..."
        return None, f"{task_file}: workspace: not a usable path ({reason}): {shown!r}"


# A workspace is never one of these directories itself (``/`` exposes everything, ``/root`` and
# ``/home`` every home), nor anything below the ones marked True (kernel, devices, system settings);
# a directory below ``/usr`` or ``/root`` is fine (``{stdlib}`` is there).
SYSTEM_DIRS: dict[str, bool] = {
    "/": False,
    "/bin": True,
    "/boot": True,
    "/dev": True,
    "/etc": True,
    "/home": False,
    "/lib": False,
    "/lib32": False,
    "/lib64": False,
    "/libx32": False,
    "/media": False,
    "/mnt": False,
    "/opt": False,
    "/proc": True,
    "/root": False,
    "/run": True,
    "/sbin": True,
    "/srv": False,
    "/sys": True,
    "/tmp": False,
    "/usr": False,
    "/usr/bin": True,
    "/usr/lib": False,
    "/usr/local": False,
    "/usr/sbin": True,
    "/var": False,
    "/var/tmp": False,
}


WRITING_TOOLS = frozenset({"write", "edit"})  # the tools that make a job's workspace writable (bash too)


def protected_paths(settings: Settings, task_file: Path) -> list[tuple[Path, str, bool]]:
    """What decides how the next run runs, which a job that may write must not be able to change:
    ``(path, what it is, whether a workspace inside it is refused too)``. The task file (and so its
    folder: a ``config.toml`` planted there, or above it, would be found first), the config file, or
    where one would be looked for last (``./config.toml``) when there is none, the runner's own code,
    and the Python it runs on (its packages and standard library are imported by the next run)."""
    config = settings.config_file
    found = [(config, "the config file", False)] if config is not None else []
    return [
        (task_file.absolute(), "its task file", False),
        *found,
        *([] if config is not None else [(Path.cwd() / "config.toml", "./config.toml", False)]),
        (Path(__file__).resolve().parent, "the runner's own code", True),
        (Path(sys.prefix), "the Python environment the runner runs in", True),
        (Path(sys.base_prefix), "the Python installation the runner runs on", True),
    ]


def writable_workspace_problem(
    workspace: Path, protected: list[tuple[Path, str, bool]], source: Path | str
) -> str | None:
    """Why a job that may write (``write`` or ``edit``) may not have ``workspace``, or None: it contains
    one of the ``protected`` paths, or lies inside one marked so. Compared as real paths."""
    real = Path(os.path.realpath(workspace))
    for path, what, nor_inside in protected:
        target = Path(os.path.realpath(path))
        if real == target or real in target.parents:
            return (
                f"{source}: workspace: {str(workspace)!r} contains {what} ({str(path)!r}), and the job may "
                "write (tools: write or edit): it could change how the next run runs; give it a "
                "workspace without it, or only the read tools"
            )
        if nor_inside and target in real.parents:
            return (
                f"{source}: workspace: {str(workspace)!r} is inside {what} ({str(path)!r}), and the job "
                "may write (tools: write or edit): the next run would run what it wrote; give it a "
                "copy elsewhere, or only the read tools"
            )
    return None


def workspace_problem(workspace: Path, output_dir: Path | None, source: Path | str) -> str | None:
    """Why ``workspace`` (absolute) may not be a job's workspace, or None: a system directory (see
    :data:`SYSTEM_DIRS`), or one that contains, or lies inside, the output directory (where every
    job's transcript and the viewer's pages are: a job there could read and rewrite the others').
    Compared as real paths, symlinks resolved."""
    real = Path(os.path.realpath(workspace))
    candidates = [real, *real.parents]
    for path in candidates:
        below = SYSTEM_DIRS.get(str(path))
        if below is not None and (path == real or below):
            what = "the root directory" if str(path) == "/" else f"the system directory {str(path)!r}"
            where = "" if path == real else " (inside it)"
            return (
                f"{source}: workspace: {str(workspace)!r} is {what}{where}; expected a project "
                "directory of its own"
            )
    if output_dir is None:
        return None
    runs = Path(os.path.realpath(output_dir))
    if real == runs or real in runs.parents:
        return (
            f"{source}: workspace: {str(workspace)!r} is or contains the output directory "
            f"{str(output_dir)!r} "
            "(every job's files); expected a directory outside it, or set [runner] output_dir elsewhere"
        )
    if runs in real.parents:
        return (
            f"{source}: workspace: {str(workspace)!r} is inside the output directory {str(output_dir)!r}; "
            "expected a directory outside it"
        )
    return None


def load_job(
    task_file: Path, settings: Settings, *, sandbox_problem: SandboxProbe | None = None
) -> JobSpec | JobError:
    """Load one task file; every problem is reported, none raised.

    ``sandbox_problem()`` says why bash's sandbox cannot start on this machine (the caller passes
    :func:`runner.tools.sandbox.bwrap_problem`), or None; it is asked only for a job that lists bash
    under ``sandbox = "bwrap"``. Without it that check is not made."""
    fallback_name = safe_job_name(task_file.stem)
    try:
        data = read_toml(task_file)
    except ConfigError as e:
        return JobError(fallback_name, task_file, tuple(e.problems))
    except (RecursionError, MemoryError, ValueError) as e:  # nested too deep, too big: the parser gave up
        return JobError(fallback_name, task_file, (f"{task_file}: cannot parse: {parse_failure(e)}",))
    try:
        task = TaskFile.model_validate(data)
    except ValidationError as e:
        raw = data.get("name")
        name = raw if isinstance(raw, str) else fallback_name
        name = name if valid_name(name) else fallback_name
        return JobError(
            name,
            task_file,
            tuple(
                describe_errors(str(task_file), e)
                + _other_problems(data, name, task_file, settings=settings, error=e)
            ),
        )
    name = task.name or task_file.stem
    problems: list[str] = []
    if reserved_name(name):
        problems.append(
            f"{task_file}: name: {name!r} is reserved (the run's own files use it); choose another"
        )
        name = safe_job_name(name)
    elif not valid_name(name):
        problems.append(f'{task_file}: name: file stem {name!r} is not a valid job name; set name = "..."')
        name = safe_job_name(name)
    workspace, problem = _check_workspace(task.workspace, task_file)
    unsafe = False
    if workspace is not None and not problem:
        problem = workspace_problem(workspace, settings.runner.output_dir, task_file)
        if not problem and WRITING_TOOLS & set(task.tools):
            problem = writable_workspace_problem(workspace, protected_paths(settings, task_file), task_file)
        workspace, unsafe = (None, True) if problem else (workspace, False)
    if problem:
        problems.append(problem)
    limits = None
    try:
        limits = settings.limits_for(name, own_limits(task))
    except ValidationError as e:
        problems += describe_errors(str(task_file), e, prefix="limits")
    if (
        limits is not None
        and "bash" in task.tools
        and limits.sandbox == "bwrap"
        and sandbox_problem
        and (reason := sandbox_problem())
    ):
        problems.append(
            f"{task_file}: tools: lists bash, which runs under bwrap, but {reason}; "
            'fix that, or set limits.sandbox = "none" to run bash without a sandbox'
        )
    if problems or limits is None or workspace is None:
        return JobError(name, task_file, tuple(problems), unsafe)
    return JobSpec(
        name=name,
        source=task_file.absolute(),
        prompt=task.prompt,
        workspace=workspace,
        model=task.model or settings.runner.model,
        system=task.system,
        tools=tuple(task.tools),
        outputs=tuple(task.outputs),
        limits=limits,
    )


def own_limits(task: TaskFile) -> dict[str, Any]:
    """The task file's own limits: its ``[limits]`` table, and ``incremental`` and ``delivery`` when it
    sets them."""
    own = {"incremental": task.incremental, "delivery": task.delivery}
    return {**task.limits, **{k: v for k, v in own.items() if v is not None}}


def _other_problems(
    data: dict[str, Any], name: str, task_file: Path, *, settings: Settings, error: ValidationError
) -> list[str]:
    """What else is wrong with a task file whose fields did not validate: its ``[limits]`` and its
    workspace, checked as written, so that every problem is reported at once."""
    failed = {str(err["loc"][0]) for err in error.errors() if err["loc"]}
    problems: list[str] = []
    limits = data.get("limits")
    if "limits" not in failed and isinstance(limits, dict) and limits:
        try:
            settings.limits_for(name, limits)
        except ValidationError as e:
            problems += describe_errors(str(task_file), e, prefix="limits")
    workspace = data.get("workspace")
    if "workspace" not in failed and isinstance(workspace, str) and workspace:
        path, problem = _check_workspace(workspace, task_file)
        if path is not None and not problem:
            problem = workspace_problem(path, settings.runner.output_dir, task_file)
        if problem:
            problems.append(problem)
    return problems


def parsed(load: Callable[[], T], source: Path | str | None) -> T:
    """``load()`` (a config file's settings), with a parser that gave up (too deep, too big) as one
    :class:`ConfigError` line naming the file instead of a traceback."""
    try:
        return load()
    except (RecursionError, MemoryError) as e:
        raise ConfigError([f"{source or 'config'}: cannot parse: {parse_failure(e)}"]) from None


def parse_failure(error: BaseException) -> str:
    """Why a TOML parser gave up, in a few words."""
    if isinstance(error, RecursionError):
        return "nested too deeply (expected a task or config file of ordinary depth)"
    if isinstance(error, MemoryError):
        return "too large to parse in memory"
    return str(error)[:200] or type(error).__name__


def find_task_files(targets: list[Path]) -> tuple[list[Path], list[str]]:
    """Expand directories to their ``*.toml`` entries (sorted); report targets that do not exist.

    Every non-hidden ``*.toml`` entry of a directory is a task file, including one that cannot be
    read (a directory, a broken symlink), so that it is reported rather than silently skipped.
    Hidden entries (editor lock and swap files such as ``.#job.toml``) are ignored.
    """
    files: list[Path] = []
    problems: list[str] = []
    for target in targets:
        if target.is_dir():
            files += sorted(p for p in target.glob("*.toml") if not p.name.startswith("."))
        elif target.is_file():
            files.append(target)
        else:
            problems.append(f"{target}: no such file or directory")
    return files, problems


LOOKALIKE_SUFFIXES = frozenset({".toml", ".yaml", ".yml", ".json"})


def lookalike_task_files(targets: list[Path]) -> list[Path]:
    """Entries of the directories in ``targets`` that look like task files but are not read as one: a
    ``.TOML`` (any case but ``.toml``), ``.yaml``, ``.yml`` or ``.json`` file (hidden entries aside)."""
    return [
        p
        for target in targets
        if target.is_dir()
        for p in sorted(target.iterdir())
        if not p.name.startswith(".") and p.suffix.lower() in LOOKALIKE_SUFFIXES and p.suffix != ".toml"
    ]


def load_jobs(
    task_files: list[Path], settings: Settings, *, sandbox_problem: SandboxProbe | None = None
) -> tuple[list[JobSpec], list[JobError]]:
    """Load every task file; duplicate job names are errors for the later files.

    Every result gets a distinct name (a run uses it as a directory name): a task file that failed
    to load, or a duplicate, is renamed ``<name>@<stem>`` (with a number when still taken).
    ``sandbox_problem`` as for :func:`load_job`.
    """
    results = [load_job(task_file, settings, sandbox_problem=sandbox_problem) for task_file in task_files]
    specs: list[JobSpec] = []
    errors: list[JobError] = []
    claimed: dict[str, Path] = {}
    for result in results:  # the first valid file with a name owns it
        if isinstance(result, JobSpec) and result.name not in claimed:
            claimed[result.name] = result.source
    taken = set(claimed)
    placed: set[str] = set()
    given = {result.source: task_file for task_file, result in zip(task_files, results, strict=True)}
    for result in results:
        duplicate = False
        if isinstance(result, JobSpec):
            if claimed[result.name] == result.source and result.name not in placed:
                specs.append(result)
                placed.add(result.name)
                continue
            first = given.get(claimed[result.name], claimed[result.name])
            this = given.get(result.source, result.source)
            problems: tuple[str, ...] = (
                (
                    f"{this}: name: job name {result.name!r} is also the name of {first} (a job's name is "
                    "its `name`, or its file stem when it sets none); each job needs its own name (it names "
                    'the job\'s directory): set name = "..." in one of them',
                )
                if claimed[result.name] != result.source
                else (
                    f"{this}: name: this task file (job {result.name!r}) is given more than once; give it "
                    "once",
                )
            )
            duplicate = True
        else:
            problems = result.problems
        name = result.name
        if name in taken:
            name = _unique(f"{result.name}@{safe_job_name(result.source.stem)}", taken)
        taken.add(name)
        errors.append(
            JobError(name, result.source, problems, isinstance(result, JobError) and result.unsafe, duplicate)
        )
    return specs, errors


def _unique(name: str, taken: set[str]) -> str:
    candidate, n = name, 1
    while candidate in taken:
        n += 1
        candidate = f"{name}.{n}"
    return candidate
