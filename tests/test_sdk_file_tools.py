"""The file tools' definitions are the installed SDK's, read from a copy saved with the SDK's version so
that a process that needs nothing else of the SDK (an offline run) does not import it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from runner.tools import file_calls
from runner.tools.file_calls import (
    BYTE_RANGE_SCHEMA,
    SDK_FILE_TOOLS,
    file_tool_definitions,
    saved_sdk_file_tools,
    sdk_file_tools,
    sdk_version,
)


def test_the_model_is_shown_the_installed_sdks_definitions_with_a_byte_range_for_read() -> None:
    sdk = sdk_file_tools()
    saved = json.loads(SDK_FILE_TOOLS.read_text())
    if saved["anthropic"] == sdk_version():
        assert saved_sdk_file_tools() == sdk == saved["definitions"]
    else:  # another SDK is installed: the copy is not used
        assert saved_sdk_file_tools() is None
    shown = file_tool_definitions()
    assert set(shown) == {"read", "write", "edit", "glob", "grep"}
    for name, definition in sdk.items():
        if name != "read":
            assert shown[name] == definition
    read = shown["read"]
    assert read["input_schema"]["properties"] == {
        **sdk["read"]["input_schema"]["properties"],
        "byte_range": BYTE_RANGE_SCHEMA,
    }
    assert {**read, "input_schema": sdk["read"]["input_schema"]} == sdk["read"]


@pytest.mark.parametrize(
    "text",
    [
        json.dumps({"anthropic": "0.0.1", "definitions": {"read": {"name": "forged"}}}),  # another version
        '{"anthropic": ',  # cut short
        "MISSING_A_TOOL",  # the installed version, a tool left out
        "[]",
    ],
)
def test_a_copy_of_another_version_or_a_damaged_one_is_not_used(
    text: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if text == "MISSING_A_TOOL":
        saved = json.loads(SDK_FILE_TOOLS.read_text())
        del saved["definitions"]["grep"]
        text = json.dumps({**saved, "anthropic": sdk_version()})
    copy = tmp_path / "sdk_file_tools.json"
    copy.write_text(text)
    monkeypatch.setattr(file_calls, "SDK_FILE_TOOLS", copy)
    assert saved_sdk_file_tools() is None
    monkeypatch.setattr(file_calls, "SDK_FILE_TOOLS", tmp_path / "missing.json")
    assert saved_sdk_file_tools() is None


def test_an_offline_run_does_not_import_the_sdk(tmp_path: Path) -> None:
    if json.loads(SDK_FILE_TOOLS.read_text())["anthropic"] != sdk_version():
        pytest.skip(f"the saved definitions are not of the installed anthropic {sdk_version()}")
    (tmp_path / "ws").mkdir()
    (tmp_path / "ws" / "a.py").write_text("x = 1\n")
    (tmp_path / "jobs").mkdir()
    (tmp_path / "jobs" / "a.toml").write_text('workspace = "../ws"\nprompt = "Survey the workspace."\n')
    code = (
        "import sys\nfrom runner import cli\n"
        "try:\n    code = cli.main(['run', 'jobs', '--backend', 'offline'])\n"
        "except SystemExit as e:\n    code = e.code\n"
        "print('exit', code, 'sdk imported:', 'anthropic' in sys.modules)\n"
    )
    argv = [sys.executable, "-c", code]
    done = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert "exit 0 sdk imported: False" in done.stdout, done.stdout + done.stderr
