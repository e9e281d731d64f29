"""quotacalc: price LLM serving in replica time and KV memory, as a library and a CLI.

from quotacalc import Deployment, Traffic, resolve, price, size_traffic, request_kv

replica = price(resolve(Deployment(model="Llama-3.3-70B-Instruct", gpu="h100-sxm", tp=4, weight_dtype="fp8")))
replica.output_weight, replica.replica_units_per_s
"""

from __future__ import annotations

# typing.TYPE_CHECKING without importing typing: the console script imports this file before the CLI's Ctrl-C
# guard is in place (cli/entry.py), so it imports nothing.
TYPE_CHECKING = False

# Imported on first use, so the CLI's start-up pays only for what a command needs.
_EXPORTS = {
    "Deployment": "quotacalc.core.deployment",
    "ModelArch": "quotacalc.core.arch",
    "ParamGroup": "quotacalc.core.arch",
    "PriceResult": "quotacalc.core.price",
    "PricedPlan": "quotacalc.priced",
    "PricingInputs": "quotacalc.core.pricing_inputs",
    "QuotacalcError": "quotacalc.errors",
    "RequestKvResult": "quotacalc.core.kv",
    "SizeResult": "quotacalc.core.traffic",
    "Traffic": "quotacalc.core.deployment",
    "UnsupportedArchitecture": "quotacalc.errors",
    "UsageError": "quotacalc.errors",
    "build_deployment": "quotacalc.inputs.deployment",
    "expected_distinct_experts": "quotacalc.core.price",
    "load_arch": "quotacalc.inputs.resolve",
    "load_plan_file": "quotacalc.inputs.plan",
    "price": "quotacalc.core.price",
    "price_plan": "quotacalc.priced",
    "request_kv": "quotacalc.core.kv",
    "resolve": "quotacalc.inputs.resolve",
    "size_traffic": "quotacalc.core.traffic",
}

__all__ = [
    "Deployment",
    "ModelArch",
    "ParamGroup",
    "PriceResult",
    "PricedPlan",
    "PricingInputs",
    "QuotacalcError",
    "RequestKvResult",
    "SizeResult",
    "Traffic",
    "UnsupportedArchitecture",
    "UsageError",
    "build_deployment",
    "expected_distinct_experts",
    "load_arch",
    "load_plan_file",
    "price",
    "price_plan",
    "request_kv",
    "resolve",
    "size_traffic",
]


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        import importlib

        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'quotacalc' has no attribute '{name}'")


if TYPE_CHECKING:
    from typing import Any

    from quotacalc.core.arch import ModelArch, ParamGroup
    from quotacalc.core.deployment import Deployment, Traffic
    from quotacalc.core.kv import RequestKvResult, request_kv
    from quotacalc.core.price import PriceResult, expected_distinct_experts, price
    from quotacalc.core.pricing_inputs import PricingInputs
    from quotacalc.core.traffic import SizeResult, size_traffic
    from quotacalc.errors import QuotacalcError, UnsupportedArchitecture, UsageError
    from quotacalc.inputs.deployment import build_deployment
    from quotacalc.inputs.plan import load_plan_file
    from quotacalc.inputs.resolve import load_arch, resolve
