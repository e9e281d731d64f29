"""Two `generate` runs into one folder at once: the folder is locked for each run's reading and writing, so one run
waits for the other (or refuses in one line), and the folder is never left in a state every later run refuses."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
PLATFORM = ROOT / "examples" / "platform.yaml"
SECRET = "test-secret-not-for-production"

#: quotacalc with its renames slowed down (QUOTACALC_TEST_DELAYS: seconds before each file's rename, and before the
#: final manifest's) and, with QUOTACALC_TEST_BARRIER set, both runs of a pair made to reach write_files at once (two
#: start-ups differ by more than one run's renames take). Unlocked, the pair then interleaves as in the wild: the
#: run whose files land first writes its final manifest last, over the other run's files.
RACING = """
import os, time
from quotacalc.exporters import writer
real_put, real_write_files = writer._put, writer.write_files
file_delay_s, manifest_delay_s = (float(part) for part in os.environ.get("QUOTACALC_TEST_DELAYS", "0,0").split(","))
manifests = []
def slow_put(temporary, path):
    if path == writer.MANIFEST:
        manifests.append(path)
    time.sleep(manifest_delay_s if len(manifests) == 2 else file_delay_s)
    real_put(temporary, path)
def write_files_together(*args):
    folder = os.environ.get("QUOTACALC_TEST_BARRIER")
    if folder:
        open(os.path.join(folder, str(os.getpid())), "w").close()
        deadline = time.monotonic() + 30
        while len(os.listdir(folder)) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
    return real_write_files(*args)
writer._put, writer.write_files = slow_put, write_files_together
writer.LOCK_WAIT_S = {wait_s}
from quotacalc.cli.entry import main
main()
"""


def _plans(tmp_path: Path) -> list[Path]:
    """Two plans that differ in one tenant's contract, so every policy file differs between them."""
    paths = []
    for number, units in enumerate((17725, 18000)):
        document = yaml.safe_load(PLATFORM.read_text(encoding="utf-8"))
        document["tenants"][0]["units_per_s"] = units
        path = tmp_path / f"plan{number}.yaml"
        path.write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")
        paths.append(path)
    return paths


def _start(
    plan: Path,
    out_dir: Path,
    *extra: str,
    wait_s: float = 60,
    barrier: Path | None = None,
    delays_s: tuple[float, float] = (0, 0),
) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "QUOTACALC_SALT_SECRET": SECRET}
    env["QUOTACALC_TEST_DELAYS"] = ",".join(str(delay) for delay in delays_s)
    env.pop("QUOTACALC_TEST_BARRIER", None)
    if barrier is not None:
        env["QUOTACALC_TEST_BARRIER"] = str(barrier)
    command = [sys.executable, "-c", RACING.format(wait_s=wait_s), "generate", str(plan), "--out", str(out_dir)]
    return subprocess.Popen([*command, *extra], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def _finish(process: subprocess.Popen[str]) -> tuple[int, str]:
    _, err = process.communicate(timeout=180)
    return process.returncode, err


def test_two_runs_at_once_both_finish_and_leave_the_folder_usable(tmp_path: Path):
    plans = _plans(tmp_path)
    out_dir = tmp_path / "out"
    for round_number in range(2):  # into a new folder, then over an earlier run's files
        barrier = tmp_path / f"barrier{round_number}"
        barrier.mkdir()
        # The first run's files land first (0.05 s a rename against 0.1 s), its final manifest last (1.5 s).
        processes = [
            _start(plan, out_dir, "--target", "canonical,vllm,litellm", barrier=barrier, delays_s=delays)
            for plan, delays in zip(plans, ((0.05, 1.5), (0.1, 0.1)), strict=True)
        ]
        results = [_finish(process) for process in processes]
        for code, err in results:
            assert code == 0, f"round {round_number}: {err}"
        # The folder holds one run's output whole: a later run finds nothing foreign or edited (unlocked, it refused
        # "was edited since quotacalc wrote it", as every run after it would), and its --check finds no drift.
        code, err = _finish(_start(plans[round_number], out_dir, "--target", "canonical,vllm,litellm"))
        assert code == 0, err
        code, err = _finish(_start(plans[round_number], out_dir, "--target", "canonical,vllm,litellm", "--check"))
        assert code == 0, err
    assert not [path for path in out_dir.rglob("*.tmp")]


def test_a_run_that_cannot_get_the_folder_refuses_in_one_line(tmp_path: Path):
    """Another process holds the folder (its lock) past the wait: one line naming --out, exit 1, nothing written."""
    plan = _plans(tmp_path)[0]
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    descriptor = os.open(out_dir, os.O_RDONLY)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX)
        for extra in ((), ("--check",)):
            code, err = _finish(_start(plan, out_dir, "--target", "canonical", *extra, wait_s=0.3))
            lines = [line for line in err.splitlines() if not line.startswith("quotacalc: note:")]
            assert code == 1 and len(lines) == 1, err
            assert lines[0].startswith(f"quotacalc: error: {out_dir}: --out: another quotacalc run is writing")
        assert list(out_dir.iterdir()) == []
    finally:
        os.close(descriptor)
    assert _finish(_start(plan, out_dir, "--target", "canonical"))[0] == 0
