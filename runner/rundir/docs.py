"""The run directory: its layout, its statuses, and its documents as pydantic models.

This is the only module that knows how a run directory is laid out::

    runs/
      latest -> <run-id>              LATEST: the newest run (a relative symlink)
      <run-id>/
        run.json                      RUN_JSON: RunDocument (head, totals, one JobMetrics row per job)
        batches.jsonl                 BATCHES: every Message Batch created (delivery = "batch"), one a line
        .lock                         LOCK: one writer per run directory
        .reserve, .reserve-run        JOBS_RESERVE, RUN_RESERVE: disk kept for the last documents
        .probe-<worker>               probe_name(): a Ray worker's proof that it sees this directory
        index.html, view/             INDEX, VIEW: the static viewer (VIEW_STAMP: what made its pages)
        <job>/
          job.json                    JOB_JSON: the job's spec (JobSpec.to_json)
          metrics.json                METRICS: JobMetrics (checkpointed while running, final at the end)
          transcript.jsonl            TRANSCRIPT: every message added, one per line
          context.jsonl               CONTEXT: the compacted window, for resume and the viewer
          events.jsonl                EVENTS: one Event per line (compaction stages, model calls, ...)
          final.md                    FINAL: the answer, or a partial report
          manifest.jsonl              MANIFEST: an incremental job's workspace at its start
                                      (rundir/manifest.py)
          baseline-memories/          BASELINE_MEMORIES: the memory it started with, its baseline's
          baseline-agents/<n>-<slug>/ BASELINE_AGENTS: its baseline's subagents that succeeded, each one's
                                      final.md and memories/ (listed in BASELINE_AGENTS_LIST)
          tool-results/, summaries/   TOOL_RESULTS, SUMMARIES: what compaction moved out of the context
            <id>.txt, <id>.<n>.txt    output_path(): an output of tool_use <id> (safe), n-th distinct one
            NNNN.md                   summary_path(): the n-th summary
          .<file>.<pid>.spare         SPARE_SUFFIX: a checkpoint's spare file

Guarantees:
- Writers build documents through the models here, so the JSON on disk has one shape: the field order
  is the models' field order, which is the order the runner has always written.
- Readers never raise on a damaged, missing or half-written file: :func:`read_model` and
  :func:`lenient` return the model (damaged fields dropped back to their defaults) and one-line
  problems naming the file and the field; :func:`load_run` reads a whole run directory so.
- Totals are always recomputed from the job rows (:func:`totals_of`), never trusted from disk.
- A job's usage, cost and call counts (every :class:`Usage` field of :class:`JobMetrics`, and every
  field marked :data:`SPENT`) have one writer, the job's spend (``runner/agent/spend.py``);
  ``tests/test_one_writer.py`` checks every other module on its source.
- A job's usage has one sum, :meth:`JobMetrics.total_usage` (its own calls', its summaries' and its
  subagents'): written as ``total_usage`` beside ``usage`` (its own calls') in ``metrics.json``, in
  ``run.json``'s rows and in the rows tables read; the totals add it up; it is never read back.
"""

from __future__ import annotations

import copy
import fcntl
import json
import os
import time
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    TypeAdapter,
    ValidationError,
    model_validator,
)

from ..pricing import CACHE_1H_KEY, USAGE_KEYS, Usage, sum_usage

# --- layout -------------------------------------------------------------------------------------

RUN_JSON = "run.json"
BATCHES = "batches.jsonl"
LOCK = ".lock"
INDEX = "index.html"
VIEW = "view"
LATEST = "latest"
JOB_JSON = "job.json"
METRICS = "metrics.json"
TRANSCRIPT = "transcript.jsonl"
UNUSABLE_TRANSCRIPT = "transcript.unusable.jsonl"
CONTEXT = "context.jsonl"
EVENTS = "events.jsonl"
FINAL = "final.md"
TOOL_RESULTS = "tool-results"
SUMMARIES = "summaries"
AGENTS = "agents"  # a job's subagents, one directory each (laid out as a job's)
OUTPUT_SUFFIX = ".txt"
SUMMARY_SUFFIX = ".md"
SPARE_SUFFIX = ".spare"
JOBS_RESERVE = ".reserve"  # for the jobs' final files, freed by the first that needs it
RUN_RESERVE = ".reserve-run"  # for the last run.json only
VIEW_STAMP = ".made-by"
JOB_FILES = (METRICS, EVENTS, TRANSCRIPT, FINAL, JOB_JSON)  # what the viewer links for each job


def output_path(stem: str, n: int = 1) -> str:
    """The path (relative to the job directory) of the ``n``-th distinct output saved under ``stem``."""
    return f"{TOOL_RESULTS}/{stem}{OUTPUT_SUFFIX}" if n == 1 else f"{TOOL_RESULTS}/{stem}.{n}{OUTPUT_SUFFIX}"


def output_stem(path: str) -> str | None:
    """The stem an :func:`output_path` was made from (None for any other path). A stem has no dot."""
    folder, _, name = path.partition("/")
    if folder != TOOL_RESULTS or "/" in name or not name.endswith(OUTPUT_SUFFIX):
        return None
    return name.removesuffix(OUTPUT_SUFFIX).split(".")[0] or None


def summary_path(number: int) -> str:
    """The path (relative to the job directory) of the job's ``number``-th summary."""
    return f"{SUMMARIES}/{number:04d}{SUMMARY_SUFFIX}"


MANIFEST = "manifest.jsonl"
BASELINE_REPORT = output_path("baseline-report")  # an incremental job's copy of its baseline's final.md
BASELINE_CHANGES = output_path("baseline-changes")  # the workspace's changes since the baseline, in full
# the memory an incremental job started with (its baseline's), as it was
BASELINE_MEMORIES = "baseline-memories"
BASELINE_AGENTS = "baseline-agents"  # an incremental job's copies of its baseline's subagents that succeeded
BASELINE_AGENTS_LIST = output_path("baseline-agents")  # those copies' directories and task prompts


def probe_name(worker: str) -> str:
    """The file a Ray worker writes in the run directory to show it sees it."""
    return f".probe-{worker}"


# --- statuses and usage ------------------------------------------------------------------------


class Status(StrEnum):
    """A job's status; a ``str``, so it compares with and is written as its value."""

    SUCCEEDED = "succeeded"
    FAILED = "failed"
    TIMEOUT = "timeout"
    MAX_TURNS = "max_turns"
    BUDGET_EXCEEDED = "budget_exceeded"
    STUCK = "stuck"
    DISK_QUOTA = "disk_quota"  # its files reached limits.max_job_bytes
    CANCELLED = "cancelled"
    NOT_STARTED = "not_started"
    RUNNING = "running"
    QUEUED = "queued"
    INTERRUPTED = "interrupted"  # shown, never written: it was running when its runner died


LIVE_STATUSES = (Status.RUNNING, Status.QUEUED)
LIMIT_STATUSES = (Status.BUDGET_EXCEEDED, Status.MAX_TURNS)  # kept by resume unless the limit was raised


class RunState(StrEnum):
    RUNNING = "running"
    FINISHED = "finished"
    INTERRUPTED = "interrupted"
    UNKNOWN = "unknown"


def now() -> float:
    return round(time.time(), 3)


# --- documents ---------------------------------------------------------------------------------


class _Doc(BaseModel):
    """Strict on types (a count is an int, never a bool or a string), open to fields a newer runner adds."""

    model_config = ConfigDict(extra="allow", strict=True)

    def to_json(self) -> dict[str, Any]:
        """The fields that were set, in the model's order, then any extra ones."""
        return self.model_dump(exclude_unset=True)


SUBAGENT_FIELDS = ("subagent_usage", "subagents", "own_cost_usd")  # written only for a job that had subagents
BATCH_FIELDS = ("batch_usage", "batch_summarizer_usage", "batch_calls")  # only when a batch answered a call
WHEN_SET = ("worker", "source", "incremental")  # written only when not None
TOTAL_USAGE = "total_usage"  # written beside usage: JobMetrics.total_usage, never read back


class Incremental(_Doc):
    """An incremental job's start (``incremental = true``): the baseline it started from and what
    changed in the workspace since, or why it ran fresh (``fresh``). Written only for such a job."""

    baseline: str | None = None  # the baseline run's id (its directory in the same output directory)
    baseline_cost_usd: float | None = None  # what the baseline's job cost
    files_added: int = 0
    files_changed: int = 0
    files_removed: int = 0
    files_unchanged: int = 0
    # unchanged files that import an added, changed or removed one (rundir/dependents.py), and the
    # files that search left unread or unparsed (too big, unreadable, not parsable, past its limits)
    files_dependent: int = 0
    dependents_skipped: int = 0
    fresh: str | None = None  # why there is no baseline (the job ran as a full run)
    manifest_entries: int = 0  # entries of this job's manifest.jsonl
    manifest_s: float = 0.0  # the time it took to make


class Spent:
    """The mark of a :class:`JobMetrics` count or cost only the job's spend writes (``Annotated[int,
    SPENT]``); a :class:`Usage` field is one by its type."""

    def __repr__(self) -> str:
        return "SPENT"


SPENT = Spent()


class JobMetrics(_Doc):
    """A job's one record. Its session mutates it as the job goes (the executor and the live display
    read the same object); ``metrics.json`` is :meth:`document` of it, and so is the job's row in
    ``run.json`` (which may carry ``source``, the task file, or be a live row of ``job``, ``status``
    and ``turns`` only). A new per-job count is one field here: it is checkpointed, written, shown in
    ``run.json`` and carried over by resume with the rest. ``LIVE`` fields are never written."""

    LIVE: ClassVar[tuple[str, ...]] = ("context_chars", "started")

    job: str = "?"
    status: str = "?"
    model: str = ""
    turns: Annotated[int, SPENT] = 0
    wall_s: float = 0.0
    usage: Usage = Field(default_factory=Usage)
    summarizer_usage: Usage = Field(default_factory=Usage)
    usage_estimated: Annotated[bool, SPENT] = False
    cost_usd: Annotated[float, SPENT] = 0.0
    compactions: dict[str, int] = Field(default_factory=dict)
    persisted_bytes: int = 0
    # HTTP attempts beyond the first of each call (the SDK's retries), and Message Batch resends
    retries: Annotated[int, SPENT] = 0
    rate_limited_429: Annotated[int, SPENT] = 0
    overloaded_529: Annotated[int, SPENT] = 0
    server_errors_5xx: Annotated[int, SPENT] = 0
    requests: Annotated[int, SPENT] = 0  # HTTP attempts
    error: str | None = None
    subagent_usage: Usage = Field(default_factory=Usage)  # its subagents' (their summaries' too)
    subagents: list[dict[str, Any]] = Field(default_factory=list)  # one row per subagent (subagent_row)
    # its own calls' and summaries' cost, without its subagents' (written with them; the viewer shows it)
    own_cost_usd: Annotated[float | None, SPENT] = None
    worker: dict[str, Any] | None = None  # where the job ran: node and pid
    source: str | None = None  # run.json rows: the task file
    context_chars: int = 0  # live: characters of the window the last call carried
    started: float | None = None  # live: when this segment of the job started (epoch seconds)
    incremental: Incremental | None = None  # an incremental job's baseline, or why it ran fresh
    # delivery = "batch": the part of usage (and of summarizer_usage) a Message Batch answered, billed at
    # prices.batch_discount (see models/batches.py); batch_calls: the calls it answered
    batch_usage: Usage = Field(default_factory=Usage)
    batch_summarizer_usage: Usage = Field(default_factory=Usage)
    batch_calls: Annotated[int, SPENT] = 0

    @model_validator(mode="before")
    @classmethod
    def _derived_not_read(cls, data: Any) -> Any:
        """``total_usage`` is computed from the parts (:meth:`total_usage`), never read back."""
        if isinstance(data, dict) and TOTAL_USAGE in data:
            data = {k: v for k, v in data.items() if k != TOTAL_USAGE}
        return data

    def total_usage(self) -> Usage:
        """The job's usage: its own calls', its summaries' and its subagents' together. Every table,
        totals line, page and document shows this one sum (``usage`` beside it: the job's own calls)."""
        return sum_usage([self])

    def usage_total(self, key: str) -> int:
        """One count of :meth:`total_usage` (summed alone: the live display asks for it every tick);
        0 for a key that is not one of :data:`USAGE_KEYS`, as the sum has no other."""
        if key not in USAGE_KEYS:
            return 0
        return sum(getattr(part, key) for part in (self.usage, self.summarizer_usage, self.subagent_usage))

    def _with_total(self, out: dict[str, Any]) -> dict[str, Any]:
        out[TOTAL_USAGE] = self.total_usage().to_json()
        return out

    def to_json(self) -> dict[str, Any]:
        """The fields that were set (a ``run.json`` row), with :data:`TOTAL_USAGE` when usage was."""
        out = super().to_json()
        return self._with_total(out) if "usage" in out else out

    def subagent_row(self) -> dict[str, Any]:
        """This job's row in its parent's ``subagents``."""
        return {
            "agent": self.job,
            "status": self.status,
            "turns": self.turns,
            "cost_usd": round(self.cost_usd, 6),
            "wall_s": round(self.wall_s, 3),
            "error": self.error,
        }

    def count(self, stage: str) -> None:
        """One more compaction of ``stage``."""
        self.compactions[stage] = self.compactions.get(stage, 0) + 1

    def _written(self) -> dict[str, Any]:
        """Every field but the live ones, those of :data:`WHEN_SET`, :data:`SUBAGENT_FIELDS` and
        :data:`BATCH_FIELDS` only when they apply, then any extra ones."""
        return {
            k: v
            for k, v in self.model_dump(exclude=set(self.LIVE)).items()
            if (k not in WHEN_SET or v is not None)
            and (k not in SUBAGENT_FIELDS or self.subagents)
            and (k not in BATCH_FIELDS or self.batch_calls)
        }

    def document(self) -> dict[str, Any]:
        """``metrics.json``: every field but the live ones (``worker`` and ``source`` when set), then
        any extra ones; wall time and cost rounded, compactions sorted by stage."""
        out = self._written()
        out["wall_s"], out["cost_usd"] = round(self.wall_s, 3), round(self.cost_usd, 6)
        if out.get("own_cost_usd") is not None:
            out["own_cost_usd"] = round(out["own_cost_usd"], 6)
        out["compactions"] = dict(sorted(self.compactions.items()))
        return self._with_total(out)

    def clean(self) -> dict[str, Any]:
        """Every field the table reads, in its type (a damaged value is back at its default)."""
        return self._with_total(self._written())


class RunDocument(_Doc):
    """``run.json``: the run's head, its totals and one row per job."""

    run_id: str = ""
    state: str = RunState.UNKNOWN
    started: float | None = None
    updated: float | None = None
    backend: str | None = None
    model: str | None = None
    summary_model: str | None = None
    concurrency: int | None = None
    resumed: bool | None = None
    executor: str | None = None
    workers: list[dict[str, Any]] | None = None  # the Ray workers started: owner, node, pid
    totals: dict[str, int | float] = Field(default_factory=dict)
    jobs: list[JobMetrics] = Field(default_factory=list)

    def head(self) -> dict[str, Any]:
        return {k: v for k, v in self.to_json().items() if k not in ("jobs", "totals")}


def totals_of(rows: list[JobMetrics]) -> dict[str, int | float]:
    """Totals over job rows: jobs, cost, turns, a count per status, and tokens (the jobs' and their
    summaries')."""
    return totals_document(
        jobs=len(rows),
        cost_usd=sum(r.cost_usd for r in rows),
        turns=sum(r.turns for r in rows),
        statuses={status: sum(1 for r in rows if r.status == status) for status in Status},
        usage={key: sum(r.usage_total(key) for r in rows) for key in USAGE_KEYS},
    )


def totals_document(
    *, jobs: int, cost_usd: float, turns: int, statuses: dict[Status, int], usage: dict[str, int]
) -> dict[str, int | float]:
    """run.json's ``totals``, the one layout of them (:func:`totals_of`, and the batch's running sums)."""
    out: dict[str, int | float] = {"jobs": jobs, "cost_usd": round(cost_usd, 6), "turns": turns}
    for status in Status:
        out[status.value] = statuses.get(status, 0)
    out.update(usage)
    if not out.get(CACHE_1H_KEY):  # written when some cache write had the 1-hour TTL
        out.pop(CACHE_1H_KEY, None)
    return out


def run_json_text(document: RunDocument) -> str:
    """run.json with one job per line: readable, and written by the C encoder (``indent`` is not)."""
    head = {**document.head(), "totals": document.totals}
    jobs = ",\n    ".join(json.dumps(job.to_json(), ensure_ascii=False) for job in document.jobs)
    return json.dumps(head, ensure_ascii=False)[:-1] + f', "jobs": [\n    {jobs}\n]}}\n'


# --- events.jsonl ------------------------------------------------------------------------------


class _Event(_Doc):
    model_config = ConfigDict(extra="allow", strict=False)
    ts: float = Field(default_factory=now)

    def line(self) -> dict[str, Any]:
        return self.model_dump()


class CompactionEvent(_Event):
    """A compaction stage changed the history; ``stage`` names the stage."""

    stage: str
    messages_before: int
    messages_after: int
    chars_before: int
    chars_after: int
    paths: list[str] = Field(default_factory=list)
    cache_invalidated_from: int | None = None  # a rewrite inside what was sent costs the prompt cache


class ModelCallEvent(_Event):
    """An answered model call: the context it carried, and the job's spend so far: its running cost,
    usage (its own calls' and its summaries'), compaction counts, persisted bytes and wall time, so
    a resumed job rebuilds what it spent from these lines (``lines``: the transcript lines before the
    call's reply; ``None`` in lines an older runner wrote, which carry the cost alone)."""

    stage: Literal["model_call"] = "model_call"
    turn: int
    chars: int
    tokens: int
    estimated: bool
    cost_usd: float
    lines: int | None = None
    usage: Usage | None = None
    summarizer_usage: Usage | None = None
    compactions: dict[str, int] | None = None
    persisted_bytes: int | None = None
    wall_s: float | None = None
    # the Message Batch that answered the call (delivery = "batch"); written when set
    batch: str | None = None

    def line(self) -> dict[str, Any]:
        out = self.model_dump()
        if out["batch"] is None:
            del out["batch"]
        return out

    @property
    def ledger(self) -> bool:
        """Whether the line carries the job's whole spend (a resumed job can start from it)."""
        return None not in (
            self.lines,
            self.usage,
            self.summarizer_usage,
            self.compactions,
            self.persisted_bytes,
            self.wall_s,
        )


class RetriesEvent(_Event):
    """A call that needed retries or met 429/529/5xx answers."""

    stage: Literal["retries"] = "retries"
    attempts: int
    rate_limited_429: int
    overloaded_529: int
    server_errors_5xx: int


class LastCallEvent(_Event):
    stage: Literal["last_call"] = "last_call"
    reason: str


class WorkerLostEvent(_Event):
    stage: Literal["worker_lost"] = "worker_lost"
    worker: dict[str, Any]
    continue_from_message: int
    turns_rerun: int


class SummaryFailedEvent(_Event):
    stage: Literal["summary_failed"] = "summary_failed"
    error: str
    consecutive_failures: int


class OtherEvent(_Event):
    """A line of a stage this runner does not know (written by a newer one): kept as it is."""

    stage: str = "?"


_KINDS = {"model_call", "retries", "last_call", "worker_lost", "summary_failed"}


def _kind(value: Any) -> str:
    data = value if isinstance(value, dict) else getattr(value, "__dict__", {})
    stage = data.get("stage")
    if stage in _KINDS:
        return str(stage)
    return "compaction" if "chars_before" in data else "other"


Event = Annotated[
    Annotated[CompactionEvent, Tag("compaction")]
    | Annotated[ModelCallEvent, Tag("model_call")]
    | Annotated[RetriesEvent, Tag("retries")]
    | Annotated[LastCallEvent, Tag("last_call")]
    | Annotated[WorkerLostEvent, Tag("worker_lost")]
    | Annotated[SummaryFailedEvent, Tag("summary_failed")]
    | Annotated[OtherEvent, Tag("other")],
    Discriminator(_kind),
]
EVENT = TypeAdapter(Event)


def parse_event(line: dict[str, Any], where: str = EVENTS) -> tuple[Any, str | None]:
    """One events.jsonl line as its model, or an :class:`OtherEvent` and a one-line problem."""
    try:
        return EVENT.validate_python(line), None
    except ValidationError as e:
        return OtherEvent.model_validate(line), _problem(where, e)


def event_lines(events: list[Any]) -> str:
    """events.jsonl text for ``events`` (models or dicts), one JSON object per line."""
    return "".join(
        json.dumps(e.line() if isinstance(e, _Event) else e, ensure_ascii=False) + "\n" for e in events
    )


# --- reading -----------------------------------------------------------------------------------

M = TypeVar("M", bound=BaseModel)


def _problem(where: str, e: ValidationError) -> str:
    err = e.errors()[0]
    at = ".".join(str(p) for p in err["loc"]) or "(document)"
    if err["type"] == "missing":
        return f"{where}: {at}: missing"
    msg = err["msg"][:1].lower() + err["msg"][1:]
    return f"{where}: {at}: {msg}, got {json.dumps(err.get('input'), default=str)[:60]}"


def _drop(data: Any, loc: tuple[Any, ...]) -> bool:
    for key in loc[:-1]:
        try:
            data = data[key]
        except (KeyError, IndexError, TypeError):
            return False
    if isinstance(data, dict) and loc and loc[-1] in data:
        del data[loc[-1]]
        return True
    return False


def lenient(model: type[M], data: Any, where: str) -> tuple[M | None, list[str]]:
    """``data`` as ``model``, every damaged field dropped back to its default, and one line per damaged
    field (file and field). ``None`` when ``data`` is not an object at all."""
    if not isinstance(data, dict):
        return None, [f"{where}: expected an object, got {type(data).__name__}"]
    try:
        return model.model_validate(data), []
    except ValidationError:
        data = copy.deepcopy(data)  # the damaged fields are dropped from a copy, never from the caller's
    problems: list[str] = []
    for _ in range(64):
        try:
            return model.model_validate(data), problems
        except ValidationError as e:
            problems.append(_problem(where, e))
            if not _drop(data, tuple(e.errors()[0]["loc"])):
                return None, problems
    return None, problems


def read_json(path: Path) -> tuple[Any, str | None]:
    """The JSON at ``path``: (document, None), (None, None) when absent, (None, problem) when damaged."""
    try:
        return json.loads(path.read_text(encoding="utf-8", errors="replace")), None
    except FileNotFoundError:
        return None, None
    except (OSError, ValueError) as e:
        return None, f"{path}: unreadable ({type(e).__name__}: {str(e)[:80]})"


def read_model(path: Path, model: type[M]) -> tuple[M | None, list[str]]:
    """The document at ``path`` as ``model`` (damaged fields at their defaults) and its problems;
    ``None`` when the file is absent or is no object."""
    data, problem = read_json(path)
    if data is None:
        return None, [problem] if problem else []
    return lenient(model, data, str(path))


def read_metrics(job_dir: Path) -> JobMetrics | None:
    """A job's ``metrics.json``, or None when it is absent or no object (damaged fields at defaults)."""
    return read_model(job_dir / METRICS, JobMetrics)[0]


def metrics_of(data: dict[str, Any] | None, where: str = METRICS) -> JobMetrics:
    """A metrics document held in memory (a resumed job's prior), damaged fields at their defaults."""
    return lenient(JobMetrics, data or {}, where)[0] or JobMetrics()


# --- a whole run -------------------------------------------------------------------------------


@dataclass
class JobData:
    """One job as it stands: its row brought up to date from its metrics.json, and where its files are."""

    name: str
    dir: Path
    metrics: JobMetrics
    spec: dict[str, Any] = field(default_factory=dict)

    @property
    def record(self) -> dict[str, Any]:
        return self.metrics.to_json()

    @property
    def status(self) -> str:
        return self.metrics.status if "status" in self.metrics.model_fields_set else RunState.UNKNOWN

    def usage(self, key: str) -> int:
        return self.metrics.usage_total(key)

    def compactions(self) -> dict[str, int]:
        return {k: v for k, v in self.metrics.compactions.items() if v}

    def limits(self) -> dict[str, Any]:
        limits = self.spec.get("limits")
        return limits if isinstance(limits, dict) else {}


@dataclass
class RunData:
    dir: Path
    run: RunDocument
    jobs: list[JobData]
    problems: list[str]
    run_json_ok: bool = True  # run.json was there and was a run document

    @property
    def state(self) -> str:
        return self.run.state


def _job_dirs(run_dir: Path) -> list[str]:
    """Directories of the run that hold a job's files (a run.json may lag behind them)."""
    try:
        return sorted(
            p.name
            for p in run_dir.iterdir()
            if p.is_dir()
            and not p.name.startswith(".")
            and ((p / METRICS).exists() or (p / JOB_JSON).exists())
        )
    except OSError:
        return []


def _read_run_json(path: Path, problems: list[str]) -> tuple[RunDocument, list[Any], bool]:
    data, problem = read_json(path)
    if problem:
        problems.append(problem)
    elif data is None:
        problems.append(f"{path}: not found; jobs are read from their directories")
    if not isinstance(data, dict) or not isinstance(data.get("jobs"), list):
        if data is not None:
            problems.append(f"{path}: not a run document (expected an object with a jobs list)")
        return RunDocument(), [], False
    head, head_problems = lenient(
        RunDocument, {k: v for k, v in data.items() if k not in ("jobs", "totals")}, str(path)
    )
    problems += head_problems
    return head or RunDocument(), data["jobs"], True


def load_run(run_dir: Path, with_specs: bool = True) -> RunData:
    """The run as it is on disk now: each job's row from ``run.json`` overlaid with its own
    ``metrics.json`` (checkpointed while it runs, so never older), jobs found by their directories when
    ``run.json`` is missing or lags, totals recomputed. Only files inside the run directory are read."""
    problems: list[str] = []
    path = run_dir / RUN_JSON
    head, entries, ok = _read_run_json(path, problems)
    by_name: dict[str, dict[str, Any]] = {}
    for i, entry in enumerate(entries):
        name = entry.get("job") if isinstance(entry, dict) else None
        if isinstance(name, str):
            by_name.setdefault(name, entry)
        else:
            problems.append(
                f"{path}: jobs.{i}.job: expected a job name, got {json.dumps(name, default=str)[:40]}"
            )
    for name in _job_dirs(run_dir):
        by_name.setdefault(name, {"job": name})
    jobs = []
    root = run_dir.resolve()
    for name, entry in by_name.items():
        job_dir = run_dir / name
        if not name or root not in job_dir.resolve().parents:  # a name from run.json never leaves the run
            problems.append(f"{path}: job name {name!r} is not a directory of the run; skipped")
            continue
        data, problem = read_json(job_dir / METRICS)
        if problem:
            problems.append(problem)
        if isinstance(data, dict) and data.get("job", name) != name:
            problems.append(f"{job_dir / METRICS}: job: expected {name!r}, got {data.get('job')!r}; ignored")
            data = None
        merged = {**entry, **(data if isinstance(data, dict) else {}), "job": name}
        metrics, row_problems = lenient(JobMetrics, merged, f"{job_dir / METRICS} over {path}")
        problems += row_problems
        spec: dict[str, Any] = {}
        if with_specs:
            spec_data, problem = read_json(job_dir / JOB_JSON)
            problems += [problem] if problem else []
            spec = spec_data if isinstance(spec_data, dict) else {}
        jobs.append(JobData(name, job_dir, metrics or JobMetrics(job=name), spec))
    update: dict[str, Any] = {}
    if (
        head.state == RunState.RUNNING or any(j.metrics.status in LIVE_STATUSES for j in jobs)
    ) and not writer_alive(run_dir):
        update["state"] = RunState.INTERRUPTED
        for job in jobs:
            if job.metrics.status in LIVE_STATUSES:
                job.metrics = job.metrics.model_copy(update={"status": Status.INTERRUPTED})
        problems.append(
            f"{run_dir}: the runner writing this run is gone (it was killed or crashed); "
            f"`runner resume {run_dir}` continues it"
        )
    rows = [j.metrics for j in jobs]
    run = head.model_copy(update={**update, "jobs": rows, "totals": totals_of(rows)})
    return RunData(run_dir, run, jobs, problems, ok)


def writer_alive(run_dir: Path) -> bool:
    """Whether a ``run`` or ``resume`` holds the run directory's lock now (the kernel drops it when
    its holder dies, however it dies). Tested with a shared lock taken and dropped at once: it fails
    only while a writer holds its exclusive one."""
    try:
        fd = os.open(run_dir / LOCK, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return False  # no lock file: nothing ever held it (or it was removed with the writer)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        os.close(fd)
    return False


def run_document(run_dir: Path) -> dict[str, Any]:
    """``run.json``'s fields, each job's row brought up to date from its ``metrics.json``, the totals
    recomputed: the run as one JSON document for scripts (``runner report --json``)."""
    data = load_run(run_dir, with_specs=False)
    document: dict[str, Any] = {"run_id": run_dir.name, "state": RunState.UNKNOWN.value, **data.run.head()}
    document["totals"] = data.run.totals
    document["jobs"] = [j.record for j in data.jobs]
    if data.problems:
        document["problems"] = data.problems
    return document


def is_run_dir(run_dir: Path) -> bool:
    """Whether ``run_dir`` holds a run: its run.json, or at least one job's metrics.json."""
    return (run_dir / RUN_JSON).exists() or any(run_dir.glob(f"*/{METRICS}"))
