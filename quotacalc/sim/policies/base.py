"""The interface every admission policy implements (docs/method.md §5: reserve, debit, release).

A policy decides three things about a request's output, whose length is unknown at admission:
what the bucket must hold and gives up at admission, how many output tokens that covers, and
whether more can be leased later. The simulator does the bookkeeping the same way for every
policy (held units are debited by use and the rest released on every terminal path), so the
policies differ only in these answers.
"""

from __future__ import annotations

from typing import Protocol


class AdmittedRequest(Protocol):
    """What a policy may read of a request."""

    prompt_units: float
    output_weight: float
    client_max_tokens: int
    limit_tokens: int


#: Output tokens covered when a policy puts no lease boundary on a request.
UNLIMITED = 1 << 62


class AdmissionPolicy:
    """Base class: one subclass per file in this package."""

    #: The name the scenario and the output use.
    name: str = ""
    #: Whether admission holds units that output tokens then draw down (False: debit at completion).
    reserves: bool = True

    def hold_units(self, request: AdmittedRequest) -> float:
        """Units taken from the bucket at admission (it must hold at least ``admission_units``)."""
        raise NotImplementedError

    def admission_units(self, request: AdmittedRequest) -> float:
        """Units the bucket must hold for the request to be admitted (the 429 deficit is measured against it)."""
        return self.hold_units(request)

    def granted_tokens(self, request: AdmittedRequest) -> int:
        """Output tokens the admission hold covers; ``UNLIMITED`` when the request never renews."""
        return UNLIMITED

    def renewal_tokens(self, request: AdmittedRequest, granted: int) -> int:
        """Output tokens to lease when a request reaches ``granted``; 0: no renewals."""
        return 0
