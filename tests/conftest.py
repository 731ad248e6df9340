"""Shared by every test module: async tests run on asyncio (aiofiles is asyncio-only); a job store;
the CLI run in this process (:func:`run_cli`) or as a real ``python -m runner`` (:func:`run_cli_process`),
each with the same cleaned environment.

Guarantees:

- Neither way sees the API's or the runner's variables of the environment pytest was started in, nor
  the ones that change the terminal output (``COLUMNS``, ``FORCE_COLOR``...): only what a test gives.
- The Ray group's tests share one local Ray instance (:func:`cluster`), on the loopback only, stopped
  when the group's run of tests ends.
- An in-process run leaves this process as it found it: its working directory, its environment, its
  SIGINT and SIGTERM handlers, ``sys.stdout`` and ``sys.stderr``; the CLI's module consoles are
  replaced by fresh ones for the test (made in the cleaned environment) and put back after it.
"""

import contextlib
import importlib
import io
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from runner.config import ConfigError
from runner.rundir.store import JobStore

# a real recorded agent history (tests/recorded/trajectories/README.md), for the replay's tests
RECORDED_TRAJECTORY = (
    Path(__file__).parent
    / "recorded"
    / "trajectories"
    / "swebv_minisweagent_gemini3pro_matplotlib_matplotlib_25775.jsonl"
)
# read by the CLI or by rich when it starts: never inherited from the shell that started pytest
CLI_VARIABLE_PREFIXES = ("ANTHROPIC_", "RUNNER_")
CLI_VARIABLES = ("COLUMNS", "LINES", "FORCE_COLOR", "NO_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE")


@pytest.fixture
def anyio_backend():
    return "asyncio"


@pytest.fixture
async def store(tmp_path: Path) -> JobStore:
    s = JobStore(tmp_path / "run" / "job")
    await s.open()
    return s


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")  # None: the browser tests skip


def headless_chromium(profile: Path, *flags: str) -> list[str]:
    """The argv of a headless Chromium with a fresh ``profile`` and no network of its own (no update,
    sync or background requests), then ``flags`` (a test's and the viewer benchmark's alike)."""
    assert CHROMIUM is not None
    return [
        CHROMIUM,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        f"--user-data-dir={profile}",
        *flags,
    ]


def inherited(name: str) -> bool:
    """Whether a variable of pytest's own environment is passed on to a CLI run."""
    return not name.startswith(CLI_VARIABLE_PREFIXES) and name not in CLI_VARIABLES


def runner_env(**extra: str) -> dict[str, str]:
    """This process's environment without the API's, the runner's and the terminal's variables (a
    subprocess sees only what a test gives it), unbuffered, with ``extra``."""
    env = {k: v for k, v in os.environ.items() if inherited(k)}
    return {**env, "PYTHONUNBUFFERED": "1", **extra}


def runner_argv(*args: str) -> list[str]:
    """``python -m runner ARGS`` with this interpreter (for a test that needs the process itself)."""
    return [sys.executable, "-m", "runner", *args]


def run_cli_process(
    *args: str, cwd: Path | str, timeout: float = 120, **env: str
) -> subprocess.CompletedProcess[str]:
    """``python -m runner ARGS`` as a real subprocess in ``cwd`` with :func:`runner_env` and ``env``:
    for what only a process has (a crash, a kill, a signal, a lock held by another process, a timeout
    on something that could block, a separate interpreter's memory)."""
    return subprocess.run(
        runner_argv(*args), cwd=cwd, env=runner_env(**env), capture_output=True, text=True, timeout=timeout
    )


def kill_runner_when(
    ready: Callable[[], bool],
    *args: str,
    cwd: Path | str,
    env: dict[str, str] | None = None,
    timeout_s: float = 60,
    then_after_s: float = 0.0,
    argv: list[str] | None = None,
) -> bool:
    """``python -m runner ARGS`` (or ``argv``, e.g. :func:`scripted.scripted_runner`'s) as a real process
    in ``cwd`` (:func:`runner_env`, or ``env``), killed with SIGKILL ``then_after_s`` seconds after
    ``ready()`` first holds (polled every 2 ms): True when it was killed, False when it ended first. The
    test fails when neither happens in ``timeout_s``. The one kill-and-resume harness: a test says when
    to kill, and checks the resume."""
    proc = subprocess.Popen(
        argv or runner_argv(*args),
        cwd=cwd,
        env=env if env is not None else runner_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + timeout_s
    kill_at: float | None = None
    try:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                return False
            now = time.monotonic()
            if kill_at is None and ready():
                kill_at = now + then_after_s
            if kill_at is not None and now >= kill_at:
                proc.send_signal(signal.SIGKILL)
                proc.wait()
                return True
            time.sleep(0.002)
        shown = " ".join(args) if args else " ".join(argv or [])
        pytest.fail(f"runner {shown} neither reached its kill point nor ended in {timeout_s:g} s")
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
    return False


def fresh_consoles(patch: pytest.MonkeyPatch) -> None:
    """The CLI's module consoles (``runner.ui.console.out`` and ``err``, wherever a runner module
    imported them) replaced by new ones made now, as that module makes them: their width and
    colours come from this test's environment, not from the one at import."""
    from runner.ui import console

    new = {id(console.out): console.console(), id(console.err): console.console(stderr=True)}
    for name, module in list(sys.modules.items()):
        if name == "runner" or name.startswith("runner."):
            for attr, value in list(vars(module).items()):
                if id(value) in new:
                    patch.setattr(module, attr, new[id(value)])


def isolate_cli(patch: pytest.MonkeyPatch, **env: str) -> None:
    """This process's environment as :func:`runner_env` gives a subprocess (``env`` set), and fresh
    CLI consoles."""
    for name in [k for k in os.environ if not inherited(k)]:
        patch.delenv(name)
    for name, value in env.items():
        patch.setenv(name, value)
    fresh_consoles(patch)


@contextlib.contextmanager
def mounted_tmpfs(mount: Path, size: str) -> Iterator[Path]:
    """A real file system of ``size`` (a tmpfs mounted at ``mount``, made here); the test is skipped
    where none can be mounted (not root)."""
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mount)], capture_output=True
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode(errors='replace').strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


@contextlib.contextmanager
def signal_handlers_kept() -> Iterator[None]:
    """SIGINT and SIGTERM handled after as before (a batch listens for both, and asyncio puts the
    defaults back when it stops, not pytest's)."""
    kept = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for signum, handler in kept.items():
            signal.signal(signum, handler)


def call_main(
    args: tuple[str, ...], cwd: Path | str | None, env: dict[str, str]
) -> subprocess.CompletedProcess[str]:
    """``runner.cli.main(args)`` in ``cwd`` with ``env`` set, its stdout and stderr captured; exit codes
    as ``python -m runner`` has them (``sys.exit`` inside, argparse's 2 included). An exception the
    CLI does not catch is raised here: the test fails with its traceback."""
    from runner import cli

    stdout, stderr = io.StringIO(), io.StringIO()
    with pytest.MonkeyPatch.context() as scoped, signal_handlers_kept():
        for name, value in env.items():
            scoped.setenv(name, value)
        if cwd is not None:
            scoped.chdir(cwd)
        with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
            try:
                code: object = cli.main(list(args))
            except SystemExit as e:
                code = e.code
                if code is not None and not isinstance(code, int):
                    print(code, file=sys.stderr)  # as the interpreter does with sys.exit("message")
                    code = 1
    return subprocess.CompletedProcess(["runner", *args], code or 0, stdout.getvalue(), stderr.getvalue())


CliRunner = Callable[..., subprocess.CompletedProcess]


@pytest.fixture
def run_cli(monkeypatch: pytest.MonkeyPatch) -> CliRunner:
    """``run_cli(*args, cwd=None, **env)``: the CLI run in this process (``runner.cli.main``), as
    :func:`run_cli_process` runs it but without a new interpreter (~1.4 s of imports saved a call).
    The environment is cleaned for the whole test (:func:`isolate_cli`); ``env`` is set for the call."""
    isolate_cli(monkeypatch)

    def run(*args: str, cwd: Path | str | None = None, **env: str) -> subprocess.CompletedProcess[str]:
        return call_main(args, cwd, env)

    return run


def run_cli_once(*args: str, cwd: Path | str | None = None, **env: str) -> subprocess.CompletedProcess[str]:
    """:func:`run_cli` for a fixture wider than one test (a module's shared run): isolated for the call."""
    with pytest.MonkeyPatch.context() as patch:
        isolate_cli(patch)
        return call_main(args, cwd, env)


async def scripted_job(
    tmp_path: Path,
    script: list[dict],
    *,
    tools: tuple[str, ...] = ("read", "glob", "grep"),
    max_turns: int = 20,
):
    """One session on the anthropic backend (the real SDK over HTTP) against the emulator playing
    ``script``; its workspace is ``tmp_path / "ws"`` (made, with one module, when missing), its
    directory ``tmp_path / "job"``. Returns the session, the requests the emulator received and the
    transcript."""
    from runner.agent.runjob import Services
    from runner.agent.session import Session
    from runner.compaction.compactor import Compactor
    from runner.compaction.summarizer import Summarizer
    from runner.config import Limits
    from runner.emulator.config import EmulatorConfig
    from runner.emulator.server import running_emulator
    from runner.jobs import JobSpec
    from runner.models.anthropic import AnthropicModel
    from runner.rundir.store import read_jsonl

    ws = tmp_path / "ws"
    if not ws.exists():
        ws.mkdir()
        (ws / "a.py").write_text('"""A."""\n')
    spec = JobSpec(
        name="s",
        source=Path("s.toml"),
        prompt="Survey.",
        workspace=ws,
        model="claude-sonnet-5-5",
        system=None,
        tools=tools,
        limits=Limits(max_retries=0, max_turns=max_turns),
    )
    with running_emulator(EmulatorConfig(script=script, record_requests=True)) as emu:
        model = AnthropicModel(base_url=emu.base_url, api_key="k", max_retries=0)
        store = JobStore(tmp_path / "job")
        await store.open()
        session = Session(
            spec,
            services=Services(model=model, compactor=Compactor(Summarizer(None, "m")), summary_model="m"),
            store=store,
        )
        await session.run()
        await model.aclose()
        recorded = emu.state.snapshot()["recorded_requests"]
    transcript, _ = read_jsonl(store.dir / "transcript.jsonl")
    return session, recorded, transcript


async def offline_survey(root: Path, out: Path, limits: dict, prompt: str = "Survey this package."):
    """The offline model's survey of ``root`` with ``limits``, its job directory ``out``: the job's
    result and its final.md ("" when there is none)."""
    from runner.agent.runjob import Services
    from runner.agent.session import Session
    from runner.compaction.compactor import Compactor
    from runner.compaction.summarizer import Summarizer
    from runner.config import Limits
    from runner.jobs import JobSpec
    from runner.offline.model import OfflineModel

    spec = JobSpec(
        name="survey",
        source=Path("survey.toml"),
        prompt=prompt,
        workspace=root,
        model="m",
        system=None,
        tools=("read", "glob", "grep"),
        limits=Limits(**limits),
    )
    store = JobStore(out)
    await store.open()
    result = await Session(
        spec,
        services=Services(
            model=OfflineModel(), compactor=Compactor(Summarizer(None, "none")), summary_model="none"
        ),
        store=store,
    ).run()
    final = out / "final.md"
    return result, final.read_text() if final.exists() else ""


def survey_rows(report: str, job: Path) -> dict[str, list]:
    """Every entry a memory survey reported (its report's table, or the facts files it names)."""
    from runner.offline.memory_survey import report_rows

    return report_rows(report, job)


def survey_todos(report: str, job: Path) -> set[str]:
    """Every TODO place (``path:line``) a memory survey reported, in the report or its todo files."""
    import re

    found = set(re.findall(r"^- `([^`]+?:\d+):", report, re.M))
    for name in re.findall(r"`(memories/survey/todo-\d{3}\.md)`", report):
        found |= {line for line in (job / name).read_text(encoding="utf-8").split("\n")[1:] if line.strip()}
    return found


def regular_files(root: Path) -> dict[str, bytes]:
    """Ground truth: every regular file under ``root`` (not a symlink), by relative path as the tools
    show it (:func:`runner.tools.beneath.shown`: a control character or a byte that is not text as
    ``\\xNN``, a backslash as ``\\\\``)."""
    from runner.tools.beneath import shown

    out = {}
    for dirpath, _, filenames in os.walk(root):
        for name in filenames:
            path = Path(dirpath) / name
            if path.is_file() and not path.is_symlink():
                out[shown(str(path.relative_to(root)))] = path.read_bytes()
    return out


def todo_lines(files: dict[str, bytes]) -> int:
    """Ground truth: the lines the survey's TODO search finds in these files, as the grep tool
    searches (not a file with a NUL byte in its first 512; a line over 2,000 bytes in its first MiB)."""
    import re

    from runner.offline.memory_survey import TODO_PATTERN

    rx = re.compile(TODO_PATTERN)
    hits = 0
    for data in files.values():
        if b"\x00" in data[:512]:
            continue
        lines = (raw[: 1 << 20].decode(errors="replace").rstrip("\r\n") for raw in data.split(b"\n"))
        hits += sum(1 for line in lines if rx.search(line))
    return hits


def expected_row(data: bytes) -> tuple:
    """What a survey must say of a file with these bytes: lines and size, or binary and its size."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return ("binary", len(data))
    return ("text", text.count("\n") + (1 if text and not text.endswith("\n") else 0))


def calls_and_gaps(job: Path) -> tuple[int, int, list[int]]:
    """A job's tool calls, how many repeated an identical earlier one, and the turns between its
    history compactions."""
    import collections
    import json

    calls = [
        json.dumps([b["name"], b["input"]], sort_keys=True)
        for line in (job / "transcript.jsonl").read_text().splitlines()
        if (m := json.loads(line))["role"] == "assistant" and isinstance(m["content"], list)
        for b in m["content"]
        if b.get("type") == "tool_use"
    ]
    turn, history = 0, []
    for line in (job / "events.jsonl").read_text().splitlines():
        event = json.loads(line)
        turn = event.get("turn", turn) if event.get("stage") == "model_call" else turn
        if event.get("stage") == "compact_history":
            history.append(turn)
    repeated = sum(n - 1 for n in collections.Counter(calls).values())
    return len(calls), repeated, [b - a for a, b in zip(history, history[1:], strict=False)]


# over ~10 s each on a shared 2-core machine (``--durations=40``): ``-m "not slow"`` leaves them out, the
# plain ``pytest`` (CI's) runs them too
SLOW = {
    "test_big_work.py::test_a_10000_file_tree_is_surveyed_whole_in_the_default_window",
    "test_spend_kill_resume.py::test_twenty_kills_lose_no_spend",
    "test_faithful_resume.py::test_killed_four_times_resumes_like_an_uninterrupted_run",
    "test_ray_executor.py::test_the_summary_gate_holds_across_workers",
    "test_ray_faults.py::test_a_worker_that_stops_answering_is_declared_dead",
    "test_ray_faults.py::test_a_worker_killed_while_its_calls_are_in_flight",
    "test_ray_faults.py::test_a_worker_killed_at_a_random_moment",
    "test_ray_faults.py::test_a_worker_killed_while_it_holds_the_only_summary_slot",
    "test_bench_smoke.py::test_benchmark_smoke",
    "test_always_a_report.py::test_a_timed_out_api_job_writes_its_report",
}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.nodeid.removeprefix("tests/").split("[")[0] in SLOW:
            item.add_marker(pytest.mark.slow)


# each test of the Ray files starts or looks for a local Ray instance: under pytest-xdist they run one
# after another on one worker (``pytestmark = RAY_TESTS`` in each; a mark must be there at collection)
RAY_TESTS = pytest.mark.xdist_group("ray")
RAY_KEY = "test-key-ray"  # the emulator's key, in the environment the shared Ray's workers inherit
_shared_ray: dict[str, object] = {}  # "ray": the module while it runs; "saved_key"; "skip": why it cannot


def in_ray_group(item: pytest.Item | None) -> bool:
    return item is not None and any(mark.args[:1] == ("ray",) for mark in item.iter_markers("xdist_group"))


@pytest.fixture
def cluster():
    """The local Ray instance the Ray group's tests share (2 CPUs, no dashboard), started by the first
    test that asks for it as the runner starts one (:func:`runner.execution.ray_driver.start_local_ray`:
    on the loopback only, which a test checks) and stopped after the last test of the group that runs
    in a row (:func:`pytest_runtest_teardown`); its workers inherit this environment with the emulator's
    key. Skipped, saying why, only when Ray cannot start on this machine; an instance that came up on
    the network is a failure, never a skip."""
    if "skip" in _shared_ray:
        pytest.skip(str(_shared_ray["skip"]))
    if "ray" not in _shared_ray:
        try:
            # first: it sets Ray's single-machine switch before ray is imported
            from runner.execution.ray_driver import start_local_ray

            ray = importlib.import_module("ray")
        except ImportError as e:
            _shared_ray["skip"] = f"Ray cannot start on this machine: it is not installed ({e})"
            pytest.skip(str(_shared_ray["skip"]))
        _shared_ray["saved_key"] = os.environ.get("ANTHROPIC_API_KEY")
        os.environ["ANTHROPIC_API_KEY"] = RAY_KEY
        try:
            start_local_ray(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level="error")
        except Exception as e:
            stop_shared_ray()
            if isinstance(e, ConfigError):  # it came up on the network: a failure, never a skip
                raise
            # whatever else stops Ray from starting is the skip reason
            _shared_ray["skip"] = f"Ray cannot start on this machine: {type(e).__name__}: {e}"
            pytest.skip(str(_shared_ray["skip"]))
        _shared_ray["ray"] = ray
    return _shared_ray["ray"]


def stop_shared_ray() -> None:
    """Shut the shared Ray instance down (when it runs) and put the API key variable back."""
    ray = _shared_ray.pop("ray", None)
    if ray is not None:
        ray.shutdown()  # type: ignore[attr-defined]
    if "saved_key" in _shared_ray:
        saved = _shared_ray.pop("saved_key")
        if saved is None:
            os.environ.pop("ANTHROPIC_API_KEY", None)
        else:
            os.environ["ANTHROPIC_API_KEY"] = str(saved)


def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    if "ray" in _shared_ray and not in_ray_group(nextitem):
        stop_shared_ray()


def pytest_sessionfinish() -> None:
    stop_shared_ray()
