"""Attacks on the operator (issue 24): terminal escapes from a server or a file name, a workspace that
holds the run directory (or is the whole system), the viewer's server answering any Host or serving
a page a job planted, a lone surrogate in a tool input, and a TOML file nested 200,000 deep.

Each test runs the real thing where it can: the CLI as a subprocess against a stub Messages API on
loopback, the viewer's server under uvicorn, rich consoles that think they are terminals.

These hold with any model: a run that needs one plays a scripted model (``tests/scripted.py``: it reads
the workspace's one module, then reports) in a real runner process, in place of the offline stand-in."""

from __future__ import annotations

import base64
import hashlib
import html
import http.client
import io
import json
import re
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from conftest import runner_env
from rich.console import Console
from scripted import ScriptedModel, scripted_runner

from runner.cli import main
from runner.rundir.docs import JobMetrics
from runner.rundir.store import read_jsonl
from runner.ui.display import LiveDisplay, PlainDisplay
from runner.ui.report import run_table
from runner.ui.tables import narrow_table
from runner.ui.terminal import json_printable, printable

# a window title, a clickable link, cursor up and erase line, an 8-bit CSI, rich markup and a bidi override
HOSTILE = (
    "\x1b]0;PWNED\x07\x1b]8;;http://evil.example/\x1b\\click\x1b]8;;\x1b\\\x1b[1A\x1b[2K"
    "\x9b31m[red]x[/red]\u202e"
)
NAME = "\x1b]0;PWNED\x07\x1b[1A\x1b[2K\x9b31m[red]x\u202e"  # the same in a file name (no slash)
RAW = ("\x1b", "\x07", "\x9b", "\u202e")


def assert_no_raw(text: str) -> None:
    for char in RAW:
        assert char not in text, (char, text[-2000:])


# -- the one function -------------------------------------------------------------------------------


def test_printable_escapes_every_control_character_and_nothing_else() -> None:
    unsafe = [
        *range(0x20),
        0x7F,
        *range(0x80, 0xA0),
        *range(0x202A, 0x202F),
        *range(0x2066, 0x206A),
        0x200E,
        0x200F,
        0x061C,
        0x2028,
        0x2029,
        0xD800,
        0xDFFF,
    ]
    for code in unsafe:
        shown = printable(f"a{chr(code)}b")
        assert shown == "a" + (f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}") + "b", hex(code)
        shown.encode("utf-8")  # a lone surrogate too: printable on a UTF-8 stream
    for code in range(0x20, 0x7F):
        assert printable(chr(code)) == chr(code)
    assert printable("é ü 日本 [red] \\ ✓") == "é ü 日本 [red] \\ ✓"
    assert printable("two\nlines\tx", one_line=False) == "two\nlines\\x09x"
    assert printable("two\nlines\tx", one_line=False, tabs=True) == "two\nlines\tx"
    assert printable(HOSTILE).startswith("\\x1b]0;PWNED\\x07\\x1b]8;;http://evil.example/")
    assert_no_raw(printable(HOSTILE))
    document = json.dumps({"error": HOSTILE + "\x7f\ud800", "name": "日本"}, ensure_ascii=False)
    safe = json_printable(document)
    assert_no_raw(safe)
    assert json.loads(safe) == json.loads(document) and "日本" in safe


# -- a stub Messages API ----------------------------------------------------------------------------


@contextmanager
def stub_api(answer: Callable[[int, dict[str, Any]], tuple[int, str, bytes]]) -> Iterator[str]:
    """A Messages API on loopback: ``answer(n, request)`` gives the n-th (1-based) messages request its
    status, content type and body. Yields the base URL."""
    calls = [0]
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)) or b"{}")
            if self.path.startswith("/v1/messages/count_tokens"):
                status, kind, data = 200, "application/json", b'{"input_tokens": 100}'
            else:
                with lock:
                    calls[0] += 1
                    n = calls[0]
                status, kind, data = answer(n, body)
            self.send_response(status)
            self.send_header("content-type", kind)
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def reply(content: list[dict[str, Any]], stop: str) -> bytes:
    """A Messages reply as JSON with ASCII escapes (so a lone surrogate goes out as ``\\ud800``)."""
    return json.dumps(
        {
            "id": "msg_stub",
            "type": "message",
            "role": "assistant",
            "model": "claude-sonnet-5-5",
            "content": content,
            "stop_reason": stop,
            "stop_sequence": None,
            "usage": {"input_tokens": 100, "output_tokens": 20},
        }
    ).encode("ascii")


REPORT = "# Report\n\na.py: one line.\n"


def runner(
    *args: str, cwd: Path, script: Path | None = None, **env: str
) -> subprocess.CompletedProcess[bytes]:
    """``runner ARGS`` as a real process in ``cwd``; its offline model the one saved in ``script``."""
    return subprocess.run(
        scripted_runner(script, *args) if script else [sys.executable, "-m", "runner", *args],
        cwd=cwd,
        env=runner_env(**env),
        capture_output=True,
        timeout=120,
    )


def script(root: Path, turns: int = 1) -> Path:
    """A scripted model, saved in ``root``: it reads ``a.py`` (``turns`` times, a line range each), then
    writes ``REPORT``."""
    reads = [("read", {"file_path": "a.py", "view_range": [1, k]}) for k in range(1, turns + 1)]
    return ScriptedModel(reads, final=REPORT).save(root / "script.json")


def project(tmp_path: Path, name: str = "j") -> Path:
    (tmp_path / "ws").mkdir(exist_ok=True)
    (tmp_path / "ws" / "a.py").write_text("x = 1\n")
    (tmp_path / "jobs").mkdir(exist_ok=True)
    (tmp_path / "jobs" / f"{name}.toml").write_text('prompt = "Survey it."\nworkspace = "../ws"\n')
    return tmp_path


# -- escapes reach no terminal ----------------------------------------------------------------------


def test_an_api_error_and_a_file_name_carrying_escapes_are_printed_escaped(tmp_path: Path) -> None:
    project(tmp_path)
    with stub_api(lambda n, body: (400, "text/plain", HOSTILE.encode())) as url:
        done = runner(
            "run",
            "jobs",
            "--output-dir",
            "runs",
            "--backend",
            "anthropic",
            cwd=tmp_path,
            ANTHROPIC_API_KEY="stub",
            ANTHROPIC_BASE_URL=url,
        )
    stdout, stderr = done.stdout.decode(), done.stderr.decode()
    assert done.returncode == 1, stderr
    assert_no_raw(stdout + stderr)
    assert f"BadRequestError: {printable(HOSTILE)}" in stderr  # the server's text, visibly escaped
    assert "[red]x[/red]" in stderr  # and never read as markup

    report = runner("report", "runs/latest", cwd=tmp_path, COLUMNS="400")
    assert report.returncode == 1
    assert_no_raw(report.stdout.decode() + report.stderr.decode())
    as_json = runner("report", "runs/latest", "--json", cwd=tmp_path)
    assert_no_raw(as_json.stdout.decode())
    errors = {j["job"]: j["error"] for j in json.loads(as_json.stdout)["jobs"]}
    assert errors["j"] == f"BadRequestError: {HOSTILE}"  # the JSON keeps the text itself

    (tmp_path / "jobs" / f"bad{NAME}.toml").write_text('prompt = "p"\nworkspace = "../ws"\n')
    refused = runner("run", "jobs", "--output-dir", "runs", "--backend", "offline", cwd=tmp_path)
    assert refused.returncode == 2  # an invalid task file: nothing starts
    assert_no_raw(refused.stdout.decode() + refused.stderr.decode())
    assert printable(f"bad{NAME}.toml") in refused.stderr.decode()  # the file name, in its error line

    validate = runner("validate", "jobs", cwd=tmp_path)
    assert validate.returncode == 2
    assert_no_raw(validate.stdout.decode() + validate.stderr.decode())
    assert printable(f"bad{NAME}.toml") in validate.stderr.decode()


def rows() -> list[dict[str, Any]]:
    return [
        {
            "job": f"j{HOSTILE}",
            "status": f"failed{HOSTILE}",
            "turns": 1,
            "error": HOSTILE,
            "compactions": {HOSTILE: 1},
            "usage": {},
            "cost_usd": 0.0,
            "wall_s": 0.0,
        }
    ]


def terminal() -> Console:
    return Console(file=io.StringIO(), force_terminal=True, color_system="truecolor", width=400, record=True)


def only_rich_styling(output: str) -> str:
    """``output`` without rich's own SGR sequences (ESC [ ... m): what is left must hold no escape."""
    return re.sub(r"\x1b\[[0-9;]*m", "", output)


def test_the_report_tables_show_escapes_as_text() -> None:
    for table in (run_table(rows(), "title"), narrow_table(rows(), "title")):
        console = terminal()
        console.print(table)
        output = console.file.getvalue()  # type: ignore[attr-defined]
        assert "\x1b]0;" not in output
        assert_no_raw(only_rich_styling(output))
        assert "\\x1b]0;PWNED" in output


def test_the_live_display_shows_escapes_as_text() -> None:
    console = terminal()
    display = LiveDisplay(console)
    display.tally.start({f"j{HOSTILE}": JobMetrics(job=f"j{HOSTILE}", status="running", started=time.time())})
    console.print(display._render())
    display.job_finished(JobMetrics(job=f"j{HOSTILE}", status="failed", error=HOSTILE))
    output = console.file.getvalue()  # type: ignore[attr-defined]
    assert "\x1b]0;" not in output and "\x1b]8;" not in output and "\x1b[1A" not in output
    assert_no_raw(only_rich_styling(output))
    assert "\\x1b]0;PWNED" in output and "[red]x[/red]" in output

    plain = io.StringIO()
    lines = PlainDisplay(Console(file=plain))
    lines.start({"j": JobMetrics(job="j", status="queued")})
    lines.job_started(JobMetrics(job=f"j{HOSTILE}", status="queued"))
    lines.job_finished(JobMetrics(job="j", status="failed", error=HOSTILE))
    assert_no_raw(plain.getvalue())
    assert plain.getvalue().count("\n") == 2 and "\\x1b]0;PWNED" in plain.getvalue()


# -- a workspace never holds the run directory, nor is the system -----------------------------------

WORKSPACES: dict[str, Callable[[Path], str]] = {
    "the output directory's parent": lambda base: str(base),
    "the output directory": lambda base: str(base / "runs"),
    "inside the output directory": lambda base: str(base / "runs" / "old"),
    "the root": lambda base: "/",
    "/etc": lambda base: "/etc",
    "a symlink to the root": lambda base: str(base / "to-root"),
}


@pytest.mark.parametrize("command", ["validate", "run"])
@pytest.mark.parametrize("case", list(WORKSPACES))
def test_a_workspace_over_the_run_directory_or_the_system_is_refused(
    tmp_path: Path, capsys: Any, monkeypatch: Any, case: str, command: str
) -> None:
    monkeypatch.chdir(tmp_path)
    for key in ("ANTHROPIC_API_KEY", "RUNNER_OUTPUT_DIR"):
        monkeypatch.delenv(key, raising=False)
    (tmp_path / "runs" / "old").mkdir(parents=True)
    (tmp_path / "to-root").symlink_to("/")
    (tmp_path / "config.toml").write_text('[runner]\noutput_dir = "runs"\nbackend = "offline"\n')
    (tmp_path / "jobs").mkdir()
    (tmp_path / "jobs" / "j.toml").write_text(f'prompt = "p"\nworkspace = "{WORKSPACES[case](tmp_path)}"\n')
    before = sorted(p.name for p in (tmp_path / "runs").iterdir())
    assert main([command, "jobs"]) == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, errors
    assert "jobs/j.toml: workspace:" in errors[0] and "expected" in errors[0]
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == before  # no run was started


def test_a_workspace_beside_the_output_directory_or_below_a_home_is_fine() -> None:
    from runner.jobs import workspace_problem

    tmp_path = Path("/tmp/project")
    assert workspace_problem(tmp_path / "ws", tmp_path / "runs", "j.toml") is None
    assert workspace_problem(Path(sys.prefix), tmp_path / "runs", "j.toml") is None  # {stdlib} and its kin
    assert workspace_problem(Path("/root"), None, "j.toml") is not None
    assert workspace_problem(Path("/home"), None, "j.toml") is not None
    assert workspace_problem(Path("/proc/self"), None, "j.toml") is not None


# -- a job that may write never has what decides the next run in its workspace ----------------------

WRITABLE_WORKSPACES: dict[str, Callable[[Path], str]] = {
    "the project (config, jobs)": lambda base: str(base),
    "the jobs folder": lambda base: str(base / "jobs"),
    "the runner's code": lambda base: str(Path(runner_package()).parent),
    "a standard library package": lambda base: "{stdlib}/json",
}


def runner_package() -> str:
    import runner

    return str(Path(runner.__file__).resolve().parent)


@pytest.mark.parametrize("case", list(WRITABLE_WORKSPACES))
def test_a_job_that_may_write_cannot_have_the_config_the_jobs_or_the_runner_in_its_workspace(
    tmp_path: Path, capsys: Any, monkeypatch: Any, case: str
) -> None:
    """With write or edit, a job could plant ``[limits] sandbox = "none"`` in config.toml (or a nearer
    one beside the task files), or code the next run imports as root: refused at validate, and at run
    before anything starts. The same workspace with the read tools only is fine."""
    monkeypatch.chdir(tmp_path)
    for key in ("ANTHROPIC_API_KEY", "RUNNER_OUTPUT_DIR"):
        monkeypatch.delenv(key, raising=False)
    (tmp_path / "config.toml").write_text(
        '[runner]\noutput_dir = "/tmp/runner-test-runs"\nbackend = "offline"\n'
    )
    (tmp_path / "jobs").mkdir()
    workspace = WRITABLE_WORKSPACES[case](tmp_path)
    job = tmp_path / "jobs" / "j.toml"
    job.write_text(f'prompt = "p"\nworkspace = "{workspace}"\ntools = ["read", "write", "bash"]\n')
    for command in ("validate", "run"):
        assert main([command, "jobs"]) == 2
        errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
        assert len(errors) == 1, errors
        assert "jobs/j.toml: workspace:" in errors[0] and "may write" in errors[0], errors[0]
    job.write_text(f'prompt = "p"\nworkspace = "{workspace}"\ntools = ["read", "grep", "bash"]\n')
    assert main(["validate", "jobs"]) == 0, capsys.readouterr().err


def test_a_workspace_through_a_link_a_repository_holds_is_refused(
    tmp_path: Path, capsys: Any, monkeypatch: Any
) -> None:
    """``workspace = "checkout/docs"`` where a commit made ``docs`` a link to a directory of root's:
    refused, naming the link. A link above the repository (the operator's own) is followed as before."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    secret = tmp_path / "root-cache"
    secret.mkdir()
    (tmp_path / "checkout" / ".git").mkdir(parents=True)
    (tmp_path / "checkout" / "src").mkdir()
    (tmp_path / "checkout" / "docs").symlink_to(secret)
    (tmp_path / "checkouts").symlink_to(tmp_path / "checkout")
    (tmp_path / "config.toml").write_text('[runner]\noutput_dir = "runs"\nbackend = "offline"\n')
    (tmp_path / "jobs").mkdir()
    job = tmp_path / "jobs" / "j.toml"
    job.write_text('prompt = "p"\nworkspace = "../checkout/docs"\n')
    assert main(["validate", "jobs"]) == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "a symbolic link" in errors[0] and "checkout/docs" in errors[0], errors
    for fine in ("../checkout/src", "../checkouts/src", str(secret)):
        job.write_text(f'prompt = "p"\nworkspace = "{fine}"\n')
        assert main(["validate", "jobs"]) == 0, (fine, capsys.readouterr().err)


# -- view --serve -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory: Any) -> Path:
    base = project(tmp_path_factory.mktemp("serve"))
    done = runner(
        "run", "jobs", "--output-dir", "runs", "--backend", "offline", cwd=base, script=script(base)
    )
    assert done.returncode == 0, done.stderr
    run = (base / "runs" / "latest").resolve()
    assert (run / "j" / "final.md").read_text() == REPORT
    return run


@contextmanager
def serving(run_dir: Path) -> Iterator[int]:
    import uvicorn

    from runner.ui.viewer.serve import create_app

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(create_app(run_dir, port), log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.02)
    try:
        yield port
    finally:
        server.should_exit = True
        thread.join(5)
        sock.close()


class Answer:
    def __init__(self, status: int, headers: dict[str, str], text: str):
        self.status_code, self.headers, self.text = status, headers, text


def get(port: int, path: str, host: str | None = None) -> Answer:
    """One GET on loopback, with this ``Host`` header (default: the server's own address)."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        connection.putrequest("GET", path, skip_host=True)
        connection.putheader("Host", host or f"127.0.0.1:{port}")
        connection.endheaders()
        response = connection.getresponse()
        return Answer(
            response.status,
            {k.lower(): v for k, v in response.getheaders()},
            response.read().decode("utf-8", "replace"),
        )
    finally:
        connection.close()


def test_serve_answers_only_loopback_hosts_serves_only_its_pages_and_sends_a_csp(finished_run: Path) -> None:
    (finished_run / "pwn.html").write_text("<script>fetch('j/transcript.jsonl')</script>")
    (finished_run / "j" / "pwn.html").write_text("<script>alert(1)</script>")
    (finished_run / "j" / "tool-results").mkdir(exist_ok=True)
    (finished_run / "j" / "tool-results" / "x.html").write_text("<script>alert(1)</script>")
    with serving(finished_run) as port:
        for host in ("evil.example", f"evil.example:{port}", f"127.0.0.1.evil.example:{port}", "localhost:1"):
            refused = get(port, "/", host)
            assert refused.status_code == 421, host
            assert "j" not in refused.text
        assert get(port, "/j/transcript.jsonl", "evil.example").status_code == 421
        for host in (f"127.0.0.1:{port}", f"localhost:{port}", f"[::1]:{port}"):
            assert get(port, "/", host).status_code == 200, host

        index = get(port, "/")
        csp = index.headers["content-security-policy"]
        assert "default-src 'none'" in csp and "frame-ancestors 'none'" in csp
        script = re.search(r"<script>(.*?)</script>", index.text, re.S)
        assert script is not None
        digest = base64.b64encode(hashlib.sha256(script.group(1).encode()).digest()).decode()
        assert f"script-src 'sha256-{digest}'" in csp  # the index's own script, and only it
        assert f"'sha256-{digest}'" in html.unescape(
            index.text
        )  # the same policy in the page, opened from disk
        assert 'http-equiv="Content-Security-Policy"' in index.text
        page = get(port, "/view/j.html")
        assert page.status_code == 200 and page.headers["content-security-policy"] == csp

        for planted in (
            "/pwn.html",
            "/j/pwn.html",
            "/run.json/../pwn.html",
            "/j/../pwn.html",
            "/latest/j/final.md",
        ):
            assert get(port, planted).status_code == 404, planted
        transcript = get(port, "/j/transcript.jsonl")
        assert transcript.status_code == 200 and transcript.headers["content-type"].startswith("text/plain")
        assert "sandbox" in transcript.headers["content-security-policy"]
        assert transcript.headers["x-content-type-options"] == "nosniff"
        saved = get(port, "/j/tool-results/x.html")  # a job file is text in a sandbox, never a page
        assert saved.headers["content-type"].startswith("text/plain")
        assert "sandbox" in saved.headers["content-security-policy"]


def test_the_written_pages_carry_the_csp(finished_run: Path, capsys: Any) -> None:
    assert main(["view", str(finished_run)]) == 0
    for page in (finished_run / "index.html", finished_run / "view" / "j.html"):
        text = page.read_text()
        assert text.index('http-equiv="Content-Security-Policy"') < text.index("<style>")
        assert "default-src 'none'" in html.unescape(text)


# -- bad inputs are errors, not crashes -------------------------------------------------------------


def test_a_lone_surrogate_in_a_tool_input_is_written_and_reloads(tmp_path: Path) -> None:
    project(tmp_path)

    def answer(n: int, body: dict[str, Any]) -> tuple[int, str, bytes]:
        if n == 1:
            return (
                200,
                "application/json",
                reply(
                    [
                        {"type": "text", "text": "looking \ud800"},
                        {
                            "type": "tool_use",
                            "id": "toolu_1",
                            "name": "grep",
                            "input": {"pattern": "x\ud800"},
                        },
                        {
                            "type": "tool_use",
                            "id": "toolu_2",
                            "name": "read",
                            "input": {"file_path": "\ud800.py"},
                        },
                    ],
                    "tool_use",
                ),
            )
        return 200, "application/json", reply([{"type": "text", "text": "# Report\n\nDone."}], "end_turn")

    with stub_api(answer) as url:
        done = runner(
            "run",
            "jobs",
            "--output-dir",
            "runs",
            "--backend",
            "anthropic",
            cwd=tmp_path,
            ANTHROPIC_API_KEY="stub",
            ANTHROPIC_BASE_URL=url,
        )
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    assert b"Traceback" not in done.stderr
    job = tmp_path / "runs" / "latest" / "j"
    assert json.loads((job / "metrics.json").read_text())["status"] == "succeeded"
    (job / "transcript.jsonl").read_bytes().decode("utf-8")  # valid UTF-8 throughout
    records, problems = read_jsonl(job / "transcript.jsonl")
    assert not problems
    uses = [
        b
        for m in records
        if isinstance(m.get("content"), list)
        for b in m["content"]
        if b.get("type") == "tool_use"
    ]
    assert {u["id"]: u["input"] for u in uses} == {
        "toolu_1": {"pattern": "x\ud800"},
        "toolu_2": {"file_path": "\ud800.py"},
    }


def deep_toml(path: Path, prefix: str) -> None:
    path.write_text(prefix + "a = " + "[" * 200_000 + "]" * 200_000 + "\n")


def test_a_task_file_nested_200000_deep_is_a_bad_task_file(tmp_path: Path) -> None:
    project(tmp_path)
    deep_toml(tmp_path / "jobs" / "deep.toml", "")
    done = runner("validate", "jobs", cwd=tmp_path)
    stderr = done.stderr.decode()
    assert done.returncode == 2 and "Traceback" not in stderr
    errors = [line for line in stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "jobs/deep.toml: cannot parse: nested too deeply" in errors[0]
    assert "ok     j " in done.stdout.decode()  # the other task file still loads
    run = runner("run", "jobs", "--output-dir", "runs", "--backend", "offline", cwd=tmp_path)
    assert run.returncode == 2 and b"Traceback" not in run.stderr  # as validate: nothing starts
    assert [line for line in run.stderr.decode().splitlines() if line.startswith("error:")] == errors
    assert not (tmp_path / "runs").exists()
    run = runner(
        "run",
        "jobs",
        "--only",
        "j",
        "--output-dir",
        "runs",
        "--backend",
        "offline",
        cwd=tmp_path,
        script=script(tmp_path),
    )
    assert run.returncode == 0 and b"Traceback" not in run.stderr  # the other task file still runs alone
    metrics = json.loads((tmp_path / "runs" / "latest" / "j" / "metrics.json").read_text())
    assert (metrics["status"], metrics["turns"]) == ("succeeded", 2)
    assert (tmp_path / "runs" / "latest" / "j" / "final.md").read_text() == REPORT
    assert [p.name for p in (tmp_path / "runs" / "latest").iterdir() if p.is_dir()] == ["j"]


def test_a_config_nested_200000_deep_is_one_error_line(tmp_path: Path) -> None:
    project(tmp_path)
    deep_toml(tmp_path / "config.toml", "[runner]\n")
    for command in (["validate", "jobs"], ["run", "jobs", "--backend", "offline"]):
        done = runner(*command, cwd=tmp_path)
        stderr = done.stderr.decode()
        assert done.returncode == 2 and "Traceback" not in stderr, stderr[-2000:]
        errors = [line for line in stderr.splitlines() if line.strip()]
        assert errors == [
            "error: config.toml: cannot parse: nested too deeply (expected a task or config file "
            "of ordinary depth)"
        ], errors


def test_resume_refuses_a_job_json_whose_workspace_holds_the_run(tmp_path: Path) -> None:
    project(tmp_path)
    (tmp_path / "jobs" / "j.toml").write_text(
        'prompt = "Survey it."\nworkspace = "../ws"\n[limits]\nmax_turns = 2\n'
    )
    model = script(tmp_path, turns=3)
    done = runner("run", "jobs", "--output-dir", "runs", "--backend", "offline", cwd=tmp_path, script=model)
    assert done.returncode == 1, done.stderr  # three turns of reads for max_turns = 2: a job to resume
    run_dir = (tmp_path / "runs" / "latest").resolve()
    assert json.loads((run_dir / "j" / "metrics.json").read_text())["status"] == "max_turns"
    job_json = run_dir / "j" / "job.json"
    spec = json.loads(job_json.read_text())
    job_json.write_text(json.dumps({**spec, "workspace": str(tmp_path)}))
    before = sorted(p.relative_to(run_dir).as_posix() for p in run_dir.rglob("*"))
    kept = (run_dir / "j" / "transcript.jsonl").read_bytes()
    resumed = runner("resume", str(run_dir), "--backend", "offline", cwd=tmp_path, script=model)
    errors = [line for line in resumed.stderr.decode().splitlines() if line.startswith("error:")]
    assert resumed.returncode == 2 and len(errors) == 1, resumed.stderr
    assert "job.json: workspace:" in errors[0] and "output directory" in errors[0]
    assert sorted(p.relative_to(run_dir).as_posix() for p in run_dir.rglob("*")) == before  # nothing ran
    assert (run_dir / "j" / "transcript.jsonl").read_bytes() == kept
