"""A reader that closes the pipe early (`quotacalc check plan | head -1`) does not change the exit code: the command
exits with its own verdict every time (README, Errors), whichever of its writes and the reader's exit comes first."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
PLATFORM = ROOT / "examples" / "platform.yaml"
SECRET = "test-secret-not-for-production"
#: Runs per case: before the fix, 5 of 6 such runs of `check | head -c1` exited 1 instead of 0.
REPEATS = 6


def _unsound_plan(tmp_path: Path) -> Path:
    """The example with one tenant sold far past its pool: check finds an error and exits 1."""
    document = yaml.safe_load(PLATFORM.read_text(encoding="utf-8"))
    document["tenants"][0]["units_per_s"] = 10**8
    path = tmp_path / "unsound.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")
    return path


def _run_with_a_reader_that_leaves(*args: object, read_bytes: int) -> tuple[int, str]:
    """Run quotacalc with stdout on a pipe whose reader takes ``read_bytes`` bytes (0: none) and closes it."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "QUOTACALC_SALT_SECRET": SECRET}
    command = [sys.executable, "-c", "from quotacalc.cli.entry import main; main()", *(str(arg) for arg in args)]
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env) as process:
        assert process.stdout is not None and process.stderr is not None
        if read_bytes:
            process.stdout.read(read_bytes)
        process.stdout.close()
        err = process.stderr.read().decode()
        code = process.wait(timeout=120)
    return code, err


@pytest.mark.parametrize(
    ("case", "expected"),
    [("sound check", 0), ("unsound check", 1), ("check --json", 0), ("generate", 0)],
)
def test_a_closed_pipe_exits_with_the_commands_own_verdict_every_time(tmp_path: Path, case: str, expected: int):
    args: list[object] = {
        "sound check": ["check", PLATFORM],
        "unsound check": ["check", _unsound_plan(tmp_path)],
        "check --json": ["check", PLATFORM, "--json"],
        "generate": ["generate", PLATFORM, "--out", tmp_path / "out"],
    }[case]
    for attempt in range(REPEATS):
        code, err = _run_with_a_reader_that_leaves(*args, read_bytes=attempt % 3)  # none, one byte, two bytes
        assert code == expected, f"attempt {attempt}: exit {code}, want {expected}: {err!r}"
        assert "Traceback" not in err and "BrokenPipe" not in err and "Exception ignored" not in err, err
    if case == "generate":
        assert (tmp_path / "out" / "canonical" / "policy.yaml").is_file()  # the run went to its end


def test_a_reader_that_stays_gets_everything(tmp_path: Path):
    """The stream that drops output after the reader leaves passes everything while it stays."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "QUOTACALC_SALT_SECRET": SECRET}
    command = [sys.executable, "-c", "from quotacalc.cli.entry import main; main()", "check", str(PLATFORM), "--json"]
    piped = subprocess.run(command, capture_output=True, text=True, env=env, timeout=120)
    with open(tmp_path / "out.json", "w", encoding="utf-8") as file:
        to_file = subprocess.run(command, stdout=file, stderr=subprocess.PIPE, text=True, env=env, timeout=120)
    assert piped.returncode == to_file.returncode == 0
    assert piped.stdout == (tmp_path / "out.json").read_text(encoding="utf-8")
    assert piped.stdout.rstrip().endswith("}")
