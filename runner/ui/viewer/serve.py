"""``runner view --serve``: the same pages, rendered on each request from what is on disk now, with
the job files beside them; on loopback only. For watching a run in progress (pages refresh every
few seconds).

Guarantees:
- A request whose ``Host`` is not a loopback name (``127.0.0.1``, ``localhost``, ``[::1]``, with the
  server's port) is answered 421, and nothing else: a web page that rebinds its own DNS name to
  127.0.0.1 reads nothing.
- Only what the viewer makes is served as a page (``/``, ``/view/<job>.html`` and a long transcript's
  further pages ``/view/<job>.<n>.html``, a subagent's ``/view/<job>/agents/<agent>.html`` and its
  further pages, only those it has); of a job's directory (and of each of its subagents',
  ``agents/<agent>/``) only the files the runner writes (``job.json``, ``metrics.json``, ``events.jsonl``,
  ``transcript.jsonl``, ``final.md``, ``tool-results/*``, ``summaries/*``), each as plain text in a
  sandbox, and the directory itself (``/<job>``, ``/<job>/agents/<agent>``) as a list of those files.
  Any other file of the run directory (a page a job planted there) is a 404.
- Every answer carries a Content-Security-Policy: a page runs only the index's own script (by
  hash), a job file runs nothing.
- The socket is bound and listening before the URL is printed: a port that cannot be listened on (in
  use, say) is one :class:`~runner.listen.ListenError` line naming ``host:port``, and no URL is printed.
"""

from __future__ import annotations

import os
from contextlib import suppress
from pathlib import Path
from urllib.parse import quote

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import FileResponse, HTMLResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ...listen import listening_socket
from ...rundir.docs import AGENTS, INDEX, JOB_FILES, SUMMARIES, TOOL_RESULTS, JobData, load_run
from ...rundir.store import safe_name
from ..terminal import printable
from .data import subagent_names, subagents_of
from .pages import page_number
from .render import PAGE_CSP, pages_dir_for, render_agent, render_files, render_index, render_job

REFRESH_S = 5
LOOPBACK_NAMES = frozenset({"127.0.0.1", "localhost", "[::1]"})
PAGE_HEADERS = {"Content-Security-Policy": PAGE_CSP + "; frame-ancestors 'none'"}
FILE_HEADERS = {"Content-Security-Policy": "default-src 'none'; sandbox; frame-ancestors 'none'"}
COMMON_HEADERS = {
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cross-Origin-Resource-Policy": "same-origin",
}
FILE_DIRS = (TOOL_RESULTS, SUMMARIES)


def runner_file(parts: list[str]) -> bool:
    """Whether a path in a job's (or a subagent's) directory, split at ``/``, is one the runner writes."""
    return (len(parts) == 1 and parts[0] in JOB_FILES) or (
        len(parts) == 2
        and parts[0] in FILE_DIRS
        and parts[1] not in ("", ".", "..")
        and not parts[1].startswith(".")
    )


def served_files(where: Path) -> list[str]:
    """The runner's files in a job's (or a subagent's) directory, as paths relative to it."""
    found = [name for name in JOB_FILES if (where / name).is_file()]
    for folder in FILE_DIRS:
        with suppress(OSError):
            found += sorted(
                f"{folder}/{p.name}"
                for p in (where / folder).iterdir()
                if runner_file([folder, p.name]) and p.is_file()
            )
    return found


def loopback_host(host: str, port: int | None) -> bool:
    """Whether a ``Host`` header names this server on loopback: a loopback name, and the server's port
    (any port when ``port`` is None; none at all only for port 80)."""
    host = host.strip().lower()
    if host.startswith("["):
        name, _, rest = host.partition("]")
        name += "]"
        if rest and not rest.startswith(":"):
            return False
        given = rest[1:] if rest else ""
    else:
        name, _, given = host.partition(":")
    if name not in LOOPBACK_NAMES:
        return False
    if not given:
        return port in (None, 80)
    if not given.isdigit():
        return False
    return port is None or int(given) == port


class LoopbackOnly:
    """Answers 421 to a request for any other host; adds the security headers to every answer."""

    def __init__(self, app: ASGIApp, port: int | None):
        self.app = app
        self.port = port

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        hosts = [v.decode("latin-1") for k, v in scope.get("headers", []) if k == b"host"]
        if len(hosts) != 1 or not loopback_host(hosts[0], self.port):
            refused = PlainTextResponse(
                "421 misdirected request: this server answers only to a loopback host "
                "(127.0.0.1, localhost or [::1])",
                status_code=421,
                headers={**FILE_HEADERS, **COMMON_HEADERS},
            )
            await refused(scope, receive, send)
            return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                present = {k.lower() for k, _ in message.get("headers", [])}
                extra = [
                    (k.lower().encode(), v.encode())
                    for k, v in {**FILE_HEADERS, **COMMON_HEADERS}.items()
                    if k.lower().encode() not in present
                ]
                message = {**message, "headers": [*message.get("headers", []), *extra]}
            await send(message)

        await self.app(scope, receive, with_headers)


def _job_page(run_dir: Path, pages: Path, index: Path, *, name: str) -> str | None:
    """The job page file ``name`` asks for, rendered now, or None when no job has it."""
    for job in load_run(run_dir).jobs:
        number = page_number(job.name, name)
        if number is not None:
            return render_job(job, pages, index, refresh=REFRESH_S, page=number)
    return None


def _agent_page(run_dir: Path, pages: Path, index: Path, *, job_page: str, name: str) -> str | None:
    """The page ``name`` of a subagent of the job whose safe name is ``job_page``, rendered now, or None
    when no subagent has it."""
    for job in load_run(run_dir).jobs:
        if safe_name(job.name) != job_page:
            continue
        for agent in subagents_of(job, []):
            number = page_number(agent.name, name)
            if number is None:
                continue
            text = render_agent(job, agent, pages, index=index, refresh=REFRESH_S, page=number)
            if text is not None:
                return text
    return None


def _agent_dir(found: JobData | None, parts: list[str]) -> str | None:
    """The subagent directory that ``parts`` (a path under a job, split) starts with, when ``found``
    (the job) has that subagent."""
    if found is not None and len(parts) >= 2 and parts[0] == AGENTS and parts[1] in subagent_names(found):
        return parts[1]
    return None


def _listing(run_dir: Path, found: JobData, where: str, *, top: bool) -> Response:
    """The page listing the runner's files of ``where`` (a job's directory, ``top``, with its subagents'
    directories too, or a subagent's)."""
    files = [{"name": f, "href": "/" + quote(f"{where}/{f}")} for f in served_files(run_dir / where)]
    if top:
        files += [
            {"name": f"{AGENTS}/{a}/", "href": "/" + quote(f"{where}/{AGENTS}/{a}")}
            for a in subagent_names(found)
        ]
    return HTMLResponse(render_files(f"files of {where}", files), headers=PAGE_HEADERS)


def _job_file(run_dir: Path, job: str, rest: str) -> Response:
    """A file the runner wrote for a job or one of its subagents, as text; anything else is a 404."""
    parts = rest.split("/")
    found = next((j for j in load_run(run_dir, with_specs=False).jobs if j.name == job), None)
    agent = _agent_dir(found, parts)
    if found is not None and (parts == [""] or (len(parts) == 2 and agent is not None)):
        return _listing(run_dir, found, f"{job}/{rest}".rstrip("/"), top=parts == [""])
    where = job
    if len(parts) > 2 and agent is not None:
        where, parts = f"{job}/{AGENTS}/{agent}", parts[2:]
    if found is not None and runner_file(parts):
        job_dir = os.path.realpath(run_dir / where)
        path = os.path.realpath(run_dir / job / rest)
        if path.startswith(job_dir + os.sep) and os.path.isfile(path):
            return FileResponse(path, media_type="text/plain; charset=utf-8", headers=FILE_HEADERS)
    return PlainTextResponse("not found", status_code=404)


def _page(text: str | None) -> Response:
    """A page rendered now, or a 404 when there is no such page."""
    if text is None:
        return PlainTextResponse("no such page", status_code=404)
    return HTMLResponse(text, headers=PAGE_HEADERS)


def create_app(run_dir: Path, port: int | None = None) -> ASGIApp:
    index = run_dir / INDEX
    pages = pages_dir_for(index)

    async def show_index(request: Request) -> Response:
        return HTMLResponse(render_index(load_run(run_dir), index, refresh=REFRESH_S), headers=PAGE_HEADERS)

    async def show_job(request: Request) -> Response:
        return _page(_job_page(run_dir, pages, index, name=request.path_params["page"]))

    async def show_agent(request: Request) -> Response:
        params = request.path_params
        return _page(_agent_page(run_dir, pages, index, job_page=params["job"], name=params["page"]))

    async def to_index(request: Request) -> Response:
        return RedirectResponse("/")

    async def job_file(request: Request) -> Response:
        return _job_file(run_dir, request.path_params["job"], request.path_params.get("rest", ""))

    app = Starlette(
        routes=[
            Route("/", show_index),
            Route("/index.html", to_index),
            Route(f"/{pages.name}/{{page}}", show_job),
            Route(f"/{pages.name}/{{job}}/{AGENTS}/{{page}}", show_agent),
            Route("/{job}", job_file),
            Route("/{job}/{rest:path}", job_file),
        ]
    )
    app.router.redirect_slashes = False  # an unknown path is a 404, never a redirect to one a route takes
    return LoopbackOnly(app, port)


def serve(run_dir: Path, port: int, host: str = "127.0.0.1") -> int:
    import uvicorn

    sock = listening_socket(host, port)
    with sock:
        port = sock.getsockname()[1]  # port 0: the free port it was given
        config = uvicorn.Config(create_app(run_dir, port), host=host, port=port, log_level="warning")
        print(printable(f"serving {run_dir} at http://{host}:{port}/ (Ctrl-C stops)"), flush=True)
        uvicorn.Server(config).run(sockets=[sock])
    return 0
