"""``runner view --serve``: the same pages, rendered on each request from what is on disk now, with
the job files beside them; on loopback only. For watching a run in progress (pages refresh every
few seconds)."""

from __future__ import annotations

from pathlib import Path

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from ..rundocs import INDEX, load_run
from .pages import page_name
from .render import pages_dir_for, render_index, render_job

REFRESH_S = 5


def create_app(run_dir: Path) -> Starlette:
    index = run_dir / INDEX
    pages = pages_dir_for(index)

    async def show_index(request: Request) -> Response:
        return HTMLResponse(render_index(load_run(run_dir), index, refresh=REFRESH_S))

    async def show_job(request: Request) -> Response:
        name = request.path_params["page"]
        for job in load_run(run_dir).jobs:
            if page_name(job.name) == name:
                return HTMLResponse(render_job(job, pages, index, refresh=REFRESH_S))
        return HTMLResponse("no such job", status_code=404)

    async def to_index(request: Request) -> Response:
        return RedirectResponse("/")

    return Starlette(routes=[Route("/", show_index), Route("/index.html", to_index),
                             Route(f"/{pages.name}/{{page}}", show_job),
                             Mount("/", StaticFiles(directory=run_dir))])


def serve(run_dir: Path, port: int, host: str = "127.0.0.1") -> int:
    import uvicorn

    print(f"serving {run_dir} at http://{host}:{port}/ (Ctrl-C stops)", flush=True)
    uvicorn.run(create_app(run_dir), host=host, port=port, log_level="warning")
    return 0
