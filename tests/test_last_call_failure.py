"""A job that reached a limit keeps that ending when its last call (the report without tools) fails:
the failure is added to its error, and ``final.md`` is built from the history instead.

This holds with any model: the job is driven here by a scripted model (``tests/scripted.py``: it reads
the email package's modules one a turn) whose answer to the request without tools fails."""

from __future__ import annotations

import sysconfig
from pathlib import Path

import pytest
from scripted import ScriptedModel, files_under, reads

from runner.compaction.compactor import Compactor
from runner.compaction.summarizer import Summarizer
from runner.config import Limits
from runner.execution.scheduler import Batch, run_batch
from runner.jobs import JobSpec
from runner.models.base import Reply, Request

EMAIL = Path(sysconfig.get_paths()["stdlib"]) / "email"


class ReportFails(ScriptedModel):
    """The scripted model, but its answer to the request without tools is a 500 after all retries."""

    async def create(self, request: Request) -> Reply:
        if (request.tool_choice or {}).get("type") == "none":
            raise RuntimeError("500 internal server error after 4 retries")
        return await super().create(request)


@pytest.mark.anyio
async def test_a_failed_last_call_keeps_the_limit_the_job_reached(tmp_path: Path) -> None:
    spec = JobSpec(
        name="j",
        source=tmp_path / "j.toml",
        prompt="Survey.",
        workspace=EMAIL,
        model="m",
        system=None,
        tools=("read", "glob", "grep"),
        limits=Limits(max_turns=4),
    )
    result = await run_batch(
        Batch(
            run_dir=tmp_path / "run",
            specs=[spec],
            model=ReportFails(reads(files_under(EMAIL))),
            compactor=Compactor(Summarizer(None, "s")),
            summary_model="s",
            concurrency=1,
            handle_signals=False,
        )
    )
    job = result.results["j"]
    assert job.status == "max_turns", (job.status, job.error)
    assert (
        job.error.startswith("reached max_turns = 4")
        and "the last call failed: RuntimeError: 500" in job.error
    )
    final = (tmp_path / "run" / "j" / "final.md").read_text()
    assert final.startswith("> **Partial report** (status `max_turns`")
