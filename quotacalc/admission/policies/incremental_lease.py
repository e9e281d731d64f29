"""Bounded incremental leases: hold the prompt and N output tokens, renew during decode, stop cleanly
at the quota boundary when the bucket cannot extend the lease."""

from __future__ import annotations

from quotacalc.admission.policies.base import AdmissionPolicy, AdmittedRequest, PolicyDeclaration, PolicyOption


class IncrementalLease(AdmissionPolicy):
    name = "incremental_lease"

    def __init__(self, lease_tokens: int = 128) -> None:
        self.lease_tokens = lease_tokens

    def hold_units(self, request: AdmittedRequest) -> float:
        return request.prompt_units + request.output_weight * self.granted_tokens(request)

    def granted_tokens(self, request: AdmittedRequest) -> int:
        return min(self.lease_tokens, request.limit_tokens)

    def renewal_tokens(self, request: AdmittedRequest, granted: int) -> int:
        return min(self.lease_tokens, request.limit_tokens - granted)


DECLARATION = PolicyDeclaration(
    name=IncrementalLease.name,
    help="hold prompt + W x lease_tokens, renew during decode, stop cleanly (quota_stop) at the quota",
    holds="prompt + W × `lease_tokens`, renewed during decode; stops cleanly (`quota_stop`) when the bucket "
    "cannot extend it",
    settles="debit use, release the rest",
    build=IncrementalLease,
    options=(PolicyOption("lease_tokens", 128, "output tokens per lease"),),
)
