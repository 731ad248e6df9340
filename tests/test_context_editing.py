"""``compaction = "clear"``: the API's context editing (``clear_tool_uses_20250919``).

The pure function clears as the API documents it; the emulator serves it over real HTTP to the real
SDK (the reply's ``context_management.applied_edits``, the usage billed for the edited prompt); a
whole job in the mode runs against the emulator and is billed less than the same job unedited; the
config and task files take the mode and its settings, and refuse bad ones; ``runner replay`` replays
a recorded history in the mode with the same function.

What the emulator answers with is a scripted model's reply (``tests/scripted.py``), so the checks
hold with any model: the model is asked with the edited history, and a job runs its whole script.
"""

from __future__ import annotations

import json
from pathlib import Path

import anthropic
import pytest
from conftest import RECORDED_TRAJECTORY
from scripted import ScriptedModel, files_under, reads
from test_api_runs import run, small_workspace, spec

from runner.billing import input_tokens
from runner.compaction.clearing import clear_tool_uses
from runner.config import ConfigError, Limits, load_settings
from runner.emulator.config import EmulatorConfig
from runner.emulator.server import running_emulator
from runner.jobs import JobSpec, load_job
from runner.pricing import PriceTable
from runner.protocol import CLEARED_TOOL_RESULT
from runner.replay import ReplayOptions, compactor_contestant, load_history, window_limits
from runner.replay.engine import replay
from runner.rundir.store import read_jsonl

pytestmark = pytest.mark.anyio
BETA = "context-management-2025-06-27"
TOOLS = [{"name": n, "description": n, "input_schema": {"type": "object"}} for n in ("read", "memory")]


def history(turns: int, size: int = 2_000, name: str = "read") -> list[dict]:
    messages: list[dict] = [{"role": "user", "content": "Survey the package."}]
    for i in range(turns):
        tool = name if i % 2 == 0 else "memory"
        use = {"type": "tool_use", "id": f"toolu_{i:03d}", "name": tool, "input": {"path": f"m{i}.py"}}
        result = {"type": "tool_result", "tool_use_id": use["id"], "content": f"{i} " + "x" * size}
        messages += [{"role": "assistant", "content": [use]}, {"role": "user", "content": [result]}]
    return messages


def count(messages: list[dict]) -> int:
    return input_tokens(None, messages, TOOLS)


def results(messages: list[dict]) -> list[str]:
    return [b["content"] for m in messages[2::2] for b in m["content"]]


# --- the pure function --------------------------------------------------------------------------


def test_nothing_is_cleared_under_the_trigger():
    messages = history(6)
    for trigger in ({"type": "input_tokens", "value": count(messages)}, {"type": "tool_uses", "value": 6}):
        cleared = clear_tool_uses(messages, {"type": "clear_tool_uses_20250919", "trigger": trigger}, count)
        assert cleared.messages is messages and cleared.applied is None
    default = clear_tool_uses(messages, {"type": "clear_tool_uses_20250919"}, count)  # 100,000 tokens
    assert default.applied is None


def test_over_the_trigger_all_but_the_newest_kept_are_cleared_oldest_first():
    messages = history(8)
    edit = {"type": "clear_tool_uses_20250919", "trigger": {"type": "tool_uses", "value": 5}}
    cleared = clear_tool_uses(messages, edit, count)
    texts = results(cleared.messages)
    assert texts[:5] == [CLEARED_TOOL_RESULT] * 5 and all(t.endswith("x" * 50) for t in texts[5:])
    assert cleared.applied is not None
    assert cleared.applied.type == "clear_tool_uses_20250919" and cleared.applied.cleared_tool_uses == 5
    assert cleared.applied.cleared_input_tokens == count(messages) - count(cleared.messages) > 2_000
    assert results(messages)[0].startswith("0 x")  # the history given is never changed
    assert cleared.messages[0] is messages[0] and cleared.messages[-1] is messages[-1]
    # the tool_use inputs stay unless clear_tool_inputs says so
    assert [b["input"] for m in cleared.messages[1::2] for b in m["content"]][0] == {"path": "m0.py"}


def test_keep_exclude_tools_clear_tool_inputs_and_clear_at_least():
    messages = history(8)
    edit = {
        "type": "clear_tool_uses_20250919",
        "trigger": {"type": "input_tokens", "value": 1_000},
        "keep": {"type": "tool_uses", "value": 2},
        "exclude_tools": ["memory"],
        "clear_tool_inputs": ["read"],
    }
    cleared = clear_tool_uses(messages, edit, count)
    texts = results(cleared.messages)
    # the reads of turns 0, 2, 4 are cleared; memory's (1, 3, 5) excluded; 6 and 7 are the newest two
    assert [t == CLEARED_TOOL_RESULT for t in texts] == [True, False, True, False, True, False, False, False]
    inputs = [b["input"] for m in cleared.messages[1::2] for b in m["content"]]
    assert inputs[:3] == [{}, {"path": "m1.py"}, {}]
    assert cleared.applied is not None and cleared.applied.cleared_tool_uses == 3
    freed = cleared.applied.cleared_input_tokens
    too_much = {**edit, "clear_at_least": {"type": "input_tokens", "value": freed + 1}}
    assert clear_tool_uses(messages, too_much, count).messages is messages
    # a result already cleared is not cleared, nor counted, again
    again = clear_tool_uses(cleared.messages, {**edit, "clear_tool_inputs": False}, count)
    assert again.applied is None


# --- the emulator, over HTTP, to the real SDK ---------------------------------------------------


@pytest.fixture(scope="module")
def server():
    with running_emulator(EmulatorConfig()) as handle:
        yield handle


async def test_the_emulator_clears_reports_and_bills_the_edited_prompt(server):
    server.reconfigure(EmulatorConfig(record_requests=True))
    model = ScriptedModel([("read", {"file_path": "m8.py"})])
    server.state.replies = lambda _batch_size: model
    messages = history(8)
    edit = {"type": "clear_tool_uses_20250919", "trigger": {"type": "input_tokens", "value": 3_000}}
    async with anthropic.AsyncAnthropic(base_url=server.base_url, api_key="k", max_retries=0) as client:
        plain = await client.beta.messages.create(
            model="m", max_tokens=500, messages=messages, tools=TOOLS, betas=[BETA]
        )
        edited = await client.beta.messages.create(
            model="m",
            max_tokens=500,
            messages=messages,
            tools=TOOLS,
            context_management={"edits": [edit]},
            betas=[BETA],
        )
        counted = await client.beta.messages.count_tokens(
            model="m", messages=messages, tools=TOOLS, context_management={"edits": [edit]}, betas=[BETA]
        )
        with pytest.raises(anthropic.BadRequestError, match=BETA):
            await client.beta.messages.create(
                model="m", max_tokens=5, messages=messages, context_management={"edits": [edit]}
            )
    assert plain.context_management is None
    (applied,) = edited.context_management.applied_edits
    assert applied.type == "clear_tool_uses_20250919" and applied.cleared_tool_uses == 5
    assert edited.usage.input_tokens == plain.usage.input_tokens - applied.cleared_input_tokens
    assert applied.cleared_input_tokens > 2_000  # five results of 2,000 characters
    assert counted.input_tokens == edited.usage.input_tokens
    assert counted.context_management.original_input_tokens == plain.usage.input_tokens
    assert server.stats()["clearings"] == 1
    # both replies are the script's first turn; the model was asked with the history as edited
    for reply in (plain, edited):
        assert [
            b.model_dump(include={"type", "name", "input"}, exclude_none=True) for b in reply.content
        ] == [
            {"type": "text"},
            {"type": "tool_use", "name": "read", "input": {"file_path": "m8.py"}},
        ]
        assert reply.content[0].text == "Turn 1." and reply.stop_reason == "tool_use"
    assert edited.usage.output_tokens == plain.usage.output_tokens
    asked_plain, asked_edited = model.requests
    assert asked_plain.messages == messages
    assert results(asked_edited.messages) == [CLEARED_TOOL_RESULT] * 5 + results(messages)[5:]


async def test_a_clear_job_runs_against_the_emulator_and_is_billed_less(server, tmp_path):
    server.reconfigure(EmulatorConfig(record_requests=True))
    workspace = small_workspace(tmp_path)
    for i in range(6):  # results big enough that clearing them matters
        (workspace / f"big{i}.py").write_text(
            f'"""Big {i}."""\n' + "".join(f"V{j} = {j}\n" for j in range(600))
        )
    files = files_under(workspace)
    report = "# Report\n\nTwelve modules, six of them big."
    billed = {}
    for mode in ("off", "clear"):
        server.reconfigure(EmulatorConfig(record_requests=True))
        model = ScriptedModel(reads(files), final=report)  # one file a turn, then the report
        server.state.replies = lambda _batch_size, model=model: model
        job = spec(mode, workspace, compaction=mode, clear_trigger_value=4_000, clear_keep_tool_uses=2)
        result = await run(server, [job], tmp_path / f"run-{mode}", 1)
        assert result.results[mode].status == "succeeded", result.results[mode].error
        assert result.results[mode].turns == len(files) + 1 == len(model.requests)
        tokens = server.stats()["tokens"]
        billed[mode] = sum(
            tokens[k] for k in ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
        )
        job_dir = tmp_path / f"run-{mode}" / mode
        metrics = json.loads((job_dir / "metrics.json").read_text())
        recorded = server.stats()["recorded_requests"]
        assert (job_dir / "final.md").read_text().strip() == report
        if mode == "clear":
            assert metrics["compactions"].get("tool_use_clearing", 0) >= 1
            assert all(
                r["context_management"]["edits"][0]["type"] == "clear_tool_uses_20250919" for r in recorded
            )
            events, _ = read_jsonl(job_dir / "events.jsonl")
            cleared = [e for e in events if e.get("stage") == "tool_use_clearing"]
            assert cleared and cleared[0]["applied_edits"][0]["cleared_tool_uses"] >= 1
            # the runner keeps the whole history: the API edits each request anew
            assert not any(CLEARED_TOOL_RESULT in json.dumps(r["messages"]) for r in recorded)
            # and the model is asked with the history as edited
            assert CLEARED_TOOL_RESULT in json.dumps(model.requests[-1].messages)
        else:
            assert "tool_use_clearing" not in metrics["compactions"]
            assert not any(CLEARED_TOOL_RESULT in json.dumps(r.messages) for r in model.requests)
    assert billed["clear"] < billed["off"]


# --- config and task files ----------------------------------------------------------------------


def test_the_config_and_task_files_take_the_mode_and_refuse_bad_settings(tmp_path):
    (tmp_path / "config.toml").write_text(
        '[limits]\ncompaction = "clear"\nclear_trigger_value = 30000\nclear_exclude_tools = ["memory"]\n'
    )
    (tmp_path / "ws").mkdir()
    settings = load_settings(tmp_path / "config.toml")
    task = tmp_path / "job.toml"
    task.write_text(
        'prompt = "p"\nworkspace = "ws"\n[limits]\nclear_trigger = "tool_uses"\nclear_tool_inputs = true\n'
    )
    job = load_job(task, settings)
    assert isinstance(job, JobSpec)
    limits = job.limits
    assert (limits.compaction, limits.clear_trigger, limits.clear_trigger_value) == (
        "clear",
        "tool_uses",
        30_000,
    )
    assert limits.clear_exclude_tools == ("memory",) and limits.clear_tool_inputs is True
    for bad, key in (
        ('clear_trigger = "turns"', "clear_trigger"),
        ("clear_trigger_value = 0", "clear_trigger_value"),
        ("clear_keep_tool_uses = -1", "clear_keep_tool_uses"),
        ("clear_at_least_tokens = true", "clear_at_least_tokens"),
        ('compaction = "clearing"', "compaction"),
    ):
        task.write_text(f'prompt = "p"\nworkspace = "ws"\n[limits]\n{bad}\n')
        error = load_job(task, settings)
        assert not isinstance(error, JobSpec) and key in error.message, bad
    (tmp_path / "config.toml").write_text('[limits]\nclear_trigger_value = "many"\n')
    with pytest.raises(ConfigError, match="clear_trigger_value"):
        load_settings(tmp_path / "config.toml")
    assert Limits(compaction="clear").clear_trigger_value == 100_000  # the API's default


# --- replay -------------------------------------------------------------------------------------


async def test_a_recorded_history_replays_in_clear_mode_as_the_emulator_clears(tmp_path):
    history_file = load_history(RECORDED_TRAJECTORY)
    options = ReplayOptions(
        model="claude-sonnet-5-5",
        summary_model="claude-haiku-5-5",
        prices=PriceTable(),
        context_tokens=16_000,
        dump_dir=tmp_path / "dump",
    )
    reports = {}
    for mode in ("off", "clear"):
        limits = window_limits(Limits(clear_trigger_value=12_000), 16_000, mode)
        contestant = compactor_contestant(mode, limits, tmp_path / mode, summary_model="claude-haiku-5-5")
        reports[mode] = await replay(history_file, contestant, options)
    clear, off = reports["clear"], reports["off"]
    assert clear.compactions.get("tool_use_clearing", 0) >= 1
    assert clear.over_window == 0 and clear.summaries < off.summaries  # clearing, not summaries, kept it in
    assert clear.in_context + clear.recoverable + clear.lost == clear.needed == off.needed
    # the API's placeholder names no file: a fact only a cleared result held is lost, not recoverable
    assert clear.lost > off.lost
    bodies = [
        json.loads(p.read_text()) for p in (tmp_path / "dump" / RECORDED_TRAJECTORY.stem).glob("*.json")
    ]
    assert any(CLEARED_TOOL_RESULT in json.dumps(b["messages"]) for b in bodies)
    assert Path(tmp_path / "clear" / "events.jsonl").exists()
