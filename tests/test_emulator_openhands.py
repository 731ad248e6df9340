"""OpenHands' SDK (its ``LLM``, litellm's anthropic provider) answered by the emulator, as by the API.

The SDK needs Python >= 3.12, so it runs in an interpreter of its own: ``RUNNER_OPENHANDS_PYTHON``, else this
one if it has ``openhands.sdk``; without either the test is skipped (``bench/peers_openhands.py`` is the
benchmark that drives the whole agent).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import pytest
import test_emulator
from conftest import runner_env

server, emu = test_emulator.server, test_emulator.emu  # its fixtures: one emulator, reset per test

OPENHANDS_SCRIPT = """
import json, os, sys
os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
os.environ["OPENHANDS_SUPPRESS_BANNER"] = "1"
from openhands.sdk import LLM, Message, TextContent
from openhands.sdk.tool.builtins.finish import FinishTool

out = []
for stream in (False, True):
    llm = LLM(model="anthropic/claude-sonnet-5-5", base_url=sys.argv[1], api_key="emulator-key",
              usage_id=f"agent-{stream}", stream=stream, num_retries=0)
    response = llm.generate(
        [Message(role="system", content=[TextContent(text="You finish.")]),
         Message(role="user", content=[TextContent(text="Say done.")])],
        tools=FinishTool.create(),
        on_token=(lambda chunk: None) if stream else None,
    )
    calls = [(c.name, json.loads(c.arguments)) for c in response.message.tool_calls or []]
    out.append({"stream": stream, "calls": calls})
print(json.dumps(out))
"""


def openhands_python() -> str | None:
    """An interpreter with the OpenHands SDK: ``RUNNER_OPENHANDS_PYTHON``, else this one if it has it."""
    given = os.environ.get("RUNNER_OPENHANDS_PYTHON")
    if given:
        return given
    return sys.executable if importlib.util.find_spec("openhands") else None


@pytest.mark.skipif(
    openhands_python() is None, reason="openhands-sdk is not installed (set RUNNER_OPENHANDS_PYTHON)"
)
def test_openhands_llm_is_answered(emu):
    """OpenHands' ``LLM`` with its stock settings (prompt caching, ``reasoning_effort="high"`` sent as
    ``output_config``, its tool schemas), unstreamed as it ships and streamed: both requests are accepted
    and the tool call reaches it whole."""
    call = {"type": "tool_use", "id": "toolu_emu_1", "name": "finish", "input": {"message": "done"}}
    emu.set_script([{"content": [call], "stop_reason": "tool_use"}] * 2)
    python = openhands_python()
    assert python is not None
    done = subprocess.run(
        [python, "-c", OPENHANDS_SCRIPT, emu.base_url],
        capture_output=True,
        text=True,
        timeout=240,
        env=runner_env(),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.splitlines()[-1]) == [
        {"stream": False, "calls": [["finish", {"message": "done"}]]},
        {"stream": True, "calls": [["finish", {"message": "done"}]]},
    ]
    stats = emu.stats()
    assert stats["outcomes"] == {"ok": 2} and stats["streamed_requests"] == 1, stats
    first = stats["recorded_requests"][0]
    assert "output_config" in first and not first.get("stream"), first


@pytest.mark.skipif(
    openhands_python() is None, reason="openhands-sdk is not installed (set RUNNER_OPENHANDS_PYTHON)"
)
def test_openhands_agent_finishes_the_smoke_survey():
    """``bench/peers_openhands.py --smoke``: the SDK's agent with each condenser runs the survey of one small
    package through the emulator to a complete, correct report (it writes nothing)."""
    python = openhands_python()
    assert python is not None
    bench = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench")
    done = subprocess.run(
        [python, os.path.join(bench, "peers_openhands.py"), "--smoke"],
        capture_output=True,
        text=True,
        timeout=240,
        env=runner_env(),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [line for line in done.stdout.splitlines() if line.startswith("| openhands ")]
    assert len(rows) == 4, done.stdout[-3000:]
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert cells[1] == "succeeded", row
        found, total = cells[10].split(" / ")
        assert found.split(" ")[0] == total and found.split(" ")[1] == f"({total})", row
