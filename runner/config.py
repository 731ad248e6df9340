"""Settings: ``config.toml`` plus ``RUNNER_*`` environment overrides, through pydantic-settings.

Precedence for a job's limits, lowest to highest: the built-in defaults of :class:`Limits`,
``[limits]``, ``[jobs.<name>]``, then the task file's own ``[limits]`` table.
Environment variables override the file: ``RUNNER_RUNNER__CONCURRENCY=4``,
``RUNNER_LIMITS__MAX_TURNS=50`` (sections and keys joined by ``__``).

The file and the variables are validated once, together (variables win), by models in pydantic's strict
mode: a file's values are taken with the types TOML gave them (``concurrency = "8"`` is an error), a
variable's text is parsed by the field it sets (:class:`FromEnv`). Every problem becomes a line of one
:class:`ConfigError` naming the file (or the variable), the key and what was expected.
"""

from __future__ import annotations

import os
import stat
import time
import tomllib
from collections.abc import Callable, ItemsView
from datetime import datetime, timedelta
from pathlib import Path, PurePath
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PrivateAttr,
    TypeAdapter,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError
from pydantic_settings import BaseSettings, EnvSettingsSource, PydanticBaseSettingsSource, SettingsConfigDict

from .pricing import BATCH_DISCOUNT_KEY

Compaction = Literal["client", "server", "clear", "mask", "off"]


MOST_TOOL_CALLS_PER_REPLY = 10_000  # the most limits.max_tool_calls_per_reply may be


class FromEnv(str):
    """A value as a ``RUNNER_*`` variable gave it: text, which a number or boolean field parses (a file's
    values keep the types TOML gave them, and are taken only as such)."""


def table_or_raise(model: type, value: Any, expected: str) -> Any:
    """``value`` as it is when it is a TOML table (or already ``model``); else the error ``expected``."""
    if not isinstance(value, dict | model):
        raise ValueError(expected)
    return value


def _not_bool(value: Any) -> Any:
    """TOML ``true``/``false`` is not a number: said in those words (the strict int says "integer")."""
    if isinstance(value, bool):
        raise ValueError(f"expected a number, not {str(value).lower()}")
    return value


def _parsed_env(kind: Any) -> BeforeValidator:
    """Text from a ``RUNNER_*`` variable parsed as ``kind`` (pydantic's lax parsing: ``"8"`` -> 8,
    ``"no"`` -> false); its error, if any, as that parse words it. Any other value passes unchanged."""
    adapter: TypeAdapter[Any] = TypeAdapter(kind)

    def parse(value: Any) -> Any:
        if not isinstance(value, FromEnv):
            return value
        try:
            return adapter.validate_python(str(value))
        except ValidationError as e:
            first = e.errors()[0]
            raise PydanticCustomError(first["type"], first["msg"]) from None

    return BeforeValidator(parse)


def _path_text(value: Any) -> Any:
    """A path is written as a string (a number is not a path)."""
    if not isinstance(value, str | PurePath):
        raise PydanticCustomError("string_type", "Input should be a valid string")
    return Path(value)


def _array(value: Any) -> Any:
    """A TOML array, kept as a tuple (a string is not a list of one)."""
    if not isinstance(value, list | tuple):
        raise PydanticCustomError("tuple_type", "Input should be a valid array")
    return tuple(value)


def _tool_inputs(value: Any) -> Any:
    """One message for what ``clear_tool_inputs`` may be (not one per member of its union)."""
    if not isinstance(value, bool | list | tuple):
        raise ValueError("expected true, false or an array of tool names")
    return tuple(value) if isinstance(value, list) else value


# The settings' field types: strict (a file's ``concurrency = "8"`` or ``cache_aware = 1`` is an error), and
# text from a RUNNER_* variable parsed; a path from a string, an array as a tuple.
Int = Annotated[int, BeforeValidator(_not_bool), _parsed_env(int)]
Float = Annotated[float, BeforeValidator(_not_bool), _parsed_env(float)]
Bool = Annotated[bool, _parsed_env(bool)]
TextPath = Annotated[Path, BeforeValidator(_path_text)]
Names = Annotated[tuple[str, ...], BeforeValidator(_array)]
ToolInputs = Annotated[bool | tuple[str, ...], BeforeValidator(_tool_inputs)]
TOML_MODEL = ConfigDict(strict=True, extra="forbid", use_attribute_docstrings=True)


class ConfigError(Exception):
    """Bad configuration or task file; ``problems`` holds one line per problem."""

    def __init__(self, problems: list[str]):
        super().__init__("\n".join(problems))
        self.problems = problems


class Limits(BaseModel):
    """Per-job limits. The compaction thresholds keep the names and defaults of DESIGN.md."""

    model_config = ConfigDict(**TOML_MODEL, frozen=True)

    max_turns: Int = Field(200, ge=1, le=100_000)
    """model calls per job, its subagents' included, the last one kept for the report; then status
    `max_turns`"""
    timeout_s: Float = Field(3600.0, gt=0, le=7 * 24 * 3600)
    """wall time per job, a tenth (at most 60 s) kept for the report; then status `timeout`"""
    max_output_tokens: Int = Field(8000, ge=1, le=128_000)
    """`max_tokens` of each call"""
    max_cost_usd: Float | None = Field(None, gt=0, le=100_000)
    """spend per job, the cost of one more call kept for the report; then status `budget_exceeded`"""
    max_retries: Int = Field(4, ge=0, le=20)
    """SDK retries per call"""
    compaction: Compaction = "client"
    """`client` (the pipeline below), `server` (the API's `compact_20260112`), `mask` (observation masking
    only: tool results older than the newest `keep_recent_results` become placeholders), `clear` (the API's
    context editing `clear_tool_uses_20250919`: over its trigger the API replaces old tool results with a
    placeholder; the runner keeps the whole history, counts each clearing as `tool_use_clearing`; on the
    offline model, `client`), `off`"""
    batch_char_limit: Int = Field(200_000, ge=1_000)
    """1. tool_result_budget: newest batch of results over this..."""
    large_result_chars: Int = Field(30_000, ge=200)
    """...persists its results over this, largest first"""
    preview_chars: Int = Field(2_000, ge=0)
    """...keeping this much as a preview"""
    snip_trigger: Int = Field(50, ge=8)
    """2. snip: over this many messages..."""
    snip_head: Int = Field(3, ge=1)
    """...keep the first messages..."""
    snip_target: Int = Field(30, ge=4)
    """...and the newest, this many in all"""
    context_char_limit: Int = Field(50_000, ge=2_000)
    """3-5. over this, micro_compact, fit_tool_results, compact_history"""
    keep_recent_results: Int = Field(3, ge=0)
    """micro_compact never touches the newest seen results"""
    compact_target_ratio: Float = Field(0.8, ge=0.1, le=0.95)
    """micro_compact and fit_tool_results bring the context down to this share of the limit; 0.5 rewrites the
    cached prefix half as often (cheaper with prompt caching, see BENCHMARKS.md)"""
    fit_preview_chars: Int = Field(1_000, ge=0)
    """preview kept by fit_tool_results"""
    cache_aware: Bool = True
    """prompt-cache breakpoints on the newest message compaction will not rewrite and on the longest prefix
    an earlier call cached that is still unchanged, besides those on the system prompt (which caches the
    tools) and the newest message"""
    context_token_limit: Int | None = Field(None, ge=1_000)
    """also trigger on tokens: last real `usage` plus an estimate since"""
    keep_recent_messages: Int = Field(5, ge=1)
    """6. reactive compact keeps the newest messages"""
    max_reactive_retries: Int = Field(1, ge=0, le=10)
    """retries after "prompt is too long"; then the job fails"""
    max_summary_failures: Int = Field(3, ge=1)
    """8. circuit breaker: then the deterministic summary"""
    summary_share: Float = Field(0.2, gt=0, le=0.5)
    """a summary (the model's or the fallback's) takes at most this share of the context limit (0 < x <=
    0.5): the summary call's `max_tokens` is share x limit / 4 (at most `summarizer.max_output_tokens`), a
    longer one is cut at a line end, saying so"""
    thrash_turns: Int = Field(2, ge=0, le=100)
    """thrashing: a history compaction (`compact_history`, reactive) within this many turns of the one before
    is a strike..."""
    thrash_freed_share: Float = Field(0.1, ge=0, le=0.9)
    """...and so is one freeing less than this share of the limit..."""
    thrash_strikes: Int = Field(3, ge=1, le=100)
    """...this many in a row step up: summaries of half the share, then of the notes alone, then status
    `stuck` (reason `thrashing:` with the numbers) and a last call for the report"""
    server_trigger_tokens: Int = Field(150_000, ge=50_000)
    """server mode: compaction trigger (at least 50000)"""
    server_instructions: str | None = None
    """server mode: replaces the default summary prompt"""
    sandbox: Literal["bwrap", "none"] = "bwrap"
    """where `bash` runs: `bwrap` (the sandbox above) or `none` (no sandbox; explicit only)"""
    sandbox_network: Bool = False
    """let `bash` reach the network"""
    max_repeated_calls: Int = Field(3, ge=1, le=100)
    """runs of one identical call in the whole job (a `write` or `edit` starts afresh); then it is caught,
    and a job that keeps repeating ends `stuck`"""
    max_job_bytes: Int = Field(2 * 1024**3, gt=0, le=1024**5)
    """bytes the job's files may take in its directory (2 GiB; a resumed job's files count, and its
    subagents' in `agents/`, their `memories/` included); then status `disk_quota`, with `final.md`
    (saying why) and `metrics.json` still written"""
    max_subagents: Int = Field(4, ge=1, le=64)
    """a job's subagents (the `task` tool) running at once"""
    max_subagents_total: Int = Field(16, ge=1, le=10_000)
    """a job's subagents in all; a `task` call past them is an error result"""
    max_sandboxes: Int = Field(2, ge=1, le=64)
    """a job's `bash` calls running at once, its subagents' included; together one memory and process budget
    (that many calls' worth: 4 GiB and 256 processes each), in one cgroup under the runner's own where it
    may make one. `runner validate` and `run` warn when `concurrency` jobs' budgets pass 90% of the host's
    RAM or `pid_max`"""
    incremental: Bool = False
    """start from the newest earlier run of the same job that succeeded (see "Running it every night");
    `--fresh` runs it in full"""
    max_tool_calls_per_reply: Int = Field(64, ge=1, le=MOST_TOOL_CALLS_PER_REPLY)
    """tool calls run from one reply (its first ones); each call past them is answered with an error result
    saying it was not run and why (a reply of over 1,024 blocks more than the most a job may set, 10,000,
    fails its call)"""
    max_memory_entries: Int = Field(1_000, ge=1, le=100_000)
    """files and directories the memory tool's folder may hold (besides its 4 MiB); a write that would make
    more is refused with an error result"""
    snip_digest_share: Float = Field(0.05, ge=0, le=0.2)
    """the snip marker's digest (what it archived, and the saved file of each archived result) takes at most
    this share of the context limit, from 1,500 to 8,000 characters"""
    # new fields go last: job.json keeps their order
    clear_trigger: Literal["input_tokens", "tool_uses"] = "input_tokens"
    """clear mode: what the trigger counts, `input_tokens` or `tool_uses`"""
    clear_trigger_value: Int = Field(100_000, ge=1)
    """clear mode: over this many (the API's default), the API clears"""
    clear_keep_tool_uses: Int = Field(3, ge=0)
    """clear mode: the newest tool uses never cleared"""
    clear_at_least_tokens: Int | None = Field(None, ge=1)
    """clear mode: clear only when that frees at least this many input tokens"""
    clear_exclude_tools: Names = ()
    """clear mode: tools whose results are never cleared"""
    clear_tool_inputs: ToolInputs = False
    """clear mode: clear the calls' inputs too (`true`, or the names of the tools whose inputs go)"""
    delivery: Literal["live", "batch"] | None = None
    """`"live"` or `"batch"`: how this job's calls go (see "Half price overnight"); unset: the run's
    `[runner] delivery`"""

    @model_validator(mode="before")
    @classmethod
    def _a_table(cls, value: Any) -> Any:
        return table_or_raise(cls, value, "expected a table of limits")

    @model_validator(mode="after")
    def _consistent(self) -> Limits:
        if not self.snip_head < self.snip_target < self.snip_trigger:
            raise ValueError(
                f"need snip_head < snip_target < snip_trigger, got {self.snip_head}, "
                f"{self.snip_target}, {self.snip_trigger}"
            )
        if self.preview_chars >= self.large_result_chars:
            raise ValueError("preview_chars must be smaller than large_result_chars")
        return self


class RunnerSection(BaseModel):
    model_config = TOML_MODEL

    concurrency: Int = Field(8, ge=1, le=10_000)
    """jobs at once"""
    output_dir: TextPath = Path("runs")
    """where `runs/<run-id>/` goes"""
    backend: Literal["auto", "anthropic", "offline"] = "auto"
    """`anthropic` when `ANTHROPIC_API_KEY` is set, else `offline`"""
    model: str = Field("claude-sonnet-5-5", min_length=1)
    """model for jobs without their own"""
    request_timeout_s: Float = Field(600.0, gt=0, le=3600)  # a total deadline per attempt, body included
    """deadline of one attempt of an API request, headers and body in all; then the SDK retries it"""
    max_reply_bytes: Int = Field(32 * 1024**2, ge=1024, le=1024**3)  # decoded body of one reply
    """decoded body of one reply (32 MiB; a gzip body is counted as it decodes), checked before it is parsed;
    over it the call fails, unretried. Each attempt of a call must also end within `request_timeout_s` in
    all (a body dripping in does not extend it)"""
    max_retry_after_s: Float = Field(60.0, ge=0, le=3600)  # a longer retry-after is cut to this
    """a `retry-after` (or `retry-after-ms`) asking for a longer wait is cut to this"""
    max_cost_usd: Float | None = Field(None, gt=0, le=1_000_000)  # for the whole run
    """spend of the whole run: a call starts only when the run's spend, the estimates the calls in flight
    hold and its own stay under it; then every job ends `budget_exceeded` (estimates: a run may end a
    little over, never by a call of every job in flight)"""
    executor: Literal["local", "ray"] = "local"
    """`local` (this process) or `ray` (Ray workers; see below); `--executor`"""
    ray_address: str | None = Field(None, min_length=1)  # None: start a local Ray; "auto" or host:port: join
    """none: start a local Ray instance; `auto` or `host:port`: join that cluster; `--ray-address`"""
    keep_runs: Int | None = Field(None, ge=1, le=1_000_000)
    """after each `run`, remove all but this many newest runs (as `runner prune --keep N`)"""
    delivery: Literal["live", "batch"] = "live"
    """`live`, or `batch`: model calls sent as Message Batches at the batch price (see "Half price
    overnight"); `--delivery`"""
    batch_window_s: Float = Field(2.0, gt=0, le=3600)  # a batch is sent this long after its first request
    """a batch is sent this long after its first request"""
    batch_max_requests: Int = Field(10_000, ge=1, le=100_000)  # ... or once it holds this many
    """... or once it holds this many requests"""
    batch_poll_s: Float = Field(1.0, gt=0, le=3600)  # the first poll's wait, doubled up to batch_poll_max_s
    """the first wait before polling a batch in flight, doubled up to `batch_poll_max_s`"""
    batch_poll_max_s: Float = Field(60.0, gt=0, le=3600)
    """the longest wait between two polls of a batch"""
    batch_cache_ttl: Literal["1h", "5m"] = "1h"  # the TTL of a batch job's cache breakpoints
    """the prompt cache's TTL on a batch job's breakpoints (its calls the deadline sends live too): `1h`
    (written at 2x input, kept across batch turns of minutes), or `5m` (1.25x, as live jobs: the same
    requests as live, but a turn longer than 5 minutes writes the prefix again)"""
    batch_live_s: Float = Field(30.0, gt=0, le=3600)
    """kept before a job's end (the deadline's) for a call its batch cannot answer by then to go live"""
    deadline: str | None = Field(None, pattern=r"^([01]?[0-9]|2[0-3]):[0-5][0-9]$")  # "06:30", local time
    """`"HH:MM"` (local time): every job ends by then, its report kept; with `delivery = "batch"` calls go
    live in time for it"""
    deadline_s: Float | None = Field(None, gt=0, le=7 * 24 * 3600)  # ... or this long after the run starts
    """... or this many seconds after the run starts"""


class Price(BaseModel):
    """USD per million tokens; cache prices default to 1.25x (write), 2x (write with the 1-hour TTL)
    and 0.1x (read) of input."""

    model_config = TOML_MODEL

    input: Float = Field(ge=0, le=10_000)
    output: Float = Field(ge=0, le=10_000)
    cache_write: Float | None = Field(None, ge=0, le=10_000)
    cache_read: Float | None = Field(None, ge=0, le=10_000)
    cache_write_1h: Float | None = Field(None, ge=0, le=10_000)

    @model_validator(mode="before")
    @classmethod
    def _a_table(cls, value: Any) -> Any:
        return table_or_raise(cls, value, "expected a table of prices (input, output, ...)")


def _discount(value: Any) -> float:
    """``[prices] batch_discount``: a number from 0 to 1 (from a RUNNER_* variable, its text)."""
    if isinstance(value, FromEnv):
        try:
            value = float(value)
        except ValueError:
            pass
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
        raise ValueError("expected a number from 0 to 1")
    return float(value)


class Prices(BaseModel):
    """``[prices]``: each other key a model's (or family's) prices; ``batch_discount`` a number. Read as
    a mapping of those (:meth:`items`), as :class:`~runner.pricing.PriceTable` takes it."""

    model_config = ConfigDict(strict=True, extra="allow")
    __pydantic_extra__: dict[str, Price] = Field(init=False)

    batch_discount: Annotated[float, BeforeValidator(_discount)] | None = None

    @model_validator(mode="before")
    @classmethod
    def _a_table(cls, value: Any) -> Any:
        return table_or_raise(
            cls, value, "expected a table: a model's prices under its name, and batch_discount"
        )

    def items(self) -> ItemsView[str, Price | float]:
        table: dict[str, Price | float] = dict(self.__pydantic_extra__ or {})
        if self.batch_discount is not None:
            table = {BATCH_DISCOUNT_KEY: self.batch_discount, **table}
        return table.items()


class SummarizerSection(BaseModel):
    model_config = TOML_MODEL

    model: str = Field("claude-haiku-5-5", min_length=1)
    """model for summaries (cheaper than the jobs')"""
    max_concurrent: Int = Field(4, ge=1, le=1000)
    """summary calls in flight at once, whole batch"""
    requests_per_minute: Int = Field(50, ge=1, le=100_000)
    """summary calls started in any 60 s, whole batch"""
    max_input_chars: Int = Field(400_000, ge=10_000)
    """a longer history is cut to head + tail for the summary"""
    max_output_tokens: Int = Field(6_000, ge=100)
    """longest summary"""


class _EnvText(EnvSettingsSource):
    """``RUNNER_*`` variables, each value marked as text (:class:`FromEnv`) for the fields to parse."""

    def __call__(self) -> dict[str, Any]:
        return _marked(super().__call__())


def _marked(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _marked(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_marked(item) for item in value]
    return FromEnv(value) if isinstance(value, str) else value


class Settings(BaseSettings):
    # not strict itself (pydantic-settings would then parse the variables its own way): its sections are,
    # and the variables' text is parsed by their fields (FromEnv)
    model_config = SettingsConfigDict(env_prefix="RUNNER_", env_nested_delimiter="__", extra="forbid")

    runner: RunnerSection = RunnerSection()
    summarizer: SummarizerSection = SummarizerSection()
    limits: Limits = Limits()
    jobs: dict[str, Limits] = {}  # each [jobs.<name>] table over [limits]: that job's limits
    prices: Prices = Prices()
    _config_file: Path | None = PrivateAttr(default=None)  # the file these settings were read from

    @property
    def config_file(self) -> Path | None:
        """The config file these settings were read from (absolute), if any."""
        return self._config_file

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """The environment over what the settings are made with (a config file's tables, by
        :func:`load_settings`)."""
        return (_EnvText(settings_cls), init_settings)

    @field_validator("jobs", mode="before")
    @classmethod
    def _over_limits(cls, jobs: Any, info: ValidationInfo) -> Any:
        """Each ``[jobs.<name>]`` table is validated over ``[limits]`` (over the defaults when ``[limits]``
        itself did not validate: its own errors are reported once, under ``limits``)."""
        if not isinstance(jobs, dict):
            return jobs
        limits = info.data.get("limits")
        base = limits.model_dump() if isinstance(limits, Limits) else {}
        return {name: {**base, **table} if isinstance(table, dict) else table for name, table in jobs.items()}

    def limits_for(self, job: str, task_limits: dict[str, Any] | None = None) -> Limits:
        """Merge ``[limits]`` < ``[jobs.<job>]`` < the task file's ``[limits]``; strictly typed (the tables
        are TOML: a number written as a string is an error, not a number)."""
        limits = self.jobs.get(job, self.limits)
        return Limits.model_validate({**limits.model_dump(), **task_limits}) if task_limits else limits


def describe_errors(
    source: str,
    error: ValidationError,
    prefix: str = "",
    *,
    source_for: Callable[[tuple[Any, ...]], str | None] | None = None,
) -> list[str]:
    """One line per pydantic error: ``file: key: what was expected (got value)``.

    ``source_for(loc)`` may name a different source for one error (an environment variable)."""
    lines = []
    for err in error.errors():
        key = ".".join(str(p) for p in (prefix, *err["loc"]) if p != "")
        # else as pydantic words it, a value error without its "Value error, "
        msg = {"extra_forbidden": "unknown key", "missing": "required key is missing"}.get(
            err["type"], err["msg"].removeprefix("Value error, ")
        )
        got = err.get("input")
        # a whole table as "got" (a check across keys) says nothing the message does not
        hidden = err["type"] in ("missing", "extra_forbidden") or (isinstance(got, dict) and bool(got))
        shown = "" if hidden else f" (got {_short(got)})"
        where = (source_for(tuple(err["loc"])) if source_for else None) or source
        lines.append(f"{where}: {key or '(top level)'}: {msg}{shown}")
    return lines


def _env_source(loc: tuple[Any, ...]) -> str | None:
    """``environment variable RUNNER_X__Y`` when that variable set the value at ``loc``."""
    if not loc:
        return None
    wanted = "RUNNER_" + "__".join(str(p) for p in loc).upper()
    for name in os.environ:
        if name.upper() == wanted:
            return f"environment variable {name}"
    return None


def _short(value: Any) -> str:
    """A value as a config file writes it (``true``, not Python's ``True``), cut at 60 characters."""
    text = ("true" if value else "false") if isinstance(value, bool) else repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def read_toml(path: Path) -> dict[str, Any]:
    """Parse a TOML file, turning every failure into a one-line :class:`ConfigError`."""
    try:
        mode = os.stat(path).st_mode
        if not stat.S_ISREG(mode):  # a FIFO or a device would block, or never end
            kind = (
                "a directory" if stat.S_ISDIR(mode) else "a FIFO" if stat.S_ISFIFO(mode) else "a special file"
            )
            raise ConfigError([f"{path}: cannot read: {kind}, not a regular file (expected a TOML file)"])
        raw = path.read_bytes()
    except OSError as e:
        raise ConfigError([f"{path}: cannot read: {e.strerror or e}"]) from None
    try:
        return tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise ConfigError([f"{path}: not UTF-8 text (is it a binary file?)"]) from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError([f"{path}: TOML syntax error: {e}"]) from None


def load_settings(path: Path | None) -> Settings:
    """Load settings from ``path`` (optional) and the environment; env wins over the file. One validation:
    every problem, each a line naming the file (or the variable) and the key (:class:`ConfigError`)."""
    if path is not None:
        if path.is_dir():
            raise ConfigError([f"{path}: config file is a directory, expected a TOML file"])
        if not path.exists():
            raise ConfigError([f"{path}: config file not found"])
    tables = read_toml(path) if path is not None else {}  # unreadable or not TOML: one line, nothing more
    try:
        settings = Settings(**tables)
    except ValidationError as e:
        source = str(path) if path is not None else "environment"
        raise ConfigError(describe_errors(source, e, source_for=_env_source)) from None
    settings._config_file = path.absolute() if path is not None else None
    return settings


def deadline_at(clock: str | None, seconds: float | None, now: float | None = None) -> float | None:
    """The deadline as epoch seconds: ``seconds`` from ``now``, or the next ``"HH:MM"`` local time
    (today's when it is still ahead, else tomorrow's); None when neither is set."""
    now = time.time() if now is None else now
    if seconds is not None:
        return now + seconds
    if clock is None:
        return None
    hours, minutes = (int(part) for part in clock.split(":"))
    today = datetime.fromtimestamp(now).replace(hour=hours, minute=minutes, second=0, microsecond=0)
    at = today if today.timestamp() > now else today + timedelta(days=1)
    return at.timestamp()
