"""Reserve the client's max_tokens at admission: never overshoots, holds the most idle quota."""

from __future__ import annotations

from quotacalc.sim.policies.base import AdmissionPolicy, AdmittedRequest


class ReserveMaxTokens(AdmissionPolicy):
    name = "reserve_max_tokens"

    def hold_units(self, request: AdmittedRequest) -> float:
        return request.prompt_units + request.output_weight * request.client_max_tokens
