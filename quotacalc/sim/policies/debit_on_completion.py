"""Debit actual units at completion only: admits while the bucket holds the prompt's units, holds
nothing, and lets a stream run past the quota (the overshoot this policy is compared on)."""

from __future__ import annotations

from quotacalc.sim.policies.base import AdmissionPolicy, AdmittedRequest


class DebitOnCompletion(AdmissionPolicy):
    name = "debit_on_completion"
    reserves = False

    def hold_units(self, request: AdmittedRequest) -> float:
        return 0.0

    def admission_units(self, request: AdmittedRequest) -> float:
        # The prompt is the part of the cost known at admission.
        return request.prompt_units
