"""The interface every admission policy implements (docs/method.md §5: reserve, debit, release), and its declaration.

A policy decides, about a request whose output length is unknown at admission: what the bucket must
hold and gives up at admission, how many output tokens that covers, whether more can be leased later,
whether output is debited as it streams, and whether units used beyond the bucket become debt or are
forgiven. The ledger (``quotacalc.admission.ledger``) does the bookkeeping the same way for every
policy: what was taken from the bucket is settled against what the tenant is billed, on every
terminal path.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
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
    """Base class: one subclass per module of this package."""

    #: The name the scenario and the output use.
    name: str = ""
    #: Whether admission holds units that output tokens then draw down (the unused reservation is measured).
    reserves: bool = True
    #: Whether output units are taken from the bucket as each token streams.
    streams: bool = False
    #: Whether units used beyond what the bucket holds stay owed (the level goes below zero) or are forgiven.
    carries_debt: bool = False

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


@dataclass(frozen=True)
class PolicyOption:
    """A setting a policy reads, as the scenario file names it."""

    name: str
    default: int
    help: str


@dataclass(frozen=True)
class PolicyDeclaration:
    """Everything the rest of quotacalc knows about a policy, said once: lists, help and tables are built from it."""

    name: str
    #: One line: what the policy does and what it trades.
    help: str
    #: What admission holds, for the reference table.
    holds: str
    #: What happens at the end, for the reference table.
    settles: str
    build: Callable[..., AdmissionPolicy]
    options: tuple[PolicyOption, ...] = ()
