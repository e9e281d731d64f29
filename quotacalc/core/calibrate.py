"""Fit a deployment's efficiencies and engine overheads to the user's own benchmark.

Each benchmark point is a closed-loop run at a fixed concurrency with mean prompt and output lengths,
and its mean time to first token and mean inter-token latency. The replica model predicts both
(:func:`predict_itl_s`, :func:`predict_ttft_s`); a bounded, robust least-squares fit
(``scipy.optimize.least_squares``, ``loss="soft_l1"``) moves the chosen deployment fields until the
relative errors are smallest. A vLLM start-up log gives the KV pool: the runtime reserve follows
from "Available KV cache memory", the measured pool from "GPU KV cache size".

Pure: no file reads, no printing. scipy is imported inside :func:`calibrate` only, so that the
other commands do not pay for it at start-up.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Literal, cast

from pydantic import BaseModel, ConfigDict, Field

from quotacalc.core.benchmark import closed_loop
from quotacalc.core.deployment import GENERIC_ENGINE, GIB, Deployment
from quotacalc.errors import QuotacalcError

if TYPE_CHECKING:
    from quotacalc.core.pricing_inputs import PricingInputs
    from quotacalc.core.replica import ReplicaModel

#: Deployment fields a fit may move, with the interval it keeps them in. The bounds are physical
#: (an efficiency is a share of the peak) or generous (no engine spends 50 ms per step by itself).
BOUNDS: dict[str, tuple[float, float]] = {
    "mfu": (0.02, 1.0),
    "mbu": (0.05, 1.0),
    "step_overhead_s": (0.0, 0.05),
    # What one layer adds to every forward pass: microseconds.
    "layer_overhead_s": (0.0, 1e-3),
    "request_overhead_s": (0.0, 2.0),
    # One NCCL all-reduce of a decode step's activations: microseconds, not milliseconds.
    "allreduce_latency_s": (0.0, 1e-3),
    # What each sequence of a decode batch adds to a step (sampling, detokenisation): microseconds.
    "sequence_overhead_s": (0.0, 1e-3),
    # What one routed-expert slot of one MoE layer adds to a forward pass: microseconds.
    "moe_slot_overhead_s": (0.0, 1e-4),
    # What one layer adds to a prefill pass: microseconds, about a millisecond where prefill runs eagerly.
    "prefill_layer_overhead_s": (0.0, 5e-3),
}
#: The size of a typical change of each parameter: the optimiser's scale, and the identifiability test's.
_SCALE = {
    "mfu": 0.1,
    "mbu": 0.1,
    "step_overhead_s": 1e-3,
    "layer_overhead_s": 1e-5,
    "request_overhead_s": 1e-2,
    "allreduce_latency_s": 1e-5,
    "sequence_overhead_s": 1e-5,
    "moe_slot_overhead_s": 1e-6,
    "prefill_layer_overhead_s": 1e-4,
}
#: How far a parameter plausibly sits from its default: the unit of the fit's pull towards the default.
PRIOR_SPREAD = {
    "mfu": 0.2,
    "mbu": 0.2,
    "step_overhead_s": 3e-3,
    "layer_overhead_s": 2e-5,
    "request_overhead_s": 3e-2,
    "allreduce_latency_s": 2e-5,
    "sequence_overhead_s": 2e-5,
    "moe_slot_overhead_s": 2e-6,
    "prefill_layer_overhead_s": 5e-4,
}
#: A parameter one spread from its starting value costs what a 0.3% error on one measured figure costs.
PRIOR_WEIGHT = 0.003
#: Beyond this many runs the fit's cost, not its accuracy, grows: a sweep has tens of runs.
MAX_POINTS = 1000
#: Leave-one-out refits once per point: up to this many points (quadratic cost beyond).
MAX_LEAVE_ONE_OUT_POINTS = 60
#: A TTFT run at concurrency > 1 is simulated (core/benchmark.py) at each step of the fit: its cost grows
#: with the prefill chunks of all its clients; 20,000 is 2,500 clients of 64K-token prompts (~0.1 s a run).
MAX_SIMULATED_PREFILL_CHUNKS = 20_000
#: soft_l1's scale: residuals (relative errors) beyond ~5% count less than quadratically, so one
#: bad run (a noisy neighbour, a warm-up) does not drag the fit.
ROBUST_SCALE = 0.05

Quantity = Literal["ttft_s", "itl_s"]
#: How a TTFT measured at concurrency > 1 is used: predicted as a lock-step closed loop and fitted, or ignored.
TtftUnderLoad = Literal["lockstep", "ignore"]


class BenchmarkPoint(BaseModel):
    """One closed-loop benchmark run: ``concurrency`` requests in flight, and what the client measured."""

    model_config = ConfigDict(defer_build=True, frozen=True, extra="forbid")

    source: str = Field(description="the file it was read from")
    row: str = Field(description="where in the file: 'row 3', 'benchmarks[2]', 'line 4'")
    # The upper bounds are far beyond any engine (a replica runs hundreds of sequences, contexts of
    # millions of tokens): past them a figure is a unit mix-up or a corrupt file, not a benchmark.
    concurrency: int = Field(ge=1, le=100_000, description="requests in flight (vllm bench serve --max-concurrency)")
    prompt_tokens: float = Field(ge=1, le=100_000_000, description="mean prompt tokens per request")
    output_tokens: float = Field(ge=1, le=100_000_000, description="mean output tokens per request")
    ttft_s: float | None = Field(None, ge=1e-5, le=86_400, description="mean time to first token, s")
    itl_s: float | None = Field(None, ge=1e-6, le=3_600, description="mean inter-token latency, s")
    model: str | None = Field(None, max_length=1000, description="the model the file says it benchmarked (model_id)")
    file_keys: dict[str, str] = Field(
        default_factory=dict, description="the file's own key of a figure (ttft_s -> ttft_ms), for its errors"
    )
    varied_lengths: str | None = Field(
        None,
        max_length=200,
        description="why the file says its requests' lengths varied ('dataset_name sharegpt'), where it says so",
    )

    def measured(self) -> dict[str, float]:
        return {name: value for name in ("ttft_s", "itl_s") if (value := getattr(self, name)) is not None}


class KvPoolReading(BaseModel):
    """What an engine's start-up log says about the KV pool (vLLM's or SGLang's lines)."""

    model_config = ConfigDict(defer_build=True, frozen=True, extra="forbid")

    source: str
    #: The engine profile whose lines the log has: generic (vLLM) or sglang.
    engine: str = GENERIC_ENGINE
    kv_pool_tokens: int | None = Field(
        None, ge=1, description="'GPU KV cache size: N tokens' (SGLang: '#tokens: N'), per replica"
    )
    available_kv_gib: float | None = Field(
        None, gt=0, description="'Available KV cache memory: X GiB' (SGLang: K + V size), per GPU"
    )
    max_model_len: int | None = Field(
        None, ge=1, description="the engine's max_model_len ('max_seq_len=N' in its config line), tokens"
    )
    memory_utilization: float | None = Field(
        None,
        gt=0,
        le=1,
        description="the share the pool was sized at: SGLang's server_args mem_fraction_static, vLLM's "
        "gpu_memory_utilization (its 'non-default args' line, 0.9 where that line omits it)",
    )
    tp: int | None = Field(
        None, ge=1, description="SGLang's server_args tp_size, vLLM's tensor_parallel_size (its config line)"
    )


class FittedParameter(BaseModel):
    model_config = ConfigDict(defer_build=True, frozen=True)

    name: str
    before: float
    after: float
    lower: float
    upper: float
    at_bound: bool


class PointFit(BaseModel):
    """One measured figure: predicted before and after the fit, and when fitted without its point."""

    model_config = ConfigDict(defer_build=True, frozen=True)

    source: str
    row: str
    concurrency: int
    prompt_tokens: float
    output_tokens: float
    quantity: Quantity
    measured: float
    predicted_before: float
    predicted_after: float
    error_before: float
    error_after: float
    #: Relative error of the prediction when the fit leaves this point out; None with one point.
    leave_one_out_error: float | None


class KvPoolFit(BaseModel):
    model_config = ConfigDict(defer_build=True, frozen=True)

    source: str
    kv_pool_tokens: int | None
    available_kv_gib: float | None
    runtime_reserve_gib: float | None
    kv_pool_measured_with: dict[str, object] | None
    note: str
    #: Set when the log's bytes per token do not match this deployment's: likely another deployment's log.
    mismatch: str | None = None
    #: Set when the reserve the log implies is more than an engine keeps (MAX_RESERVE_SHARE of the GPU).
    implausible_reserve: str | None = None


class CalibrationResult(BaseModel):
    """The fit, every point's error, and the deployment with the fitted values."""

    model_config = ConfigDict(defer_build=True, frozen=True)

    parameters: tuple[FittedParameter, ...]
    points: tuple[PointFit, ...]
    #: Root mean square of the relative errors after the fit (before: at the deployment's values).
    rms_error_before: float | None
    rms_error_after: float | None
    rms_leave_one_out_error: float | None
    kv_pool: KvPoolFit | None
    #: The fields to write into the plan: the fitted parameters, rounded, and the KV pool's.
    fitted_values: dict[str, object]
    deployment: Deployment
    warnings: tuple[str, ...]
    #: What the fit did with TTFTs measured at concurrency > 1 (:data:`TtftUnderLoad`).
    ttft_under_load: TtftUnderLoad = "lockstep"


# --------------------------------------------------------------------------- predictions


def predict_itl_s(model: ReplicaModel, point: BenchmarkPoint) -> float:
    """Mean inter-token latency of a closed-loop run at ``point.concurrency``: the replica model's
    loaded ITL (a decode step of the batch with the engine's overheads, plus the other requests'
    prefills riding in it)."""
    return model.loaded_itl_s(point.concurrency, point.prompt_tokens, point.output_tokens)


def predict_ttft_s(model: ReplicaModel, point: BenchmarkPoint) -> float:
    """Mean time to first token of a closed-loop run at ``point.concurrency``.

    At concurrency 1, the replica model's TTFT of the prompt (request overhead, prefill chunks on an
    idle replica). Above, the run simulated from a lock-step start (core/benchmark.py): with the
    fixed lengths of ``vllm bench serve``'s random dataset or GuideLLM's synthetic data every client's
    prompt is prefilled with the others', so a request waits for theirs (vLLM's runs: within 14%,
    where the idle-replica TTFT is 62-89% short; docs/accuracy.md).
    """
    if point.concurrency == 1:
        return model.ttft_s(point.prompt_tokens)
    return closed_loop(model, point.concurrency, point.prompt_tokens, point.output_tokens, "lockstep").mean_ttft_s


def check_simulated_runs(max_num_batched_tokens: int, points: Sequence[BenchmarkPoint]) -> None:
    """Refuse a TTFT run too large to simulate many times in a fit (its clients' prefill chunks, summed)."""
    for point in points:
        if point.ttft_s is None or point.concurrency == 1:
            continue
        chunks = point.concurrency * math.ceil(point.prompt_tokens / max_num_batched_tokens)
        if chunks > MAX_SIMULATED_PREFILL_CHUNKS:
            raise QuotacalcError(
                f"{point.concurrency:,} clients of {point.prompt_tokens:,.0f}-token prompts: {chunks:,} prefill "
                f"chunks a cycle, above the {MAX_SIMULATED_PREFILL_CHUNKS:,} calibrate simulates",
                source=point.source,
                field=f"{point.row}: concurrency" if point.row else "concurrency",
                fix="calibrate on runs of fewer clients or shorter prompts",
            )


PREDICTORS: dict[str, Callable[[ReplicaModel, BenchmarkPoint], float]] = {
    "ttft_s": predict_ttft_s,
    "itl_s": predict_itl_s,
}


def _with(inputs: PricingInputs, values: dict[str, float]) -> tuple[PricingInputs, Deployment]:
    deployment = inputs.deployment.model_copy(update=values)
    return inputs.model_copy(update={"deployment": deployment}), deployment


def predictions(inputs: PricingInputs, values: dict[str, float], points: Sequence[BenchmarkPoint]) -> list[float]:
    """Each measured figure of each point, predicted with the deployment's fields set to ``values``."""
    from quotacalc.core.replica import replica_model

    changed, _ = _with(inputs, values)
    model = replica_model(changed, 0.0)
    return [PREDICTORS[quantity](model, point) for point in points for quantity in point.measured()]


class _Predictor:
    """:func:`predictions` for many parameter values: the replica model is built once.

    MFU and MBU enter the model only as factors of its compute rate and bandwidth, and the
    overheads are coefficients of their own, so new values replace those few coefficients instead
    of rebuilding every layer's (tests check both agree).
    """

    def __init__(self, inputs: PricingInputs) -> None:
        from quotacalc.core.replica import replica_model

        self.deployment = inputs.deployment
        self.model = replica_model(inputs, 0.0)
        # The model holds the MoE layers' time per forward pass; the deployment, its time per routed-expert slot.
        from quotacalc.core.replica import moe_slots

        self.moe_slots = moe_slots(inputs.arch, inputs.deployment.tp)
        self.layers = len(inputs.arch.layers)

    def __call__(self, values: dict[str, float], points: Sequence[BenchmarkPoint]) -> list[float]:
        from dataclasses import replace

        base, model = self.deployment, self.model
        overheads: dict[str, Any] = {name: value for name, value in values.items() if name not in ("mfu", "mbu")}
        if "moe_slot_overhead_s" in overheads:
            overheads["moe_overhead_s"] = overheads.pop("moe_slot_overhead_s") * self.moe_slots
        if "prefill_layer_overhead_s" in overheads:
            overheads["prefill_overhead_s"] = overheads.pop("prefill_layer_overhead_s") * self.layers
        if "step_overhead_s" in overheads or "layer_overhead_s" in overheads:
            # The model holds one fixed time a forward pass: the step's own and each layer's.
            step = overheads.pop("step_overhead_s", base.step_overhead_s)
            overheads["step_overhead_s"] = step + overheads.pop("layer_overhead_s", base.layer_overhead_s) * self.layers
        model = replace(
            model,
            compute_flops_per_s=model.compute_flops_per_s * values.get("mfu", base.mfu) / base.mfu,
            bandwidth_bytes_per_s=model.bandwidth_bytes_per_s * values.get("mbu", base.mbu) / base.mbu,
            **overheads,
        )
        return [PREDICTORS[quantity](model, point) for point in points for quantity in point.measured()]


# --------------------------------------------------------------------------- the fit


def _measurements(points: Sequence[BenchmarkPoint]) -> list[float]:
    return [value for point in points for value in point.measured().values()]


def _fit(
    predict: _Predictor, names: Sequence[str], start: Sequence[float], points: Sequence[BenchmarkPoint]
) -> tuple[list[float], object]:
    """Bounded soft-L1 least squares on relative errors, with a weak pull towards the starting values.

    The pull (:data:`PRIOR_WEIGHT` per :data:`PRIOR_SPREAD`) decides what the points leave open: two
    runs cannot separate four parameters, and without it a trade-off the data do not see (MFU
    against the request overhead from one TTFT) lands anywhere along it. Points that do measure a
    parameter outweigh it: one spread costs what a 0.3% error on one figure costs.
    Returns the parameters and scipy's result (its ``jac`` rows: the points, then the pull).
    """
    import numpy as np
    from scipy.optimize import least_squares

    measured = np.array(_measurements(points))
    prior = np.array(start, dtype=float)
    spread = np.array([PRIOR_SPREAD[name] for name in names])

    def residuals(x):
        predicted = np.array(predict(dict(zip(names, x, strict=True)), points))
        return np.concatenate([predicted / measured - 1, PRIOR_WEIGHT * (x - prior) / spread])

    lower = [BOUNDS[name][0] for name in names]
    upper = [BOUNDS[name][1] for name in names]
    result = least_squares(
        residuals,
        x0=np.clip(start, lower, upper),
        bounds=(lower, upper),
        loss="soft_l1",
        f_scale=ROBUST_SCALE,
        x_scale=[_SCALE[name] for name in names],
        method="trf",
        # The residuals are relative errors: 1e-10 is far below any benchmark's noise.
        xtol=1e-10,
        ftol=1e-12,
        gtol=1e-12,
        max_nfev=500,
    )
    return [float(value) for value in result.x], result


def _rms(errors: Sequence[float]) -> float | None:
    return math.sqrt(sum(error * error for error in errors) / len(errors)) if errors else None


def _identifiability_warnings(names: Sequence[str], jacobian) -> list[str]:
    """Parameters the points cannot tell apart: the fit's Jacobian (in each parameter's scale) is near-singular."""
    import numpy as np

    if len(names) < 2:
        return []
    scaled = np.asarray(jacobian) * np.array([_SCALE[name] for name in names])
    figures = scaled.shape[0]
    if figures < len(names):
        # Fewer equations than unknowns: some direction is free whatever the singular values say.
        return [
            f"{figures} measured figures cannot determine {len(names)} parameters ({', '.join(names)}): the fit "
            "keeps the undetermined ones near their starting values; add runs at other concurrencies and prompt "
            "lengths, or fit fewer parameters (--fit)"
        ]
    _, singular, vt = np.linalg.svd(scaled, full_matrices=False)
    if singular[0] == 0 or singular[-1] / singular[0] > 1e-4:
        return []
    weak = vt[-1]
    involved = [name for name, weight in zip(names, weak, strict=True) if abs(weight) > 0.3]
    return [
        f"these points cannot tell {' and '.join(involved)} apart (the fit keeps them near their starting "
        "values): add runs at other concurrencies and prompt lengths"
    ]


def _current(inputs: PricingInputs, name: str) -> float:
    """A parameter's value before the fit: the deployment's, or (all-reduce latency) the GPU catalog's."""
    value = getattr(inputs.deployment, name)
    if value is None and name == "allreduce_latency_s":
        value = inputs.gpu.allreduce_latency_s
    return float(value)


def informed_parameters(points: Sequence[BenchmarkPoint], inputs: PricingInputs | None = None) -> tuple[str, ...]:
    """The parameters the points can determine, each from what it scales.

    - TTFT: ``mfu`` where a measured prompt's prefill is compute-bound on this deployment (its first chunk's FLOP
      time above one read of the weights, at the deployment's own MFU); where every one is memory-bound its time
      does not depend on MFU, and it gives the fixed ``request_overhead_s`` instead. Two prompt lengths give both.
    - ITL: ``mbu``; once runs differ in concurrency, ``sequence_overhead_s`` (what each sequence adds to a step:
      the slope with batch, which MBU would otherwise absorb, pushing the step overhead below zero at
      concurrency 1); once runs at one concurrency differ in context, ``step_overhead_s`` (the intercept beside
      MBU's slope with context).

    Without ``inputs`` every TTFT counts as compute-bound.
    """
    names: list[str] = []
    lengths = {point.prompt_tokens for point in points if point.ttft_s is not None}
    if lengths:
        if inputs is None or _any_compute_bound_prefill(inputs, lengths):
            names += ["mfu", "request_overhead_s"] if len(lengths) >= 2 else ["mfu"]
        else:
            names.append("request_overhead_s")
    shapes = {
        (point.concurrency, point.prompt_tokens + point.output_tokens / 2)
        for point in points
        if point.itl_s is not None
    }
    if shapes:
        names.append("mbu")
        if len({concurrency for concurrency, _ in shapes}) >= 2:
            names.append("sequence_overhead_s")
        contexts: dict[int, set[float]] = {}
        for concurrency, context in shapes:
            contexts.setdefault(concurrency, set()).add(context)
        if any(len(seen) >= 2 for seen in contexts.values()):
            names.append("step_overhead_s")
    return tuple(name for name in BOUNDS if name in names)


def one_prompt_length_warnings(
    points: Sequence[BenchmarkPoint], names: Sequence[str], inputs: PricingInputs, *, chosen: bool
) -> list[str]:
    """Where calibrate chose MFU alone from first tokens of one prompt length: those cannot separate it from the
    request overhead, held at its starting value, so a long prompt's TTFT is extrapolated along that choice."""
    lengths = {point.prompt_tokens for point in points if point.ttft_s is not None}
    if not chosen or len(lengths) != 1 or "mfu" not in names or "request_overhead_s" in names:
        return []
    (length,) = lengths
    return [
        f"first tokens of one prompt length ({length:,.0f} tokens) fit MFU with request_overhead_s held at "
        f"{_current(inputs, 'request_overhead_s'):g} s: they cannot tell the two apart, and TTFTs of other prompt "
        "lengths are extrapolated (add runs at a second prompt length to fit both)"
    ]


def compute_bound_prompt_tokens(inputs: PricingInputs) -> int | None:
    """The shortest prompt whose first prefill chunk takes longer to compute than to read the weights once on this
    deployment (the shortest TTFT run that measures MFU), or None where no chunk of the engine's budget does."""
    from quotacalc.core.replica import replica_model

    model = replica_model(inputs, 0.0)
    read_s = model.weight_bytes_per_gpu / model.bandwidth_bytes_per_s
    budget = model.max_num_batched_tokens
    if model.prefill_compute_s(budget) <= read_s:
        return None
    shortest, longest = 1, budget  # compute-bound at longest; FLOP time grows with the chunk
    while shortest < longest:
        middle = (shortest + longest) // 2
        if model.prefill_compute_s(middle) > read_s:
            longest = middle
        else:
            shortest = middle + 1
    return shortest


def unmeasured_mfu_warnings(
    points: Sequence[BenchmarkPoint], names: Sequence[str], inputs: PricingInputs, *, chosen: bool
) -> list[str]:
    """Where calibrate chose its parameters and none of the runs measures compute speed (no first token of a
    compute-bound prompt): MFU keeps its starting value, and with it every prompt token's price and long prompts'
    first tokens, which the runs never tested."""
    if not chosen or "mfu" in names or not points:
        return []
    shortest = compute_bound_prompt_tokens(inputs)
    mfu = _current(inputs, "mfu")
    if shortest is None:
        return []
    measured = sorted({point.prompt_tokens for point in points if point.ttft_s is not None})
    what = (
        f"the first tokens measured, of {' and '.join(f'{length:,.0f}' for length in measured)}-token prompts, are "
        "memory-bound"
        if measured
        else "no first token is measured"
    )
    # Just past the ridge a prefill's time is as much the weight read and fixed costs as FLOPs (docs/accuracy.md):
    # a prompt several times longer measures MFU cleanly.
    clean = float(f"{max(4 * shortest, 1000):.2g}")
    return [
        f"no run measures compute speed ({what}): mfu stays at {mfu:g}, and with it the prompt token's price and "
        f"long prompts' first tokens; add a TTFT run of a prompt well past {shortest:,} tokens, where this "
        f"deployment's prefill turns compute-bound ({clean:,.0f} or more), to fit it"
    ]


def _any_compute_bound_prefill(inputs: PricingInputs, prompt_lengths: set[float]) -> bool:
    """Whether any prompt's first prefill chunk takes longer to compute than to read the weights once: a prompt at
    least the ridge's length (a chunk's FLOP time grows with its tokens, and the ridge is within one chunk)."""
    shortest = compute_bound_prompt_tokens(inputs)
    return shortest is not None and any(length >= shortest for length in prompt_lengths)


def _snap(name: str, value: float) -> float:
    """A fitted value, rounded; one within a millionth of its scale of a bound is that bound."""
    for bound in BOUNDS[name]:
        if abs(value - bound) < 1e-6 * _SCALE[name]:
            return bound
    return _significant(value)


def _significant(value: float, digits: int = 4) -> float:
    """Round to a few significant digits: the plan stays readable and the same fit writes the same bytes."""
    if value == 0:
        return 0.0
    return float(f"{value:.{digits}g}")


def logged_pool_bytes_per_gpu(inputs: PricingInputs, kv_pool_tokens: int, max_model_len: int | None = None) -> float:
    """KV bytes per GPU behind a logged 'GPU KV cache size': tokens × KV bytes per token, or for a model of
    several cache kinds the blocks vLLM 0.21+'s count stands for (core/kv_groups.py) at ``max_model_len`` (the
    log's; None: the deployment's)."""
    from quotacalc.core import kv_groups, memory
    from quotacalc.core.price import vllm_max_model_len

    arch, deployment = inputs.arch, inputs.deployment
    kv_b, state_b = inputs.kv_dtype.bytes_per_element, inputs.state_dtype.bytes_per_element
    layout = kv_groups.hybrid_layout(arch, kv_b, state_b, deployment.tp)
    if layout is None:
        return kv_pool_tokens * memory.kv_bytes_per_token_per_gpu(arch, kv_b, deployment.tp)
    batched = memory.max_num_batched_tokens(deployment, inputs.gpu)
    length = max_model_len or vllm_max_model_len(arch, deployment)
    blocks = layout.blocks_for_logged_tokens(kv_pool_tokens, length, batched)
    return blocks * layout.bytes_per_block


#: The most of a GPU's memory a start-up log's runtime reserve may take before it is read as another deployment's log.
MAX_RESERVE_SHARE = 0.25


def _check_logged_settings(inputs: PricingInputs, reading: KvPoolReading) -> float:
    """A log that states its TP or memory share (SGLang's server_args) holds only for a deployment run so; the
    deployment's share of memory (given, or its engine's default)."""
    from quotacalc.core import kv_groups, memory

    deployment = inputs.deployment
    if reading.tp is not None and reading.tp != deployment.tp:
        raise QuotacalcError(
            f"the log ran at TP {reading.tp}, the deployment is TP {deployment.tp}",
            source=reading.source,
            fix=f"give --tp {reading.tp}, or the log of this deployment",
        )
    share, source = memory.memory_utilization(deployment, inputs.gpu)
    # Three decimals: SGLang's own rounding of its default.
    if reading.memory_utilization is not None and abs(reading.memory_utilization - share) > 5e-4:
        setting = "gpu_memory_utilization" if reading.engine == GENERIC_ENGINE else "mem_fraction_static"
        raise QuotacalcError(
            f"the log's pool was sized at {setting} {reading.memory_utilization:g}, the deployment's share "
            f"is {share:g} ({source})",
            source=reading.source,
            fix=f"give --memory-utilization {reading.memory_utilization:g} (the share the engine ran at)",
        )
    kv_b, state_b = inputs.kv_dtype.bytes_per_element, inputs.state_dtype.bytes_per_element
    if reading.engine != GENERIC_ENGINE and kv_groups.hybrid_layout(inputs.arch, kv_b, state_b, deployment.tp):
        raise QuotacalcError(
            f"{inputs.arch.name} keeps windowed or state layers, which SGLang lays out its own way (not read)",
            source=reading.source,
            fix="give the engine's logged pool as --kv-pool-tokens",
        )
    return share


def kv_pool_fit(inputs: PricingInputs, reading: KvPoolReading) -> KvPoolFit:
    """The runtime reserve a start-up log implies, and the measured pool with the deployment it holds for.

    vLLM sizes the pool as memory_utilization × HBM − weights − everything else (activations of the
    profiling run, CUDA graphs, communication buffers): the reserve is that last term. SGLang sizes it as
    mem_fraction_static × HBM − weights − its fixed buffers (activations live outside the fraction): the same
    subtraction at the share its server_args state, which must be the deployment's.
    """

    from quotacalc.core import kv_groups
    from quotacalc.core.weights import engine_extra_bytes_per_gpu

    deployment, gpu = inputs.deployment, inputs.gpu
    utilization = _check_logged_settings(inputs, reading)

    # The same resident weights price subtracts, so the reserve fitted here reproduces the log's pool there.
    weight_bytes_per_gpu = inputs.weights.weight_bytes(
        inputs.arch.params_by_group()
    ) / deployment.tp + engine_extra_bytes_per_gpu(inputs.arch, inputs.weights, deployment, gpu)
    budget = utilization * gpu.memory_bytes
    pool_bytes = (
        logged_pool_bytes_per_gpu(inputs, reading.kv_pool_tokens, reading.max_model_len)
        if reading.kv_pool_tokens
        else None
    )
    reserve_gib, note = None, ""
    if reading.available_kv_gib is not None:
        reserve_gib = (budget - weight_bytes_per_gpu - reading.available_kv_gib * GIB) / GIB
        note = "runtime reserve = memory_utilization × HBM − weights per GPU − available KV memory"
    elif pool_bytes:
        reserve_gib = (budget - weight_bytes_per_gpu - pool_bytes) / GIB
        kv_b, state_b = inputs.kv_dtype.bytes_per_element, inputs.state_dtype.bytes_per_element
        if kv_groups.hybrid_layout(inputs.arch, kv_b, state_b, deployment.tp) is None:
            note = "runtime reserve = memory_utilization × HBM − weights per GPU − pool tokens × KV bytes per token per GPU"
        else:
            note = (
                "runtime reserve = memory_utilization × HBM − weights per GPU − the blocks vLLM's logged pool stands "
                "for × their bytes per GPU (its hybrid KV cache manager, vLLM 0.21+'s count)"
            )
    if pool_bytes and pool_bytes > gpu.memory_bytes:
        # The logged token count alone must fit the GPU (the log's KV GiB, where given, is checked against it below).
        raise QuotacalcError(
            f"the log's pool of {reading.kv_pool_tokens:,} tokens needs {pool_bytes / GIB:,.1f} GiB of KV per GPU for "
            f"this deployment, more than {gpu.id}'s {gpu.memory_bytes / GIB:.1f} GiB",
            source=reading.source,
            fix="check that the log is from this model, TP and KV dtype",
        )
    if reserve_gib is not None and reserve_gib < 0:
        raise QuotacalcError(
            f"the log's KV pool is larger than {gpu.id}'s memory less the weights ({reserve_gib:.2f} GiB reserve)",
            source=reading.source,
            fix="check that the log is from this deployment (GPU, TP, weight dtype, gpu-memory-utilization)",
        )
    mismatch = None
    if reading.kv_pool_tokens is not None and reading.available_kv_gib is not None and pool_bytes:
        implied = reading.available_kv_gib * GIB / reading.kv_pool_tokens
        # vLLM's block rounding is a few percent at most.
        if not 0.8 <= reading.available_kv_gib * GIB / pool_bytes <= 1.25:
            mismatch = (
                f"{reading.source}: the log's pool holds {implied:,.0f} B of KV per token per GPU where this "
                f"deployment needs {pool_bytes / reading.kv_pool_tokens:,.0f} B: is the log from this model, TP and "
                "KV dtype?"
            )
    implausible_reserve = None
    if reserve_gib is not None and reserve_gib * GIB > MAX_RESERVE_SHARE * gpu.memory_bytes:
        # Engines keep a few GiB outside the pool (activations, CUDA graphs, buffers); a quarter of the GPU is a log
        # from another GPU (an H100's pool read on an H200), another memory share, or a GPU shared with another
        # process (an offloading connector): said, since the pool is then another deployment's.
        implausible_reserve = (
            f"{reading.source}: the log's pool leaves {reserve_gib:.1f} GiB of {gpu.id}'s {gpu.memory_bytes / GIB:.1f} "
            f"GiB outside the KV pool at a memory share of {utilization:g}, more than an engine keeps: is the log from "
            "this GPU and memory share, on a GPU of its own?"
        )
    measured_with = None
    if reading.kv_pool_tokens is not None:
        measured_with = {
            "model": deployment.model,
            "gpu": gpu.id,
            "tp": deployment.tp,
            "weight_dtype": deployment.weight_dtype,
            "kv_dtype": deployment.kv_dtype,
            "memory_utilization": utilization,
            "max_num_batched_tokens": deployment.max_num_batched_tokens,
            "engine": deployment.engine,
        }
        # Recorded where they change the pool: sharding whole experts moves weights between GPUs, and a state dtype
        # resizes every sequence's state.
        if inputs.arch.moe_layers():
            measured_with["expert_parallel"] = deployment.expert_parallel
        if inputs.arch.keeps_recurrent_state():
            measured_with["state_dtype"] = inputs.state_dtype.name
        kv_b, state_b = inputs.kv_dtype.bytes_per_element, inputs.state_dtype.bytes_per_element
        if reading.max_model_len is not None and kv_groups.hybrid_layout(inputs.arch, kv_b, state_b, deployment.tp):
            # The logged count of windowed or state layers is per request of this length: it holds only there.
            measured_with["max_model_len"] = reading.max_model_len
    return KvPoolFit(
        source=reading.source,
        kv_pool_tokens=reading.kv_pool_tokens,
        available_kv_gib=reading.available_kv_gib,
        runtime_reserve_gib=None if reserve_gib is None else _significant(reserve_gib),
        kv_pool_measured_with=measured_with,
        note=note,
        mismatch=mismatch,
        implausible_reserve=implausible_reserve,
    )


def _point_fits(
    points: Sequence[BenchmarkPoint],
    before: Sequence[float],
    after: Sequence[float],
    left_out: list[dict[str, float]] | None,
) -> list[PointFit]:
    fits, index = [], 0
    for number, point in enumerate(points):
        for quantity, value in point.measured().items():
            alone = left_out[number][quantity] if left_out is not None else None
            fits.append(
                PointFit(
                    source=point.source,
                    row=point.row,
                    concurrency=point.concurrency,
                    prompt_tokens=point.prompt_tokens,
                    output_tokens=point.output_tokens,
                    quantity=quantity,
                    measured=value,
                    predicted_before=before[index],
                    predicted_after=after[index],
                    error_before=before[index] / value - 1,
                    error_after=after[index] / value - 1,
                    leave_one_out_error=None if alone is None else alone / value - 1,
                )
            )
            index += 1
    return fits


def _model_key(name: str) -> str:
    """A model name's last path part, lower case: 'meta-llama/Llama-3.3-70B-Instruct' -> 'llama-3.3-70b-instruct'."""
    return name.replace("\\", "/").rstrip("/").rsplit("/", 1)[-1].lower()


#: A measured figure this many times the deployment's prediction (or this many times smaller) at the starting values
#: is not an engine's spread (the worst public run seen is 2x off, docs/accuracy.md) but a unit slip (1,000x) or a
#: file from another deployment: two orders of magnitude.
UNIT_SLIP_RATIO = 100.0


def check_units(points: Sequence[BenchmarkPoint], predicted: Sequence[float]) -> None:
    """Refuse a figure ``UNIT_SLIP_RATIO`` times off the prediction: milliseconds in a seconds column, a swapped
    TTFT and ITL, or a file from another deployment; fitting it would drive a parameter to its bound."""
    index = 0
    for point in points:
        for quantity, value in point.measured().items():
            ratio = value / predicted[index]
            index += 1
            if 1 / UNIT_SLIP_RATIO <= ratio <= UNIT_SLIP_RATIO:
                continue
            times = f"{ratio:,.0f} times" if ratio > 1 else f"1/{1 / ratio:,.0f} of"
            key = point.file_keys.get(quantity, quantity)
            # In the file's own unit: a millisecond column's figure in ms.
            scale, unit = (1000, "ms") if key.endswith("_ms") else (1, "s")
            hint = (
                ("milliseconds in a seconds column?" if ratio > 1 else "seconds read as milliseconds?")
                if unit == "s"
                else ("microseconds in a milliseconds column?" if ratio > 1 else "seconds in a milliseconds column?")
            )
            raise QuotacalcError(
                f"{key} {value * scale:g} {unit} is {times} what this deployment predicts "
                f"({predicted[index - 1] * scale:.4g} {unit}): {hint}",
                source=point.source,
                field=f"{point.row}: {key}" if point.row else key,
                fix="check the column's unit (ttft_ms / itl_ms for milliseconds) and that the file is this deployment's",
            )


def benchmarked_model_warnings(inputs: PricingInputs, points: Sequence[BenchmarkPoint]) -> list[str]:
    """A warning for each benchmarked model that is not the deployment's: its runs calibrate nothing here.

    Names match when one contains the other ('Llama-3.3-70B-Instruct' and
    'RedHatAI/Llama-3.3-70B-Instruct-FP8-dynamic'): quantized checkpoints extend the name.
    """
    ours = {_model_key(inputs.deployment.model), _model_key(inputs.arch.name)}
    warnings = []
    for benchmarked in sorted({point.model for point in points if point.model}):
        theirs = _model_key(benchmarked)
        if not any(mine in theirs or theirs in mine for mine in ours):
            files = ", ".join(sorted({point.source for point in points if point.model == benchmarked}))
            warnings.append(
                f"{files}: benchmarked model '{benchmarked}' is not this deployment's {inputs.arch.name}: "
                "calibrate against the plan of the deployment that ran it (ignore if it is a served alias)"
            )
    return warnings


#: Root mean square relative error of the runs at the defaults above which they probably come from another
#: deployment than the one being calibrated (another TP, GPU or dtype; a TP 4 deployment calibrated on NIM's
#: TP 2 runs is 36% off, with a BF16 cache instead of their FP8 one 34%): above every dense deployment's in docs/accuracy.md but one (TensorRT-LLM 0.9.0's
#: Mistral 7B on H200, 36%, whose step is not bandwidth-bound; the next is 31%). A warning, not an error.
MISMATCH_RMS_ERROR_BEFORE = 0.35


def deployment_mismatch_warning(inputs: PricingInputs, rms_error_before: float | None) -> str | None:
    """A warning when the runs are further from the defaults than a matching deployment has been seen to be."""
    if rms_error_before is None or rms_error_before <= MISMATCH_RMS_ERROR_BEFORE:
        return None
    deployment = inputs.deployment
    return (
        f"the runs are {rms_error_before:.0%} (RMS) from this deployment's defaults, more than all but one dense "
        f"deployment in docs/accuracy.md: check that {inputs.arch.name} at TP {deployment.tp} on {inputs.gpu.id}, "
        f"{inputs.weights.describe(inputs.arch.params_by_group())} weights, {inputs.kv_dtype.name} KV, is what ran them "
        "(a benchmark file does not say; give the plan or flags of that deployment)"
    )


def varied_lengths_warnings(points: Sequence[BenchmarkPoint], ttft_under_load: TtftUnderLoad) -> list[str]:
    """Runs under load whose TTFT is fitted as a lock-step closed loop although their lengths varied.

    Clients of equal requests stay in step (each prefill lands together); varied lengths spread them out,
    so the lock-step TTFT is no prediction of theirs.
    """
    if ttft_under_load != "lockstep":
        return []
    return [
        f"{point.source}: {point.row}: {point.varied_lengths}: its requests' lengths varied, so its TTFT at "
        f"concurrency {point.concurrency} is not a lock-step closed loop's (--ttft-under-load ignore leaves it out)"
        for point in points
        if point.varied_lengths and point.concurrency > 1 and point.ttft_s is not None
    ]


def absent_term_warnings(inputs: PricingInputs, names: Sequence[str]) -> list[str]:
    """Parameters of a term this deployment does not have, which no run can move: MoE slots on a dense model or
    at TP 1, all-reduces at TP 1."""
    from quotacalc.core.replica import allreduces_per_step, moe_slots

    tp = inputs.deployment.tp
    absent = {
        "moe_slot_overhead_s": moe_slots(inputs.arch, tp) == 0,
        "allreduce_latency_s": allreduces_per_step(inputs.arch, tp) == 0,
    }
    unused = [name for name in names if absent.get(name)]
    if not unused:
        return []
    return [
        f"{', '.join(unused)}: {inputs.arch.name} at TP {tp} has no such term (MoE slots need MoE layers and TP > 1, "
        "all-reduces TP > 1), so the runs cannot move it: left at its starting value; drop it from --fit"
    ]


def calibrate(
    inputs: PricingInputs,
    points: Sequence[BenchmarkPoint],
    *,
    parameters: Sequence[str] | None = None,
    kv_reading: KvPoolReading | None = None,
    ttft_under_load: TtftUnderLoad = "lockstep",
    start: PricingInputs | None = None,
) -> CalibrationResult:
    """Fit ``parameters`` (default: those the points measure) to the points; read the pool from the log.

    ``ttft_under_load="ignore"`` leaves out every TTFT measured at concurrency > 1 (runs whose prompt
    lengths varied do not stay in lock-step, and no engine-independent model predicts their TTFT).
    ``start``: the deployment whose values the fit starts from and is pulled towards (default: ``inputs``'s). A
    plan an earlier fit wrote into starts from its values before that fit, so the same runs give the same values
    however often they are fitted.
    """
    if ttft_under_load == "ignore":
        points = [
            point.model_copy(update={"ttft_s": None}) if point.concurrency > 1 else point
            for point in points
            if point.concurrency == 1 or point.itl_s is not None
        ]
    names = tuple(parameters) if parameters is not None else informed_parameters(points, inputs)
    unknown = [name for name in names if name not in BOUNDS]
    if unknown:
        raise QuotacalcError(f"cannot fit {', '.join(unknown)}", field="--fit", fix=f"choose from {', '.join(BOUNDS)}")
    if names and not points:
        raise QuotacalcError("no benchmark points to fit", field="--bench", fix="give a benchmark file")
    if kv_reading is not None and inputs.deployment.engine != kv_reading.engine:
        # A log's pool is its engine's, sized by that engine's memory rules.
        if kv_reading.engine == GENERIC_ENGINE:
            raise QuotacalcError(
                f"a vLLM start-up log measures vLLM's KV pool, not that of engine {inputs.deployment.engine}",
                field="--log",
                fix="calibrate the pool with --engine generic (vLLM), or give the engine's own logged pool as "
                "--kv-pool-tokens",
            )
        raise QuotacalcError(
            f"an SGLang start-up log measures SGLang's KV pool, not that of engine {inputs.deployment.engine}",
            field="--log",
            fix=f"calibrate the pool with --engine {kv_reading.engine}",
        )
    if len(points) > MAX_POINTS:
        raise QuotacalcError(
            f"{len(points):,} benchmark runs: calibrate takes at most {MAX_POINTS:,}",
            field="--bench",
            fix="give one row per run (mean figures), not one per request",
        )
    from quotacalc.core.memory import max_num_batched_tokens

    check_simulated_runs(max_num_batched_tokens(inputs.deployment, inputs.gpu), points)
    before = [_current(start or inputs, name) for name in names]
    check_units(points, predictions(inputs, dict(zip(names, before, strict=True)), points))
    warnings: list[str] = (
        benchmarked_model_warnings(inputs, points)
        + absent_term_warnings(inputs, names)
        + varied_lengths_warnings(points, ttft_under_load)
        + one_prompt_length_warnings(points, names, start or inputs, chosen=parameters is None)
        + unmeasured_mfu_warnings(points, names, start or inputs, chosen=parameters is None)
    )
    after = before
    fitted_values: dict[str, object] = {}
    point_fits: list[PointFit] = []
    parameter_fits: list[FittedParameter] = []
    if names:
        predict = _Predictor(inputs)
        after, result = _fit(predict, names, before, points)
        after = [_snap(name, value) for name, value in zip(names, after, strict=True)]
        warnings += _identifiability_warnings(names, cast(Any, result).jac[: len(_measurements(points))])
        point_fits = _point_fits(
            points,
            predictions(inputs, dict(zip(names, before, strict=True)), points),
            predictions(inputs, dict(zip(names, after, strict=True)), points),
            _leave_one_out(predict, names, before, points),
        )
        if len(points) > MAX_LEAVE_ONE_OUT_POINTS:
            warnings.append(
                f"leave-one-out errors are computed up to {MAX_LEAVE_ONE_OUT_POINTS} runs, not for {len(points)}"
            )
        for name, old, new in zip(names, before, after, strict=True):
            low, high = BOUNDS[name]
            at_bound = new in (low, high)
            if at_bound:
                warnings.append(f"{name} stopped at its bound {new:g}: the model cannot follow these points there")
            parameter_fits.append(
                FittedParameter(name=name, before=old, after=new, lower=low, upper=high, at_bound=at_bound)
            )
            fitted_values[name] = new
    kv = None
    if kv_reading is not None:
        kv = kv_pool_fit(inputs, kv_reading)
        warnings += [note for note in (kv.mismatch, kv.implausible_reserve) if note]
        if kv.runtime_reserve_gib is not None:
            fitted_values["runtime_reserve_gib"] = kv.runtime_reserve_gib
        if kv.kv_pool_tokens is not None:
            fitted_values["kv_pool_tokens"] = kv.kv_pool_tokens
            fitted_values["kv_pool_measured_with"] = kv.kv_pool_measured_with
            recorded = kv.kv_pool_measured_with or {}
            if recorded.get("max_model_len") is not None:
                fitted_values["max_model_len"] = recorded["max_model_len"]
    loo_errors = [fit.leave_one_out_error for fit in point_fits if fit.leave_one_out_error is not None]
    rms_error_after = _rms([fit.error_after for fit in point_fits])
    if names and rms_error_after is not None and rms_error_after > POOR_FIT_RMS:
        warnings.append(
            f"after the fit the runs are still {rms_error_after:.0%} (RMS) from the model: it does not follow them, "
            "and figures priced on these values are no better (check the deployment, or fit fewer values with --fit)"
        )
    rms_error_before = _rms([fit.error_before for fit in point_fits])
    mismatch = deployment_mismatch_warning(inputs, rms_error_before)
    if mismatch:
        warnings.insert(0, mismatch)
    return CalibrationResult(
        parameters=tuple(parameter_fits),
        points=tuple(point_fits),
        rms_error_before=rms_error_before,
        rms_error_after=rms_error_after,
        rms_leave_one_out_error=_rms(loo_errors),
        kv_pool=kv,
        fitted_values=fitted_values,
        deployment=inputs.deployment.model_copy(update=dict(zip(names, after, strict=True))),
        warnings=tuple(warnings),
        ttft_under_load=ttft_under_load,
    )


def _leave_one_out(
    predict: _Predictor, names: Sequence[str], start: Sequence[float], points: Sequence[BenchmarkPoint]
) -> list[dict[str, float]] | None:
    """Each point's figures predicted by a fit on the other points (from the same start, so independent)."""
    if not 2 <= len(points) <= MAX_LEAVE_ONE_OUT_POINTS:
        return None
    out = []
    for left_out, point in enumerate(points):
        others = [other for number, other in enumerate(points) if number != left_out]
        values, _ = _fit(predict, names, start, others)
        predicted = predict(dict(zip(names, values, strict=True)), [point])
        out.append(dict(zip(point.measured(), predicted, strict=True)))
    return out


# --------------------------------------------------------------------------- provenance in the plan


class CalibratedFile(BaseModel):
    model_config = ConfigDict(defer_build=True, frozen=True, extra="forbid")

    path: str = Field(description="as given, relative to the plan's directory when it can be")
    sha256: str = Field(description="of the file's bytes: the same name with other content is another file")
    rows: tuple[str, ...] = Field(description="the rows fitted ('row 3', 'benchmarks[2]'); empty for a log")


class CalibratedOn(BaseModel):
    """The deployment a calibration holds for: its figures mean nothing on another GPU, TP or dtype."""

    model_config = ConfigDict(defer_build=True, frozen=True, extra="forbid")

    model: str = Field(description="the model's name as quotacalc resolved it")
    gpu: str = Field(description="GPU catalog id")
    tp: int
    weight_dtype: str | None
    kv_dtype: str | None
    engine: str | None = Field(
        None,
        description="the engine profile it was fitted under (its defaults are part of what the values predict); "
        "None: not recorded (written before it was), not checked",
    )


#: A fit that leaves its own runs further than this (RMS) does not describe them: calibrate warns. The shipped NIM
#: runs fit to 3.9%, public deployments within 10% (docs/accuracy.md).
POOR_FIT_RMS = 0.10

#: The engine model's revision: bumped whenever the same fitted values start to predict different figures, so a
#: plan calibrated under an earlier one says it is no longer calibrated. 2: a prefill pass's per-layer cost
#: (request_overhead_s 5 ms -> 3 ms) and MFU scaled by the GPU's matmul efficiency (mfu_scale); plans written
#: before record none.
ENGINE_MODEL_REVISION = 2


class CalibratedRange(BaseModel):
    """What the fitted runs covered: concurrency and sequence length. Figures outside it are extrapolated."""

    model_config = ConfigDict(defer_build=True, frozen=True, extra="forbid")

    concurrency: tuple[int, int] = Field(description="lowest and highest requests in flight of the fitted runs")
    context_tokens: tuple[int, int] = Field(
        description="shortest prompt and longest prompt + output of the fitted runs, tokens"
    )


def calibrated_range(points: Sequence[PointFit]) -> CalibratedRange | None:
    """The range ``points`` cover (None without points)."""
    if not points:
        return None
    return CalibratedRange(
        concurrency=(min(point.concurrency for point in points), max(point.concurrency for point in points)),
        context_tokens=(
            math.floor(min(point.prompt_tokens for point in points)),
            math.ceil(max(point.prompt_tokens + point.output_tokens for point in points)),
        ),
    )


def extrapolation_note(covered: CalibratedRange | None, deployment: Deployment) -> str | None:
    """A warning where the deployment prices a decode batch or a context the calibration's runs did not cover."""
    if covered is None:
        return None
    (low_c, high_c), (low_t, high_t) = covered.concurrency, covered.context_tokens
    outside = [
        f"{name} {value:,} (runs: {low:,}-{high:,})"
        for name, value, low, high in (
            ("batch", deployment.batch, low_c, high_c),
            ("context", deployment.context, low_t, high_t),
        )
        if not low <= value <= high
    ]
    if not outside:
        return None
    return (
        f"extrapolated: the calibration's runs do not cover {' and '.join(outside)}; the fitted values may not hold "
        "there (calibrate on runs that include it)"
    )


class CalibrationProvenance(BaseModel):
    """The ``calibration:`` section of a plan: where its fitted values come from. No date: the same
    files and plan always write the same section."""

    model_config = ConfigDict(defer_build=True, frozen=True, extra="forbid")

    quotacalc_version: str
    engine_model: int | None = Field(
        None, description="ENGINE_MODEL_REVISION the values were fitted under (absent: before revisions were recorded)"
    )
    files: tuple[CalibratedFile, ...] = Field(min_length=1)
    rows: int = Field(ge=0, description="benchmark points fitted")
    parameters: dict[str, object] = Field(description="the values written into the plan by this calibration")
    fit_rms_error: float | None = Field(description="root mean square relative error of the points after the fit")
    leave_one_out_rms_error: float | None = Field(description="the same, each point predicted by a fit without it")
    ttft_under_load: TtftUnderLoad | None = Field(
        None,
        description="how the fit read TTFTs measured at concurrency > 1 (calibrate --ttft-under-load); None: no "
        "benchmark fitted, or written before it was recorded",
    )
    covers: CalibratedRange | None = Field(
        None, description="what the fitted runs covered; None: no benchmark fitted, or written before it was recorded"
    )
    calibrated_on: CalibratedOn


def provenance(
    result: CalibrationResult, inputs: PricingInputs, files: Sequence[CalibratedFile], version: str
) -> CalibrationProvenance:
    """The ``calibration:`` section for a result."""
    deployment = inputs.deployment
    return CalibrationProvenance(
        quotacalc_version=version,
        engine_model=ENGINE_MODEL_REVISION,
        files=tuple(files),
        rows=len({(point.source, point.row) for point in result.points}),
        parameters=dict(result.fitted_values),
        fit_rms_error=None if result.rms_error_after is None else _significant(result.rms_error_after, 3),
        leave_one_out_rms_error=None
        if result.rms_leave_one_out_error is None
        else _significant(result.rms_leave_one_out_error, 3),
        ttft_under_load=result.ttft_under_load if result.points else None,
        covers=calibrated_range(result.points),
        calibrated_on=CalibratedOn(
            model=inputs.arch.name,
            gpu=inputs.gpu.id,
            tp=deployment.tp,
            weight_dtype=deployment.weight_dtype,
            kv_dtype=deployment.kv_dtype,
            engine=deployment.engine,
        ),
    )


#: The plan keys a start-up log sets (kv_pool_fit); every other calibrated key comes from benchmark runs.
LOG_PARAMETERS = frozenset({"kv_pool_tokens", "runtime_reserve_gib", "kv_pool_measured_with"})


def merge_provenance(previous: CalibrationProvenance | None, current: CalibrationProvenance) -> CalibrationProvenance:
    """The section to write when the plan already has one: a log calibrated after a benchmark (or the
    other way round) on the same deployment adds to it; on another deployment, or after a calibration under an
    earlier engine model, it starts afresh."""
    if (
        previous is None
        or previous.calibrated_on != current.calibrated_on
        or previous.engine_model != current.engine_model
    ):
        return current
    paths = {file.path for file in current.files}
    fitted_again = current.rows > 0
    logged_again = any(not file.rows for file in current.files)
    # A new benchmark fit replaces the previous one (its files and fitted values), a new log the previous log's
    # pool: what is kept is what this calibration did not redo.
    kept_files = tuple(
        file
        for file in previous.files
        if file.path not in paths and (not fitted_again if file.rows else not logged_again)
    )
    kept_values = {
        name: value
        for name, value in previous.parameters.items()
        if (not logged_again if name in LOG_PARAMETERS else not fitted_again)
    }
    return current.model_copy(
        update={
            "files": current.files + kept_files,
            "parameters": {**kept_values, **current.parameters},
            "rows": current.rows if fitted_again else previous.rows,
            "fit_rms_error": current.fit_rms_error if fitted_again else previous.fit_rms_error,
            "leave_one_out_rms_error": current.leave_one_out_rms_error
            if fitted_again
            else previous.leave_one_out_rms_error,
            "ttft_under_load": current.ttft_under_load if fitted_again else previous.ttft_under_load,
            "covers": current.covers if fitted_again else previous.covers,
        }
    )


def _same(expected: object, actual: object) -> bool:
    if isinstance(expected, float) and isinstance(actual, int | float):
        return math.isclose(expected, actual, rel_tol=1e-9)
    if isinstance(expected, dict) and isinstance(actual, BaseModel):
        # Through the model: a key recorded before it existed (or left out at its default) reads as its default.
        try:
            return type(actual).model_validate(expected) == actual
        except ValueError:
            return False
    return expected == actual


def _dtype_as_run(name: str | None, inputs: PricingInputs) -> str:
    """A dtype as the engine runs it: unset, 'auto' and the checkpoint's own dtype are all 'the checkpoint's'."""
    from quotacalc.catalog.dtypes import dtype_by_name

    plain = inputs.checkpoint_quantization is None
    own = f"{inputs.arch.checkpoint_dtype if plain else inputs.checkpoint_quantization} (the checkpoint's)"
    if name in (None, "auto"):
        return own
    resolved = dtype_by_name(name).name
    return own if plain and resolved == inputs.arch.checkpoint_dtype else resolved


def deployment_changes(on: CalibratedOn, inputs: PricingInputs) -> list[str]:
    """What differs between the deployment a calibration was fitted on and ``inputs``' (model, GPU, TP, the dtypes
    as the engine runs them, the engine profile), each as 'name fitted -> now'; empty for the same deployment."""
    deployment = inputs.deployment
    return [
        f"{name} {expected} -> {actual}"
        for name, expected, actual in (
            ("model", on.model, inputs.arch.name),
            ("gpu", on.gpu, inputs.gpu.id),
            ("tp", on.tp, deployment.tp),
            ("weight_dtype", _dtype_as_run(on.weight_dtype, inputs), _dtype_as_run(deployment.weight_dtype, inputs)),
            ("kv_dtype", _dtype_as_run(on.kv_dtype, inputs), _dtype_as_run(deployment.kv_dtype, inputs)),
            # Another engine's profile changes the defaults the fitted values were fitted beside.
            ("engine", on.engine or deployment.engine, deployment.engine),
        )
        if expected != actual
    ]


def calibration_status(
    section: CalibrationProvenance | None, inputs: PricingInputs
) -> tuple[dict[str, object] | None, str | None]:
    """Whether a plan's figures are calibrated for the deployment being priced.

    Returns (the ``calibrated`` summary, None) when the plan's calibration holds, (summary, a warning) when it
    holds but the priced batch or context lies outside what its runs covered; (None, why not) when the command
    line changed the GPU, TP, a dtype or a fitted value; (None, None) without one.
    """
    if section is None:
        return None, None
    deployment = inputs.deployment
    changed = deployment_changes(section.calibrated_on, inputs)
    changed += [
        f"{name} {value} -> {getattr(deployment, name, None)}"
        for name, value in section.parameters.items()
        if not _same(value, getattr(deployment, name, None))
    ]
    if section.engine_model != ENGINE_MODEL_REVISION:
        fitted_under = "unrecorded" if section.engine_model is None else section.engine_model
        changed.append(
            f"engine model revision {fitted_under} -> {ENGINE_MODEL_REVISION}: the same values now predict other "
            "figures; re-run quotacalc calibrate"
        )
    if changed:
        return None, f"not calibrated: the plan's calibration holds for what it was fitted on ({'; '.join(changed)})"
    summary: dict[str, object] = {
        "covers": None if section.covers is None else section.covers.model_dump(mode="json"),
        "sources": [file.path for file in section.files],
        "rows": section.rows,
        "fit_rms_error": section.fit_rms_error,
        "leave_one_out_rms_error": section.leave_one_out_rms_error,
        "parameters": dict(section.parameters),
        "quotacalc_version": section.quotacalc_version,
    }
    return summary, extrapolation_note(section.covers, deployment)
