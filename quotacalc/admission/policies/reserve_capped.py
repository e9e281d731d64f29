"""Reserve a capped bound: max_tokens clipped to the tier's output cap (and what the context leaves)."""

from __future__ import annotations

from quotacalc.admission.policies.base import AdmissionPolicy, AdmittedRequest, PolicyDeclaration


class ReserveCapped(AdmissionPolicy):
    name = "reserve_capped"

    def hold_units(self, request: AdmittedRequest) -> float:
        # limit_tokens is already min(max_tokens, tier cap, context left): the most the engine will produce.
        return request.prompt_units + request.output_weight * request.limit_tokens


DECLARATION = PolicyDeclaration(
    name=ReserveCapped.name,
    help="reserve prompt + W x min(max_tokens, tier cap, context left): never overshoots",
    holds="prompt + W × min(max_tokens, tier cap, context left)",
    settles="debit use, release the rest",
    build=ReserveCapped,
)
