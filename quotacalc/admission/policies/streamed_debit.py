"""Real-time streamed debit carrying debt: the prompt's units at admission, each output token's W as it
streams, and the bucket goes below zero when a stream outruns it. The debt is paid from the refill before
the tenant is admitted again, so a sustained over-sender is held to its contract plus one bucket depth and
what its streams in flight run up."""

from __future__ import annotations

from quotacalc.admission.policies.base import AdmissionPolicy, AdmittedRequest, PolicyDeclaration


class StreamedDebit(AdmissionPolicy):
    name = "streamed_debit"
    reserves = False
    streams = True
    carries_debt = True

    def hold_units(self, request: AdmittedRequest) -> float:
        return request.prompt_units


DECLARATION = PolicyDeclaration(
    name=StreamedDebit.name,
    help="debit the prompt at admission and W per output token as it streams; a stream past the bucket is debt, "
    "repaid before the next admission",
    holds="the prompt's units; output debited token by token as it streams",
    settles="what the bucket lacks is debt (level below 0), repaid from the refill before the next admission",
    build=StreamedDebit,
)
