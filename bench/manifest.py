"""The workspace manifest an incremental job makes at its start (:mod:`runner.rundir.manifest`), on this
interpreter's installed site-packages (10,000+ files): the walk and the sha256 of every file, then
writing and reading ``manifest.jsonl`` and diffing two manifests.

    python bench/manifest.py              # 3 rounds; writes the "workspace manifest" section of BENCHMARKS.md
    python bench/manifest.py --smoke      # 1 round on the json package of the standard library; prints only

The tree is read from the page cache after the first round (the first round is as warm as the machine
left it). The table gives the median over the rounds and the spread (lowest to highest).
"""

from __future__ import annotations

import argparse
import site
import statistics
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import load_note, machine, replace_section, write_result  # noqa: E402
from runner.rundir.manifest import build, diff, read_manifest  # noqa: E402

COMMAND = "python bench/manifest.py"


def timed(fn, *args):  # type: ignore[no-untyped-def]
    started = time.perf_counter()
    value = fn(*args)
    return value, time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--smoke", action="store_true", help="one round on a small tree; print only")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    tree = Path(sysconfig.get_paths()["stdlib"]) / "json" if args.smoke else Path(site.getsitepackages()[0])
    rounds = 1 if args.smoke else args.rounds
    times: dict[str, list[float]] = {"build": [], "write": [], "read": [], "diff": []}
    manifest = None
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "manifest.jsonl"
        for _ in range(rounds):
            manifest, took = timed(build, tree)
            times["build"].append(took)
            _, took = timed(lambda m=manifest: path.write_text(m.text()))
            times["write"].append(took)
            (back, problem), took = timed(read_manifest, path)
            assert problem is None and back is not None and back.entries == manifest.entries, problem
            times["read"].append(took)
            changes, took = timed(diff, back, manifest)
            assert changes.total == 0
            times["diff"].append(took)
        size = path.stat().st_size
    assert manifest is not None
    rows = ["| step | median s | spread s (low-high) |", "|---|---:|---:|"]
    labels = {
        "build": "walk + sha256 of every file (`build`)",
        "write": "serialize and write manifest.jsonl",
        "read": "read it back (`read_manifest`)",
        "diff": "diff two manifests (`diff`)",
    }
    for key, label in labels.items():
        values = times[key]
        rows.append(f"| {label} | {statistics.median(values):.3f} | {min(values):.3f}-{max(values):.3f} |")
    head = (
        f"Tree: `{tree}` ({len(manifest.entries):,} entries, {manifest.files:,} regular files, "
        f"{manifest.bytes / 2**20:,.0f} MiB; git: {'yes' if manifest.git else 'no'}); {rounds} rounds; "
        f"manifest.jsonl {size / 2**20:.1f} MiB. The build's median is "
        f"{statistics.median(times['build']) / max(1, manifest.files) * 1e6:.0f} µs a file, the git status "
        "included."
    )
    body = head + "\n\n" + "\n".join(rows) + "\n"
    print(f"{machine()}; {load_note()}")
    print(body)
    if not args.smoke:
        write_result(
            "manifest",
            {
                "tree": str(tree),
                "entries": len(manifest.entries),
                "files": manifest.files,
                "bytes": manifest.bytes,
                "seconds": times,
            },
        )
        replace_section("manifest", "### Workspace manifest\n\n" + body, COMMAND)
    return 0


if __name__ == "__main__":
    sys.exit(main())
