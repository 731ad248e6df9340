"""The tests' scripted model (``tests/scripted.py``) answers from the request alone: the turn after the
newest of its calls the request carries, the final text when no tool may be called or the script is
done; its usage counted from the request as the API's billing counts; saved and loaded alike; a
subagent's request answered by the model its task's prompt names."""

from __future__ import annotations

from pathlib import Path

import pytest
from scripted import ScriptedModel, call_id

from runner.billing import estimate, input_tokens
from runner.models.base import Request

pytestmark = pytest.mark.anyio
TURNS = [("glob", {"pattern": "*"}), [("read", {"file_path": "a.py"}), ("read", {"file_path": "b.py"})]]


def request(*messages: dict, tool_choice: dict | None = None) -> Request:
    return Request(
        model="m",
        messages=[{"role": "user", "content": "Survey."}, *messages],
        tools=[{"name": "read"}],
        max_tokens=100,
        tool_choice=tool_choice,
    )


def answered(turn: int, name: str) -> list[dict]:
    """The assistant's call of ``turn`` and its result, as a history carries them."""
    use = {"type": "tool_use", "id": call_id(turn, 0), "name": name, "input": {}}
    result = {"type": "tool_result", "tool_use_id": call_id(turn, 0), "content": "x"}
    return [{"role": "assistant", "content": [use]}, {"role": "user", "content": [result]}]


async def test_the_turn_is_read_from_the_request() -> None:
    model = ScriptedModel(TURNS, final="Report.")
    first = await model.create(request())
    assert [b["name"] for b in first.content if b["type"] == "tool_use"] == ["glob"]
    second = await model.create(request(*answered(0, "glob")))
    uses = [b for b in second.content if b["type"] == "tool_use"]
    assert [(u["id"], u["input"]) for u in uses] == [
        (call_id(1, 0), {"file_path": "a.py"}),
        (call_id(1, 1), {"file_path": "b.py"}),
    ]
    assert second.stop_reason == "tool_use"
    # the same request again (a retried call, a resumed job): the same reply
    again = await model.create(request(*answered(0, "glob")))
    assert again.content == second.content
    done = await model.create(request(*answered(0, "glob"), *answered(1, "read")))
    assert (done.content, done.stop_reason) == ([{"type": "text", "text": "Report."}], "end_turn")
    last = await model.create(request(tool_choice={"type": "none"}))  # the runner's last call
    assert last.content == [{"type": "text", "text": "Report."}]
    assert len(model.requests) == 5


async def test_usage_is_the_requests_as_billed_and_a_scripted_exception_is_raised() -> None:
    model = ScriptedModel([RuntimeError("500"), *TURNS], notes=50)
    asked = request(*answered(0, "glob"))
    reply = await model.create(asked)
    assert reply.usage.input_tokens == input_tokens(None, asked.messages, asked.tools)
    assert reply.usage.output_tokens == estimate(reply.content) and not reply.estimated
    assert len(reply.content[0]["text"]) == len("Turn 2.") + 50
    with pytest.raises(RuntimeError, match="500"):
        await model.create(request())


async def test_a_saved_script_plays_alike(tmp_path: Path) -> None:
    model = ScriptedModel(TURNS, final="Report.", notes=20)
    loaded = ScriptedModel.load(model.save(tmp_path / "script.json"))
    for asked in (request(), request(*answered(0, "glob")), request(*answered(1, "read"))):
        assert (await loaded.create(asked)).content == (await model.create(asked)).content
    with pytest.raises(TypeError):
        ScriptedModel(TURNS, final=lambda r: "x").save(tmp_path / "no.json")


async def test_a_subagents_request_is_answered_by_its_model_and_saved_alike(tmp_path: Path) -> None:
    child = ScriptedModel([("read", {"file_path": "a.py"})], final="Part done.")
    model = ScriptedModel(
        [("task", {"prompt": "Read a.py."})], final="All done.", subagents={"Read a.py.": child}
    )
    asked = Request(model="m", messages=[{"role": "user", "content": "Read a.py."}], tools=[], max_tokens=9)
    for played in (model, ScriptedModel.load(model.save(tmp_path / "script.json"))):
        reply = await played.create(asked)
        assert [(b["name"], b["input"]) for b in reply.content if b["type"] == "tool_use"] == [
            ("read", {"file_path": "a.py"})
        ]
        parent = await played.create(request())
        assert [b["name"] for b in parent.content if b["type"] == "tool_use"] == ["task"]
    assert len(child.requests) == 1 and len(model.requests) == 2  # the subagent's request: in both
