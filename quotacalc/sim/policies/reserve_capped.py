"""Reserve a capped bound: max_tokens clipped to the tier's output cap (and what the context leaves)."""

from __future__ import annotations

from quotacalc.sim.policies.base import AdmissionPolicy, AdmittedRequest


class ReserveCapped(AdmissionPolicy):
    name = "reserve_capped"

    def hold_units(self, request: AdmittedRequest) -> float:
        # limit_tokens is already min(max_tokens, tier cap, context left): the most the engine will produce.
        return request.prompt_units + request.output_weight * request.limit_tokens
