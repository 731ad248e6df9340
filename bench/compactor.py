"""Benchmark 4: the Compactor's overhead against the seeds' pipelines and the physical floor.

    python bench/compactor.py            # 1,000 .. 5,000 messages, median of 3; updates BENCHMARKS.md
    python bench/compactor.py --smoke    # tiny sizes, a few seconds; touches nothing

Each synthetic session is a realistic agent history: the user request, then assistant turns (text
plus one to three parallel tool_use blocks) each answered by a user message of tool results of 200
to 40,000 characters (some list-shaped, some ``is_error``), with a few huge ones (100k to 300k). The
same session is fed turn by turn to four contestants, each in the way its own loop drives it:

- ``ours``: everything the runner does per message for compaction, as ``runner/agent/session.py`` does it:
  ``Compactor.prepare`` on a real ``CompactionState`` writing through a real ``JobStore``, the cache
  breakpoint's ``settled_prefix``, ``mark_seen`` after the model call, and ``History.add`` of
  the reply and its results (each message measured and appended to ``transcript.jsonl``). The
  Summarizer has no model, so a summary is the deterministic fallback.
- ``seed 000``: ``Seed000.prepare`` (the Vietnamese lesson with code, "Context Compact"), then the
  turn's messages appended to its list, as its agent loop does.
- ``seed 001``: ``Seed001.prepare`` (the English README, "s08: Context Compact"; THRESHOLD 50,000
  chars), likewise. It keeps nothing: old results become a fixed placeholder with no file.
- ``floor``: the least any runner that keeps every message can do: serialize each new message once
  (``json.dumps``) and write the turn's lines with one ``os.write`` to a file opened once.
- ``floor + files``: the floor, plus the files ours must keep: every result ours saved to a file of its
  own (the same names and bytes, learned from ours' run of the same session), written whole in the
  turn its result arrives (a temporary name, one ``os.write``, a rename: what a reader or a crash may see
  of it is the old file or the new, as the store promises). The like-for-like floor of ours.

Both seeds are transcribed in ``bench/seeds_pipeline.py``, their only change a model-free summary
(the same deterministic fallback ours uses here). Measured: CPU time (``process_time``: all the
process's threads, so ours' writes in the store's worker thread count; wall time on this shared machine
is the other processes' as much as ours) summed over the turns, each run after ``os.sync()``; the
contestants run one after another on the same session in each of ``--repeats`` runs (ours first: the
second floor writes what it saved); the table gives the median run and the spread (worst / best - 1)
of each, and each ratio's median with its range over the runs. Files go to the system temp dir
(``--dir`` to choose) and are deleted only at the end (deleting many files mid-run makes ext4 with
``discard`` slow for the runs that follow). Results go to ``bench/results/compactor.json`` and,
unless ``--smoke``, to ``BENCHMARKS.md`` between ``<!-- compactor:start -->`` and ``<!-- compactor:end -->``.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import common  # noqa: E402
from common import load_note, replace_section, write_result  # noqa: E402
from seeds_pipeline import Seed000, Seed001  # noqa: E402

import runner.rundir.store  # noqa: E402
from runner.agent.history import History  # noqa: E402
from runner.compaction.compactor import CompactionState, Compactor  # noqa: E402
from runner.compaction.summarizer import Summarizer  # noqa: E402
from runner.config import Limits  # noqa: E402
from runner.messages import request_problems  # noqa: E402
from runner.rundir.docs import TOOL_RESULTS, output_path  # noqa: E402
from runner.rundir.store import JobStore, safe_name  # noqa: E402

SMOKE_SIZES = (30, 120)
SEED_001_THRESHOLD = 50_000
CONTESTANTS = ("floor", "files", "ours", "seed000", "seed001")
LABELS = {
    "floor": "floor",
    "files": "floor + files",
    "ours": "ours",
    "seed000": "seed 000",
    "seed001": "seed 001",
}

REQUEST = "Survey the package in the workspace: list its modules, their public API and any TODOs. (bench)"
SIZES = (1_000, 2_000, 3_000, 4_000, 5_000)
SMOKE_SIZES = (30, 120)

_WORDS = (
    "def class return import async await self value result error path file line module test "
    "config limit message tool output json data index entry window total stage summary"
).split()


def _corpus(rng: random.Random, chars: int) -> str:
    lines, n = [], 0
    while n < chars:
        line = f"{rng.randint(1, 9999):5d}: " + " ".join(
            rng.choice(_WORDS) for _ in range(rng.randint(3, 14))
        )
        if rng.random() < 0.05:
            line += ' "quoted" \\ é 中文 \t tab'
        lines.append(line)
        n += len(line) + 1
    return "\n".join(lines)


def result_size(rng: random.Random) -> int:
    if rng.random() < 0.01:
        return rng.randint(100_000, 300_000)  # a few huge ones
    return int(200 * (200 ** rng.random()))  # 200 .. 40,000, log-uniform


def synthetic_session(n_messages: int, seed: int = 0) -> list[dict[str, Any]]:
    """``n_messages`` messages: the request, then assistant/tool-result pairs."""
    rng = random.Random(seed)
    corpus = _corpus(rng, 400_000)
    messages: list[dict[str, Any]] = [{"role": "user", "content": REQUEST}]
    call = 0
    while len(messages) < n_messages:
        content: list[dict[str, Any]] = [
            {"type": "text", "text": corpus[(o := rng.randrange(300_000)) : o + rng.randint(40, 600)]}
        ]
        uses = []
        for _ in range(rng.choice((1, 1, 2, 3))):
            call += 1
            name = rng.choice(("read", "grep", "glob", "bash"))
            args = (
                {"file_path": f"src/module_{call % 97}.py"}
                if name == "read"
                else {"pattern": rng.choice(_WORDS)}
                if name in ("grep", "glob")
                else {"command": "pytest -q"}
            )
            uses.append(
                {"type": "tool_use", "id": f"toolu_{seed:02d}{call:07d}", "name": name, "input": args}
            )
        messages.append({"role": "assistant", "content": content + uses})
        if len(messages) >= n_messages:
            break
        results = []
        for use in uses:
            size = result_size(rng)
            start = rng.randrange(len(corpus) - min(size, 40_000))
            text = (
                corpus[start : start + size]
                if size <= 40_000
                else (corpus * (size // len(corpus) + 1))[:size]
            )
            block: dict[str, Any] = {
                "type": "tool_result",
                "tool_use_id": use["id"],
                "content": [{"type": "text", "text": text}] if rng.random() < 0.2 else text,
            }
            if rng.random() < 0.05:
                block["is_error"] = True
            results.append(block)
        messages.append({"role": "user", "content": results})
    return messages


def turns_of(messages: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """The messages each turn adds after the first request: [assistant, tool results]."""
    return [messages[i : i + 2] for i in range(1, len(messages), 2)]


def filesystem(path: Path) -> str:
    """The type of the filesystem ``path`` is on (from /proc/mounts), e.g. ``ext4`` or ``tmpfs``."""
    best, kind = "", "?"
    try:
        for line in Path("/proc/mounts").read_text().splitlines():
            _, point, fstype, *_ = line.split()
            if str(path).startswith(point.rstrip("/") + "/") and len(point) > len(best):
                best, kind = point, fstype
    except OSError:
        pass
    return kind


class FileTimer:
    """Times the store's whole-file writes (each persisted output: the existence check, the write to a
    temporary name, the rename), where its worker thread does them: the part of ours' time that is one
    file per output. Installed for one run of ours and removed after it."""

    def __init__(self) -> None:
        self.s = 0.0
        self.files = 0
        self._write, self._same = runner.rundir.store.write_atomic_sync, runner.rundir.store._same_text

    def __enter__(self) -> FileTimer:
        def write(path: Path, text: str) -> None:
            w = time.thread_time()
            self._write(path, text)
            self.s += time.thread_time() - w
            self.files += 1

        def same(path: Path, content: str) -> bool:
            w = time.thread_time()
            try:
                return self._same(path, content)
            finally:
                self.s += time.thread_time() - w

        runner.rundir.store.write_atomic_sync, runner.rundir.store._same_text = write, same
        return self

    def __exit__(self, *exc: object) -> None:
        runner.rundir.store.write_atomic_sync, runner.rundir.store._same_text = self._write, self._same


async def run_ours(messages: list[dict[str, Any]], workdir: Path, check: bool) -> dict[str, Any]:
    with FileTimer() as files:
        result = await _run_ours(messages, workdir, check)
    return {**result, "files": files.files, "files_s": files.s}


async def _run_ours(messages: list[dict[str, Any]], workdir: Path, check: bool) -> dict[str, Any]:
    store = JobStore(workdir / "job")
    await store.open()
    state = CompactionState(limits=Limits(), active_request=REQUEST)
    history = History(store, state)
    compactor = Compactor(Summarizer(None, "fallback"))
    elapsed = 0.0
    w = time.process_time()
    history.add(messages[0])
    elapsed += time.process_time() - w
    for added in [*turns_of(messages), []]:
        w = time.process_time()
        sent = await compactor.prepare(state, store)
        state.window.settled_prefix()  # the cache breakpoint the session places
        elapsed += time.process_time() - w
        if check:
            problems = request_problems(sent, REQUEST)
            assert not problems, problems
        w = time.process_time()
        state.window.mark_seen()  # the model call
        history.add(*added)
        elapsed += time.process_time() - w
    return {
        "s": elapsed,
        "compactions": dict(sorted(state.record.compactions.items())),
        "final_messages": len(state.window),
    }


def run_seed(seed: Seed000 | Seed001, messages: list[dict[str, Any]]) -> dict[str, Any]:
    turns = [copy.deepcopy(t) for t in turns_of(messages)]  # the seeds mutate blocks in place
    history = [copy.deepcopy(messages[0])]
    elapsed = 0.0
    for added in [*turns, []]:
        w = time.process_time()
        history = seed.prepare(history, REQUEST)
        history.extend(added)
        elapsed += time.process_time() - w
    return {"s": elapsed, "final_messages": len(history)}


def run_floor(messages: list[dict[str, Any]], workdir: Path) -> dict[str, Any]:
    fd = os.open(workdir / "floor.jsonl", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    elapsed = 0.0
    try:
        for added in [messages[:1], *turns_of(messages)]:
            w = time.process_time()
            os.write(fd, "".join(json.dumps(m, ensure_ascii=False) + "\n" for m in added).encode())
            elapsed += time.process_time() - w
    finally:
        os.close(fd)
    return {"s": elapsed}


def saved_by_ours(job_dir: Path, messages: list[dict[str, Any]]) -> dict[str, list[tuple[str, str]]]:
    """What ours saved of each tool result: tool_use id -> [(relative path, text)], read from its run."""
    on_disk = {
        f"{TOOL_RESULTS}/{p.name}": p.read_text(encoding="utf-8", errors="surrogatepass")
        for p in (job_dir / TOOL_RESULTS).iterdir()
    }
    saved: dict[str, list[tuple[str, str]]] = {}
    for message in messages:
        for block in message["content"] if isinstance(message["content"], list) else ():
            if block.get("type") != "tool_result":
                continue
            stem = safe_name(block["tool_use_id"])
            rels = [output_path(stem, k) for k in range(1, 4)]
            saved[block["tool_use_id"]] = [(rel, on_disk[rel]) for rel in rels if rel in on_disk]
    return {k: v for k, v in saved.items() if v}


def run_floor_files(
    messages: list[dict[str, Any]], workdir: Path, saved: dict[str, list[tuple[str, str]]]
) -> dict[str, Any]:
    """The floor, plus each file ours kept written whole (temporary name, one write, rename) in the turn
    its result arrives."""
    out = workdir / "floor-files"
    out.mkdir()
    fd = os.open(out / "floor.jsonl", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    elapsed, files = 0.0, 0
    try:
        for added in [messages[:1], *turns_of(messages)]:
            w = time.process_time()
            for message in added:
                for block in message["content"] if isinstance(message["content"], list) else ():
                    for rel, text in saved.get(block.get("tool_use_id", ""), ()):
                        target = out / rel.rsplit("/", 1)[1]
                        tmp = target.with_name(f".{target.name}.tmp")
                        f = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                        os.write(f, text.encode("utf-8", "surrogatepass"))
                        os.close(f)
                        os.replace(tmp, target)
                        files += 1
            os.write(fd, "".join(json.dumps(m, ensure_ascii=False) + "\n" for m in added).encode())
            elapsed += time.process_time() - w
    finally:
        os.close(fd)
    return {"s": elapsed, "files": files}


def quiet_disk() -> None:
    """Flush what the previous run wrote (and freed), so its writeback is not billed to the next run."""
    if hasattr(os, "sync"):
        os.sync()


def measure(n: int, repeats: int, check: bool, root: Path) -> dict[str, Any]:
    messages = synthetic_session(n, seed=0)
    runs: list[dict[str, float]] = []
    ours: dict[str, Any] = {}
    for r in range(repeats):  # the same session through all four, one after the other, in each repeat
        workdir = root / f"{n}-{r}"  # kept until the end (see the module's docstring)
        workdir.mkdir()
        run: dict[str, float] = {}
        quiet_disk()
        ours = anyio.run(run_ours, messages, workdir, check)
        run["ours"] = ours["s"]
        run["ours_files_s"] = ours["files_s"]
        saved = saved_by_ours(workdir / "job", messages)
        quiet_disk()
        run["floor"] = run_floor(messages, workdir)["s"]
        quiet_disk()
        files = run_floor_files(messages, workdir, saved)
        run["files"], run["floor_files"] = files["s"], files["files"]
        quiet_disk()
        run["seed000"] = run_seed(Seed000(workdir / "seed000"), messages)["s"]
        quiet_disk()
        run["seed001"] = run_seed(Seed001(workdir / "seed001", SEED_001_THRESHOLD), messages)["s"]
        runs.append(run)
    middle = {k: statistics.median(r[k] for r in runs) for k in CONTESTANTS}
    median_run = sorted(runs, key=lambda r: r["ours"])[len(runs) // 2]  # how much of it was file writes
    spread = {k: max(r[k] for r in runs) / max(min(r[k] for r in runs), 1e-9) - 1 for k in CONTESTANTS}
    turns = len(turns_of(messages)) + 1

    def ratio(num: str, den: str) -> dict[str, float]:
        each = [r[num] / max(r[den], 1e-9) for r in runs]
        return {"median": statistics.median(each), "min": min(each), "max": max(each)}

    return {
        "messages": n,
        "turns": turns,
        "repeats": repeats,
        "median_s": middle,
        "spread": spread,
        "us_per_turn": {k: middle[k] / turns * 1e6 for k in CONTESTANTS},
        "seed000_over_ours": ratio("seed000", "ours"),
        "seed001_over_ours": ratio("seed001", "ours"),
        "ours_over_floor": ratio("ours", "floor"),
        "ours_over_files": ratio("ours", "files"),
        "ours_compactions": ours.get("compactions"),
        "ours_files": ours.get("files"),
        "floor_files": median_run["floor_files"],
        "ours_files_s": median_run["ours_files_s"],
        "runs": [{k: round(v, 4) for k, v in r.items()} for r in runs],
    }


def _ratio(r: dict[str, float]) -> str:
    return f"{r['median']:.2f}× ({r['min']:.2f}–{r['max']:.2f})"


def section(rows: list[dict[str, Any]], verdict: str, repeats: int, fs: str) -> str:
    lines = [
        "## 4. Compactor overhead: ours, the seeds as written, and the floors",
        "",
        "Synthetic sessions fed turn by turn (tool results 200..40,000 chars, ~1% of 100k..300k, 1-3 "
        "parallel calls per turn, some list-shaped or `is_error`), the same session to each contestant, one "
        f"after another in each of {repeats} runs (ours first); files on {fs}. Time is CPU time (all the "
        "process's threads: ours' writes in the store's worker thread count; its waits for them do not) "
        f"summed over the turns: the median of {repeats} runs, with the spread (worst / best - 1).",
        "",
        "- **ours**: everything the runner does per message for compaction: `prepare`, the cache "
        "breakpoint's `settled_prefix`, `mark_seen`, and `History.add` of each message (measured "
        "once, appended to `transcript.jsonl`).",
        '- **seed 000**: the Vietnamese lesson with code ("Context Compact"), transcribed literally: a '
        "`json.dumps` of the whole history for every estimate, micro_compact only over 50,000 chars, a "
        "transcript file written on every snip.",
        f'- **seed 001**: the English README ("s08: Context Compact"), transcribed literally, THRESHOLD '
        f"{SEED_001_THRESHOLD:,} chars: micro_compact every turn with a fixed placeholder and no file (it "
        "keeps nothing), snip without a transcript, no fit stage.",
        "- **floor**: each new message serialized once (`json.dumps`) and the turn written with one "
        "`os.write` to a file opened once.",
        "- **floor + files**: the floor, plus every result ours saved to a file of its own (the same names "
        "and bytes) written whole in the turn it arrives: a temporary name, one `os.write`, a rename. Ours "
        "must keep those files (a removed result is recalled from them), so this is its like-for-like "
        "floor; the target is set against it.",
        "",
        "Both seeds summarize with the deterministic fallback (the only change to them); so does ours here.",
        "",
        "| messages | ours s | seed 000 s | seed 001 s | floor s | floor + files s | 000 / ours | 001 / ours "
        "| ours / floor | ours / (floor + files) | ours µs/turn |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        b, sp = r["median_s"], r["spread"]
        cells = " | ".join(
            f"{b[k]:.3f} ±{sp[k]:.0%}" for k in ("ours", "seed000", "seed001", "floor", "files")
        )
        lines.append(
            f"| {r['messages']:,} | {cells} | {_ratio(r['seed000_over_ours'])} | "
            f"{_ratio(r['seed001_over_ours'])} | {_ratio(r['ours_over_floor'])} | "
            f"{_ratio(r['ours_over_files'])} | {r['us_per_turn']['ours']:.0f} |"
        )
    lines += [
        "",
        "Times and ratios: medians over the runs, the range of the per-run ratios in brackets. ±: spread.",
        "",
    ]
    return "\n".join([*lines, verdict])


def verdict_text(rows: list[dict[str, Any]], profile: str = "") -> str:
    """The targets, checked against the table (computed, never typed in)."""
    largest, smallest = rows[-1], rows[0]
    n = f"{largest['messages']:,}"
    vs000, vs001, files = (
        largest["seed000_over_ours"],
        largest["seed001_over_ours"],
        largest["ours_over_files"],
    )
    growth = largest["us_per_turn"]["ours"] / max(smallest["us_per_turn"]["ours"], 1e-9)

    def mark(ok: bool) -> str:
        return "met" if ok else "MISSED"

    def mark_runs(r: dict[str, float], target: float, higher_is_better: bool = True) -> str:
        """Met when the median met it, and whether every run did; missed by how much."""

        def ok(x: float) -> bool:
            return x >= target if higher_is_better else x <= target

        if not ok(r["median"]):
            if higher_is_better:
                return f"MISSED: {r['median'] / target:.0%} of the target"
            return f"MISSED by {r['median'] / target - 1:.0%}"
        if ok(r["min"]) and ok(r["max"]):
            return "met by every run"
        return f"met by the median, not by every run ({r['min']:.2f}–{r['max']:.2f}×)"

    met = (vs000["median"] >= 10, vs001["median"] >= 1, files["median"] <= 3, growth < 1.5)
    saved, files_s = largest.get("ours_files") or 0, largest.get("ours_files_s") or 0.0
    cause = (
        f" Where ours' time goes at {n} messages: it saves every result it takes out of context to a file of "
        f"its own before the placeholder is sent ({saved:,} files, written whole and renamed; seed 001 saves "
        f"none; the floor + files row writes the same {largest.get('floor_files') or 0:,}). Writing them "
        f"took {files_s:.2f} s of ours' {largest['median_s']['ours']:.2f} s (CPU of the writing thread)."
        + (f" {profile}" if profile else "")
        if not all(met)
        else ""
    )
    return (
        f"Targets at {n} messages, measured (medians): ours takes {vs000['median']:.1f}× less time than seed "
        f"000 (target ≥ 10×: {mark_runs(vs000, 10)}); seed 001 takes {vs001['median']:.2f}× our time "
        f"(target ≥ 1.00×, no slower: {mark_runs(vs001, 1)}); ours is {files['median']:.2f}× the floor that "
        f"writes what ours keeps (target ≤ 3×: {mark_runs(files, 3, higher_is_better=False)}) and "
        f"{largest['ours_over_floor']['median']:.2f}× the floor that writes one file; our time per turn at "
        f"{n} messages is {growth:.2f}× what it is at {smallest['messages']:,} (near-linear growth, target "
        f"< 1.5×: {mark(growth < 1.5)})." + cause
    )


def profile_ours(n: int, root: Path, top: int = 6) -> str:
    """Where ours' time goes at ``n`` messages: the functions with the most own time in a cProfile run."""
    import cProfile
    import pstats

    messages = synthetic_session(n, seed=0)
    workdir = root / f"profile-{n}"
    workdir.mkdir()
    profiler = cProfile.Profile(time.process_time)  # CPU, as the table: waits are not work
    profiler.enable()
    anyio.run(_run_ours, messages, workdir, False)
    profiler.disable()
    stats = pstats.Stats(profiler)
    total = sum(v[2] for v in stats.stats.values())  # type: ignore[attr-defined]
    rows = sorted(stats.stats.items(), key=lambda kv: kv[1][2], reverse=True)[:top]  # type: ignore[attr-defined]
    named = ", ".join(
        f"{Path(f).name}:{line} {name} {own / total:.0%}" for (f, line, name), (_, _, own, _, _) in rows
    )
    return f"In a cProfile of ours at {n} messages (CPU time), the most own time: {named}."


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, a few seconds; writes nothing")
    parser.add_argument(
        "--repeats", type=int, default=None, help="runs per size, the median kept (default 3; smoke 1)"
    )
    parser.add_argument(
        "--dir", default=None, help="where the runs write their files (default: the system temp dir)"
    )
    parser.add_argument(
        "--render", action="store_true", help="rewrite BENCHMARKS.md from bench/results/compactor.json"
    )
    args = parser.parse_args(argv)
    if args.render:
        saved = json.loads((ROOT / "bench" / "results" / "compactor.json").read_text())
        common.measured_at(saved)  # the load and code of those runs, not of now
        verdict = verdict_text(saved["rows"], saved.get("profile", ""))
        print(verdict)
        repeats = saved["rows"][0]["repeats"]
        replace_section(
            "compactor", section(saved["rows"], verdict, repeats, saved["filesystem"]), saved["command"]
        )
        return 0
    sizes = SMOKE_SIZES if args.smoke else SIZES
    repeats = args.repeats or (1 if args.smoke else 3)
    print(load_note(), flush=True)
    root = Path(tempfile.mkdtemp(prefix="bench-compactor-", dir=args.dir))
    fs = filesystem(root.resolve())
    rows = []
    try:
        for n in sizes:
            row = measure(n, repeats, args.smoke, root)
            rows.append(row)
            b = row["median_s"]
            print(
                f"{n:>6} messages: ours {b['ours']:.3f} s, seed 000 {b['seed000']:.3f} s, seed 001 "
                f"{b['seed001']:.3f} s, floor {b['floor']:.3f} s, floor + files {b['files']:.3f} s; "
                f"{row['ours_compactions']}",
                flush=True,
            )
        profile = "" if args.smoke else profile_ours(sizes[-1], root)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    verdict = verdict_text(rows, profile)
    print(verdict)
    if args.smoke:
        return 0
    command = "python bench/compactor.py" + (f" --repeats {args.repeats}" if args.repeats else "")
    write_result(
        "compactor",
        {"command": command, "filesystem": fs, "rows": rows, "verdict": verdict, "profile": profile},
    )
    replace_section("compactor", section(rows, verdict, repeats, fs), command)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
