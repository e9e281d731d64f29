"""JSON documents for each command: SI units, stable keys, every explain step and input.

No rich here: the JSON path (what CI runs) does not pay for the terminal renderer.
"""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # each command imports only the core modules it runs
    from quotacalc.core.explain import Step
    from quotacalc.core.kv import RequestKvResult
    from quotacalc.core.price import PriceResult
    from quotacalc.core.tenant import SizeResult

#: Bumped only when a key is renamed or removed; new keys may appear at any time.
JSON_SCHEMA_VERSION = 1

#: A plan's calibration as the figures report it: (the ``calibrated`` summary or None, why it does not hold or None).
Calibration = tuple[dict[str, Any] | None, str | None]


def _steps_json(steps: tuple[Step, ...]) -> list[dict[str, Any]]:
    return [step.model_dump(exclude_none=True) for step in steps]


def _inputs_json(result: PriceResult) -> dict[str, Any]:
    inputs = result.inputs
    arch = inputs.arch
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
        "gpu": inputs.gpu.model_dump(),
        "weights": {
            "source": inputs.weights.source,
            "compute_dtype": inputs.weights.compute_dtype,
            "groups": {group.value: storage.model_dump() for group, storage in inputs.weights.groups.items()},
        },
        "kv_dtype": inputs.kv_dtype.model_dump(),
        "state_dtype": inputs.state_dtype.model_dump(),
    }


def price_results_json(result: PriceResult) -> dict[str, Any]:
    return result.model_dump(mode="json", exclude={"steps", "inputs", "warnings"})


def price_json(result: PriceResult, calibration: Calibration = (None, None)) -> dict[str, Any]:
    return {
        "schema_version": JSON_SCHEMA_VERSION,
        "command": "price",
        "results": price_results_json(result),
        "calibrated": calibration[0],
        "warnings": list(result.warnings) + ([calibration[1]] if calibration[1] else []),
        "explain": _steps_json(result.steps),
        "inputs": _inputs_json(result),
    }


def size_json(result: SizeResult, calibration: Calibration = (None, None)) -> dict[str, Any]:
    return {
        "schema_version": JSON_SCHEMA_VERSION,
        "command": "size",
        "results": result.model_dump(mode="json", exclude={"steps", "tenant", "replica"}),
        "tenant": result.tenant.model_dump(),
        "replica": price_results_json(result.replica),
        "calibrated": calibration[0],
        "warnings": list(result.replica.warnings) + ([calibration[1]] if calibration[1] else []),
        "explain": _steps_json(result.steps) + _steps_json(result.replica.steps),
        "inputs": _inputs_json(result.replica),
    }


def kv_json(result: RequestKvResult) -> dict[str, Any]:
    return {
        "schema_version": JSON_SCHEMA_VERSION,
        "command": "kv",
        "results": result.model_dump(mode="json", exclude={"steps", "replica"}),
        "replica": price_results_json(result.replica),
        "warnings": list(result.replica.warnings),
        "explain": _steps_json(result.steps) + _steps_json(result.replica.steps),
        "inputs": _inputs_json(result.replica),
    }


def emit_json(document: Any) -> None:
    sys.stdout.write(json.dumps(document, indent=2) + "\n")
