"""The calibration's small parts, figure by figure: the KV reserve from a log, the rounding of fitted
values, the identifiability test, the leave-one-out bookkeeping, the provenance written into a plan and
whether a plan's calibration holds. Each expected figure is worked out in the test (docs/mutation.md).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from quotacalc.core.calibrate import (
    BOUNDS,
    ENGINE_MODEL_REVISION,
    PRIOR_SPREAD,
    PRIOR_WEIGHT,
    BenchmarkPoint,
    CalibratedFile,
    CalibratedOn,
    CalibratedRange,
    CalibrationProvenance,
    KvPoolReading,
    _current,
    _fit,
    _Predictor,
    _rms,
    _same,
    _significant,
    _snap,
    calibrate,
    calibration_status,
    informed_parameters,
    kv_pool_fit,
    merge_provenance,
    predictions,
    provenance,
)
from quotacalc.core.deployment import GIB, Deployment
from quotacalc.errors import QuotacalcError

#: A parameter set away from the defaults (tests/test_calibrate.py's).
TRUTH = {"mfu": 0.37, "mbu": 0.81, "step_overhead_s": 0.0027, "request_overhead_s": 0.041}
#: Llama 3.3 70B at TP 4 with BF16 KV: 80 layers × 8 KV heads × 128 × 2 (K, V) × 2 B / 4 GPUs.
KV_BYTES_PER_TOKEN_PER_GPU = 80 * 8 * 128 * 2 * 2 // 4
FIX = "check that the log is from this deployment (GPU, TP, weight dtype, gpu-memory-utilization)"


@pytest.fixture(scope="module")
def inputs():
    from quotacalc.inputs.resolve import resolve

    return resolve(
        Deployment(model="Llama-3.3-70B-Instruct", gpu="h100-sxm", tp=4, weight_dtype="fp8", kv_dtype="bf16")
    )


def point(concurrency=1, prompt=1000.0, output=200.0, ttft=1.0, itl=0.02, row="r") -> BenchmarkPoint:
    return BenchmarkPoint(
        source="b.csv",
        row=row,
        concurrency=concurrency,
        prompt_tokens=prompt,
        output_tokens=output,
        ttft_s=ttft,
        itl_s=itl,
    )


def synthetic(inputs, truth, runs, *, ttft=True, itl=True) -> list[BenchmarkPoint]:
    """Points measured exactly as the replica model predicts them at ``truth``."""
    blank = [point(c, p, o, row=f"run {n}") for n, (c, p, o) in enumerate(runs, 1)]
    values = predictions(inputs, truth, blank)
    return [
        b.model_copy(update={"ttft_s": values[2 * n] if ttft else None, "itl_s": values[2 * n + 1] if itl else None})
        for n, b in enumerate(blank)
    ]


def weights_per_gpu(inputs) -> float:
    from quotacalc.core.price import price

    # The resident weights price subtracts: kv_pool_fit must use the same (its reserve reproduces the pool).
    return price(inputs).weight_bytes_per_gpu


# --------------------------------------------------------------------------- small helpers


def test_rms_is_the_root_of_the_mean_square():
    # (0.03² + 0.04²) / 2 = 0.00125, √ = 0.0353553...
    assert _rms([0.03, -0.04]) == pytest.approx(math.sqrt(0.00125), rel=1e-12)
    assert _rms([0.5]) == 0.5
    assert _rms([]) is None


def test_significant_rounds_to_four_digits_and_keeps_zero_and_one():
    assert _significant(0.123456) == 0.1235
    assert _significant(0.123456, 3) == 0.123
    assert _significant(1.0) == 1.0
    assert _significant(0) == 0.0
    assert _significant(98765.4) == 98770.0


def test_a_value_within_a_millionth_of_its_scale_of_a_zero_bound_is_that_bound():
    # step_overhead_s: scale 1 ms, so the snap reaches 1e-9 s (exclusive) of its 0 bound.
    threshold = 1e-6 * 1e-3
    assert _snap("step_overhead_s", threshold / 2) == 0.0
    assert _snap("step_overhead_s", threshold) == _significant(threshold)  # not below: kept (rounded)
    assert _snap("step_overhead_s", threshold) != 0.0
    assert _snap("step_overhead_s", 5e-4) == 5e-4  # half a scale away: a fitted value, not the bound
    assert _snap("request_overhead_s", 0.0123456) == 0.01235
    assert _snap("mbu", 1.0) == 1.0 and _snap("mfu", 0.02) == 0.02


def test_the_starting_value_of_the_allreduce_latency_is_the_gpu_catalogs_unless_set(inputs):
    # H100 SXM's catalog all-reduce latency: 14 µs; the deployment leaves it unset.
    assert inputs.deployment.allreduce_latency_s is None
    assert _current(inputs, "allreduce_latency_s") == 1.4e-5
    set_explicitly = inputs.model_copy(
        update={"deployment": inputs.deployment.model_copy(update={"allreduce_latency_s": 7e-6})}
    )
    assert _current(set_explicitly, "allreduce_latency_s") == 7e-6
    assert _current(inputs, "mbu") == inputs.deployment.mbu


def test_fitting_the_allreduce_latency_starts_from_the_catalog(inputs):
    points = synthetic(inputs, TRUTH, [(1, 1000, 200), (32, 4000, 300)], ttft=False)
    result = calibrate(inputs, points, parameters=["allreduce_latency_s"])
    (parameter,) = result.parameters
    assert parameter.before == 1.4e-5
    assert (parameter.lower, parameter.upper) == (0.0, 1e-3)


# --------------------------------------------------------------------------- which parameters the points inform


def test_ttft_shapes_are_prompt_lengths_only():
    # Two TTFTs of one prompt length at two concurrencies: the efficiency only.
    points = [point(1, 1000, 200, itl=None), point(8, 1000, 200, itl=None)]
    assert informed_parameters(points) == ("mfu",)


def test_itl_shapes_are_concurrency_and_mean_context():
    # 1000 + 200/2 = 800 + 600/2 = 1100 tokens of mean context at concurrency 1: one shape.
    same = [point(1, 1000, 200, ttft=None), point(1, 800, 600, ttft=None)]
    assert informed_parameters(same) == ("mbu",)
    # 1000 + 200/2 = 1100 against 900 + 400/2 = 1100 is again one shape; 1000 + 300/2 = 1150 is another.
    assert informed_parameters([point(1, 1000, 200, ttft=None), point(1, 900, 400, ttft=None)]) == ("mbu",)
    assert informed_parameters([point(1, 1000, 200, ttft=None), point(1, 1000, 300, ttft=None)]) == (
        "mbu",
        "step_overhead_s",
    )


def test_runs_at_two_concurrencies_inform_the_per_sequence_cost():
    """The slope with batch is the per-sequence cost (MBU alone would absorb it and push the step overhead below
    zero at concurrency 1); the intercept beside MBU's slope with context is the step overhead."""
    two_batches = [point(1, 1000, 200, ttft=None), point(64, 1000, 200, ttft=None)]
    assert informed_parameters(two_batches) == ("mbu", "sequence_overhead_s")
    both = [*two_batches, point(64, 4000, 200, ttft=None)]
    assert informed_parameters(both) == ("mbu", "step_overhead_s", "sequence_overhead_s")
    # Different concurrencies and contexts, but never two contexts at one concurrency: the slope with batch only.
    assert informed_parameters([point(1, 1000, 200, ttft=None), point(8, 4000, 200, ttft=None)]) == (
        "mbu",
        "sequence_overhead_s",
    )


def test_a_memory_bound_first_token_informs_the_request_overhead_not_mfu():
    """Llama 3.1 8B FP8 on one H100: a 200-token prefill computes 200 × 13.96 GFLOP (2 × the parameters less the
    embedding table) at 0.5 × 1,979 TFLOP/s in 2.8 ms, less than one read of its 8.03 GB of weights at 0.75 × 3.35
    TB/s (3.2 ms): memory-bound, so its time says nothing of MFU and gives the request overhead. At 1,000 tokens
    (14 ms) it is compute-bound and gives MFU; with both lengths, both."""
    from quotacalc.inputs.resolve import resolve

    inputs = resolve(Deployment(model="Llama-3.1-8B-Instruct", gpu="h100-sxm", weight_dtype="fp8", kv_dtype="fp8"))
    short, long = point(1, 200, 200, itl=None), point(1, 1000, 200, itl=None)
    assert informed_parameters([short], inputs) == ("request_overhead_s",)
    assert informed_parameters([long], inputs) == ("mfu",)
    assert informed_parameters([short, long], inputs) == ("mfu", "request_overhead_s")
    # Without the deployment, a first token counts as compute-bound (the efficiency it scales).
    assert informed_parameters([short]) == ("mfu",)


# --------------------------------------------------------------------------- the fit's pull towards the start


def test_the_pull_towards_the_start_is_prior_weight_per_spread(inputs):
    points = synthetic(inputs, TRUTH, [(1, 1000, 200), (16, 4000, 300)])
    names = ["mfu", "mbu"]
    start = [0.5, 0.6]
    values, result = _fit(_Predictor(inputs), names, start, points)
    # The last residuals are the pull: 0.003 × (x − start) / spread, spreads 0.2 and 0.2.
    pull = result.fun[-2:]
    expected = [PRIOR_WEIGHT * (values[0] - 0.5) / 0.2, PRIOR_WEIGHT * (values[1] - 0.6) / 0.2]
    assert pull == pytest.approx(expected, rel=1e-9, abs=1e-15)
    assert PRIOR_WEIGHT == 0.003 and PRIOR_SPREAD["mfu"] == 0.2
    # The first residuals are the relative errors of the four figures.
    fitted_predictions = predictions(inputs, dict(zip(names, values, strict=True)), points)
    measured = [value for p in points for value in p.measured().values()]
    assert result.fun[:4] == pytest.approx([p / m - 1 for p, m in zip(fitted_predictions, measured, strict=True)])


def test_a_start_outside_the_bounds_is_clipped_into_them(inputs):
    # A deployment may start outside the fit's bounds (a hand-set 5 ms per-sequence overhead, MFU 0.01):
    # the optimiser starts from the nearest bound instead of refusing an infeasible start.
    points = synthetic(inputs, TRUTH, [(1, 1000, 200)])
    values, _ = _fit(_Predictor(inputs), ["sequence_overhead_s"], [5e-3], points)
    assert 0.0 <= values[0] <= 1e-3
    values, _ = _fit(_Predictor(inputs), ["mfu"], [0.01], points)
    assert 0.02 <= values[0] <= 1.0


def test_a_fit_of_exact_figures_stops_on_its_step_size(inputs):
    # Two ITLs measured exactly at MBU 0.5, one parameter: each step of the trust region halves the
    # error (or better), so the step falls below 1e-10 of MBU within tens of evaluations. Without the
    # step-size criterion the cost and gradient tests (1e-12) would keep it going for hundreds.
    points = synthetic(inputs, {"mbu": 0.5}, [(1, 1000, 200), (8, 100, 100)], ttft=False)
    values, result = _fit(_Predictor(inputs), ["mbu"], [inputs.deployment.mbu], points)
    assert values[0] == pytest.approx(0.5, rel=1e-4)  # the pull towards the start (0.75) moves it ~3e-5
    assert result.nfev <= 30


# --------------------------------------------------------------------------- identifiability


CANNOT_TELL = (
    "these points cannot tell {} apart (the fit keeps them near their starting values): "
    "add runs at other concurrencies and prompt lengths"
)


def test_two_contexts_ten_tokens_apart_cannot_separate_bandwidth_from_step_overhead(inputs):
    # Concurrency 1 at 1,100 and 1,110 tokens of mean context: both ITLs move alike with MBU and the
    # step overhead. The smallest singular value is ~1e-5 of the largest but not 0, and the direction
    # the points cannot see moves both (weights ±0.7 in their scales, both above 0.3).
    points = synthetic(inputs, TRUTH, [(1, 1000, 200), (1, 1010, 200)], ttft=False)
    result = calibrate(inputs, points, parameters=["mbu", "step_overhead_s"])
    assert result.warnings == (CANNOT_TELL.format("mbu and step_overhead_s"),)


def test_three_parameters_two_of_them_unidentified(inputs):
    # One TTFT at one prompt length: MFU and the request overhead trade off along one line. Two ITLs at
    # concurrency 1 fix MBU alone (no prefill rides in them, so MFU does not enter). Three singular
    # values: MBU's, the TTFT's, and 0: the blind direction is MFU against the request overhead, the
    # middle one (MBU's) is not weak.
    points = [
        *synthetic(inputs, TRUTH, [(1, 1000, 200)]),
        *synthetic(inputs, TRUTH, [(1, 1000, 600)], ttft=False),
    ]
    result = calibrate(inputs, points, parameters=["mfu", "mbu", "request_overhead_s"])
    assert result.warnings == (CANNOT_TELL.format("mfu and request_overhead_s"),)


def test_parameters_no_point_moves_get_no_identifiability_warning(inputs):
    # ITL at concurrency 1 only: no prefill rides in the decode steps, so neither MFU nor the request
    # overhead moves any figure; the Jacobian is all zeros and there is nothing to tell apart.
    points = synthetic(inputs, TRUTH, [(1, 1000, 200), (1, 2000, 200)], ttft=False)
    result = calibrate(inputs, points, parameters=["mfu", "request_overhead_s"])
    # Nothing to tell apart; the runs' MBU is not the default, which neither value can follow: a poor fit, said so.
    (poor,) = result.warnings
    assert poor.startswith("after the fit the runs are still ") and "(RMS) from the model" in poor


def test_weak_but_separable_overheads_are_not_flagged(inputs):
    # The step and per-sequence overheads at concurrency 1 and 2: the per-sequence one is only seen as
    # the difference of one sequence, so the singular values are ~0.11 and ~0.0006 (ratio 0.005, above
    # the 1e-4 the test needs; their product, 6e-5, is small, but separability is a ratio).
    points = synthetic(inputs, TRUTH, [(1, 1000, 200), (2, 1000, 200)], ttft=False)
    result = calibrate(inputs, points, parameters=["step_overhead_s", "sequence_overhead_s"])
    assert result.warnings == ()


def test_fewer_measured_figures_than_parameters_are_named(inputs):
    # One run measures two figures (its TTFT and its ITL); four parameters cannot all be determined by
    # two equations, whatever the Jacobian's two singular values are.
    points = synthetic(inputs, TRUTH, [(1, 1000, 200)])
    assert len(points) == 1 and len(points[0].measured()) == 2
    result = calibrate(inputs, points, parameters=["mfu", "mbu", "step_overhead_s", "request_overhead_s"])
    assert result.warnings == (
        "2 measured figures cannot determine 4 parameters (mfu, mbu, step_overhead_s, request_overhead_s): "
        "the fit keeps the undetermined ones near their starting values; add runs at other concurrencies and "
        "prompt lengths, or fit fewer parameters (--fit)",
    )


def test_identifiable_points_give_no_warning(inputs):
    points = synthetic(inputs, TRUTH, [(1, 1000, 200), (64, 4000, 500), (8, 2000, 400)])
    result = calibrate(inputs, points, parameters=["mfu", "mbu", "step_overhead_s", "request_overhead_s"])
    assert result.warnings == ()


# --------------------------------------------------------------------------- calibrate's checks and results


def test_unknown_parameters_are_named_with_the_choices(inputs):
    with pytest.raises(QuotacalcError) as caught:
        calibrate(inputs, [point()], parameters=["batch", "mfu", "tp"])
    assert caught.value.one_line() == (
        "--fit: cannot fit batch, tp (choose from mfu, mbu, step_overhead_s, layer_overhead_s, request_overhead_s, "
        "allreduce_latency_s, sequence_overhead_s, moe_slot_overhead_s, prefill_layer_overhead_s)"
    )


def test_parameters_without_points_is_an_error(inputs):
    with pytest.raises(QuotacalcError) as caught:
        calibrate(inputs, [], parameters=["mfu"])
    assert caught.value.one_line() == "--bench: no benchmark points to fit (give a benchmark file)"


def test_a_thousand_runs_are_taken_and_one_more_is_refused(inputs):
    runs = [point()] * 1000
    result = calibrate(inputs, runs, parameters=[])  # nothing to fit: the count check alone
    assert result.parameters == () and result.points == ()
    with pytest.raises(QuotacalcError) as caught:
        calibrate(inputs, [*runs, point()], parameters=[])
    assert caught.value.one_line() == (
        "--bench: 1,001 benchmark runs: calibrate takes at most 1,000 "
        "(give one row per run (mean figures), not one per request)"
    )


def test_nothing_to_fit_and_no_log_changes_nothing(inputs):
    result = calibrate(inputs, [], parameters=[])
    assert result.parameters == () and result.points == () and result.fitted_values == {}
    assert result.rms_error_before is None and result.rms_error_after is None
    assert result.rms_leave_one_out_error is None and result.kv_pool is None and result.warnings == ()
    assert result.deployment == inputs.deployment


def test_one_point_has_no_leave_one_out(inputs):
    points = synthetic(inputs, TRUTH, [(8, 2000, 400)])
    result = calibrate(inputs, points)
    assert [fit.quantity for fit in result.points] == ["ttft_s", "itl_s"]
    assert all(fit.leave_one_out_error is None for fit in result.points)
    assert result.rms_leave_one_out_error is None


def test_point_fits_carry_the_run_and_the_errors(inputs):
    points = synthetic(inputs, TRUTH, [(1, 1000, 200), (16, 3000, 300), (64, 500, 100)])
    result = calibrate(inputs, points, parameters=["mfu", "mbu"])
    after = {parameter.name: parameter.after for parameter in result.parameters}
    assert result.fitted_values == after
    assert (result.deployment.mfu, result.deployment.mbu) == (after["mfu"], after["mbu"])
    assert [(p.name, p.lower, p.upper) for p in result.parameters] == [
        ("mfu", 0.02, 1.0),
        ("mbu", 0.05, 1.0),
    ]
    predicted = predictions(inputs, after, points)
    assert [(fit.row, fit.quantity) for fit in result.points] == [
        (f"run {n}", quantity) for n in (1, 2, 3) for quantity in ("ttft_s", "itl_s")
    ]
    for fit, p, (run, quantity) in zip(
        result.points, predicted, [(r, q) for r in points for q in ("ttft_s", "itl_s")], strict=True
    ):
        assert (fit.source, fit.concurrency, fit.prompt_tokens, fit.output_tokens) == (
            "b.csv",
            run.concurrency,
            run.prompt_tokens,
            run.output_tokens,
        )
        assert fit.measured == getattr(run, quantity)
        assert fit.predicted_after == p and fit.error_after == p / fit.measured - 1
    errors = [fit.error_after for fit in result.points]
    assert result.rms_error_after == pytest.approx(math.sqrt(sum(e * e for e in errors) / 6), rel=1e-12)
    loo = [fit.leave_one_out_error for fit in result.points]
    assert result.rms_leave_one_out_error == pytest.approx(math.sqrt(sum(e * e for e in loo) / 6), rel=1e-12)


def test_a_parameter_at_either_bound_is_flagged_in_words(inputs):
    # TTFTs thirty times longer than the model predicts at MFU 0.37 need MFU ≈ 0.012, under the 0.02 floor (and
    # stay under the hundredfold a unit slip is refused at: about 50 times the defaults' prediction).
    points = synthetic(inputs, TRUTH, [(1, 2000, 200), (1, 4000, 200)], itl=False)
    slow = [p.model_copy(update={"ttft_s": p.ttft_s * 30}) for p in points]
    result = calibrate(inputs, slow, parameters=["mfu"])
    (mfu,) = result.parameters
    assert (mfu.after, mfu.at_bound) == (0.02, True)
    # Runs thirty (or a third) times off the defaults are flagged as another deployment's first.
    mismatch, bound, poor = result.warnings
    assert mismatch.startswith("the runs are ") and "(RMS) from this deployment's defaults" in mismatch
    assert bound == "mfu stopped at its bound 0.02: the model cannot follow these points there"
    assert poor.startswith("after the fit the runs are still ")
    itl = synthetic(inputs, TRUTH, [(1, 1000, 200), (8, 1000, 200)], ttft=False)
    fast = [p.model_copy(update={"itl_s": p.itl_s / 3}) for p in itl]
    result = calibrate(inputs, fast, parameters=["mbu"])
    assert result.warnings[1] == "mbu stopped at its bound 1: the model cannot follow these points there"
    assert result.warnings[2].startswith("after the fit the runs are still ")
    assert "(RMS) from this deployment's defaults" in result.warnings[0]
    assert result.fitted_values == {"mbu": 1.0}


def test_two_points_each_predicted_by_a_fit_on_the_other(inputs):
    # MBU 0.6, two ITLs at concurrency 1; the second measured 10% slow. Fitted on the first alone, MBU
    # comes back (the pull towards the start moves it ~1e-4), so the second is predicted at its true
    # ITL: leave-one-out error 1/1.1 − 1 = −9.09%.
    exact = synthetic(inputs, {"mbu": 0.6}, [(1, 1000, 200), (1, 4000, 200)], ttft=False)
    points = [exact[0], exact[1].model_copy(update={"itl_s": exact[1].itl_s * 1.1})]
    result = calibrate(inputs, points, parameters=["mbu"])
    first, second = result.points
    assert second.leave_one_out_error == pytest.approx(1 / 1.1 - 1, abs=1e-3)
    assert first.leave_one_out_error > 0.05  # fitted on the slow run alone, the first comes out slow
    assert result.rms_leave_one_out_error == pytest.approx(
        math.sqrt((first.leave_one_out_error**2 + second.leave_one_out_error**2) / 2), rel=1e-12
    )


def test_sixty_runs_are_each_left_out(inputs):
    runs = [(1 + n % 8, 500 + 50 * n, 100) for n in range(60)]
    points = synthetic(inputs, {"mbu": 0.81}, runs, ttft=False)
    result = calibrate(inputs, points, parameters=["mbu"])
    assert result.warnings == ()
    # Exact figures: each run is predicted by the other 59 within the pull's ~1e-5.
    assert all(abs(fit.leave_one_out_error) < 1e-4 for fit in result.points)


def test_more_runs_than_the_leave_one_out_limit_say_so(inputs):
    # 61 runs, ITL only, one parameter: fitted once, not left out one by one.
    runs = [(1 + n % 8, 500 + 50 * n, 100) for n in range(61)]
    points = synthetic(inputs, {"mbu": 0.81}, runs, ttft=False)  # the other parameters at the defaults
    result = calibrate(inputs, points, parameters=["mbu"])
    assert result.warnings == ("leave-one-out errors are computed up to 60 runs, not for 61",)
    assert all(fit.leave_one_out_error is None for fit in result.points)
    assert result.fitted_values == {"mbu": 0.81}


# --------------------------------------------------------------------------- the KV pool from a log


def test_reserve_from_the_available_memory(inputs):
    weights = weights_per_gpu(inputs)
    # 0.9 × 85,029,158,912 B (H100 SXM as the runtime reports it) − weights − 40 GiB.
    expected = (0.9 * 85_029_158_912 - weights - 40 * GIB) / GIB
    kv = kv_pool_fit(inputs, KvPoolReading(source="serve.log", available_kv_gib=40.0))
    assert kv.runtime_reserve_gib == _significant(expected)
    assert kv.note == "runtime reserve = memory_utilization × HBM − weights per GPU − available KV memory"
    assert (kv.source, kv.available_kv_gib, kv.kv_pool_tokens) == ("serve.log", 40.0, None)
    assert kv.kv_pool_measured_with is None and kv.mismatch is None


def test_the_reserve_counts_the_weights_the_engine_pads():
    from quotacalc.core.weights import engine_padding_bytes_per_gpu
    from quotacalc.inputs.resolve import resolve

    # gpt-oss-120b on one B200: vLLM pads the MXFP4 experts for its kernels; the resident weights are
    # the checkpoint's 65,248,815,744 B (its expert biases in BF16: 65,190,340,224 + 4,608 experts x 8,640 biases
    # x (2 - 0.53125) B; tests/test_quantized_biases.py) plus that padding, as price subtracts them.
    gpt = resolve(Deployment(model="gpt-oss-120b", gpu="b200", tp=1))
    padding = engine_padding_bytes_per_gpu(gpt.arch, gpt.weights, gpt.deployment, gpt.gpu)
    assert padding > 0
    resident = 65_248_815_744 + padding
    assert weights_per_gpu(gpt) == resident
    expected = (0.9 * gpt.gpu.memory_bytes - resident - 50 * GIB) / GIB
    kv = kv_pool_fit(gpt, KvPoolReading(source="serve.log", available_kv_gib=50.0))
    assert kv.runtime_reserve_gib == _significant(expected)


def test_reserve_from_the_pool_tokens(inputs):
    weights = weights_per_gpu(inputs)
    assert KV_BYTES_PER_TOKEN_PER_GPU == 81_920
    # 0.9 × HBM − weights − 500,000 tokens × 81,920 B.
    expected = (0.9 * 85_029_158_912 - weights - 500_000 * 81_920) / GIB
    kv = kv_pool_fit(inputs, KvPoolReading(source="serve.log", kv_pool_tokens=500_000))
    assert kv.runtime_reserve_gib == _significant(expected)
    assert kv.note == (
        "runtime reserve = memory_utilization × HBM − weights per GPU − pool tokens × KV bytes per token per GPU"
    )
    assert kv.available_kv_gib is None and kv.mismatch is None
    assert kv.kv_pool_measured_with == {
        "model": inputs.deployment.model,
        "gpu": "h100-sxm",
        "tp": 4,
        "weight_dtype": "fp8",
        "kv_dtype": "bf16",
        "memory_utilization": 0.9,
        "max_num_batched_tokens": None,
        "engine": "generic",
    }


@pytest.mark.parametrize(
    ("deployment", "recorded"),
    [
        # Experts: whether they were sharded whole is part of the record; a dense model's has no such key.
        (Deployment(model="Mixtral-8x7B-v0.1", gpu="h100", tp=2, expert_parallel=True), {"expert_parallel": True}),
        # Experts and Mamba layers: the state dtype as the engine kept it (the checkpoint's BF16 when unset).
        (Deployment(model="AI21-Jamba-1.5-Mini", gpu="h100", tp=2), {"expert_parallel": False, "state_dtype": "bf16"}),
        (Deployment(model="Llama-3.1-8B-Instruct", gpu="h100", state_dtype="fp32"), {}),
    ],
)
def test_a_logged_pool_records_expert_parallelism_and_state_dtype_where_they_change_it(deployment, recorded):
    from quotacalc.inputs.resolve import resolve

    kv = kv_pool_fit(resolve(deployment), KvPoolReading(source="serve.log", kv_pool_tokens=300_000))
    assert {
        key: kv.kv_pool_measured_with[key]
        for key in ("expert_parallel", "state_dtype")
        if key in kv.kv_pool_measured_with
    } == recorded


def test_a_log_without_either_figure_gives_no_reserve(inputs):
    kv = kv_pool_fit(inputs, KvPoolReading(source="serve.log"))
    assert (kv.runtime_reserve_gib, kv.note, kv.kv_pool_measured_with, kv.mismatch) == (None, "", None, None)


def test_a_reserve_under_a_gib_is_taken_and_a_negative_one_refused(inputs):
    free_gib = (0.9 * 85_029_158_912 - weights_per_gpu(inputs)) / GIB  # ≈ 54.84 GiB for KV and the reserve
    kv = kv_pool_fit(inputs, KvPoolReading(source="serve.log", available_kv_gib=free_gib - 0.5))
    assert kv.runtime_reserve_gib == pytest.approx(0.5, rel=1e-6)
    # A pool of all the free memory: no reserve at all, which is not an error (GiB is a power of two, so
    # free_gib × GiB gives the free bytes back exactly).
    assert kv_pool_fit(inputs, KvPoolReading(source="serve.log", available_kv_gib=free_gib)).runtime_reserve_gib == 0.0
    with pytest.raises(QuotacalcError) as caught:
        kv_pool_fit(inputs, KvPoolReading(source="big.log", available_kv_gib=free_gib + 1.0))
    error = caught.value
    assert (error.source, error.fix) == ("big.log", FIX)
    assert error.one_line() == (
        f"big.log: the log's KV pool is larger than h100-sxm's memory less the weights (-1.00 GiB reserve) ({FIX})"
    )
    # In tokens: 1 GiB more than fits, at 81,920 B per token.
    too_many = math.ceil((free_gib + 1.0) * GIB / 81_920)
    with pytest.raises(QuotacalcError, match="larger than h100-sxm's memory"):
        kv_pool_fit(inputs, KvPoolReading(source="big.log", kv_pool_tokens=too_many))


@pytest.mark.parametrize(
    ("available_gib", "flagged"),
    [
        # 16,384 tokens; 1 GiB / 16,384 = 65,536 B = 0.8 × 81,920: the lowest ratio taken.
        (1.0, False),
        # 1.5625 GiB / 16,384 = 102,400 B = 1.25 × 81,920: the highest.
        (1.5625, False),
        # 1.875 GiB / 16,384 = 122,880 B = 1.5 × 81,920: another deployment's log.
        (1.875, True),
        # 0.75 GiB / 16,384 = 49,152 B = 0.6 × 81,920.
        (0.75, True),
    ],
)
def test_the_logs_bytes_per_token_must_be_this_deployments(inputs, available_gib, flagged):
    kv = kv_pool_fit(inputs, KvPoolReading(source="s.log", available_kv_gib=available_gib, kv_pool_tokens=16_384))
    if flagged:
        implied = available_gib * GIB / 16_384
        assert kv.mismatch == (
            f"s.log: the log's pool holds {implied:,.0f} B of KV per token per GPU where this deployment "
            "needs 81,920 B: is the log from this model, TP and KV dtype?"
        )
    else:
        assert kv.mismatch is None


def test_calibrate_writes_the_logs_values(inputs):
    reading = KvPoolReading(source="serve.log", available_kv_gib=40.0, kv_pool_tokens=524_288)
    result = calibrate(inputs, [], parameters=[], kv_reading=reading)
    kv = kv_pool_fit(inputs, reading)
    assert result.kv_pool == kv
    assert result.fitted_values == {
        "runtime_reserve_gib": kv.runtime_reserve_gib,
        "kv_pool_tokens": 524_288,
        "kv_pool_measured_with": kv.kv_pool_measured_with,
    }
    assert result.warnings == ()
    mismatched = reading.model_copy(update={"kv_pool_tokens": 262_144})  # 163,840 B per token: twice
    assert calibrate(inputs, [], parameters=[], kv_reading=mismatched).warnings == (
        "serve.log: the log's pool holds 163,840 B of KV per token per GPU where this deployment needs "
        "81,920 B: is the log from this model, TP and KV dtype?",
    )
    only_memory = calibrate(inputs, [], parameters=[], kv_reading=KvPoolReading(source="a.log", available_kv_gib=40))
    assert set(only_memory.fitted_values) == {"runtime_reserve_gib"}


# --------------------------------------------------------------------------- provenance


ON = CalibratedOn(
    model="Llama-3.3-70B-Instruct", gpu="h100-sxm", tp=4, weight_dtype="fp8", kv_dtype="bf16", engine="generic"
)


def section(rows, fit, loo, parameters, files=("b.csv",), on=ON, engine_model=ENGINE_MODEL_REVISION, covers=None):
    return CalibrationProvenance(
        covers=covers,
        quotacalc_version="1.0",
        engine_model=engine_model,
        # A benchmark file records the rows fitted; a log, none.
        files=tuple(
            CalibratedFile(path=path, sha256="0" * 64, rows=() if path.endswith(".log") else ("row 1",))
            for path in files
        ),
        rows=rows,
        parameters=parameters,
        fit_rms_error=fit,
        leave_one_out_rms_error=loo,
        calibrated_on=on,
    )


def test_provenance_rounds_the_errors_to_three_digits(inputs):
    result = calibrate(inputs, synthetic(inputs, TRUTH, [(1, 1000, 200), (8, 2000, 300)]), parameters=["mbu"])
    result = result.model_copy(update={"rms_error_after": 0.0123456, "rms_leave_one_out_error": 0.0234567})
    files = [CalibratedFile(path="b.csv", sha256="0" * 64, rows=("run 1", "run 2"))]
    written = provenance(result, inputs, files, "9.9")
    assert (written.fit_rms_error, written.leave_one_out_rms_error) == (0.0123, 0.0235)
    assert written.rows == 2 and written.quotacalc_version == "9.9" and written.calibrated_on == ON
    assert written.engine_model == ENGINE_MODEL_REVISION == 2
    assert written.parameters == result.fitted_values
    # What the runs covered: concurrency 1 and 8; the 1,000-token prompt to the 2,000 + 300 sequence.
    assert written.covers == CalibratedRange(concurrency=(1, 8), context_tokens=(1000, 2300))
    assert written.ttft_under_load == "lockstep"
    none = provenance(result.model_copy(update={"rms_leave_one_out_error": None}), inputs, files, "9.9")
    assert none.leave_one_out_rms_error is None


def test_a_log_after_a_benchmark_keeps_the_benchmarks_errors():
    bench = section(6, 0.01, 0.02, {"mbu": 0.7}, files=("b.csv",))
    log = section(0, None, None, {"kv_pool_tokens": 1000}, files=("s.log",))
    merged = merge_provenance(bench, log)
    assert (merged.rows, merged.fit_rms_error, merged.leave_one_out_rms_error) == (6, 0.01, 0.02)
    assert merged.parameters == {"mbu": 0.7, "kv_pool_tokens": 1000}
    assert [file.path for file in merged.files] == ["s.log", "b.csv"]


def test_a_benchmark_of_one_run_after_another_replaces_the_errors():
    old = section(6, 0.01, 0.02, {"mbu": 0.7})
    new = section(1, 0.03, None, {"mbu": 0.75}, files=("b.csv", "c.csv"))
    merged = merge_provenance(old, new)
    assert (merged.rows, merged.fit_rms_error, merged.leave_one_out_rms_error) == (1, 0.03, None)
    assert merged.parameters == {"mbu": 0.75}
    assert [file.path for file in merged.files] == ["b.csv", "c.csv"]
    elsewhere = section(1, 0.03, None, {"mbu": 0.75}, on=ON.model_copy(update={"tp": 8}))
    assert merge_provenance(old, elsewhere) == elsewhere
    assert merge_provenance(None, new) == new


def test_a_new_fit_replaces_the_old_fits_files_and_values_and_a_new_log_the_old_log():
    first = section(4, 0.01, 0.02, {"mbu": 0.7, "sequence_overhead_s": 4e-5}, files=("a.json",))
    log = section(0, None, None, {"kv_pool_tokens": 1000, "runtime_reserve_gib": 5.0}, files=("s.log",))
    both = merge_provenance(first, log)
    refit = merge_provenance(both, section(1, 0.03, None, {"mbu": 0.75}, files=("c.json",)))
    # a.json and its sequence_overhead_s were not fitted this time: gone; the log's pool stays.
    assert [file.path for file in refit.files] == ["c.json", "s.log"]
    assert refit.parameters == {"kv_pool_tokens": 1000, "runtime_reserve_gib": 5.0, "mbu": 0.75}
    relogged = merge_provenance(refit, section(0, None, None, {"kv_pool_tokens": 2000}, files=("t.log",)))
    assert [file.path for file in relogged.files] == ["t.log", "c.json"]
    assert relogged.parameters == {"mbu": 0.75, "kv_pool_tokens": 2000}
    assert (relogged.rows, relogged.fit_rms_error) == (1, 0.03)


# --------------------------------------------------------------------------- does a plan's calibration hold


def test_same_compares_floats_closely_and_the_rest_exactly():
    assert _same(0.1 + 0.2, 0.3)  # 0.30000000000000004: the same fitted value read back
    assert not _same(0.3, 0.3003)
    assert not _same(3, 3.0000000001)  # an integer is compared exactly
    assert _same(3, 3)
    assert not _same({"gpu": "h100-sxm"}, None)
    assert not _same("h100", {"gpu": "h100"})


def test_status_names_every_change(inputs):
    other = CalibratedOn(model="Other-Model", gpu="a100-sxm", tp=4, weight_dtype="bf16", kv_dtype="fp8")
    summary, why = calibration_status(section(2, 0.01, None, {"mbu": 0.7, "no_such_field": 1}, on=other), inputs)
    assert summary is None
    assert why == (
        "not calibrated: the plan's calibration holds for what it was fitted on (model Other-Model -> "
        "Llama-3.3-70B-Instruct; gpu a100-sxm -> h100-sxm; weight_dtype bf16 (the checkpoint's) -> fp8; kv_dtype fp8 "
        f"-> bf16 (the checkpoint's); mbu 0.7 -> {inputs.deployment.mbu}; no_such_field 1 -> None)"
    )
    # Unset, 'auto' and the checkpoint's own dtype are one dtype: naming it does not undo a calibration.
    same = CalibratedOn(
        model="Llama-3.3-70B-Instruct", gpu="h100-sxm", tp=inputs.deployment.tp, weight_dtype="fp8", kv_dtype=None
    )
    assert calibration_status(section(2, 0.01, None, {}, on=same), inputs)[1] is None


@pytest.mark.parametrize(("fitted_under", "shown"), [(None, "unrecorded"), (1, "1")])
def test_a_calibration_under_an_earlier_engine_model_no_longer_holds(inputs, fitted_under, shown):
    # Same deployment, same values: what changed is what the values mean (mfu_scale, the per-layer prefill cost).
    mbu = inputs.deployment.mbu
    summary, why = calibration_status(section(2, 0.01, 0.02, {"mbu": mbu}, engine_model=fitted_under), inputs)
    assert summary is None
    assert why == (
        "not calibrated: the plan's calibration holds for what it was fitted on (engine model revision "
        f"{shown} -> 2: the same values now predict other figures; re-run quotacalc calibrate)"
    )


def test_a_log_after_a_benchmark_under_an_earlier_engine_model_starts_afresh():
    old = section(6, 0.01, 0.02, {"mbu": 0.7}, engine_model=None)
    log = section(0, None, None, {"kv_pool_tokens": 1000}, files=("s.log",))
    assert merge_provenance(old, log) == log


def test_status_when_the_calibration_holds(inputs):
    mbu = inputs.deployment.mbu
    summary, why = calibration_status(section(2, 0.01, 0.02, {"mbu": mbu}, files=("b.csv", "s.log")), inputs)
    assert why is None
    assert summary == {
        "covers": None,
        "sources": ["b.csv", "s.log"],
        "rows": 2,
        "fit_rms_error": 0.01,
        "leave_one_out_rms_error": 0.02,
        "parameters": {"mbu": mbu},
        "quotacalc_version": "1.0",
    }
    assert calibration_status(None, inputs) == (None, None)


@pytest.mark.parametrize(
    ("concurrency", "context_tokens", "note"),
    [
        ((1, 128), (1000, 2300), None),  # the priced batch 128 and context 1,700 inside: nothing to say
        ((128, 128), (1700, 1700), None),  # the edges are covered
        ((1, 100), (1000, 2300), "batch 128 (runs: 1-100)"),
        ((1, 128), (1701, 2300), "context 1,700 (runs: 1,701-2,300)"),
        ((1, 127), (200, 1699), "batch 128 (runs: 1-127) and context 1,700 (runs: 200-1,699)"),
    ],
)
def test_a_calibration_used_outside_its_runs_says_so(inputs, concurrency, context_tokens, note):
    assert (inputs.deployment.batch, inputs.deployment.context) == (128, 1700)
    covers = CalibratedRange(concurrency=concurrency, context_tokens=context_tokens)
    mbu = inputs.deployment.mbu
    summary, why = calibration_status(section(2, 0.01, 0.02, {"mbu": mbu}, covers=covers), inputs)
    # Still calibrated (the deployment is the one fitted), with a warning where it extrapolates.
    assert summary["covers"] == {"concurrency": list(concurrency), "context_tokens": list(context_tokens)}
    if note is None:
        assert why is None
    else:
        assert why == (
            f"extrapolated: the calibration's runs do not cover {note}; the fitted values may not hold there "
            "(calibrate on runs that include it)"
        )


def test_a_log_after_a_benchmark_keeps_what_the_benchmark_covered():
    covers = CalibratedRange(concurrency=(1, 64), context_tokens=(500, 4000))
    bench = section(6, 0.01, 0.02, {"mbu": 0.7}, covers=covers).model_copy(update={"ttft_under_load": "ignore"})
    merged = merge_provenance(bench, section(0, None, None, {"kv_pool_tokens": 1000}, files=("s.log",)))
    assert (merged.covers, merged.ttft_under_load) == (covers, "ignore")
    refit = merge_provenance(bench, section(1, 0.03, None, {"mbu": 0.75}, covers=None))
    assert (refit.covers, refit.ttft_under_load) == (None, None)


def test_bounds_are_the_documented_ones():
    assert BOUNDS["mfu"] == (0.02, 1.0) and BOUNDS["sequence_overhead_s"] == (0.0, 1e-3)
    assert np.isfinite(list(PRIOR_SPREAD.values())).all()


def test_a_figure_a_hundred_times_off_is_a_unit_slip(inputs):
    # Milliseconds in a seconds column: a TTFT 1,000 times the prediction is refused before any fit.
    (point,) = synthetic(inputs, TRUTH, [(1, 2000, 200)], itl=False)
    slipped = point.model_copy(update={"ttft_s": point.ttft_s * 1000})
    with pytest.raises(QuotacalcError) as refused:
        calibrate(inputs, [slipped], parameters=["mfu"])
    assert (
        refused.value.field == f"{point.row}: ttft_s" and "milliseconds in a seconds column?" in refused.value.problem
    )
    fast = point.model_copy(update={"ttft_s": point.ttft_s / 1000})
    with pytest.raises(QuotacalcError) as refused:
        calibrate(inputs, [fast], parameters=["mfu"])
    assert "seconds read as milliseconds?" in refused.value.problem


def test_first_tokens_of_one_prompt_length_say_mfu_was_fitted_alone(inputs):
    one_length = synthetic(inputs, TRUTH, [(1, 1000, 200), (8, 1000, 200)])
    result = calibrate(inputs, one_length)
    assert "mfu" in result.fitted_values and "request_overhead_s" not in result.fitted_values
    assert (
        "first tokens of one prompt length (1,000 tokens) fit MFU with request_overhead_s held at 0.003 s: they "
        "cannot tell the two apart, and TTFTs of other prompt lengths are extrapolated (add runs at a second prompt "
        "length to fit both)"
    ) in result.warnings
    # Two prompt lengths fit both; a --fit list is the user's choice: nothing to say either way.
    two_lengths = synthetic(inputs, TRUTH, [(1, 1000, 200), (1, 4000, 200)])
    assert not any("one prompt length" in line for line in calibrate(inputs, two_lengths).warnings)
    chosen = calibrate(inputs, one_length, parameters=["mfu"])
    assert not any("one prompt length" in line for line in chosen.warnings)
