"""``inspect eval`` with inspect_ai's stock anthropic provider against ``runner emulate`` (issue 37,
item 6's acceptance): a tool-using sample completes, and no request of inspect_ai's is rewritten.

The peer runs in its own interpreter (``RUNNER_INSPECT_PYTHON``, as ``.ci/run`` makes it; or this one
when it has inspect_ai): inspect_ai 0.3.285 needs an ``anthropic`` SDK of its own choosing, which may
be newer than the runner's cap. The emulator is the real CLI, started as a subprocess on a free
loopback port with a config file that scripts the model's two replies (a call of ``add``, then the
answer); ``inspect eval`` reaches it through ``ANTHROPIC_BASE_URL`` and ``ANTHROPIC_API_KEY`` alone.

``claude-sonnet-5-5`` is the model that makes inspect_ai's provider send
``thinking: {"type": "adaptive", "block_binding": {...}}`` with the ``anthropic-beta`` header
``thinking-binding-controls-2026-08-01`` (``apply_thinking_block_binding``): the field the emulator
used to refuse. The emulator refuses ``block_binding`` without a beta header
(``test_emulator_validation``), so a 200 to a request carrying it also shows the header arrived.
"""

from __future__ import annotations

import json
import subprocess
import textwrap
from pathlib import Path

import pytest
from conftest import runner_argv, runner_env
from test_emulator import free_port, stats_when_up
from test_emulator_streaming import inspect_python

MODEL = "anthropic/claude-sonnet-5-5"
KEY = "emulator-key"

EMULATOR_TOML = f"""
api_key = "{KEY}"
record_requests = true

[[script]]
stop_reason = "tool_use"
content = [{{type = "tool_use", id = "toolu_emu_1", name = "add", input = {{x = 1, y = 2}}}}]

[[script]]
content = "1 + 2 = 3"
"""

TASK = textwrap.dedent(
    '''
    from inspect_ai import Task, task
    from inspect_ai.dataset import Sample
    from inspect_ai.scorer import includes
    from inspect_ai.solver import generate, use_tools
    from inspect_ai.tool import tool


    @tool
    def add():
        async def execute(x: int, y: int) -> int:
            """Add two numbers.

            Args:
                x: First number.
                y: Second number.
            """
            return x + y

        return execute


    @task
    def addition():
        return Task(
            dataset=[Sample(input="What is 1 + 2? Use the add tool.", target="3")],
            solver=[use_tools(add()), generate()],
            scorer=includes(),
            message_limit=6,
        )
    '''
)


def blocks_of(request: dict, kind: str) -> list[dict]:
    return [
        block
        for message in request["messages"]
        if isinstance(message["content"], list)
        for block in message["content"]
        if block.get("type") == kind
    ]


@pytest.mark.skipif(
    inspect_python() is None, reason="inspect_ai is not installed (set RUNNER_INSPECT_PYTHON)"
)
def test_inspect_eval_completes_a_tool_using_sample_against_runner_emulate(tmp_path: Path):
    python = inspect_python()
    assert python is not None
    config = tmp_path / "emulator.toml"
    config.write_text(EMULATOR_TOML)
    (tmp_path / "task.py").write_text(TASK)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    emulator = subprocess.Popen(
        runner_argv("emulate", "--port", str(port), "--config", str(config)),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=runner_env(),
    )
    try:
        assert stats_when_up(url)["requests"] == 0
        home = tmp_path / "home"  # inspect_ai's own data and cache directories, kept out of the user's
        env = runner_env(
            ANTHROPIC_BASE_URL=url,
            ANTHROPIC_API_KEY=KEY,
            HOME=str(home),
            XDG_DATA_HOME=str(home / "data"),
            XDG_CACHE_HOME=str(home / "cache"),
            XDG_CONFIG_HOME=str(home / "config"),
        )
        env = {k: v for k, v in env.items() if not k.startswith("INSPECT_")}
        done = subprocess.run(
            [
                python,
                "-m",
                "inspect_ai",
                "eval",
                "task.py",
                "--model",
                MODEL,
                "--log-dir",
                str(tmp_path / "logs"),
                "--log-format",
                "json",
                "--display",
                "plain",
                "--limit",
                "1",
                "--max-retries",
                "1",
            ],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=300,
            env=env,
        )
        stats = stats_when_up(url)
    finally:
        emulator.terminate()
        emulator.wait(timeout=10)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]

    (log_file,) = (tmp_path / "logs").glob("*.json")
    log = json.loads(log_file.read_text())
    assert log["status"] == "success", log.get("error")
    (sample,) = log["samples"]
    assert sample.get("error") is None and sample.get("limit") is None, sample.get("error")
    assert [m["role"] for m in sample["messages"]] == ["user", "assistant", "tool", "assistant"]
    assert sample["messages"][2]["content"] == "3"  # inspect_ai ran the tool on the emulator's call
    assert sample["scores"]["includes"]["value"] == "C"

    # every request answered (no 400, no fault), both streamed as inspect_ai chooses for a thinking model
    assert stats["outcomes"] == {"ok": 2}, stats["outcomes"]
    first, second = stats["recorded_requests"]
    # stock settings: the binding config inspect_ai adds for this model, sent as it made it
    binding = {"prefix_mismatch_behavior": "drop_block"}
    assert first["thinking"] == {"type": "adaptive", "block_binding": binding}
    assert second["thinking"] == first["thinking"]
    # the round trip: the second request answers the first reply's tool call with the tool's result
    assert [b["id"] for b in blocks_of(second, "tool_use")] == ["toolu_emu_1"]
    (result,) = blocks_of(second, "tool_result")
    assert result["tool_use_id"] == "toolu_emu_1"
    assert "3" in json.dumps(result.get("content"))
