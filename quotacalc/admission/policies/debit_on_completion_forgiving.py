"""Debit actual units at completion only, forgiving what the bucket lacks: admits while the bucket holds the
prompt's units, holds nothing, and lets a stream run past the quota. The bucket floors at zero and carries no
debt, so a sustained over-sender is served past its contract (the overshoot this policy is compared on)."""

from __future__ import annotations

from quotacalc.admission.policies.base import AdmissionPolicy, AdmittedRequest, PolicyDeclaration


class DebitOnCompletionForgiving(AdmissionPolicy):
    name = "debit_on_completion_forgiving"
    reserves = False

    def hold_units(self, request: AdmittedRequest) -> float:
        return 0.0

    def admission_units(self, request: AdmittedRequest) -> float:
        # The prompt is the part of the cost known at admission.
        return request.prompt_units


DECLARATION = PolicyDeclaration(
    name=DebitOnCompletionForgiving.name,
    help="hold nothing, debit use at completion, forgive what the bucket lacks (overshoot, never repaid)",
    holds="nothing (needs the prompt's units in the bucket)",
    settles="debit actual use; what the bucket lacks is forgiven: overshoot",
    build=DebitOnCompletionForgiving,
)
