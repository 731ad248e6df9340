"""Work bigger than the window (issue 18, items 1 and 3): summaries sized to the window, a snip
marker's digest, repeats caught anywhere in the job, and the thrash ladder that ends a job ``stuck``.
"""

from __future__ import annotations

import encodings
import json
import os
import re
from pathlib import Path

import pytest
from conftest import offline_survey

from runner.agent.history import History
from runner.compaction import stages
from runner.compaction.compactor import LEVEL_HALF, LEVEL_NOTES, CompactionState, Compactor, Thrash
from runner.compaction.digest import digest
from runner.compaction.fallback import NOTES_HEADING, fallback_summary
from runner.compaction.summarizer import Summarizer, cut_summary
from runner.compaction.window import Entry
from runner.config import Limits
from runner.emulator.config import EmulatorConfig
from runner.emulator.server import running_emulator
from runner.models.anthropic import AnthropicModel
from runner.protocol import SNIP_DIGEST_CHARS, archived_span
from runner.rundir.store import JobStore
from runner.tools.repeats import RepeatGuard, call_key
from runner.tools.toolset import Toolset

pytestmark = pytest.mark.anyio
STDLIB = Path(encodings.__file__).parent.parent
REQUEST = "Survey the workspace."


def turn(n: int, notes: int = 6) -> list[dict]:
    """One assistant turn: progress notes (keyed, new each turn), a read, and its 3,000-char result."""
    text = "\n".join(f"- file: d{n:03}/f{k}.py | {n * 10 + k} lines | " + "x" * 60 for k in range(notes))
    use = {"type": "tool_use", "id": f"toolu_{n}", "name": "read", "input": {"file_path": f"/w/d{n:03}/f.py"}}
    return [
        {"role": "assistant", "content": [{"type": "text", "text": f"Read batch {n}.\n{text}"}, use]},
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": f"toolu_{n}", "content": f"line of d{n:03}\n" * 200}
            ],
        },
    ]


async def state_for(tmp_path: Path, limits: Limits) -> History:
    store = JobStore(tmp_path / "job")
    await store.open()
    history = History(store, CompactionState(limits=limits, active_request=REQUEST))
    history.add({"role": "user", "content": REQUEST})
    return history


async def summaries_of_summaries(compactor: Compactor, history: History, rounds: int) -> list[str]:
    """Compact ``rounds`` times, each over the previous summary plus four new turns; the summaries."""
    out, n = [], 0
    state, store = history.state, history.writer
    for _ in range(rounds):
        for _ in range(4):
            n += 1
            history.add(*turn(n))
            state.window.mark_seen()
        state.turns += 10  # far apart: the thrash ladder stays put
        await compactor.compact_history(state, store)
        await store.flush()
        out.append(sorted((store.dir / "summaries").glob("*.md"))[-1].read_text())
    return out


@pytest.mark.parametrize("limit", [8_000, 50_000])
async def test_fallback_summaries_of_summaries_never_outgrow_the_share(tmp_path, limit):
    limits = Limits(context_char_limit=limit)
    history = await state_for(tmp_path, limits)
    texts = await summaries_of_summaries(Compactor(Summarizer(None, "none")), history, 25)
    cap = limits.summary_share * limit
    print(f"limit {limit}: fallback summaries {[len(t) for t in texts]} (cap {cap:.0f})")
    assert all(len(t) <= cap for t in texts)
    assert NOTES_HEADING in texts[-1] and "- file: d100/" in texts[-1]  # the newest progress is kept
    assert len(texts[-1]) > cap / 2  # it uses what it may


@pytest.mark.parametrize("limit", [8_000, 50_000])
async def test_model_summaries_of_summaries_through_the_emulator_never_outgrow_the_share(tmp_path, limit):
    limits = Limits(context_char_limit=limit)
    history = await state_for(tmp_path, limits)
    with running_emulator(EmulatorConfig(record_requests=True)) as emu:
        model = AnthropicModel(base_url=emu.base_url, api_key="test-key", max_retries=0)
        summarizer = Summarizer(model, "summary-model")
        try:
            texts = await summaries_of_summaries(Compactor(summarizer), history, 12)
        finally:
            await model.aclose()
        asked = [
            r["body"]["max_tokens"] if "body" in r else r.get("max_tokens")
            for r in emu.stats()["recorded_requests"]
        ]
    cap = limits.summary_share * limit
    print(f"limit {limit}: model summaries {[len(t) for t in texts]} (cap {cap:.0f}), max_tokens {asked[:1]}")
    assert summarizer.calls == 12 and history.state.summary_failures == 0
    assert all(len(t) <= cap for t in texts)
    assert Summarizer(None, "x").max_tokens(int(cap)) == min(6_000, int(cap) // 4)
    if limit == 8_000:  # the emulator writes more than 1,600 chars: cut at a line end, saying so
        assert all("[summary cut at a line end" in t and "transcript.jsonl" in t for t in texts)


def test_a_cut_summary_ends_at_a_line_and_says_where_the_transcript_is():
    text = "\n".join(f"- fact {i} | " + "y" * 50 for i in range(100))
    cut = cut_summary(text, 1_000, "transcript.jsonl (messages 1-40 of this session)")
    assert len(cut) <= 1_000 and cut_summary(text, len(text)) == text
    body, note = cut.rsplit("\n", 1)
    assert all(line in text.split("\n") for line in body.split("\n"))  # whole lines only
    assert note.startswith("[summary cut at a line end") and "messages 1-40" in note


def test_the_fallback_keeps_the_notes_first_and_notes_only_when_asked():
    history = [{"role": "user", "content": REQUEST}]
    for n in range(1, 60):
        history += turn(n)
    summary = fallback_summary(history, 3_000)
    assert len(summary) <= 3_000 and "- file: d059/" in summary
    only = fallback_summary(history, 1_500, notes_only="9 poor compactions in a row")
    assert len(only) <= 1_500 and "### Files read" not in only and "notes alone" in only


def test_a_snip_marker_carries_a_bounded_digest_and_folds_in_earlier_markers():
    entries = [Entry.of({"role": "user", "content": REQUEST}, 1, True)]
    seq = 1
    for n in range(1, 200):
        for message in turn(n, notes=1):
            seq += 1
            entries.append(Entry.of(message, seq, True))
    first = stages.snip(entries[:101], 50, 3, target=30)
    assert first is not None
    kept = first.entries
    marker = [b["text"] for b in kept[2].message["content"] if b.get("type") == "text"][0]
    assert len(marker) <= SNIP_DIGEST_CHARS + 80 and "files read:" in marker and "d037/f.py" in marker
    second = stages.snip(kept + entries[101:], 50, 3, target=30)
    assert second is not None
    markers = [
        b["text"]
        for e in second.entries
        for b in e.message["content"]
        if isinstance(b, dict) and b.get("type") == "text" and archived_span(b["text"])
    ]
    assert len(markers) == 1  # the earlier marker was folded in, not left beside the new one
    assert archived_span(markers[0])[0] == 4 and len(markers[0]) <= SNIP_DIGEST_CHARS + 80
    assert "and " in markers[0] and "more" in markers[0]  # the oldest reads give way, counted
    assert digest([]) == ""


def test_a_repeat_30_turns_apart_is_caught_and_keys_are_hashes():
    guard = RepeatGuard(max_repeated=1)
    key = call_key("glob", {"pattern": "**/*", "path": "x" * 5_000})
    guard.remember(key, 1, "toolu_1")
    for t in range(2, 31):
        assert guard.check(call_key("read", {"file_path": f"/w/{t}.py"}), t) is None
        guard.remember(call_key("read", {"file_path": f"/w/{t}.py"}), t, f"toolu_{t}")
    caught = guard.check(key, 31)
    assert caught is not None and caught[0] == 1 and caught[1].turn == 1
    assert all(isinstance(k, bytes) and len(k) == 16 for k in guard._runs)  # not the input
    # a saved result is caught at its first repeat (at_once), naming the file
    guard = RepeatGuard(max_repeated=3, at_once=True)
    guard.remember(key, 1, "toolu_1")
    assert guard.caught(key, 31) is None
    guard.saved("toolu_1", "tool-results/toolu_1.txt")
    found = guard.caught(key, 31)
    assert found is not None and found.saved == "tool-results/toolu_1.txt" and found.first.turn == 1
    # a write starts afresh
    guard.remember(call_key("write", {"file_path": "/w/a"}), 32, "toolu_w")
    assert guard.caught(key, 33) is None


async def test_the_toolset_catches_a_call_repeated_30_turns_later(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.py").write_text("x = 1\n")
    store = JobStore(tmp_path / "job")
    await store.open()
    async with Toolset(str(ws), ("read", "glob"), store, limits=Limits(max_repeated_calls=1)) as tools:
        same = {"type": "tool_use", "name": "glob", "input": {"pattern": "*.py"}}
        [first] = await tools.run_batch([{**same, "id": "toolu_a"}], turn=1)
        assert not first.get("is_error")
        for t in range(2, 31):
            await tools.run_batch(
                [{"type": "tool_use", "id": f"toolu_{t}", "name": "glob", "input": {"pattern": f"{t}*"}}],
                turn=t,
            )
        [again] = await tools.run_batch([{**same, "id": "toolu_b"}], turn=31)
    assert again.get("is_error") and "already made 1 times in this job, first at turn 1" in again["content"]


def test_the_thrash_ladder_steps_up_then_ends_with_the_numbers():
    limits = Limits()
    ladder = Thrash()
    ladder.observe(10, 0.6, limits)  # a good first compaction
    levels = []
    for t in range(11, 20):  # one every turn
        ladder.observe(t, 0.6, limits)
        levels.append(ladder.level)
    assert levels == [0, 0, LEVEL_HALF, LEVEL_HALF, LEVEL_HALF, LEVEL_NOTES, LEVEL_NOTES, LEVEL_NOTES, 3]
    assert ladder.reason is not None and ladder.reason.startswith("thrashing: 9 history compactions")
    assert "1, 1, 1" in ladder.reason and "60%" in ladder.reason
    good = Thrash()
    for t in (10, 20, 30, 40):
        good.observe(t, 0.5, limits)
    good.observe(41, 0.05, limits)  # one poor compaction is no thrash
    assert good.level == 0 and good.reason is None


async def test_a_thrashing_job_halves_its_summaries_then_keeps_notes_only_then_is_stuck(tmp_path):
    limits = Limits(context_char_limit=8_000, thrash_turns=4)
    history = await state_for(tmp_path, limits)
    state, store = history.state, history.writer
    compactor = Compactor(Summarizer(None, "none"))
    sizes, n = [], 0
    for _ in range(10):  # the first has none before it; then 3 strikes per step of the ladder
        for _ in range(4):
            n += 1
            history.add(*turn(n))
            state.window.mark_seen()
        # a compaction every 4 turns (each turn one assistant message), within thrash_turns of the last
        await compactor.compact_history(state, store)
        await store.flush()
        sizes.append(len(sorted((store.dir / "summaries").glob("*.md"))[-1].read_text()))
    assert max(sizes[:4]) <= 1_600 and max(sizes[4:]) <= 800 and max(sizes[:4]) > 800
    last = sorted((store.dir / "summaries").glob("*.md"))[-1].read_text()
    assert "notes alone" in last
    assert state.thrash.reason and "thrashing" in state.thrash.reason


@pytest.mark.stand_in  # its turns and its report are the stand-in's; the folding is checked above
async def test_the_asyncio_survey_with_a_tiny_snip_ends_within_60_turns_with_a_report(tmp_path):
    result, report = await offline_survey(
        STDLIB / "asyncio", tmp_path / "job", {"snip_trigger": 12, "snip_target": 8}
    )
    print(
        f"asyncio, snip 12/8: {result.status} after {result.turns} turns ({result.error}); "  # type: ignore[attr-defined]
        f"compactions {result.compactions}"
    )  # type: ignore[attr-defined]
    assert result.turns <= 60  # type: ignore[attr-defined]
    assert result.status in ("succeeded", "stuck")  # type: ignore[attr-defined]
    if result.status == "stuck":  # type: ignore[attr-defined]
        assert report.startswith("> **Partial report** (status `stuck`")
        assert result.error and result.error in report  # type: ignore[attr-defined]
    records = [json.loads(line) for line in (tmp_path / "job" / "context.jsonl").read_text().splitlines()]
    # the newest context with a snip marker in it (a compaction after the read pass may summarize it)
    markers = next(
        found
        for r in reversed(records)
        if (found := re.findall(r"\[\d+ messages archived: [^\]]*\]", json.dumps(r)))
    )
    assert len(markers) == 1 and re.search(r"transcript\.jsonl messages \d+-\d+\]", markers[0])  # one, folded


@pytest.mark.anyio
async def test_a_job_whose_compactions_thrash_ends_stuck_with_its_report(tmp_path):
    """Any model: a job that reads a file of several KB a turn and thinks aloud (3,000 characters of notes
    a reply) in a 15,000-character window compacts its history every few turns; a ladder that counts a
    compaction within 6 turns of the one before as poor ends it stuck, and its last call still writes
    the report."""
    from scripted import ScriptedModel, files_under, reads

    from runner.agent.runjob import Services
    from runner.agent.session import Session
    from runner.jobs import JobSpec

    files = [
        f for f in files_under(STDLIB / "encodings") if (STDLIB / "encodings" / f).stat().st_size > 3_000
    ]
    model = ScriptedModel(reads(files), "# Survey\n\nWhat I read before the window thrashed.", notes=3000)
    limits = Limits(
        context_char_limit=15_000,
        batch_char_limit=15_000,
        large_result_chars=4_000,
        summary_share=0.5,
        thrash_turns=6,
        max_turns=len(files) + 5,
    )
    spec = JobSpec(
        name="survey",
        source=Path("survey.toml"),
        prompt="Read every module.",
        workspace=STDLIB / "encodings",
        model="m",
        system=None,
        tools=("read", "glob", "grep"),
        limits=limits,
    )
    store = JobStore(tmp_path / "job")
    await store.open()
    services = Services(model=model, compactor=Compactor(Summarizer(None, "none")), summary_model="none")
    result = await Session(spec, services=services, store=store).run()
    assert result.status == "stuck" and result.error.startswith("thrashing: "), result.error
    assert re.search(r"turns between them: [\d, -]+; share of the context freed: \d+%", result.error)
    assert result.turns < len(files)  # it ended before the script did
    report = (tmp_path / "job" / "final.md").read_text()
    assert report.startswith("> **Partial report** (status `stuck`: thrashing")
    assert "# Survey\n\nWhat I read before the window thrashed." in report  # the last call's, the script's
    assert model.requests[-1].tool_choice == {"type": "none"}


def _big_tree(tmp_path: Path) -> Path:
    """The test venv's site-packages as it is (``__pycache__``, shared objects, files over 256 KiB), its
    entries in name order, whole, up to the first that brings the tree to 10,200 files (a venv with the
    ``ray`` extra holds almost twice that, which only makes the survey longer), topped up from the
    standard library when it holds fewer; plus odd names and a one-line file of 900 KB."""
    import shutil
    import sysconfig

    root = tmp_path / "tree"
    purelib = Path(sysconfig.get_paths()["purelib"])
    kept, count = set(), 0
    for entry in sorted(purelib.iterdir()):
        if count >= 10_200:
            break
        kept.add(entry.name)
        count += sum(len(files) for _, _, files in os.walk(entry)) if entry.is_dir() else 1
    shutil.copytree(
        purelib,
        root / "site-packages",
        symlinks=True,
        ignore=lambda where, names: [n for n in names if n not in kept] if Path(where) == purelib else [],
    )
    count = sum(len(files) for _, _, files in os.walk(root))
    for name in ("json", "email", "asyncio", "xml", "unittest", "concurrent", "importlib", "logging"):
        if count >= 10_200:
            break
        shutil.copytree(STDLIB / name, root / "stdlib" / name, symlinks=True)
        count = sum(len(files) for _, _, files in os.walk(root))
    odd = root / "odd names"
    odd.mkdir()
    (odd / "with space.py").write_text("x = 1\n")
    (odd / "tab\tand|pipe.txt").write_text("a\nb\n")
    (odd / "ünïcode.md").write_text("# ü\n")
    (odd / "empty.txt").write_text("")
    (odd / "one-line.svg").write_text("<svg>" + "<p/>" * 225_000 + "</svg>")
    return root


@pytest.mark.stand_in  # the stand-in's survey: its rows, its repeats, the spacing of its compactions
async def test_a_10000_file_tree_is_surveyed_whole_in_the_default_window(tmp_path):
    """Issue 18's acceptance: a real big tree in the default 50,000-char window, every regular file
    named with its line count (or as binary with its size), checked against ``os.walk``."""
    import time

    from conftest import calls_and_gaps, expected_row, regular_files, survey_rows

    root = _big_tree(tmp_path)
    truth = regular_files(root)
    assert len(truth) >= 10_000
    assert any("/__pycache__/" in p for p in truth) and any(p.endswith(".so") for p in truth)
    assert any(len(data) > 256 * 1024 for data in truth.values())
    started = time.monotonic()
    result, report = await offline_survey(root, tmp_path / "job", {"max_turns": 8_000})
    wall = time.monotonic() - started
    job = tmp_path / "job"
    calls, repeated, gaps = calls_and_gaps(job)
    print(
        f"{len(truth)} files: {result.status} in {result.turns} turns, {wall:.1f} s; {calls} calls, "  # type: ignore[attr-defined]
        f"{repeated} repeated; {len(gaps) + 1} history compactions, closest {min(gaps, default=0)} turns "
        "apart; "
        f"compactions {result.compactions}"
    )  # type: ignore[attr-defined]
    assert result.status == "succeeded", result.error  # type: ignore[attr-defined]
    rows = survey_rows(report, job)
    assert set(truth) <= set(rows), sorted(set(truth) - set(rows))[:5]
    wrong = [
        (p, rows[p])
        for p, data in truth.items()
        if ("binary" if rows[p][1] == "image" else rows[p][1], rows[p][2]) != expected_row(data)
    ]
    assert not wrong, wrong[:5]
    assert repeated <= 0.02 * calls
    assert min(gaps, default=99) >= 3  # no two history compactions within 3 turns
