"""check reports a plan's calibration that does not hold, or holds only by extrapolation, as warning findings:
counted, in --json, and an error under --strict, as docs/calibration.md says ("an error under --strict").

The shipped synthetic runs (examples/calibration/synthetic-llama-3.3-70b-h100-tp4.csv) are at concurrency 1-64,
prompts of 200 tokens up to 8,256 tokens of prompt + output; platform.yaml's `shared` pool is priced at batch 128,
context 1,700. `--reversal-replicas 10` keeps stark's reversal warning out, so the plan is otherwise sound.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from quotacalc.core.checks import calibration_findings

ROOT = Path(__file__).parent.parent
PLATFORM = ROOT / "examples" / "platform.yaml"
SYNTHETIC_CSV = ROOT / "examples" / "calibration" / "synthetic-llama-3.3-70b-h100-tp4.csv"
QUIET = ("--reversal-replicas", "10")


@pytest.fixture
def calibrated_platform(tmp_path, run_cli) -> Path:
    plan = tmp_path / "platform.yaml"
    shutil.copy(PLATFORM, plan)
    shutil.copy(SYNTHETIC_CSV, tmp_path / SYNTHETIC_CSV.name)
    code, _, err = run_cli(
        "calibrate", plan, "--pool", "shared", "--bench", tmp_path / SYNTHETIC_CSV.name, "--write", plan
    )
    assert code == 0, err
    return plan


def _check(run_cli, plan: Path, *flags: str) -> tuple[int, dict, str]:
    code, out, err = run_cli("check", plan, "--json", *QUIET, *flags)
    return code, json.loads(out), err


def _calibration(document: dict) -> list[dict]:
    return [finding for finding in document["findings"] if finding["code"].startswith("calibration-")]


def test_batch_128_on_runs_of_concurrency_1_to_64_is_a_warning_that_fails_strict(run_cli, calibrated_platform):
    """Batch 128 lies outside the runs' concurrency 1-64 (context 1,700 lies inside 200-8,256): one warning,
    subject pools.shared, its fix naming pools.shared.deployment.batch; the counts say 1 warning; --strict makes
    it the one error (exit 1). Before, check said so on stderr only: 0 warnings, exit 0 under --strict."""
    code, document, err = _check(run_cli, calibrated_platform)
    assert code == 0 and err == ""  # a finding now, not a line on stderr besides the table's
    (finding,) = _calibration(document)
    assert finding["severity"] == "warning" and finding["code"] == "calibration-extrapolated"
    assert finding["subject"] == "pools.shared"
    assert finding["message"] == (
        "extrapolated: the calibration's runs do not cover batch 128 (runs: 1-64); the fitted values may not hold there"
    )
    assert finding["fix"] == (
        f"re-run quotacalc calibrate {calibrated_platform} --pool shared --bench RUNS --write {calibrated_platform} "
        "on runs that cover batch 128, or set pools.shared.deployment.batch within 1-64"
    )
    assert finding["figures"] == {"batch": 128, "runs_concurrency_low": 1, "runs_concurrency_high": 64}
    assert document["counts"]["warning"] == 1 and document["ok"] is True

    code, document, _ = _check(run_cli, calibrated_platform, "--strict")
    assert code == 1 and document["ok"] is False
    assert (document["counts"]["error"], document["counts"]["warning"]) == (1, 0)
    assert [f["severity"] for f in _calibration(document)] == ["error"]
    code, out, _ = run_cli("check", calibrated_platform, "--strict", *QUIET)
    assert code == 1 and "not sound: 1 error, 0 warnings," in " ".join(out.split())


def test_the_fix_the_finding_names_clears_it(run_cli, calibrated_platform):
    """Setting pools.shared.deployment.batch to 64 (within the runs) keeps the calibration (batch is neither a
    fitted value nor part of the deployment calibrated on) and leaves no calibration finding, and no warning. (At
    batch 64 a replica sells fewer units, so the plan is oversold: another finding, an error with or without
    --strict.)"""
    text = calibrated_platform.read_text(encoding="utf-8")
    moved = text.replace("deployment: {batch: 128, context: 1700, mfu:", "deployment: {batch: 64, context: 1700, mfu:")
    assert moved != text
    calibrated_platform.write_text(moved, encoding="utf-8")
    _, document, _ = _check(run_cli, calibrated_platform)
    assert _calibration(document) == [] and document["counts"]["warning"] == 0
    assert document["calibrated"]["shared"]["rows"] == 6


def test_a_calibration_that_no_longer_holds_is_a_warning_saying_what_changed(run_cli, calibrated_platform):
    """The pool moved to TP 8 after it was calibrated at TP 4: not calibrated (JSON null), and a warning that says
    'tp 4 -> 8' and names the pool's deployment and calibration section."""
    text = calibrated_platform.read_text(encoding="utf-8")
    moved = text.replace(
        "deployment: {batch: 128, context: 1700, mfu:",
        "deployment: {tp: 8, kv_pool_tokens: null, batch: 128, context: 1700, mfu:",
    )
    assert moved != text
    calibrated_platform.write_text(moved, encoding="utf-8")
    code, document, _ = _check(run_cli, calibrated_platform)
    assert code == 0 and document["calibrated"]["shared"] is None
    (finding,) = _calibration(document)
    assert (finding["severity"], finding["code"], finding["subject"]) == (
        "warning",
        "calibration-not-held",
        "pools.shared",
    )
    assert finding["message"].startswith("not calibrated:") and "tp 4 -> 8" in finding["message"]
    assert "pools.shared.deployment back to what the pools.shared.calibration section records" in finding["fix"]
    assert _check(run_cli, calibrated_platform, "--strict")[0] == 1


def test_a_flat_plan_names_its_top_level_keys_and_both_ranges():
    """By hand: runs at concurrency 1-64 and 200-8,256 tokens; a flat plan priced at batch 128 and context 9,000
    lies outside both, so the fix names both top-level keys and their ranges, and the figures carry all six numbers.
    A pool whose calibration holds inside its runs (no note) gets no finding."""
    covers = {"concurrency": [1, 64], "context_tokens": [200, 8256]}
    note = (
        "extrapolated: the calibration's runs do not cover batch 128 (runs: 1-64) and context 9,000 (runs: 200-8,256); "
        "the fitted values may not hold there (calibrate on runs that include it)"
    )
    (finding,) = calibration_findings(
        {"default": ({"covers": covers}, note), "other": ({"covers": covers}, None)},
        {"default": {"batch": 128, "context": 9000}, "other": {"batch": 8, "context": 1000}},
        flat_plan=True,
        plan="plan.yaml",
    )
    assert finding.severity == "warning" and finding.subject == "pools.default"
    assert finding.message == note.removesuffix(" (calibrate on runs that include it)")
    assert finding.fix == (
        "re-run quotacalc calibrate plan.yaml --bench RUNS --write plan.yaml on runs that cover batch 128 and "
        "context 9,000, or set batch within 1-64 and context within 200-8,256"
    )
    assert finding.figures == {
        "batch": 128,
        "runs_concurrency_low": 1,
        "runs_concurrency_high": 64,
        "context": 9000,
        "runs_context_tokens_low": 200,
        "runs_context_tokens_high": 8256,
    }


def test_a_pool_price_fix_names_the_key_where_the_plan_sets_it(run_cli, tmp_path):
    """A state dtype on a model without state: the fix names deployment.state_dtype where the pools inherit it from
    the plan's top level, and pools.NAME.deployment.state_dtype where a pool sets it itself (check and size)."""
    import yaml

    document = yaml.safe_load((Path(__file__).parent.parent / "examples" / "platform.yaml").read_text())
    inherited = tmp_path / "inherited.yaml"
    document["deployment"]["state_dtype"] = "fp32"
    inherited.write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")
    own = tmp_path / "own.yaml"
    del document["deployment"]["state_dtype"]
    first = document["pools"][0]
    first.setdefault("deployment", {})["state_dtype"] = "fp32"
    own.write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")

    def fixes(plan):
        code, out, err = run_cli("check", plan, "--json")
        assert code == 0, err
        return {f["subject"]: f["fix"] for f in json.loads(out)["findings"] if "state_dtype" in f["message"]}

    got = fixes(inherited)
    assert len(got) == len(document["pools"]) and set(got.values()) == {"remove deployment.state_dtype"}
    assert fixes(own) == {f"pools.{first['name']}": f"remove pools.{first['name']}.deployment.state_dtype"}
    code, _, err = run_cli("size", inherited)
    assert code == 0 and "(remove deployment.state_dtype)" in err and "pools." not in err.split("state_dtype fp32")[1]


def test_a_bucket_fix_names_the_key_that_sets_the_rate_and_clears_every_shortfall(run_cli, tmp_path):
    """A traffic tenant has no units_per_s: its bucket's fix names tenants.NAME.traffic.rps. And size's burst to
    raise clears the mean request too, not only the smallest (following the first fix met the second warning)."""
    import yaml

    document = yaml.safe_load((Path(__file__).parent.parent / "examples" / "platform.yaml").read_text())
    sized = next(t for t in document["tenants"] if "traffic" in t)
    sized["traffic"]["rps"] = 1e-9
    plan = tmp_path / "plan.yaml"
    plan.write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")
    code, out, err = run_cli("check", plan, "--json")
    assert code == 0, err
    (finding,) = [
        f
        for f in json.loads(out)["findings"]
        if f["code"] == "bucket-below-any-request" and f["subject"] == f"tenants.{sized['name']}"
    ]
    assert finding["fix"] == f"raise tenants.{sized['name']}.traffic.rps or tiers.{sized['tier']}.burst_s"
    flat = Path(__file__).parent.parent / "examples" / "llama-3.3-70b-h100.yaml"
    code, out, err = run_cli("size", flat, "--rps", "0.001", "--burst-s", "1", "--json")
    assert code == 0, err
    document = json.loads(out)
    per_request = document["results"]["units_per_request"]
    (warning,) = [w for w in document["warnings"] if "raise --burst-s to at least" in w]
    needed = float(warning.split("at least ")[1].split(" s")[0].replace(",", ""))
    assert needed * 0.001 * per_request >= per_request * 0.999  # the depth it gives holds a mean request


def test_size_of_a_plan_warns_of_a_bucket_that_admits_nothing_as_check_does(run_cli, tmp_path):
    """size PLAN printed no warning for a tenant whose bucket holds less than the smallest request, so --strict
    passed a tenant every gateway rejects; check and size of one tenant warned."""
    import yaml

    document = yaml.safe_load((Path(__file__).parent.parent / "examples" / "platform.yaml").read_text())
    contract = next(t for t in document["tenants"] if "units_per_s" in t)
    contract["units_per_s"] = 0.001
    plan = tmp_path / "plan.yaml"
    plan.write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")
    code, out, err = run_cli("size", plan, "--json")
    assert code == 0, err
    (warning,) = [w for w in json.loads(out)["warnings"] if w.startswith(f"tenants.{contract['name']}:")]
    assert "less than the smallest request" in warning and f"raise tenants.{contract['name']}.units_per_s" in warning
    code, out, err = run_cli("size", plan, "--strict")
    assert code == 1 and out == "" and "less than the smallest request" in err
