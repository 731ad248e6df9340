"""Shared by every test module: async tests run on asyncio (aiofiles is asyncio-only); a job store;
the environment a ``runner`` subprocess gets."""

import os
from pathlib import Path

import pytest

from runner.rundir.store import JobStore


@pytest.fixture
def anyio_backend():
    return "asyncio"


@pytest.fixture
async def store(tmp_path: Path) -> JobStore:
    s = JobStore(tmp_path / "run" / "job")
    await s.open()
    return s


def runner_env(**extra: str) -> dict[str, str]:
    """This process's environment without the API's and the runner's variables (a subprocess sees
    only what a test gives it), unbuffered, with ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "RUNNER_"))}
    return {**env, "PYTHONUNBUFFERED": "1", **extra}


async def scripted_job(tmp_path: Path, script: list[dict], *, tools: tuple[str, ...] = ("read", "glob", "grep"),
                       max_turns: int = 20):
    """One session on the anthropic backend (the real SDK over HTTP) against the emulator playing
    ``script``; its workspace is ``tmp_path / "ws"`` (made, with one module, when missing), its
    directory ``tmp_path / "job"``. Returns the session, the requests the emulator received and the
    transcript."""
    from runner.agent.session import Session
    from runner.compaction.compactor import Compactor
    from runner.compaction.summarizer import Summarizer
    from runner.config import Limits
    from runner.emulator import EmulatorConfig, running_emulator
    from runner.jobs import JobSpec
    from runner.models.anthropic import AnthropicModel
    from runner.rundir.store import read_jsonl

    ws = tmp_path / "ws"
    if not ws.exists():
        ws.mkdir()
        (ws / "a.py").write_text('"""A."""\n')
    spec = JobSpec(name="s", source=Path("s.toml"), prompt="Survey.", workspace=ws, model="claude-sonnet-5-5",
                   system=None, tools=tools, limits=Limits(max_retries=0, max_turns=max_turns))
    with running_emulator(EmulatorConfig(script=script, record_requests=True)) as emu:
        model = AnthropicModel(base_url=emu.base_url, api_key="k", max_retries=0)
        store = JobStore(tmp_path / "job")
        await store.open()
        session = Session(spec, model, Compactor(Summarizer(None, "m")), store, "m")
        await session.run()
        await model.aclose()
        recorded = emu.state.snapshot()["recorded_requests"]
    transcript, _ = read_jsonl(store.dir / "transcript.jsonl")
    return session, recorded, transcript


async def offline_survey(root: Path, out: Path, limits: dict):
    """The offline model's survey of ``root`` with ``limits``, its job directory ``out``: the job's
    result and its final.md ("" when there is none)."""
    from runner.agent.session import Session
    from runner.compaction.compactor import Compactor
    from runner.compaction.summarizer import Summarizer
    from runner.config import Limits
    from runner.jobs import JobSpec
    from runner.models.offline import OfflineModel

    spec = JobSpec(name="survey", source=Path("survey.toml"), prompt="Survey this package.", workspace=root,
                   model="m", system=None, tools=("read", "glob", "grep"), limits=Limits(**limits))
    store = JobStore(out)
    await store.open()
    result = await Session(spec, OfflineModel(), Compactor(Summarizer(None, "none")), store, "none").run()
    final = out / "final.md"
    return result, final.read_text() if final.exists() else ""


def survey_rows(report: str, job: Path) -> dict[str, list]:
    """Every entry a memory survey reported (its report's table, or the facts files it names)."""
    from runner.models.memory_survey import report_rows

    return report_rows(report, job)


def survey_todos(report: str, job: Path) -> set[str]:
    """Every TODO place (``path:line``) a memory survey reported, in the report or its todo files."""
    import re

    found = set(re.findall(r"^- `([^`]+?:\d+):", report, re.M))
    for name in re.findall(r"`(memories/survey/todo-\d{3}\.md)`", report):
        found |= {line for line in (job / name).read_text(encoding="utf-8").split("\n")[1:] if line.strip()}
    return found


def regular_files(root: Path) -> dict[str, bytes]:
    """Ground truth: every regular file under ``root`` (not a symlink), by relative path."""
    out = {}
    for dirpath, _, filenames in os.walk(root):
        for name in filenames:
            path = Path(dirpath) / name
            if path.is_file() and not path.is_symlink():
                out[str(path.relative_to(root))] = path.read_bytes()
    return out


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

    calls = [json.dumps([b["name"], b["input"]], sort_keys=True)
             for line in (job / "transcript.jsonl").read_text().splitlines()
             if (m := json.loads(line))["role"] == "assistant" and isinstance(m["content"], list)
             for b in m["content"] if b.get("type") == "tool_use"]
    turn, history = 0, []
    for line in (job / "events.jsonl").read_text().splitlines():
        event = json.loads(line)
        turn = event.get("turn", turn) if event.get("stage") == "model_call" else turn
        if event.get("stage") == "compact_history":
            history.append(turn)
    repeated = sum(n - 1 for n in collections.Counter(calls).values())
    return len(calls), repeated, [b - a for a, b in zip(history, history[1:], strict=False)]
