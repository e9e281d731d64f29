"""Reserve the client's max_tokens at admission: never overshoots, holds the most idle quota."""

from __future__ import annotations

from quotacalc.admission.policies.base import AdmissionPolicy, AdmittedRequest, PolicyDeclaration


class ReserveMaxTokens(AdmissionPolicy):
    name = "reserve_max_tokens"

    def hold_units(self, request: AdmittedRequest) -> float:
        return request.prompt_units + request.output_weight * request.client_max_tokens


DECLARATION = PolicyDeclaration(
    name=ReserveMaxTokens.name,
    help="reserve prompt + W x the client's max_tokens: never overshoots, holds the most idle quota",
    holds="prompt + W × client `max_tokens`",
    settles="debit use, release the rest",
    build=ReserveMaxTokens,
)
