"""Shared by every test module: async tests run on asyncio (aiofiles is asyncio-only); a job store;
the environment a ``runner`` subprocess gets."""

import os
from pathlib import Path

import pytest

from runner.store import JobStore


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
    from runner.compactor.compactor import Compactor
    from runner.compactor.summarizer import Summarizer
    from runner.config import Limits
    from runner.emulator import EmulatorConfig, running_emulator
    from runner.jobs import JobSpec
    from runner.models.anthropic import AnthropicModel
    from runner.session import Session
    from runner.store import read_jsonl

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
    from runner.compactor.compactor import Compactor
    from runner.compactor.summarizer import Summarizer
    from runner.config import Limits
    from runner.jobs import JobSpec
    from runner.models.offline import OfflineModel
    from runner.session import Session

    spec = JobSpec(name="survey", source=Path("survey.toml"), prompt="Survey this package.", workspace=root,
                   model="m", system=None, tools=("read", "glob", "grep"), limits=Limits(**limits))
    store = JobStore(out)
    await store.open()
    result = await Session(spec, OfflineModel(), Compactor(Summarizer(None, "none")), store, "none").run()
    final = out / "final.md"
    return result, final.read_text() if final.exists() else ""
