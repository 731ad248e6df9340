"""``bench/replay_inspect.py``: inspect_ai's compaction strategies as replay contestants.

Skipped when inspect_ai is not importable (CI does not install it; the benchmark runs in a venv of its
own). On the recorded history: the needed facts are the rule's, every request body the engine built
passes the emulator's validation, the strategies compact (and ``CompactionSummary`` bills its summary
calls); the conversion to inspect's messages and back gives the recorded messages.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

pytest.importorskip("inspect_ai")

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))

import replay_inspect  # noqa: E402
from conftest import RECORDED_TRAJECTORY  # noqa: E402

from runner.emulator.validation import validate  # noqa: E402
from runner.pricing import PriceTable  # noqa: E402
from runner.replay import ReplayOptions, load_history  # noqa: E402
from runner.replay.engine import replay  # noqa: E402
from runner.replay.facts import needed_facts  # noqa: E402

pytestmark = pytest.mark.anyio

TRAJECTORY = RECORDED_TRAJECTORY
WINDOW = 16_000


@pytest.mark.parametrize("name", list(replay_inspect.STRATEGIES))
async def test_strategy_replays_valid_requests(name: str, tmp_path: Path) -> None:
    history = load_history(TRAJECTORY)
    description, make = replay_inspect.factory(name)(WINDOW)
    assert f"threshold={int(0.9 * WINDOW)}" in description
    options = ReplayOptions(
        model="claude-sonnet-5-5",
        summary_model="claude-haiku-5-5",
        prices=PriceTable(),
        context_tokens=WINDOW,
        dump_dir=tmp_path,
    )
    report = await replay(history, make(tmp_path / "job"), options)
    assert report.needed == sum(len(f) for f in needed_facts(history.system, history.messages).values())
    assert report.in_context + report.recoverable + report.lost == report.needed
    assert report.recoverable == 0  # inspect's placeholders name nothing to recover
    bodies = sorted((tmp_path / TRAJECTORY.stem).glob("*.json"))
    assert len(bodies) == report.turns == history.turns
    for body in bodies:
        assert validate(json.loads(body.read_text()), betas=(), count_tokens=False, min_trigger=50000) == []
    strategy = name.split()[-1]
    assert report.compactions.get(strategy, 0) > 0
    if strategy == "CompactionSummary":
        assert report.summaries == report.compactions[strategy] > 0
        assert report.summary_usage.input_tokens > 0 and report.summary_usage.output_tokens > 0
        assert any("[CONTEXT COMPACTION SUMMARY]" in b.read_text() for b in bodies)
    else:
        assert report.summaries == 0
    if strategy != "CompactionEdit":  # Edit never removes a call or a text: its view outgrows 16k here
        assert report.over_window == 0
    if strategy == "CompactionEdit":
        assert any("(Tool result removed)" in b.read_text() for b in bodies)


def test_conversion_round_trip() -> None:
    history = [
        {"role": "user", "content": [{"type": "text", "text": "fix it"}]},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "THOUGHT: look"},
                {"type": "tool_use", "id": "t1", "name": "bash", "input": {"command": "ls"}},
                {"type": "tool_use", "id": "t2", "name": "bash", "input": {"command": "false"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "t1", "content": "a.py"},
                {"type": "tool_result", "tool_use_id": "t2", "content": "exit 1", "is_error": True},
                {"type": "text", "text": "one command a turn"},
            ],
        },
    ]
    calls: dict[str, str] = {}
    converted = [m for i, message in enumerate(history) for m in replay_inspect.to_inspect(message, i, calls)]
    assert [m.role for m in converted] == ["user", "assistant", "tool", "tool", "user"]
    assert len({m.id for m in converted}) == len(converted)
    assert converted[0].source == "input"
    convert = replay_inspect.ToApi()
    view = convert.view(converted)
    assert view == history
    assert all(a is b for a, b in zip(convert.view(converted), view, strict=True))  # the same objects
