"""A plan's new text is read back as the file it replaces before it is written (``calibrate --write``, ``fleet
--write``): in memory, under the file's own name, so an error names that file and its key, no temporary file is
left beside it, and the file is unchanged."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).parent.parent
PLATFORM = ROOT / "examples" / "platform.yaml"
SYNTHETIC_CSV = ROOT / "examples" / "calibration" / "synthetic-llama-3.3-70b-h100-tp4.csv"


def _only_files(folder: Path) -> set[str]:
    return {path.name for path in folder.iterdir()}


def test_calibrate_pool_write_that_does_not_read_back_names_the_target(run_cli, tmp_path):
    shutil.copy(SYNTHETIC_CSV, tmp_path / SYNTHETIC_CSV.name)
    plan = tmp_path / "platform.yaml"
    shutil.copy(PLATFORM, plan)
    # The target's other pool names a model that does not exist: the pool calibrated reads, the whole plan does not.
    document = yaml.safe_load(PLATFORM.read_text(encoding="utf-8"))
    document["pools"][1].setdefault("deployment", {})["model"] = "nope-model"
    target = tmp_path / "target.yaml"
    target.write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")
    before, files = target.read_bytes(), _only_files(tmp_path)
    code, out, err = run_cli(
        "calibrate", plan, "--pool", "shared", "--bench", tmp_path / SYNTHETIC_CSV.name, "--write", target
    )
    assert code == 2 and out == "", err
    assert err.startswith(f"quotacalc: error: {target}: pools[1].deployment.model: unknown model 'nope-model'"), err
    assert target.read_bytes() == before and _only_files(tmp_path) == files


def test_calibrate_flat_write_reads_back_under_the_targets_name(run_cli, tmp_path):
    # A new flat plan from flags, written beside its bench file: it reads back, and no probe file is left behind.
    shutil.copy(SYNTHETIC_CSV, tmp_path / SYNTHETIC_CSV.name)
    target = tmp_path / "new.yaml"
    flags = ("--model", "Llama-3.3-70B-Instruct", "--gpu", "h100-sxm", "--tp", "4", "--weight-dtype", "fp8")
    code, _, err = run_cli("calibrate", *flags, "--bench", tmp_path / SYNTHETIC_CSV.name, "--write", target)
    assert code == 0, err
    assert yaml.safe_load(target.read_text(encoding="utf-8"))["calibration"]["rows"] == 6
    assert _only_files(tmp_path) == {SYNTHETIC_CSV.name, "new.yaml"}


def test_fleet_write_that_does_not_read_back_names_the_target(run_cli, tmp_path):
    pytest.importorskip("duckdb")
    pytest.importorskip("sqlglot")
    from tests.fleet_logs import PLAN, golden_requests, write_quotacalc

    plan = tmp_path / "plan.yaml"
    plan.write_text(PLAN, encoding="utf-8")
    # The target names a tier no tenant list defines: a platform plan by its keys, not one that reads.
    target = tmp_path / "target.yaml"
    target.write_text(PLAN.replace("tier: pro\n    units_per_s: 100", "tier: gold\n    units_per_s: 100"), "utf-8")
    log = write_quotacalc(tmp_path / "usage.jsonl", golden_requests())
    before, files = target.read_bytes(), _only_files(tmp_path)
    code, _, err = run_cli("fleet", log, "--plan", plan, "--write", target)
    assert code != 0, err
    assert err.startswith(f"quotacalc: error: {target}: tenants[0].tier"), err
    assert target.read_bytes() == before and _only_files(tmp_path) == files
