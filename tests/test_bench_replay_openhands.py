"""``bench/replay_openhands.py``: OpenHands' condensers as replay contestants.

Skipped when the OpenHands SDK is not importable (CI does not install it; the benchmark runs in a venv of
its own). On the recorded history: the needed facts are the rule's, every request body the engine built
passes the emulator's validation, ``LLMSummarizingCondenser`` condenses (each summary billed, the summary a
user text of the runner's deterministic fallback summary), masking masks; the conversion to OpenHands events
and back gives the recorded messages.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

pytest.importorskip("openhands.sdk")

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))

import replay_openhands  # noqa: E402
from conftest import RECORDED_TRAJECTORY  # noqa: E402

from runner.emulator.validation import validate  # noqa: E402
from runner.pricing import PriceTable  # noqa: E402
from runner.replay import ReplayOptions, load_history  # noqa: E402
from runner.replay.engine import recorded_tools, replay  # noqa: E402
from runner.replay.facts import needed_facts  # noqa: E402

pytestmark = pytest.mark.anyio

TRAJECTORY = RECORDED_TRAJECTORY
WINDOW = 16_000


@pytest.mark.parametrize("name", list(replay_openhands.CONTESTANTS))
async def test_contestant_replays_valid_requests(name: str, tmp_path: Path) -> None:
    history = load_history(TRAJECTORY)
    description, make = replay_openhands.CONTESTANTS[name](WINDOW)
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
    assert report.recoverable == 0  # their placeholders and summaries name nothing saved
    bodies = sorted((tmp_path / TRAJECTORY.stem).glob("*.json"))
    assert len(bodies) == report.turns == history.turns
    for body in bodies:
        assert validate(json.loads(body.read_text()), betas=(), count_tokens=False, min_trigger=50000) == []
    texts = [b.read_text() for b in bodies]
    if "LLMSummarizingCondenser" in name:
        assert f"max_tokens={WINDOW}" in description
        assert report.summaries == sum(report.compactions.values()) > 0
        assert report.summary_usage.input_tokens > 0 and report.summary_usage.output_tokens > 0
        assert report.over_window == 0  # a refused request gets a CondensationRequest
        assert any("Summary built without a model" in t for t in texts)
    else:
        assert report.summaries == 0 and report.compactions == {}
        assert any("<MASKED>" in t for t in texts)


async def test_conversion_round_trip() -> None:
    from openhands.sdk.context.condenser import NoOpCondenser

    history = load_history(TRAJECTORY)
    contestant = replay_openhands.OpenHandsContestant(
        "no-op", NoOpCondenser(), replay_openhands.agent_llm("claude-sonnet-5-5"), 1000
    )
    await contestant.start(history.system, recorded_tools(history.messages))
    view = await contestant.prepare(history.messages)
    assert view == history.messages
    ids = [e.id for e in contestant.log]
    assert len(set(ids)) == len(ids)
    again = await contestant.prepare(history.messages)
    assert all(a is b for a, b in zip(again, view, strict=True))  # an unchanged view: the same objects
