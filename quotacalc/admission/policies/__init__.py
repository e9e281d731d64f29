"""The admission policies, each declared once; simulate's choices, help and tables are built from ``POLICIES``.

Adding a policy touches exactly these files:

1. ``quotacalc/admission/policies/<name>.py``: a subclass of ``AdmissionPolicy`` (``base.py``) and its
   ``DECLARATION`` (name, one-line help, what it holds, how it settles, its options with defaults).
2. This module: one line in ``_MODULES`` below (the order is the order simulate compares them in).
3. ``docs/simulate.md``: its row in the policy table, and ``README.md``'s table of the same rows while the
   README has one (``tests/test_admission.py`` fails until each row says what the declaration says).
4. A test of its own behaviour in ``tests/test_admission.py`` (every registered policy is already run through
   the ledger's conservation and every terminal path by the parametrised tests there and in
   ``tests/test_sim.py``).

Nothing else: the scenario reader (``quotacalc/inputs/scenario.py``: its ``policies`` and ``policy_options``
keys), ``simulate --help`` (``quotacalc/cli/app.py``), the reference table's test and the JSON read the names,
help and options from here. An option (``PolicyOption``) is set in a scenario under ``policy_options:`` by its
name (``lease_tokens`` may also stay a top-level key, as scenarios have always given it), and ``make_policy``
passes it to the policy's constructor by that name.
"""

from __future__ import annotations

from collections.abc import Mapping

from quotacalc.admission.policies import (
    debit_on_completion_forgiving,
    incremental_lease,
    reserve_capped,
    reserve_max_tokens,
    streamed_debit,
)
from quotacalc.admission.policies.base import UNLIMITED, AdmissionPolicy, PolicyDeclaration, PolicyOption

_MODULES = (reserve_max_tokens, reserve_capped, incremental_lease, streamed_debit, debit_on_completion_forgiving)

#: Every policy by name, in the order simulate compares them.
POLICIES: dict[str, PolicyDeclaration] = {module.DECLARATION.name: module.DECLARATION for module in _MODULES}
POLICY_NAMES: tuple[str, ...] = tuple(POLICIES)

#: Names a policy no longer goes by, and why: a scenario that names one is refused with this as the fix,
#: never silently run under another policy.
RETIRED_NAMES = {
    "debit_on_completion": "it forgave every overshoot under a name that did not say so: name "
    "debit_on_completion_forgiving to keep that behaviour, or streamed_debit to carry the debt",
}


def make_policy(name: str, options: Mapping[str, int] | None = None) -> AdmissionPolicy:
    """The policy called ``name`` with the options it declares, from ``options`` or its defaults."""
    declaration = POLICIES[name]
    given = options or {}
    return declaration.build(**{option.name: given.get(option.name, option.default) for option in declaration.options})


def option_defaults() -> dict[str, int]:
    """Every declared option's default, by name (options of the same name must agree)."""
    return {option.name: option.default for declaration in POLICIES.values() for option in declaration.options}


__all__ = [
    "POLICIES",
    "POLICY_NAMES",
    "RETIRED_NAMES",
    "UNLIMITED",
    "AdmissionPolicy",
    "PolicyDeclaration",
    "PolicyOption",
    "make_policy",
    "option_defaults",
]
