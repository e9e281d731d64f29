"""The lease and settlement ledger: admit, renew, stream, settle, the same bookkeeping for every policy.

Units leave the bucket three ways (held at admission or renewal, taken as output streams, or charged at
the end) and come back one way (released at the end). At the end the tenant is billed what it received;
the difference between what was taken and what is billed is released, or charged, where a charge the
bucket cannot cover becomes debt or is forgiven as the policy says. So on every terminal path:

    held + streamed + charged = billed + released,   forgiven <= charged.
"""

from __future__ import annotations

from typing import NamedTuple, Protocol

from quotacalc.admission.policies.base import AdmissionPolicy
from quotacalc.admission.state import BucketStore

ADMITTED = "admitted"
#: The bucket lacks the units now: a 429 with Retry-After.
REJECTED = "rejected"
#: A full bucket would lack them: waiting never helps, so no Retry-After.
NEVER_ADMISSIBLE = "never_admissible"


class Lease(Protocol):
    """What the ledger reads and writes of a request."""

    prompt_units: float
    output_weight: float
    client_max_tokens: int
    limit_tokens: int
    #: Units held for the request (admission plus renewals), until it settles.
    hold: float
    #: Output tokens the holds cover.
    granted: int


class Admission(NamedTuple):
    outcome: str
    #: Units the bucket had to hold (the 429's deficit is measured against it).
    needed_units: float
    #: Units taken and held (0 unless admitted).
    hold_units: float
    #: Whole seconds until the bucket holds ``needed_units``; None unless a 429.
    retry_after_s: int | None


class Settlement(NamedTuple):
    #: Units the tenant is billed: what it received.
    billed: float
    #: Units given back to the bucket.
    released: float
    #: Units taken from the bucket at the end (beyond what was held or streamed).
    charged: float
    #: Of ``charged``, what the bucket lacked and the policy forgave (overshoot, never repaid).
    forgiven: float


class Ledger:
    """One policy's bookkeeping over a store of buckets."""

    __slots__ = ("carries_debt", "policy", "store", "streams")

    def __init__(self, policy: AdmissionPolicy, store: BucketStore) -> None:
        self.policy = policy
        self.store = store
        self.streams = policy.streams
        self.carries_debt = policy.carries_debt

    def admit(self, tenant: int, request: Lease, now: float) -> Admission:
        """Hold the policy's units if the bucket has them; say why not otherwise."""
        policy = self.policy
        needed = policy.admission_units(request)
        store = self.store
        if needed > store.depth(tenant):
            return Admission(NEVER_ADMISSIBLE, needed, 0.0, None)
        hold = policy.hold_units(request)
        taken = store.try_take(tenant, needed, hold, now)
        if not taken.ok:
            deficit = needed - taken.level
            return Admission(REJECTED, needed, 0.0, max(1, -int(-deficit // store.rate(tenant))))
        request.hold = hold
        request.granted = policy.granted_tokens(request)
        return Admission(ADMITTED, needed, hold, None)

    def renew(self, tenant: int, request: Lease, now: float) -> int:
        """Lease more output tokens at a lease boundary; 0 when the bucket cannot extend it (a quota stop)."""
        wanted = self.policy.renewal_tokens(request, request.granted)
        if wanted <= 0:
            return 0
        weight = request.output_weight
        granted = self.store.take_whole(tenant, weight, wanted, now)
        request.hold += granted * weight
        request.granted += granted
        return granted

    def stream(self, tenant: int, units: float, now: float) -> None:
        """Output units as they stream, for a policy that debits in real time (else nothing)."""
        if self.streams:
            self.store.debit(tenant, units, now, carry_debt=self.carries_debt)

    def settle(self, tenant: int, request: Lease, billed: float, streamed: float, now: float) -> Settlement:
        """End a request: bill ``billed``, release or charge the difference from what was held and streamed."""
        taken = request.hold + streamed
        request.hold = 0.0
        difference = billed - taken
        if difference < 0:
            self.store.credit(tenant, -difference, now)
            return Settlement(billed, -difference, 0.0, 0.0)
        if difference > 0:
            forgiven = self.store.debit(tenant, difference, now, carry_debt=self.carries_debt)
            return Settlement(billed, 0.0, difference, forgiven)
        return Settlement(billed, 0.0, 0.0, 0.0)
