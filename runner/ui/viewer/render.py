"""Write the pages: Jinja2 templates (shipped in this package) filled from :mod:`.pages`.

Guarantees:
- Every page is written to a temporary name and renamed: a browser never reads a torn page.
- Text from the run (job names, messages, errors) is HTML-escaped by the template engine.
- A job's page is rewritten only when one of its files is newer than the page (or ``force``); its
  transcript's further pages (``<job>.<n>.html``) are written with it, and those it no longer has (a
  resumed job's transcript cut back) are removed. So are its subagents' pages (``<job>/agents/``),
  each a job page of its own: a subagent's file newer than the job's page makes the page stale.
"""

from __future__ import annotations

import base64
import hashlib
import os
import time
from concurrent.futures import ProcessPoolExecutor
from contextlib import suppress
from dataclasses import dataclass, field
from itertools import repeat
from pathlib import Path

from jinja2 import Environment, PackageLoader, select_autoescape

from ...rundir.docs import AGENTS, INDEX, JOB_FILES, VIEW, VIEW_STAMP, JobData, RunData, load_run
from ...rundir.store import safe_name, write_atomic_sync
from .data import subagent_names
from .pages import agents_page_dir, index_context, job_context, link, page_name, transcript_page_name

PAGES_PER_WORKER = 16
# the index's table script, as it is (a template file only so that it ships with the others; never rendered)
SCRIPT = (Path(__file__).parent / "templates" / "index.js.j2").read_text(encoding="utf-8")
# What a page may load: its own styles and the index's one script (by hash), nothing else; no script in a
# file of the run (a transcript, a planted page) ever runs in a page's origin. Also sent as a header by
# --serve.
PAGE_CSP = (
    "default-src 'none'; script-src 'sha256-"
    + base64.b64encode(hashlib.sha256(SCRIPT.encode("utf-8")).digest()).decode("ascii")
    + "'; style-src 'unsafe-inline'; img-src data:; base-uri 'none'; form-action 'none'"
)
_env = Environment(
    loader=PackageLoader("runner.ui.viewer", "templates"),
    autoescape=select_autoescape(["j2", "html"]),
    trim_blocks=True,
    lstrip_blocks=True,
)


@dataclass
class ViewResult:
    index: Path
    pages_dir: Path
    pages_written: int = 0
    problems: list[str] = field(default_factory=list)


def pages_dir_for(index: Path) -> Path:
    """Where the job pages of ``index`` go: ``view/`` beside ``index.html``, ``<stem>-view/`` otherwise."""
    return index.parent / (VIEW if index.name == INDEX else f"{index.stem}-view")


def render_index(run: RunData, index: Path, refresh: int | None = None) -> str:
    pages = link(pages_dir_for(index), index.parent)
    return _env.get_template("index.html.j2").render(
        **index_context(run, pages, start=index.parent),
        written=time.strftime("%Y-%m-%d %H:%M:%S"),
        refresh=refresh,
        script=SCRIPT,
        csp=PAGE_CSP,
    )


def render_job(
    job: JobData, pages_dir: Path, index: Path, *, refresh: int | None = None, page: int = 1
) -> str | None:
    """Page ``page`` of a job: 1 is the job's page (charts, compactions, report and the transcript's first
    page), 2 and on the transcript's further pages; None when the transcript has no such page."""
    context = job_context(job, pages_dir, link(index, pages_dir))
    pages = context["transcript_pages"]
    if not 1 <= page <= len(pages):
        return None
    return _render_page(context, page, refresh)


def agent_context(job: JobData, agent: JobData, pages_dir: Path, *, index: Path) -> dict:
    """A subagent's page, in its job's directory of subagent pages, linking back to the job's page."""
    start = pages_dir / agents_page_dir(job.name)
    return job_context(
        agent, start, link(index, start), parent=(job.name, link(pages_dir / page_name(job.name), start))
    )


def render_agent(
    job: JobData,
    agent: JobData,
    pages_dir: Path,
    *,
    index: Path,
    refresh: int | None = None,
    page: int = 1,
) -> str | None:
    """Page ``page`` of a subagent of ``job`` (as :func:`render_job`)."""
    context = agent_context(job, agent, pages_dir, index=index)
    if not 1 <= page <= len(context["transcript_pages"]):
        return None
    return _render_page(context, page, refresh)


def render_files(title: str, files: list[dict[str, str]]) -> str:
    """A list of a directory's files (for ``--serve``): ``files`` are names and links."""
    return _env.get_template("files.html.j2").render(title=title, files=files, csp=PAGE_CSP)


def _render_page(context: dict, page: int, refresh: int | None) -> str:
    template = "job.html.j2" if page == 1 else "transcript.html.j2"
    return _env.get_template(template).render(
        **{**context, "items": context["transcript_pages"][page - 1], "page": page},
        refresh=refresh,
        csp=PAGE_CSP,
    )


def _stale(job: JobData, page: Path) -> bool:
    try:
        written = page.stat().st_mtime
    except OSError:
        return True
    dirs = [job.dir, *(job.dir / AGENTS / name for name in subagent_names(job))]
    for name in JOB_FILES:
        for where in dirs:
            with suppress(OSError):
                if (where / name).stat().st_mtime >= written:
                    return True
    return False


def _write_pages(context: dict, pages: Path, name: str) -> None:
    """A job's page and its transcript's further pages in ``pages``; the job's page last."""
    count = len(context["transcript_pages"])
    for number in range(2, count + 1):
        write_atomic_sync(pages / transcript_page_name(name, number), _render_page(context, number, None))
    for old in pages.glob(f"{safe_name(name)}.*.html"):  # pages of a longer transcript than today's
        rest = old.name.removesuffix(".html").split(".", 1)[1]
        if not (
            rest.isdigit() and 2 <= int(rest) <= count and old.name == transcript_page_name(name, int(rest))
        ):
            old.unlink(missing_ok=True)
    write_atomic_sync(pages / page_name(name), _render_page(context, 1, None))


def _write_page(job: JobData, pages: Path, index: Path) -> None:
    """The job's pages, its subagents' before them (the job's page last: its time says all are written)."""
    context = job_context(job, pages, link(index, pages))
    agent_pages = pages / agents_page_dir(job.name)
    names = set()
    for agent in context["subagents"]:
        agent_pages.mkdir(parents=True, exist_ok=True)
        _write_pages(agent_context(job, agent, pages, index=index), agent_pages, agent.name)
        names.add(safe_name(agent.name))
    for old in agent_pages.glob("*.html"):  # a subagent that is no longer there
        if old.name.split(".", 1)[0] not in names:
            old.unlink(missing_ok=True)
    _write_pages(context, pages, job.name)


def _stamp() -> str:
    """What the pages were made with: a page written by other templates or code is out of date too."""
    digest = hashlib.sha256()
    here = Path(__file__).parent
    for path in sorted([*here.glob("*.py"), *(here / "templates").glob("*.j2")]):
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def write_view(run_dir: Path, out: Path | None = None, force: bool = False) -> ViewResult:
    """Write the index (default ``RUN_DIR/index.html``) and every job page that is out of date."""
    index = out or run_dir / INDEX
    run = load_run(run_dir)
    pages = pages_dir_for(index)
    pages.mkdir(parents=True, exist_ok=True)
    stamp_file, stamp = pages / VIEW_STAMP, _stamp()
    try:
        force = force or stamp_file.read_text() != stamp
    except OSError:
        force = True
    result = ViewResult(index, pages, problems=list(run.problems))
    stale = [job for job in run.jobs if force or _stale(job, pages / page_name(job.name))]
    workers = min(os.cpu_count() or 1, len(stale) // PAGES_PER_WORKER)
    if workers > 1:  # rendering is CPU-bound: a big run's pages are written by one process per core
        with ProcessPoolExecutor(workers) as pool:
            list(pool.map(_write_page, stale, repeat(pages), repeat(index), chunksize=PAGES_PER_WORKER))
    else:
        for job in stale:
            _write_page(job, pages, index)
    result.pages_written = len(stale)
    write_atomic_sync(stamp_file, stamp)
    write_atomic_sync(index, render_index(run, index))
    return result
