"""A plan read once and priced once: the one object every plan command takes (``PricedPlan``).

The file is read once (``inputs.plan.read_plan``), a flat plan is one pool, every pool is priced once, and
each deployment value remembers where it came from (a flag, the pool's key, the plan's top-level
``deployment:``, a default), so a message names the place the user can change it.

``price``, ``kv`` and ``size`` of one tenant take one pool the same way (``PricedDeployment``): a plan's, or
flags alone, a one-pool plan whose values have origin ``flag``.
"""

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from quotacalc.priced.deployment import PricedDeployment, price_deployment
    from quotacalc.priced.origins import ValueOrigin
    from quotacalc.priced.plan import PricedPlan, price_plan, price_pools, price_read_plan

#: Each name's module, imported on first use: a price of one deployment does not import the plan's.
_MODULES = {
    "PricedDeployment": "deployment",
    "price_deployment": "deployment",
    "ValueOrigin": "origins",
    "PricedPlan": "plan",
    "price_plan": "plan",
    "price_pools": "plan",
    "price_read_plan": "plan",
}


def __getattr__(name: str) -> Any:
    if name not in _MODULES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(f"{__name__}.{_MODULES[name]}"), name)


__all__ = [
    "PricedDeployment",
    "PricedPlan",
    "ValueOrigin",
    "price_deployment",
    "price_plan",
    "price_pools",
    "price_read_plan",
]
