"""Admission policies, one per file, behind ``AdmissionPolicy``."""

from __future__ import annotations

from quotacalc.sim.policies.base import UNLIMITED, AdmissionPolicy
from quotacalc.sim.policies.debit_on_completion import DebitOnCompletion
from quotacalc.sim.policies.incremental_lease import IncrementalLease
from quotacalc.sim.policies.reserve_capped import ReserveCapped
from quotacalc.sim.policies.reserve_max_tokens import ReserveMaxTokens

__all__ = ["UNLIMITED", "AdmissionPolicy", "make_policy"]


def make_policy(name: str, *, lease_tokens: int) -> AdmissionPolicy:
    """The policy called ``name`` (names are validated by the scenario reader)."""
    if name == "incremental_lease":
        return IncrementalLease(lease_tokens)
    return {
        "reserve_max_tokens": ReserveMaxTokens,
        "reserve_capped": ReserveCapped,
        "debit_on_completion": DebitOnCompletion,
    }[name]()
