"""An incremental job's start (``limits.incremental``): its workspace manifest, its baseline, and the
message that tells the model what changed since.

The baseline is the newest earlier run in the same output directory whose job of the same name, with
the same prompt and workspace, succeeded and left a usable ``manifest.jsonl`` and ``final.md``. With
one, the job starts with its prompt and then one more user message (:func:`runner.protocol.incremental_note`;
the window joins the two into its first message, the transcript keeps both lines, the first still the
prompt alone): when the analysis ran, where its report is (copied in as ``BASELINE_REPORT``, so
``recall`` reads it), the counts of files added, changed and removed, the first of each, and where the
full lists are (``BASELINE_CHANGES``); and the unchanged files that import an added, changed or
removed one (:mod:`runner.rundir.dependents`), the first of them in the note, every one in the lists.
The baseline's ``memories/`` is copied in as the job's memory, and
each of its subagents that succeeded and that its report names (``agents/<n>-<slug>/``, or a copy it
carried over itself: its ``final.md``, ``job.json``, ``metrics.json`` and ``memories/``) into
``BASELINE_AGENTS``, listed with its task prompt in ``BASELINE_AGENTS_LIST``, so that a part of the work
whose files did not change can be carried over night after night instead of done again.
The record's ``incremental`` names the baseline, the counts and the baseline's cost; or, with no usable
baseline (or ``--fresh``), why the job runs fresh.

Guarantees:
- Never an error: an unusable baseline, an output directory that cannot be listed, a workspace that
  cannot be walked or is deeper than a manifest goes (:data:`runner.rundir.manifest.MAX_DEPTH`) mean a
  full run, the reason in the record (and in the job's one line on stderr).
- What the workspace holds reaches the model only as quoted data: the note's lists and the saved
  change lists name each path as :func:`runner.protocol.listed_path` writes it (a name that is not
  plain is a JSON string), after the runtime's own words, never as a line of its own.
- Only the job's own starting segment decides: a resumed job continues from its transcript and keeps
  its record's baseline (:meth:`~runner.agent.spend.Spend.carry_over`); a subagent (its
  directory under ``agents/``) starts from its prompt alone.
- The walks and copies run off the event loop; nothing outside the baseline's job directory is read
  for it (its memory files are opened beneath it, no symlink followed).
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

from ..config import ConfigError
from ..jobs import JobSpec
from ..messages import Message
from ..protocol import (
    INCREMENTAL_AGENTS,
    INCREMENTAL_MEMORY,
    agents_text,
    changes_text,
    incremental_note,
    listed_path,
)
from ..rundir import dependents
from ..rundir.dependents import Dependents
from ..rundir.docs import (
    AGENTS,
    BASELINE_AGENTS,
    BASELINE_AGENTS_LIST,
    BASELINE_CHANGES,
    BASELINE_MEMORIES,
    BASELINE_REPORT,
    FINAL,
    JOB_JSON,
    MANIFEST,
    METRICS,
    Incremental,
    JobMetrics,
    Status,
    read_json,
    read_metrics,
)
from ..rundir.manifest import Changes, Manifest, build, diff, read_manifest
from ..rundir.prune import find_runs
from ..rundir.store import JobStore, in_thread
from ..rundir.trees import TooDeep
from ..tools.beneath import Root, open_regular
from ..tools.git_state import git_state
from ..tools.memory_files import MEMORY_DIR, PREFIX, memory_files

FRESH_FLAG = "--fresh: a full run was asked for"


@dataclass
class Baseline:
    """An earlier run's job this one starts from."""

    job_dir: Path
    manifest: Manifest
    metrics: JobMetrics

    @property
    def run(self) -> str:
        return self.job_dir.parent.name


def _head(job_dir: Path, spec: JobSpec) -> tuple[float | None, str | None]:
    """When ``job_dir``'s manifest was made, or why the job there is no baseline for ``spec`` (the
    cheap checks: its status, prompt, workspace, final.md and manifest head)."""
    metrics = read_metrics(job_dir)
    status = metrics.status if metrics is not None else "(no metrics.json)"
    if status != Status.SUCCEEDED:
        return None, f"ended {status}"
    job, _ = read_json(job_dir / JOB_JSON)
    if not isinstance(job, dict) or job.get("prompt") != spec.prompt:
        return None, "had another prompt" if isinstance(job, dict) else "has no readable job.json"
    if job.get("workspace") != str(spec.workspace):
        return None, f"had another workspace ({str(job.get('workspace'))[:200]})"
    if not (job_dir / FINAL).is_file():
        return None, "has no final.md"
    try:
        with (job_dir / MANIFEST).open(encoding="utf-8") as f:
            head = f.readline()
    except OSError:
        return None, f"has no usable {MANIFEST} (missing)"
    created = _created(head)
    if created is None:
        return None, f"has no usable {MANIFEST} (damaged head line)"
    return created, None


def _created(line: str) -> float | None:
    try:
        head = json.loads(line)
    except ValueError:
        return None
    created = head.get("created") if isinstance(head, dict) else None
    return float(created) if isinstance(created, (int, float)) and not isinstance(created, bool) else None


def find_baseline(spec: JobSpec, run_dir: Path, before: float) -> tuple[Baseline | None, str | None]:
    """The newest usable baseline for ``spec`` among ``run_dir``'s siblings (its manifest made before
    ``before``), or None and why there is none. Blocking."""
    output_dir = run_dir.parent
    try:
        runs = find_runs(output_dir)
    except ConfigError as e:
        return None, f"no usable baseline: {e.problems[0]}"
    here = run_dir.resolve()
    found: list[tuple[float, Path]] = []
    first_problem: str | None = None
    examined = 0
    for run in runs:
        job_dir = run / spec.name
        if run.resolve() == here or job_dir.is_symlink() or not job_dir.is_dir():
            continue
        examined += 1
        created, problem = _head(job_dir, spec)
        if created is not None and created >= before:
            continue  # a run made after this one's start is no earlier run
        if problem is None and created is not None:
            found.append((created, job_dir))
        elif first_problem is None:
            first_problem = f"its newest earlier run, {run.name}, {problem}"
    for _, job_dir in sorted(found, reverse=True):
        manifest, problem = read_manifest(job_dir / MANIFEST)
        if manifest is not None:
            return Baseline(job_dir, manifest, read_metrics(job_dir) or JobMetrics()), None
        if first_problem is None:
            first_problem = (
                f"its newest earlier run, {job_dir.parent.name}, has no usable {MANIFEST} ({problem})"
            )
    if not examined:
        return None, f"no usable baseline: no earlier run of job {spec.name} in {output_dir}"
    more = f" (none of its {examined} earlier runs is usable)" if examined > 1 else ""
    return None, f"no usable baseline: {first_problem}{more}"


def copy_memories(source_job: Path, job_dir: Path) -> list[str]:
    """The baseline's memory files, copied into ``job_dir/memories/`` (and, as they were, into
    ``BASELINE_MEMORIES``, which ``continuation.rebuild_memory`` starts a resumed job's memory from);
    their ``/memories/...`` paths.
    Only regular files beneath the baseline's ``memories/`` are read (links are not followed)."""
    copied: list[str] = []
    files = memory_files(str(source_job))
    if not files:
        return copied
    with Root.open(str(source_job)) as root:
        for path, _ in files:
            rel = path.removeprefix(PREFIX + "/")
            try:
                fd, _st = open_regular(root, f"{MEMORY_DIR}/{rel}", no_symlinks=True)
            except (OSError, ValueError):
                continue
            with os.fdopen(fd, "rb") as f:
                data = f.read()
            for folder in (MEMORY_DIR, BASELINE_MEMORIES):
                target = job_dir / folder / rel
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(data)
            copied.append(path)
    return copied


def _read_beneath(root: Root, rel: str) -> bytes | None:
    """A regular file beneath ``root`` (no link followed), or None."""
    try:
        fd, _st = open_regular(root, rel, no_symlinks=True)
    except (OSError, ValueError):
        return None
    with os.fdopen(fd, "rb") as f:
        return f.read()


def _subagent_dirs(source_job: Path) -> list[str]:
    """The baseline's subagent directories and the copies it carried over itself (relative paths),
    never a symbolic link."""
    found = []
    for folder in (AGENTS, BASELINE_AGENTS):
        top = source_job / folder
        if top.is_symlink() or not top.is_dir():
            continue
        found += [f"{folder}/{p.name}" for p in top.iterdir() if p.is_dir() and not p.is_symlink()]
    return found


def copy_agents(source_job: Path, job_dir: Path, report: str) -> list[tuple[str, str]]:
    """The baseline's subagents that succeeded and whose reports its own ``report`` names (its
    ``agents/<n>-<slug>/``, and the copies in its ``BASELINE_AGENTS`` it carried over in turn), in the
    order the report names them: each one's ``final.md``, ``job.json``, ``metrics.json`` and memory files
    copied into ``job_dir/BASELINE_AGENTS/<its name>/``; (that directory, relative to the job's, and its
    task prompt) each. Only regular files beneath the baseline's job directory are read (no link
    followed); a subagent without a readable status, prompt or report is left out, and so is a second
    one of the same name."""
    named = []
    for here in _subagent_dirs(source_job):
        at = report.find(f"`{here}/{FINAL}`")
        if at >= 0:
            named.append((at, here))
    copied: list[tuple[str, str]] = []
    with Root.open(str(source_job)) as root:
        for _, here in sorted(named):
            name = here.split("/", 1)[1]
            target = job_dir / BASELINE_AGENTS / name
            files = {doc: _read_beneath(root, f"{here}/{doc}") for doc in (METRICS, JOB_JSON, FINAL)}
            if target.exists() or any(data is None for data in files.values()):
                continue
            try:
                status = json.loads(files[METRICS] or b"").get("status")
                prompt = json.loads(files[JOB_JSON] or b"").get("prompt")
            except (ValueError, AttributeError):
                continue
            if status != Status.SUCCEEDED or not isinstance(prompt, str):
                continue
            target.mkdir(parents=True)
            for doc, data in files.items():
                (target / doc).write_bytes(data or b"")
            for path, _ in memory_files(str(source_job / here)):
                rel = path.removeprefix(PREFIX + "/")
                data = _read_beneath(root, f"{here}/{MEMORY_DIR}/{rel}")
                if data is not None:
                    (target / MEMORY_DIR / rel).parent.mkdir(parents=True, exist_ok=True)
                    (target / MEMORY_DIR / rel).write_bytes(data)
            copied.append((f"{BASELINE_AGENTS}/{name}", prompt))
    return copied


def too_deep(e: TooDeep) -> str:
    """Why a workspace deeper than a manifest goes has none (the job's one line says it)."""
    return (
        f"the workspace has no manifest: a directory in it is more than {e.max_depth} levels deep "
        f"({listed_path(e.path[:80])}{'...' if len(e.path) > 80 else ''}), deeper than a manifest goes"
    )


def _when(stamp: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime(stamp))


async def start(spec: JobSpec, store: JobStore, record: JobMetrics) -> list[Message]:
    """What an incremental job's history holds after its prompt: the note on its baseline, or nothing.
    Writes its manifest and, with a baseline, the copied report, the lists and the memory files; sets
    ``record.incremental``. Nothing for a job that is not incremental, nor for a subagent."""
    if not spec.limits.incremental or store.dir.parent.name == AGENTS:
        return []
    forced = spec.fresh or (record.incremental is not None and record.incremental.fresh == FRESH_FLAG)
    try:
        manifest = await in_thread(build)(spec.workspace)
    except TooDeep as e:
        record.incremental = Incremental(fresh=too_deep(e))
        return []
    except OSError as e:
        record.incremental = Incremental(fresh=f"the workspace could not be listed: {e.strerror or e}")
        return []
    manifest.git = await git_state(spec.workspace)  # git runs in the sandbox, never as the runner
    await store.write_text(MANIFEST, manifest.text())
    entries, took = len(manifest.entries), round(manifest.wall_s, 3)
    baseline: Baseline | None = None
    reason: str | None = FRESH_FLAG
    if not forced:
        baseline, reason = await in_thread(find_baseline)(spec, store.dir.parent, manifest.created)
    if baseline is None:
        record.incremental = Incremental(fresh=reason, manifest_entries=entries, manifest_s=took)
        return []
    changes = diff(baseline.manifest, manifest)
    lists = {"added": changes.added, "changed": changes.changed, "removed": changes.removed}
    found = await _dependents(spec.workspace, manifest, changes)
    report = await in_thread(
        lambda: (baseline.job_dir / FINAL).read_text(encoding="utf-8", errors="replace")
    )()
    await store.save(
        [
            (BASELINE_REPORT, report),
            (
                BASELINE_CHANGES,
                changes_text(run=baseline.run, lists=lists, unchanged=changes.unchanged, dependents=found.on),
            ),
        ]
    )
    memories = await in_thread(copy_memories, abandon_on_cancel=False)(baseline.job_dir, store.dir)
    memory = INCREMENTAL_MEMORY.format(files=len(memories), prefix=PREFIX) if memories else ""
    agents = await in_thread(copy_agents, abandon_on_cancel=False)(baseline.job_dir, store.dir, report)
    if agents:
        await store.save([(BASELINE_AGENTS_LIST, agents_text(agents))])
    copied = (
        INCREMENTAL_AGENTS.format(count=len(agents), folder=BASELINE_AGENTS, listed=BASELINE_AGENTS_LIST)
        if agents
        else ""
    )
    record.incremental = Incremental(
        baseline=baseline.run,
        baseline_cost_usd=round(baseline.metrics.cost_usd, 6),
        files_added=len(changes.added),
        files_changed=len(changes.changed),
        files_removed=len(changes.removed),
        files_unchanged=changes.unchanged,
        files_dependent=len(found.files),
        dependents_skipped=sum(found.skipped.values()),
        manifest_entries=entries,
        manifest_s=took,
    )
    note = incremental_note(
        run=baseline.run,
        when=_when(baseline.manifest.created),
        report=BASELINE_REPORT,
        changes=BASELINE_CHANGES,
        memory=memory,
        lists=lists,
        unchanged=changes.unchanged,
        dependents=found.on,
        agents=copied,
    )
    return [{"role": "user", "content": note}]


async def _dependents(workspace: Path, manifest: Manifest, changes: Changes) -> Dependents:
    """The unchanged files that import a changed one, found off the event loop; none (never an error)
    when the workspace cannot be opened again."""
    try:
        return await in_thread(dependents.find)(workspace, manifest, changes)
    except OSError:
        return Dependents()


def summary_line(job: str, incremental: Incremental) -> str:
    """One line for the operator: the job's baseline and what changed, or why it ran fresh."""
    if incremental.baseline is None:
        return f"job {job}: a full run: {incremental.fresh or 'no baseline'}"
    cost = (
        f"; the baseline cost ${incremental.baseline_cost_usd:.4f}"
        if incremental.baseline_cost_usd is not None
        else ""
    )
    depending = (
        f" ({incremental.files_dependent} unchanged files import them)" if incremental.files_dependent else ""
    )
    return (
        f"job {job}: incremental from run {incremental.baseline}: {incremental.files_added} files added, "
        f"{incremental.files_changed} changed, {incremental.files_removed} removed{depending}{cost}"
    )
