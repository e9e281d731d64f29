"""The calibration fit: recovery of known parameters, leave-one-out, robustness, bounds, provenance in the plan.

Synthetic points are predicted by the replica model from a known parameter set (the only way to know
the truth); the fit must give that set back. Where the truth is a measurement, the figure is cited.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
from pathlib import Path

import pytest
import yaml

from quotacalc.cli.json_out import JSON_SCHEMA_VERSION
from quotacalc.core.calibrate import (
    BenchmarkPoint,
    KvPoolReading,
    calibrate,
    informed_parameters,
    kv_pool_fit,
    predictions,
)
from quotacalc.core.deployment import GIB, Deployment
from quotacalc.errors import QuotacalcError

ROOT = Path(__file__).parent.parent
EXAMPLES = ROOT / "examples" / "calibration"
PLAN = ROOT / "examples" / "llama-3.3-70b-h100.yaml"
SYNTHETIC_CSV = EXAMPLES / "synthetic-llama-3.3-70b-h100-tp4.csv"
SYNTHETIC_JSONL = EXAMPLES / "synthetic-llama-3.3-70b-h100-tp4.vllm.jsonl"
QWEN_LOG = EXAMPLES / "vllm-startup-qwen3-235b-fp8-tp4-h100.log"
#: examples/calibration/make_synthetic.py's parameter set (its files' header says the same).
SHIPPED_KNOWN = {"mfu": 0.42, "mbu": 0.68, "sequence_overhead_s": 4.1e-05, "request_overhead_s": 0.025}
#: Another set, away from both the defaults and the shipped one.
TRUTH = {"mfu": 0.37, "mbu": 0.81, "sequence_overhead_s": 6.3e-05, "request_overhead_s": 0.041}
RUNS = [(1, 1000, 200), (4, 200, 200), (8, 2000, 400), (16, 8000, 256), (32, 500, 300), (64, 4000, 500)]


@pytest.fixture(scope="module")
def inputs():
    from quotacalc.inputs.resolve import resolve

    return resolve(
        Deployment(model="Llama-3.3-70B-Instruct", gpu="h100-sxm", tp=4, weight_dtype="fp8", kv_dtype="bf16")
    )


def synthetic(inputs, truth: dict[str, float], runs=RUNS) -> list[BenchmarkPoint]:
    blank = [
        BenchmarkPoint(
            source="synthetic", row=f"run {n}", concurrency=c, prompt_tokens=p, output_tokens=o, ttft_s=1, itl_s=1
        )
        for n, (c, p, o) in enumerate(runs, 1)
    ]
    values = predictions(inputs, truth, blank)
    return [
        point.model_copy(update={"ttft_s": values[2 * n], "itl_s": values[2 * n + 1]}) for n, point in enumerate(blank)
    ]


def fitted(result) -> dict[str, float]:
    return {parameter.name: parameter.after for parameter in result.parameters}


def assert_recovers(result, truth: dict[str, float], rel: float = 0.02) -> None:
    got = fitted(result)
    assert set(got) == set(truth)
    for name, value in truth.items():
        assert math.isclose(got[name], value, rel_tol=rel), (name, got[name], value)


def test_fit_recovers_known_parameters_within_2_percent(inputs):
    result = calibrate(inputs, synthetic(inputs, TRUTH))
    assert_recovers(result, TRUTH)
    assert result.rms_error_after < 1e-3 < result.rms_error_before  # the defaults are far from this truth
    assert result.warnings == ()


@pytest.mark.parametrize("path", [SYNTHETIC_CSV, SYNTHETIC_JSONL], ids=["csv", "vllm-jsonl"])
def test_shipped_synthetic_examples_give_back_their_parameters(inputs, path):
    from quotacalc.inputs.benchmarks import read_benchmark

    points, _ = read_benchmark(str(path))
    assert "SYNTHETIC" in path.read_text(encoding="utf-8")  # clearly marked as not a measurement
    result = calibrate(inputs, points)
    # If this fails after a change to the replica model: python examples/calibration/make_synthetic.py
    assert_recovers(result, SHIPPED_KNOWN)


def test_calibrated_on_two_points_the_other_points_are_within_5_percent(inputs):
    points = synthetic(inputs, TRUTH)
    two = [points[0], points[5]]  # concurrency 1 at 1,000 tokens and concurrency 64 at 4,000
    result = calibrate(inputs, two)
    others = points[1:5]
    predicted = predictions(inputs, fitted(result), others)
    measured = [value for point in others for value in point.measured().values()]
    errors = [p / m - 1 for p, m in zip(predicted, measured, strict=True)]
    assert max(abs(error) for error in errors) < 0.05, errors


def test_leave_one_out_predicts_each_point_without_it(inputs):
    points = synthetic(inputs, TRUTH)
    # One run measured 30% slow (a noisy neighbour): its ITL is an outlier.
    outlier = points[2].model_copy(update={"itl_s": points[2].itl_s * 1.3})
    result = calibrate(inputs, [*points[:2], outlier, *points[3:]])
    by = {(fit.row, fit.quantity): fit for fit in result.points}
    bad = by[("run 3", "itl_s")]
    # Fitted without it, the others predict the true ITL: 1/1.3 − 1 = −23% against the outlier.
    assert bad.leave_one_out_error == pytest.approx(1 / 1.3 - 1, abs=0.02)
    # soft_l1 keeps the outlier from dragging the fit far: the other points stay within 2% (it takes
    # 23% of the error itself, where plain least squares would spread it over every ITL).
    assert all(abs(fit.error_after) < 0.02 for key, fit in by.items() if key != ("run 3", "itl_s"))
    assert bad.error_after < -0.2
    assert_recovers(result, TRUTH, rel=0.05)


def test_errors_before_are_at_the_deployment_values(inputs):
    points = synthetic(inputs, TRUTH)
    result = calibrate(inputs, points)
    d = inputs.deployment
    at_defaults = predictions(
        inputs,
        {
            "mfu": d.mfu,
            "mbu": d.mbu,
            "sequence_overhead_s": d.sequence_overhead_s,
            "request_overhead_s": d.request_overhead_s,
        },
        points,
    )
    assert [fit.predicted_before for fit in result.points] == at_defaults
    assert [fit.error_before for fit in result.points] == [
        p / fit.measured - 1 for p, fit in zip(at_defaults, result.points, strict=True)
    ]


def test_itl_only_fits_what_itl_measures(inputs):
    points = [point.model_copy(update={"ttft_s": None}) for point in synthetic(inputs, TRUTH)]
    result = calibrate(inputs, points)
    # Runs at six concurrencies: MBU, and the slope with batch as the per-sequence cost.
    assert set(fitted(result)) == {"mbu", "sequence_overhead_s"}
    assert result.deployment.mfu == inputs.deployment.mfu  # untouched: ITL alone does not measure it


def test_a_parameter_past_its_physical_bound_stops_there_and_says_so(inputs):
    # Decode twice as fast as the memory bandwidth allows: MBU would have to exceed 1.
    points = synthetic(inputs, {**TRUTH, "mbu": 0.81})
    fast = [point.model_copy(update={"itl_s": point.itl_s / 2, "ttft_s": None}) for point in points]
    result = calibrate(inputs, fast, parameters=["mbu"])
    (mbu,) = result.parameters
    assert mbu.after == 1.0 and mbu.at_bound
    assert any("mbu stopped at its bound" in warning for warning in result.warnings)


def test_points_that_cannot_tell_two_parameters_apart_are_named(inputs):
    # Concurrency 1 at one context only: MBU and the step overhead both move the one ITL.
    points = synthetic(inputs, TRUTH, runs=[(1, 1000, 200), (1, 1000, 200)])
    itl_only = [point.model_copy(update={"ttft_s": None}) for point in points]
    assert informed_parameters(itl_only) == ("mbu",)  # by default, only what one shape determines
    result = calibrate(inputs, itl_only, parameters=["mbu", "step_overhead_s"])
    assert any("cannot tell mbu and step_overhead_s apart" in warning for warning in result.warnings)


def test_one_run_of_each_fits_the_efficiencies_only(inputs):
    one = synthetic(inputs, TRUTH, runs=[(8, 2000, 400)])
    assert informed_parameters(one) == ("mfu", "mbu")
    two_prompts = synthetic(inputs, TRUTH, runs=[(1, 500, 100), (1, 4000, 100)])
    assert informed_parameters(two_prompts) == ("mfu", "mbu", "step_overhead_s", "request_overhead_s")


def test_unknown_parameter_is_an_error(inputs):
    with pytest.raises(QuotacalcError) as caught:
        calibrate(inputs, synthetic(inputs, TRUTH)[:1], parameters=["mfu", "batch"])
    assert "--fit" in caught.value.one_line() and "cannot fit batch" in caught.value.one_line()


def test_kv_reserve_is_what_the_log_leaves_of_memory(inputs):
    from quotacalc.core.price import price

    weights = price(inputs).weight_bytes_per_gpu
    reading = KvPoolReading(source="serve.log", available_kv_gib=40.0, kv_pool_tokens=524_288)
    kv = kv_pool_fit(inputs, reading)
    # 0.9 × 79.19 GiB (H100's memory as the runtime reports it) − 17.64 GB of FP8 weights − 40 GiB.
    expected = (0.9 * inputs.gpu.memory_bytes - weights - 40.0 * GIB) / GIB
    assert kv.runtime_reserve_gib == pytest.approx(expected, rel=1e-3)
    assert kv.kv_pool_measured_with["tp"] == 4 and kv.kv_pool_measured_with["gpu"] == "h100-sxm"
    assert kv.mismatch is None  # 40 GiB / 524,288 tokens = 81,920 B: Llama 70B's BF16 KV per token over TP 4
    with pytest.raises(QuotacalcError, match="larger than"):
        kv_pool_fit(inputs, KvPoolReading(source="x.log", available_kv_gib=90.0))


# --------------------------------------------------------------------------- the command and the plan


@pytest.fixture
def plan(tmp_path) -> Path:
    target = tmp_path / "plan.yaml"
    shutil.copy(PLAN, target)
    for source in (SYNTHETIC_CSV, SYNTHETIC_JSONL):
        shutil.copy(source, tmp_path / source.name)
    return target


def test_write_sets_the_fitted_keys_and_keeps_the_rest(run_cli, plan):
    before_text = plan.read_text(encoding="utf-8")
    before = yaml.safe_load(before_text)
    bench = plan.parent / SYNTHETIC_JSONL.name
    code, _, err = run_cli("calibrate", plan, "--bench", bench, "--write", plan)
    assert code == 0, err
    text = plan.read_text(encoding="utf-8")
    after = yaml.safe_load(text)
    for name, value in SHIPPED_KNOWN.items():
        assert after[name] == pytest.approx(value, rel=0.02)
    unchanged = {key: value for key, value in before.items() if key not in SHIPPED_KNOWN}
    assert {key: after[key] for key in unchanged} == unchanged
    # The comments the plan's author wrote stay where they were.
    for comment in (
        "# decode batch",
        "# Used by `quotacalc size`: one tenant's traffic.",
        "# resolves to the shipped config",
    ):
        assert comment in text
    section = after["calibration"]
    assert section["files"] == [
        {
            "path": bench.name,
            "sha256": hashlib.sha256(bench.read_bytes()).hexdigest(),
            "rows": [f"line {n}" for n in range(1, 7)],
        }
    ]
    assert section["rows"] == 6 and section["fit_rms_error"] < 1e-3
    assert section["calibrated_on"] == {
        "model": "Llama-3.3-70B-Instruct",
        "gpu": "h100-sxm",
        "tp": 4,
        "weight_dtype": "fp8",
        "kv_dtype": "bf16",
        "engine": "generic",
    }
    assert section["quotacalc_version"]
    assert "date" not in text.lower().split("calibration:")[1]  # determinism: no timestamp
    # The same plan and files again write the same bytes (a copy of the original plan, calibrated anew).
    again = plan.parent / "again.yaml"
    again.write_text(before_text, encoding="utf-8")
    assert run_cli("calibrate", again, "--bench", bench, "--write", again)[0] == 0
    assert again.read_text(encoding="utf-8") == text
    assert before_text != text


def test_price_says_whether_a_plan_is_calibrated(run_cli, plan):
    bench = plan.parent / SYNTHETIC_CSV.name
    assert run_cli("calibrate", plan, "--bench", bench, "--write", plan)[0] == 0
    doc = json.loads(run_cli("price", plan, "--json")[1])
    calibrated = doc["calibrated"]
    assert calibrated["sources"] == [bench.name] and calibrated["rows"] == 6
    assert calibrated["parameters"]["mbu"] == pytest.approx(0.68, rel=0.02)
    assert doc["inputs"]["deployment"]["mbu"] == calibrated["parameters"]["mbu"]  # the fitted value is used
    code, out, _ = run_cli("price", plan)
    assert code == 0 and "calibrated" in out and "6 points" in out
    # Another TP, or a fitted value overridden on the command line: the calibration does not hold.
    moved = json.loads(run_cli("size", plan, "--tp", "8", "--kv-pool-tokens", "600000", "--mbu", "0.7", "--json")[1])
    assert moved["calibrated"] is None
    assert any("tp 4 -> 8" in warning and "mbu" in warning for warning in moved["warnings"])
    uncalibrated = json.loads(run_cli("price", PLAN, "--json")[1])
    assert uncalibrated["calibrated"] is None


def test_kv_says_whether_a_plan_is_calibrated_as_price_does(run_cli, plan):
    """kv --json carries the same ``calibrated`` key as price and size: the summary, or null with the reason."""
    bench = plan.parent / SYNTHETIC_CSV.name
    assert run_cli("calibrate", plan, "--bench", bench, "--write", plan)[0] == 0
    code, out, err = run_cli("kv", plan, "--context", "8192", "--json")
    assert code == 0, err
    doc = json.loads(out)
    price_doc = json.loads(run_cli("price", plan, "--json")[1])
    assert doc["calibrated"] == price_doc["calibrated"]
    assert doc["calibrated"]["sources"] == [bench.name] and doc["calibrated"]["rows"] == 6
    # On another TP the calibration does not hold: null, and the warning names what changed.
    moved = json.loads(run_cli("kv", plan, "--context", "8192", "--tp", "8", "--kv-pool-tokens", "600000", "--json")[1])
    assert moved["calibrated"] is None
    assert any("tp 4 -> 8" in warning for warning in moved["warnings"])
    # Without a plan there is no calibration to report, and the key is still there.
    bare = json.loads(
        run_cli("kv", "--model", "Llama-3.1-8B-Instruct", "--gpu", "h100", "--context", "100", "--json")[1]
    )
    assert "calibrated" in bare and bare["calibrated"] is None


def test_write_a_new_plan_from_flags(run_cli, tmp_path):
    target = tmp_path / "plan.yaml"
    args = (
        "--model",
        "Llama-3.3-70B-Instruct",
        "--gpu",
        "h100-sxm",
        "--tp",
        "4",
        "--weight-dtype",
        "fp8",
        "--kv-dtype",
        "bf16",
    )
    code, _, err = run_cli("calibrate", *args, "--bench", SYNTHETIC_CSV, "--write", target)
    assert code == 0, err
    written = yaml.safe_load(target.read_text(encoding="utf-8"))
    assert written["gpu"] == "h100-sxm" and written["tp"] == 4 and written["mfu"] == 0.42
    assert run_cli("price", target, "--json")[0] == 0


def test_a_log_of_another_deployment_is_read_but_never_written(run_cli, tmp_path):
    target = tmp_path / "plan.yaml"
    llama = ("--model", "Llama-3.3-70B-Instruct", "--gpu", "h100-sxm", "--tp", "4", "--weight-dtype", "fp8")
    # The Qwen log on a Llama deployment: the KV bytes per token disagree, and calibrate says so.
    code, _, err = run_cli("calibrate", *llama, "--log", QWEN_LOG)
    assert code == 0 and "is the log from this model" in err, err
    # Written, its pool would be priced as measured on this deployment: refused, nothing written.
    code, out, err = run_cli("calibrate", *llama, "--log", QWEN_LOG, "--write", target)
    assert code == 1 and out == "" and not target.exists(), err
    assert err.strip() == (
        f"quotacalc: error: {QWEN_LOG}: the log's pool holds 48,681 B of KV per token per GPU where this deployment "
        "needs 81,920 B (not this deployment's log: give its own, or leave out --write to only read this one)"
    )


def test_write_refuses_a_plan_of_another_deployment_a_missing_folder_and_an_unwritable_one(run_cli, tmp_path):
    other = tmp_path / "gpt.yaml"
    other.write_text((EXAMPLES.parent / "gpt-oss-120b-h100.yaml").read_text(encoding="utf-8"), encoding="utf-8")
    before = other.read_bytes()
    code, out, err = run_cli("calibrate", PLAN, "--bench", SYNTHETIC_CSV, "--write", other)
    assert code == 2 and out == "" and other.read_bytes() == before, err
    assert err.startswith(f"quotacalc: error: {other}: --write: the plan is another deployment than the one calibrated")
    assert "model Llama-3.3-70B-Instruct -> gpt-oss-120b" in err
    assert err.rstrip().endswith("(write into the plan that was calibrated, or into a new file)")
    missing = tmp_path / "typo" / "plan.yaml"
    code, out, err = run_cli("calibrate", PLAN, "--bench", SYNTHETIC_CSV, "--write", missing)
    assert code == 2 and not missing.parent.exists(), err
    assert f"--write: no such directory '{missing.parent}' (create it first, or fix the path)" in err
    readonly = tmp_path / "readonly.yaml"
    readonly.write_bytes(Path(PLAN).read_bytes())
    readonly.chmod(0o444)
    code, out, err = run_cli("calibrate", PLAN, "--bench", SYNTHETIC_CSV, "--write", readonly)
    assert code == 1 and readonly.read_bytes() == Path(PLAN).read_bytes(), err
    assert err.strip() == (
        f"quotacalc: error: {readonly}: --write: is read-only (make it writable (chmod u+w) to let calibrate write it)"
    )
    if os.geteuid() != 0:  # root writes anywhere
        locked = tmp_path / "locked"
        locked.mkdir()
        locked.chmod(0o555)
        code, out, err = run_cli("calibrate", PLAN, "--bench", SYNTHETIC_CSV, "--write", locked / "plan.yaml")
        assert code == 1 and "--write: cannot write in" in err and "(write to a writable path)" in err, err


def test_the_same_runs_written_twice_give_the_same_plan(run_cli, tmp_path):
    plan = tmp_path / "plan.yaml"
    plan.write_bytes(Path(PLAN).read_bytes())
    texts = []
    for _ in range(3):
        code, _, err = run_cli("calibrate", plan, "--bench", SYNTHETIC_CSV, "--write", plan)
        assert code == 0, err
        texts.append(plan.read_text(encoding="utf-8"))
    # Each fit starts from the plan as it was before the earlier fit, not from that fit's answer.
    assert texts[0] == texts[1] == texts[2]


def test_calibrate_json(run_cli):
    code, out, err = run_cli("calibrate", PLAN, "--bench", SYNTHETIC_CSV, "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["command"] == "calibrate" and doc["schema_version"] == JSON_SCHEMA_VERSION and doc["written"] is None
    assert len(doc["results"]["points"]) == 12  # 6 runs × (TTFT, ITL)
    point = doc["results"]["points"][0]
    assert {
        "measured",
        "predicted_before",
        "predicted_after",
        "error_before",
        "error_after",
        "leave_one_out_error",
    } <= set(point)
    assert doc["calibration"]["files"][0]["rows"] == [f"row {n}" for n in range(1, 7)]


@pytest.mark.parametrize(
    ("args", "code", "needles"),
    [
        ((), 2, ("--bench", "nothing to calibrate on")),
        (("--bench", "missing.csv"), 2, ("missing.csv", "no such file")),
        (("--bench", str(SYNTHETIC_CSV), "--fit", "mfu,batch"), 2, ("--fit", "cannot fit batch")),  # a usage error
        (("--bench", str(SYNTHETIC_CSV), "--fit", " , "), 2, ("--fit", "no field named")),
    ],
    ids=["nothing", "missing-file", "unknown-fit", "empty-fit"],
)
def test_calibrate_bad_arguments(run_cli, args, code, needles):
    exit_code, out, err = run_cli("calibrate", PLAN, *args)
    assert exit_code == code and out == "", err
    assert len(err.strip().splitlines()) == 1
    for needle in needles:
        assert needle in err, (needle, err)


def test_write_into_a_directory_or_a_broken_plan_changes_nothing(run_cli, tmp_path):
    code, _, err = run_cli("calibrate", PLAN, "--bench", SYNTHETIC_CSV, "--write", tmp_path)
    assert code == 2 and "is a directory" in err  # a place the command line names, as a missing folder is
    broken = tmp_path / "broken.yaml"
    broken.write_text("model: [unclosed\n", encoding="utf-8")
    code, _, err = run_cli("calibrate", PLAN, "--bench", SYNTHETIC_CSV, "--write", broken)
    assert code == 1 and "malformed YAML" in err
    assert broken.read_text(encoding="utf-8") == "model: [unclosed\n"
    assert sorted(path.name for path in tmp_path.iterdir()) == ["broken.yaml"]  # no temporary file left behind


def test_a_malformed_calibration_section_is_named(run_cli, tmp_path):
    bad = tmp_path / "plan.yaml"
    bad.write_text(PLAN.read_text(encoding="utf-8") + "calibration:\n  rows: many\n", encoding="utf-8")
    code, _, err = run_cli("price", bad)
    assert code != 0 and "calibration." in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("model", ["Llama-3.3-70B-Instruct", "Mixtral-8x7B-v0.1", "gemma-3-27b-it"])
def test_the_fast_predictor_agrees_with_a_rebuilt_replica_model(model):
    """The fit rescales the model's compute rate and bandwidth instead of rebuilding it: both must agree."""
    from quotacalc.core.calibrate import _Predictor
    from quotacalc.inputs.resolve import resolve

    inputs = resolve(Deployment(model=model, gpu="h100-sxm", tp=2))
    points = [
        BenchmarkPoint(source="s", row="r", concurrency=c, prompt_tokens=p, output_tokens=o, ttft_s=1, itl_s=1)
        for c, p, o in ((1, 300, 100), (48, 6000, 700))
    ]
    fast = _Predictor(inputs)
    extra = {"allreduce_latency_s": 3e-5, "sequence_overhead_s": 4e-5}
    for values in (TRUTH, SHIPPED_KNOWN, {"mbu": 0.33}, {"mfu": 0.9, "step_overhead_s": 0.0}, extra):
        assert fast(values, points) == pytest.approx(predictions(inputs, values, points), rel=1e-12)


def test_real_measurements_two_points_predict_the_runs_the_model_covers():
    """NVIDIA NIM 1.8.0, Llama 3.3 70B FP8 on 2x H100 (docs.nvidia.com/nim/benchmarking/llm/1.0.0/performance,
    examples/calibration/nim-llama-3.3-70b-h100-tp2.csv). Calibrated on the 1000/1000 runs at concurrency
    1 and 50 (one compute-bound TTFT: MFU alone; two concurrencies: MBU and the per-sequence cost), these land
    within 5%: every concurrency-1 ITL, the ITL at concurrency 5-50 of every shape, and the TTFTs of the 200- and
    500-token prompts.

    Not within 5% (the calibration target, reported; bench/calibrate.py has every pair of runs): ITL at
    concurrency 100-150 (-6% to -8%) and TTFT of long prompts (5,000: -11%, 20,000: -12%): the 1,000-token TTFT
    reads MFU beside a fixed 10 ms (3 ms request overhead and 80 layers x 90 us a prefill pass), where NIM's long
    prompts imply almost none; calibration moves efficiencies and overheads, not the shape of the replica model's
    curves.
    """
    from quotacalc.inputs.benchmarks import read_benchmark
    from quotacalc.inputs.resolve import resolve

    inputs = resolve(
        Deployment(model="Llama-3.3-70B-Instruct", gpu="h100-sxm", tp=2, weight_dtype="fp8", kv_dtype="fp8")
    )
    points, _ = read_benchmark(str(EXAMPLES / "nim-llama-3.3-70b-h100-tp2.csv"))
    shape = {(p.concurrency, p.prompt_tokens, p.output_tokens): p for p in points}
    train = [shape[(1, 1000, 1000)], shape[(50, 1000, 1000)]]
    result = calibrate(inputs, train)
    assert {parameter.name for parameter in result.parameters} == {"mfu", "mbu", "sequence_overhead_s"}
    itl_only = [
        *(p for p in points if p.concurrency == 1 and p not in train),
        *(shape[key] for key in ((50, 200, 200), (25, 500, 2000), (5, 5000, 500), (25, 5000, 500), (5, 20000, 2000))),
    ]
    covered = [
        *(p.model_copy(update={"ttft_s": None}) for p in itl_only),
        *(shape[key].model_copy(update={"itl_s": None}) for key in ((1, 200, 200), (1, 500, 2000))),
    ]
    predicted = predictions(inputs, fitted(result), covered)
    measured = [value for point in covered for value in point.measured().values()]
    errors = [p / m - 1 for p, m in zip(predicted, measured, strict=True)]
    assert len(errors) == 11 and max(abs(error) for error in errors) < 0.05, errors


def test_a_new_plan_copies_the_plan_read_and_a_log_adds_to_the_calibration(run_cli, plan):
    target = plan.parent / "calibrated.yaml"
    bench = plan.parent / SYNTHETIC_CSV.name
    assert run_cli("calibrate", plan, "--bench", bench, "--write", target)[0] == 0
    text = target.read_text(encoding="utf-8")
    assert "# Used by `quotacalc size`: one tenant's traffic." in text and yaml.safe_load(text)["tenant"]["rps"] == 5
    assert plan.read_text(encoding="utf-8") == PLAN.read_text(encoding="utf-8")  # the plan read is untouched
    log = plan.parent / "serve.log"
    # 40 GiB of KV per GPU and 524,288 tokens: Llama 70B's 81,920 B per token per GPU at TP 4 (BF16 KV).
    log.write_text("Available KV cache memory: 40.0 GiB\nGPU KV cache size: 524,288 tokens\n", encoding="utf-8")
    code, _, err = run_cli("calibrate", target, "--log", log, "--write", target)
    assert code == 0, err
    section = yaml.safe_load(target.read_text(encoding="utf-8"))["calibration"]
    assert [file["path"] for file in section["files"]] == ["serve.log", bench.name]
    assert section["rows"] == 6 and section["fit_rms_error"] < 1e-3  # the benchmark fit's, kept
    assert section["parameters"]["kv_pool_tokens"] == 524_288 and "mbu" in section["parameters"]
    assert json.loads(run_cli("price", target, "--json")[1])["calibrated"]["rows"] == 6


def test_a_vllm_log_is_refused_for_another_engine(run_cli, plan):
    """The log reader parses vLLM's start-up lines: its pool does not measure SGLang's or TensorRT-LLM's. One line
    naming the flag and the fix; nothing written."""
    log = plan.parent / "serve.log"
    log.write_text("Available KV cache memory: 40.0 GiB\nGPU KV cache size: 524,288 tokens\n", encoding="utf-8")
    before = plan.read_text(encoding="utf-8")
    # The plan's pool was measured at memory_utilization 0.9: kept, so the log is what is refused.
    code, out, err = run_cli(
        "calibrate", plan, "--engine", "sglang", "--memory-utilization", "0.9", "--log", log, "--write", plan
    )
    assert code == 1 and out == ""
    assert err.strip() == (
        "quotacalc: error: --log: a vLLM start-up log measures vLLM's KV pool, not that of engine sglang "
        "(calibrate the pool with --engine generic (vLLM), or give the engine's own logged pool as "
        "--kv-pool-tokens)"
    )
    assert plan.read_text(encoding="utf-8") == before
    assert run_cli("calibrate", plan, "--engine", "vllm", "--log", log)[0] == 0


def test_flags_given_to_calibrate_are_written_with_the_fit(run_cli, plan):
    bench = plan.parent / SYNTHETIC_CSV.name
    before = yaml.safe_load(plan.read_text(encoding="utf-8"))
    code, _, err = run_cli(
        "calibrate",
        plan,
        "--bench",
        bench,
        "--layer-overhead-s",
        "0.00003",
        "--batch",
        "64",
        "--ceiling",
        "0.8",
        "--write",
        plan,
    )
    assert code == 0, err
    written = yaml.safe_load(plan.read_text(encoding="utf-8"))
    # An engine input the fit depended on is part of the deployment calibrated: the plan now describes it.
    assert written["layer_overhead_s"] == 0.00003
    # Pricing choices play no part in a fit: the plan keeps its own.
    assert (written.get("batch"), written.get("ceiling")) == (before.get("batch"), before.get("ceiling"))
    assert json.loads(run_cli("price", plan, "--json")[1])["calibrated"] is not None


def test_a_calibration_does_not_hold_under_another_engine(run_cli, plan):
    bench = plan.parent / SYNTHETIC_CSV.name
    assert run_cli("calibrate", plan, "--bench", bench, "--write", plan)[0] == 0
    # (SGLang sizes its pool by another rule: the measured vLLM pool is given on the command line to price it.)
    code, out, err = run_cli("price", plan, "--engine", "sglang", "--kv-pool-tokens", "646503", "--json")
    assert code == 0, err
    assert json.loads(out)["calibrated"] is None
    assert "not calibrated: the plan's calibration holds for what it was fitted on (engine generic -> sglang)" in err


def test_a_per_request_dump_is_refused_before_the_fit(inputs):
    point = synthetic(inputs, TRUTH, runs=[(1, 100, 10)])[0]
    with pytest.raises(QuotacalcError, match="1,001 benchmark runs: calibrate takes at most 1,000"):
        calibrate(inputs, [point] * 1001)


def test_kv_reserve_from_pool_tokens_and_the_log_bounds(inputs):
    from quotacalc.core.price import price

    weights = price(inputs).weight_bytes_per_gpu
    budget = 0.9 * inputs.gpu.memory_bytes
    # Llama 3.3 70B, BF16 KV over TP 4: 80 layers × 8 KV heads × 128 × 2 (K and V) × 2 B / 4 = 81,920 B per token.
    tokens_only = kv_pool_fit(inputs, KvPoolReading(source="serve.log", kv_pool_tokens=262_144))
    assert tokens_only.runtime_reserve_gib == pytest.approx((budget - weights - 262_144 * 81_920) / GIB, rel=1e-3)
    assert tokens_only.note == (
        "runtime reserve = memory_utilization × HBM − weights per GPU − pool tokens × KV bytes per token per GPU"
    )
    assert tokens_only.available_kv_gib is None and tokens_only.kv_pool_measured_with["tp"] == 4
    memory_only = kv_pool_fit(inputs, KvPoolReading(source="serve.log", available_kv_gib=30.0))
    assert memory_only.note == "runtime reserve = memory_utilization × HBM − weights per GPU − available KV memory"
    assert memory_only.available_kv_gib == 30.0 and memory_only.kv_pool_measured_with is None
    nothing = kv_pool_fit(inputs, KvPoolReading(source="serve.log"))
    assert (nothing.runtime_reserve_gib, nothing.note, nothing.kv_pool_measured_with) == (None, "", None)
    # A reserve of half a GiB is small, not negative: accepted.
    small = kv_pool_fit(inputs, KvPoolReading(source="serve.log", available_kv_gib=(budget - weights) / GIB - 0.5))
    assert small.runtime_reserve_gib == pytest.approx(0.5, rel=1e-6)
    with pytest.raises(QuotacalcError) as error:
        kv_pool_fit(inputs, KvPoolReading(source="x.log", available_kv_gib=90.0))
    line = str(error.value)
    assert line.startswith("x.log: the log's KV pool is larger than h100-sxm's memory less the weights (-")
    assert line.endswith(
        " GiB reserve) (check that the log is from this deployment (GPU, TP, weight dtype, gpu-memory-utilization))"
    )
    # The log's own KV per token (memory / tokens) within 0.8-1.25 of the model's is block rounding, not a mismatch:
    # 16 GiB / 262,144 = 65,536 B = 0.8 × 81,920; 25 GiB / 262,144 = 102,400 B = 1.25 × 81,920.
    for gib in (16.0, 25.0):
        assert (
            kv_pool_fit(inputs, KvPoolReading(source="s.log", kv_pool_tokens=262_144, available_kv_gib=gib)).mismatch
            is None
        )
    # 30 GiB / 262,144 = 122,880 B = 1.5 × 81,920.
    off = kv_pool_fit(inputs, KvPoolReading(source="s.log", kv_pool_tokens=262_144, available_kv_gib=30.0))
    assert off.mismatch == (
        "s.log: the log's pool holds 122,880 B of KV per token per GPU where this deployment needs 81,920 B: "
        "is the log from this model, TP and KV dtype?"
    )


# --------------------------------------------------------------------------- the benchmarked model


def test_a_benchmark_of_another_model_is_named(inputs):
    runs = synthetic(inputs, TRUTH)
    ours = [point.model_copy(update={"model": "meta-llama/Llama-3.3-70B-Instruct"}) for point in runs]
    assert calibrate(inputs, ours).warnings == ()
    # A quantized checkpoint extends the name: still this model.
    fp8 = [point.model_copy(update={"model": "RedHatAI/Llama-3.3-70B-Instruct-FP8-dynamic"}) for point in runs]
    assert calibrate(inputs, fp8).warnings == ()
    # A local path names the model in its last part, whatever the directories above it are called.
    in_a_folder = [*runs[:-1], runs[-1].model_copy(update={"model": "/data/llama-3.3-70b-instruct/Qwen3-8B"})]
    assert "benchmarked model '/data/llama-3.3-70b-instruct/Qwen3-8B'" in calibrate(inputs, in_a_folder).warnings[0]
    other = [*runs[:-1], runs[-1].model_copy(update={"model": "meta-llama/Llama-3.1-8B-Instruct"})]
    warnings = calibrate(inputs, other).warnings
    assert warnings[0] == (
        "synthetic: benchmarked model 'meta-llama/Llama-3.1-8B-Instruct' is not this deployment's "
        "Llama-3.3-70B-Instruct: calibrate against the plan of the deployment that ran it (ignore if it is a served alias)"
    )


def test_strict_refuses_to_write_a_calibration_with_warnings(run_cli, tmp_path):
    # The synthetic runs with a Llama 3.1 8B model_id: a warning, so --strict exits 1 and writes nothing.
    rows = [json.loads(line) for line in SYNTHETIC_JSONL.read_text(encoding="utf-8").splitlines() if line.strip()]
    bench = tmp_path / "other-model.jsonl"
    bench.write_text(
        "".join(json.dumps({**row, "model_id": "meta-llama/Llama-3.1-8B-Instruct"}) + "\n" for row in rows),
        encoding="utf-8",
    )
    target = tmp_path / "calibrated.yaml"
    code, out, err = run_cli("calibrate", PLAN, "--bench", bench, "--write", target, "--strict")
    assert code == 1 and out == "" and not target.exists()
    assert "benchmarked model 'meta-llama/Llama-3.1-8B-Instruct'" in err
    assert (
        err.strip()
        .splitlines()[-1]
        .endswith("--strict: 1 warning(s) under --strict (see the warnings above; nothing was written)")
    )
    # Without the warning --strict changes nothing.
    code, _, err = run_cli("calibrate", PLAN, "--bench", SYNTHETIC_JSONL, "--write", target, "--strict")
    assert code == 0 and target.exists(), err


# --------------------------------------------------------------------------- TTFT under load


def test_a_ttft_under_load_is_predicted_as_the_lock_step_closed_loop():
    """inference-bench's vLLM runs (tests/data/measurements/closed_loop.yaml, cited there): Qwen2.5-7B BF16 on
    one L4, ~40-token prompts, 128 output tokens, TTFT p50 at concurrency 16-64. calibrate predicts them as the
    closed loop from a lock-step start (every client's prompt prefilled together) within 30% at the defaults
    (-18% to -26%: vLLM's per-request API costs are not in the model); the idle replica's TTFT, what it
    predicted before, is 60-90% short of every one. (At concurrency 4 both miss: 69 ms against 123 ms;
    docs/accuracy.md.)"""
    from quotacalc.core.benchmark import closed_loop
    from quotacalc.core.replica import replica_model
    from quotacalc.inputs.resolve import resolve

    runs = yaml.safe_load((ROOT / "tests" / "data" / "measurements" / "closed_loop.yaml").read_text(encoding="utf-8"))
    l4 = [run for run in runs["points"] if run["id"].startswith("ib-l4-") and run["concurrency"] >= 16]
    assert len(l4) == 3
    inputs = resolve(Deployment(model="Qwen2.5-7B-Instruct", gpu="l4", weight_dtype="bf16", kv_dtype="bf16"))
    points = [
        BenchmarkPoint(
            source="closed_loop.yaml",
            row=run["id"],
            concurrency=run["concurrency"],
            prompt_tokens=run["prompt_tokens"],
            output_tokens=run["output_tokens"],
            ttft_s=run["ttft_s"],
        )
        for run in l4
    ]
    predicted = predictions(inputs, {}, points)
    model = replica_model(inputs, 0.0)
    for point, ttft_s in zip(points, predicted, strict=True):
        lock_step = closed_loop(model, point.concurrency, point.prompt_tokens, point.output_tokens, "lockstep")
        assert ttft_s == lock_step.mean_ttft_s
        assert abs(ttft_s / point.ttft_s - 1) < 0.30, (point.row, ttft_s, point.ttft_s)
        assert model.ttft_s(point.prompt_tokens) < 0.4 * point.ttft_s


def test_a_ttft_run_too_large_to_simulate_is_refused_before_the_fit(inputs):
    # 5,000 clients of 32,768-token prompts in chunks of 8,192 (vLLM's default on H100): 20,000 chunks
    # are simulated; 5,001 clients are 20,004, one run above the limit.
    point = BenchmarkPoint(
        source="huge.csv", row="row 1", concurrency=5001, prompt_tokens=32768, output_tokens=10, ttft_s=60.0
    )
    with pytest.raises(QuotacalcError) as refused:
        calibrate(inputs, [point])
    assert refused.value.source == "huge.csv" and refused.value.field == "row 1: concurrency"
    assert "20,004 prefill chunks a cycle, above the 20,000 calibrate simulates" in refused.value.problem
    # The same run measuring only ITL is not simulated, so not refused.
    itl_only = point.model_copy(update={"ttft_s": None, "itl_s": 10.0})
    assert calibrate(inputs, [itl_only], parameters=["mbu"]).parameters[0].name == "mbu"


def test_ttfts_under_load_can_be_ignored(inputs, run_cli):
    runs = synthetic(inputs, TRUTH)
    ignored = calibrate(inputs, runs, ttft_under_load="ignore")
    assert ignored.ttft_under_load == "ignore"
    # Only run 1 (concurrency 1) keeps its TTFT: one prompt length fits MFU alone, beside the ITL's two.
    assert [(fit.row, fit.quantity) for fit in ignored.points if fit.quantity == "ttft_s"] == [("run 1", "ttft_s")]
    assert [parameter.name for parameter in ignored.parameters] == ["mfu", "mbu", "sequence_overhead_s"]
    assert calibrate(inputs, runs).ttft_under_load == "lockstep"
    code, out, err = run_cli("calibrate", PLAN, "--bench", SYNTHETIC_CSV, "--ttft-under-load", "ignore", "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["results"]["ttft_under_load"] == "ignore" and len(doc["results"]["points"]) == 7  # 6 ITL + 1 TTFT
    code, out, err = run_cli("calibrate", PLAN, "--bench", SYNTHETIC_CSV, "--ttft-under-load", "queue")
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert "--ttft-under-load: unknown value 'queue' (give lockstep or ignore)" in err


def test_runs_of_another_deployment_are_flagged(inputs):
    """NIM's runs are of TP 2 with an FP8 cache (examples/calibration/nim-llama-3.3-70b-h100-tp2.csv's header);
    calibrated against TP 4 the defaults miss them by more than all but one dense deployment in docs/accuracy.md,
    and the result says which deployment to check. Against their own deployment it does not. (Against the TP 4
    fixture with a BF16 cache they are 34% off, within what matching deployments have been: its larger cache reads
    make up for much of the smaller weight shard, so that mismatch goes unflagged.)"""
    from quotacalc.inputs.benchmarks import read_benchmark
    from quotacalc.inputs.resolve import resolve

    points, _ = read_benchmark(str(EXAMPLES / "nim-llama-3.3-70b-h100-tp2.csv"))
    tp4 = resolve(Deployment(model="Llama-3.3-70B-Instruct", gpu="h100-sxm", tp=4, weight_dtype="fp8", kv_dtype="fp8"))
    wrong = calibrate(tp4, points)
    assert wrong.rms_error_before > 0.35
    assert wrong.warnings[0].startswith(f"the runs are {wrong.rms_error_before:.0%} (RMS) from this deployment's")
    assert wrong.warnings[0].endswith(
        "Llama-3.3-70B-Instruct at TP 4 on h100-sxm, fp8 weights, fp8 KV, is what ran them "
        "(a benchmark file does not say; give the plan or flags of that deployment)"
    )
    right = calibrate(
        resolve(Deployment(model="Llama-3.3-70B-Instruct", gpu="h100-sxm", tp=2, weight_dtype="fp8", kv_dtype="fp8")),
        points,
    )
    assert right.rms_error_before < 0.35
    assert not any("(RMS) from this deployment" in warning for warning in right.warnings)


def test_the_mismatch_threshold_is_strict(inputs):
    from quotacalc.core.calibrate import MISMATCH_RMS_ERROR_BEFORE, deployment_mismatch_warning

    assert MISMATCH_RMS_ERROR_BEFORE == 0.35  # above all dense deployments in docs/accuracy.md but one (36%)
    assert deployment_mismatch_warning(inputs, None) is None
    assert deployment_mismatch_warning(inputs, 0.35) is None
    assert deployment_mismatch_warning(inputs, 0.3501).startswith("the runs are 35% (RMS)")


def test_ignoring_ttfts_under_load_keeps_an_idle_ttft_without_an_itl(inputs):
    """Under 'ignore' a run at concurrency 1 keeps its TTFT even when it measured no ITL; a run at concurrency
    8 that measured only a TTFT is left out whole."""
    runs = synthetic(inputs, TRUTH, [(1, 1000, 200), (1, 4000, 200), (8, 2000, 400)])
    ttft_only = [point.model_copy(update={"itl_s": None}) for point in runs]
    ignored = calibrate(inputs, ttft_only, ttft_under_load="ignore")
    assert [(fit.row, fit.quantity) for fit in ignored.points] == [("run 1", "ttft_s"), ("run 2", "ttft_s")]


def test_a_ttft_at_concurrency_two_is_the_lock_step_one(inputs):
    """From two clients on, a run's TTFT is the lock-step closed loop's (both prompts prefilled together), longer
    than one prompt's on an idle replica; at one client it is the idle replica's."""
    from quotacalc.core.benchmark import closed_loop
    from quotacalc.core.calibrate import predict_ttft_s
    from quotacalc.core.replica import replica_model

    model = replica_model(inputs, 0.0)
    pair = BenchmarkPoint(source="t", row="r", concurrency=2, prompt_tokens=6000, output_tokens=100, ttft_s=1.0)
    lock_step = closed_loop(model, 2, 6000, 100, "lockstep").mean_ttft_s
    assert predict_ttft_s(model, pair) == lock_step > model.ttft_s(6000)
    alone = pair.model_copy(update={"concurrency": 1})
    assert predict_ttft_s(model, alone) == model.ttft_s(6000)


def test_write_keeps_crlf_line_ends_and_a_link_and_records_paths_from_the_plan(run_cli, tmp_path):
    """--write changes only the keys it sets: a CRLF plan stays CRLF, a plan reached through a link is written
    where the link points (the link stays), and each file's path is relative to the plan's directory."""
    folder = tmp_path / "plans"
    folder.mkdir()
    real = folder / "real.yaml"
    real.write_bytes(b"model: Llama-3.3-70B-Instruct  # the model\r\ngpu: h100-sxm\r\ntp: 4\r\nweight_dtype: fp8\r\n")
    link = folder / "link.yaml"
    link.symlink_to(real.name)
    code, _, err = run_cli("calibrate", link, "--bench", SYNTHETIC_CSV, "--write", link)
    assert code == 0, err
    assert link.is_symlink() and link.resolve() == real.resolve()
    data = real.read_bytes()
    assert data.startswith(b"model: Llama-3.3-70B-Instruct  # the model\r\ngpu: h100-sxm\r\n")
    assert data.count(b"\n") == data.count(b"\r\n")  # no bare line feed: every line keeps CRLF
    section = yaml.safe_load(data.decode("utf-8"))["calibration"]
    (record,) = section["files"]
    assert (folder / record["path"]).resolve() == Path(SYNTHETIC_CSV).resolve()
    assert record["path"].startswith("../")


def test_the_same_runs_given_twice_are_refused(run_cli, tmp_path):
    copy = tmp_path / "copy.csv"
    copy.write_bytes(Path(SYNTHETIC_CSV).read_bytes())
    for second in (SYNTHETIC_CSV, copy):
        code, out, err = run_cli("calibrate", PLAN, "--bench", SYNTHETIC_CSV, "--bench", second)
        assert code == 2 and out == "" and err.count("\n") == 1
        assert f"{second}: --bench: the same file as {SYNTHETIC_CSV} (the same bytes) (give it once)" in err


def test_a_run_whose_lengths_varied_warns_where_its_ttft_under_load_is_fitted_lock_step(inputs):
    runs = synthetic(inputs, TRUTH)
    varied = [run.model_copy(update={"varied_lengths": "dataset_name sharegpt"}) for run in runs]
    warned = [warning for warning in calibrate(inputs, varied).warnings if "lengths varied" in warning]
    # Runs 2-6 are under load and measured a first token; run 1 (one client) stays in step with itself.
    assert [warning.split(":")[1].strip() for warning in warned] == [f"run {n}" for n in range(2, 7)]
    assert warned[0] == (
        "synthetic: run 2: dataset_name sharegpt: its requests' lengths varied, so its TTFT at concurrency 4 is "
        "not a lock-step closed loop's (--ttft-under-load ignore leaves it out)"
    )
    assert not any(
        "lengths varied" in warning for warning in calibrate(inputs, varied, ttft_under_load="ignore").warnings
    )
    assert not any("lengths varied" in warning for warning in calibrate(inputs, runs).warnings)
    itl_only = [run.model_copy(update={"ttft_s": None}) for run in varied]
    assert not any("lengths varied" in warning for warning in calibrate(inputs, itl_only).warnings)
    # Two clients are already a closed loop that varied lengths take out of step.
    pair = [varied[0], varied[1].model_copy(update={"concurrency": 2})]
    assert any("concurrency 2 is not a lock-step" in warning for warning in calibrate(inputs, pair).warnings)


def test_a_comparison_row_the_calibration_does_not_hold_for_says_so(run_cli, plan):
    assert run_cli("calibrate", plan, "--bench", plan.parent / SYNTHETIC_CSV.name, "--write", plan)[0] == 0
    code, out, err = run_cli("price", plan, "--gpu", "h100-sxm,h200", "--format", "json")
    assert code == 0, err
    rows = {row["gpu"]: row for row in json.loads(out)["rows"]}
    assert rows["h100-sxm"]["calibrated"] is True
    assert not any("not calibrated" in warning for warning in rows["h100-sxm"]["warnings"])
    assert rows["h200"]["calibrated"] is False
    assert (
        "not calibrated: the plan's calibration holds for what it was fitted on (gpu h100-sxm -> h200)"
        in (rows["h200"]["warnings"])
    )
    # As for a single price on h200: --strict fails on it.
    assert run_cli("price", plan, "--gpu", "h100-sxm,h200", "--strict")[0] == 1


def test_a_value_an_earlier_fit_wrote_and_this_one_does_not_refit_is_named(run_cli, plan):
    bench = plan.parent / SYNTHETIC_CSV.name
    assert run_cli("calibrate", plan, "--bench", bench, "--fit", "mbu,step_overhead_s", "--write", plan)[0] == 0
    written = yaml.safe_load(plan.read_text(encoding="utf-8"))["step_overhead_s"]
    code, _, err = run_cli("calibrate", plan, "--bench", bench)
    assert code == 0
    assert (
        f"quotacalc: warning: {plan}: step_overhead_s {written} is an earlier fit's, not refitted now: this fit "
        "started from it and --write keeps it (remove it from the plan to fit from the default)"
    ) in err
    assert run_cli("calibrate", plan, "--bench", bench, "--strict")[0] == 1
    # Refitting it (or giving it as a flag) is no such case.
    code, _, err = run_cli("calibrate", plan, "--bench", bench, "--fit", "mbu,step_overhead_s")
    assert code == 0 and "earlier fit's" not in err


def test_a_run_given_twice_figure_for_figure_is_named(run_cli, plan):
    """A line appended twice (or a file given reformatted) counts twice in the fit and predicts its twin in the
    leave-one-out error: named, and fatal under --strict. The byte-identical file is refused before (elsewhere)."""
    bench = plan.parent / SYNTHETIC_CSV.name
    lines = bench.read_text(encoding="utf-8").splitlines()
    doubled = plan.parent / "doubled.csv"
    doubled.write_text("\n".join([*lines, lines[-1]]) + "\n", encoding="utf-8")
    code, _, err = run_cli("calibrate", plan, "--bench", doubled)
    assert code == 0
    last = sum(1 for line in lines if line and not line.startswith("#")) - 1  # data rows, the header not counted
    assert (
        f"quotacalc: warning: {doubled}: row {last + 1} repeats {doubled}: row {last} figure for figure: it counts "
        "twice in the fit (give it once)"
    ) in err
    assert run_cli("calibrate", plan, "--bench", doubled, "--strict")[0] == 1
    assert "repeats" not in run_cli("calibrate", plan, "--bench", bench)[2]


def test_a_flag_over_an_earlier_fitted_value_is_not_another_deployment(run_cli, tmp_path):
    plan = tmp_path / "plan.yaml"
    plan.write_bytes(Path(PLAN).read_bytes())
    assert run_cli("calibrate", plan, "--bench", SYNTHETIC_CSV, "--write", plan)[0] == 0
    log = tmp_path / "serve.log"
    log.write_text("GPU KV cache size: 646,503 tokens\nAvailable KV cache memory: 49.33 GiB\n", encoding="utf-8")
    # The same deployment, an MBU of the user's over the fitted one: written, not refused as another deployment.
    code, _, err = run_cli("calibrate", plan, "--log", log, "--mbu", "0.8", "--write", plan)
    assert code == 0, err
    assert yaml.safe_load(plan.read_text(encoding="utf-8"))["mbu"] == 0.8


# --------------------------------------------------------------------------- runs that do not measure MFU


@pytest.fixture(scope="module")
def qwen3_8b_fp8():
    from quotacalc.inputs.resolve import resolve

    return resolve(Deployment(model="Qwen3-8B", gpu="h100-sxm", tp=1, weight_dtype="fp8", kv_dtype="bf16"))


def test_the_shortest_compute_bound_prompt_is_the_ridge_of_flops_and_one_weight_read(qwen3_8b_fp8):
    """The method's ridge: a chunk of n tokens computes n × FLOPs a prompt token (plus one chunk's logits) at
    TP × peak × MFU, against one read of the weights at peak bandwidth × MBU; below n the read is longer."""
    from quotacalc.core.calibrate import compute_bound_prompt_tokens
    from quotacalc.core.replica import replica_model

    shortest = compute_bound_prompt_tokens(qwen3_8b_fp8)
    assert isinstance(shortest, int)  # a token count, as the warning prints it
    model = replica_model(qwen3_8b_fp8, 0.0)
    read_s = model.weight_bytes_per_gpu / (3.35e12 * 0.75)  # the H100 SXM's 3.35 TB/s (gpus.yaml), MBU 0.75
    flops_per_s = 1979e12 * 0.5  # its dense FP8 peak, MFU 0.5 (the H100 at FP8 is the MFU scale's reference)
    # Attention over a few hundred tokens adds well under 1% to a prompt token: the linear ridge is within 2%.
    ridge = (read_s * flops_per_s - model.logits_flops_per_token) / model.prefill_flops_per_token
    assert shortest == pytest.approx(ridge, rel=0.02)
    assert model.prefill_compute_s(shortest) > read_s >= model.prefill_compute_s(shortest - 1)


def test_runs_that_leave_mfu_at_its_default_say_which_prompt_would_measure_it(qwen3_8b_fp8):
    # silybench's vLLM runs (tests/data/measurements/): a 128-token first token and ITLs at concurrency 1 and 4.
    short = [
        BenchmarkPoint(
            source="s.csv",
            row="row 1",
            concurrency=1,
            prompt_tokens=128,
            output_tokens=128,
            ttft_s=0.01445,
            itl_s=0.004618,
        ),
        BenchmarkPoint(
            source="s.csv", row="row 2", concurrency=4, prompt_tokens=128, output_tokens=128, itl_s=0.004716
        ),
    ]
    from quotacalc.core.calibrate import compute_bound_prompt_tokens

    shortest = compute_bound_prompt_tokens(qwen3_8b_fp8)
    assert 128 < shortest < 1000
    result = calibrate(qwen3_8b_fp8, short)
    assert "mfu" not in fitted(result)
    (warning,) = [w for w in result.warnings if "no run measures compute speed" in w]
    assert "of 128-token prompts, are memory-bound" in warning and "mfu stays at 0.5" in warning
    assert f"well past {shortest:,} tokens" in warning and "(1,000 or more)" in warning
    # ITL runs alone say so too.
    itl_only = [point.model_copy(update={"ttft_s": None}) for point in short]
    assert any("no first token is measured" in w for w in calibrate(qwen3_8b_fp8, itl_only).warnings)
    # A compute-bound first token fits MFU, and the warning goes.
    long = short[0].model_copy(update={"row": "row 3", "prompt_tokens": 2048, "ttft_s": 0.04})
    result = calibrate(qwen3_8b_fp8, [*short, long])
    assert "mfu" in fitted(result)
    assert not any("compute speed" in w for w in result.warnings)
    # Parameters the user chose are the user's: no warning about what was left out.
    assert not any("compute speed" in w for w in calibrate(qwen3_8b_fp8, short, parameters=["mbu"]).warnings)


def test_the_unmeasured_mfu_warning_fails_strict(run_cli, tmp_path):
    bench = tmp_path / "short.csv"
    bench.write_text(
        "concurrency,prompt_tokens,output_tokens,ttft_s,itl_s\n1,128,128,0.01445,0.004618\n4,128,128,,0.004716\n",
        encoding="utf-8",
    )
    args = ("calibrate", "--bench", bench, "--model", "Qwen3-8B", "--gpu", "h100-sxm", "--weight-dtype", "fp8")
    code, out, err = run_cli(*args)
    assert code == 0 and "mbu" in out
    (line,) = [line for line in err.splitlines() if "compute speed" in line]
    assert line.startswith("quotacalc: warning: no run measures compute speed")
    code, out, err = run_cli(*args, "--strict")
    assert code == 1 and out == "" and "compute speed" in err
