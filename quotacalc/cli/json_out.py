"""JSON documents for each command: SI units, stable keys, every explain step and input.

No rich here: the JSON path (what CI runs) does not pay for the terminal renderer.
"""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Any

from quotacalc.core.figures import json_keys

if TYPE_CHECKING:  # each command imports only the core modules it runs
    from quotacalc.core.explain import Step
    from quotacalc.core.kv import RequestKvResult
    from quotacalc.core.price import PriceResult
    from quotacalc.core.traffic import SizeResult

#: Bumped only when a key is renamed or removed; new keys may appear at any time.
#: 2: "explain" only with --explain; inputs.gpu without its sources (quotacalc gpus --json has them).
JSON_SCHEMA_VERSION = 2

#: A plan's calibration as the figures report it: (the ``calibrated`` summary or None, why it does not hold or None).
Calibration = tuple[dict[str, Any] | None, str | None]


def _steps_json(steps: tuple[Step, ...]) -> list[dict[str, Any]]:
    return [step.model_dump(exclude_none=True) for step in steps]


def _inputs_json(result: PriceResult) -> dict[str, Any]:
    inputs = result.inputs
    arch = inputs.arch
    present = arch.params_by_group()
    return {
        "deployment": inputs.deployment.model_dump(),
        "model": {
            "name": arch.name,
            "model_type": arch.model_type,
            "layers": len(arch.layers),
            "layer_kinds": arch.mixer_counts(),
            "vocab_size": arch.vocab_size,
            "hidden_size": arch.hidden_size,
            "tie_word_embeddings": arch.tie_word_embeddings,
            "checkpoint_dtype": arch.checkpoint_dtype,
            "max_context_tokens": arch.max_context_tokens,
            "params_by_group": {group.value: count for group, count in arch.params_by_group().items() if count},
            "active_params_by_group": {
                group.value: count for group, count in arch.active_params_by_group().items() if count
            },
            "notes": list(arch.notes),
        },
        # The figures priced on; where each comes from is the catalog's business (quotacalc gpus --sources).
        "gpu": inputs.gpu.model_dump(
            include={
                "id",
                "name",
                "memory_bytes",
                "memory_bandwidth_bytes_per_s",
                "dense_tflops",
                # the all-reduce terms and the matmul share that scales MFU: inputs of itl_s, ttft_s and allreduce_s
                "interconnect_bandwidth_bytes_per_s",
                "allreduce_latency_s",
                "matmul_efficiency",
            }
        ),
        "weights": {
            "source": inputs.weights.source,
            "compute_dtype": inputs.weights.compute_dtype,
            "groups": {
                group.value: storage.model_dump()
                for group, storage in inputs.weights.groups.items()
                if present.get(group)
            },
        },
        "kv_dtype": inputs.kv_dtype.model_dump(),
        "state_dtype": inputs.state_dtype.model_dump(),
    }


def price_results_json(result: PriceResult) -> dict[str, Any]:
    """The declared figures (``core/figures.py``), in ``PriceResult``'s order."""
    return result.model_dump(mode="json", include=set(json_keys("price")))


def _document(
    command: str,
    body: dict[str, Any],
    result: PriceResult,
    steps: list,
    explain: bool,
    calibration: Calibration | None = None,
    warnings: tuple[str, ...] | None = None,
) -> dict:
    """The envelope every command shares; the explain steps only when asked for, the inputs once.

    price, size and kv say whether a plan's calibration holds (``calibrated``, null when none does).
    """
    document = {"schema_version": JSON_SCHEMA_VERSION, "command": command, **body}
    warnings = list(result.warnings if warnings is None else warnings)
    if calibration is not None:
        document["calibrated"] = calibration[0]
        warnings += [calibration[1]] if calibration[1] else []
    document["warnings"] = warnings
    if explain:
        document["explain"] = steps
    document["inputs"] = _inputs_json(result)
    return document


def price_json(
    result: PriceResult, *, explain: bool = False, calibration: Calibration = (None, None)
) -> dict[str, Any]:
    body = {"results": price_results_json(result)}
    return _document("price", body, result, _steps_json(result.steps), explain, calibration)


def size_json(
    result: SizeResult,
    *,
    explain: bool = False,
    calibration: Calibration = (None, None),
    warnings: tuple[str, ...] | None = None,
) -> dict[str, Any]:
    body = {
        "results": result.model_dump(mode="json", include=set(json_keys("size"))),
        "tenant": result.traffic.model_dump(),
        "replica": price_results_json(result.replica),
    }
    steps = _steps_json(result.steps) + _steps_json(result.replica.steps)
    return _document(
        "size", body, result.replica, steps, explain, calibration, result.warnings if warnings is None else warnings
    )


def kv_json(
    result: RequestKvResult, *, explain: bool = False, calibration: Calibration = (None, None)
) -> dict[str, Any]:
    body = {
        "results": result.model_dump(mode="json", include=set(json_keys("kv"))),
        "replica": price_results_json(result.replica),
    }
    steps = _steps_json(result.steps) + _steps_json(result.replica.steps)
    return _document("kv", body, result.replica, steps, explain, calibration, result.warnings)


def listing_json(command: str, key: str, rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The document of a catalog listing (models, gpus)."""
    return {"schema_version": JSON_SCHEMA_VERSION, "command": command, key: rows}


def emit_json(document: Any) -> None:
    """Strict JSON: a NaN or infinity is a bug to fail on, never a token other parsers reject."""
    sys.stdout.write(json.dumps(document, indent=2, allow_nan=False) + "\n")
