"""Where bucket levels live, behind one small interface: in memory here, Redis for several gateways.

Every operation is one atomic step on one tenant's bucket (a Redis implementation runs each as a Lua
script on the server's clock), so the ledger never reads a level and writes it back in two steps.
"""

from __future__ import annotations

from typing import NamedTuple, Protocol

from quotacalc.admission.bucket import Bucket


class Taken(NamedTuple):
    """What ``try_take`` did: whether the bucket held ``needed``, and its level after."""

    ok: bool
    level: float


class BucketStore(Protocol):
    """Atomic operations on each tenant's bucket, identified by its index."""

    def depth(self, tenant: int) -> float: ...

    def rate(self, tenant: int) -> float: ...

    def level(self, tenant: int, now: float) -> float: ...

    def try_take(self, tenant: int, needed: float, take: float, now: float) -> Taken:
        """If the bucket holds ``needed`` units, take ``take`` of them."""
        ...

    def take_whole(self, tenant: int, unit: float, wanted: int, now: float) -> int:
        """Take as many of ``wanted`` blocks of ``unit`` units as the bucket holds; return how many."""
        ...

    def debit(self, tenant: int, units: float, now: float, *, carry_debt: bool) -> float:
        """Take ``units``; below zero the bucket carries the debt or forgives it. Returns the units forgiven."""
        ...

    def credit(self, tenant: int, units: float, now: float) -> None:
        """Give back ``units`` (at most up to the depth)."""
        ...


class MemoryBuckets:
    """Buckets in this process: one gateway, or the simulator."""

    __slots__ = ("buckets",)

    def __init__(self, buckets: list[Bucket]) -> None:
        self.buckets = buckets

    def depth(self, tenant: int) -> float:
        return self.buckets[tenant].depth

    def rate(self, tenant: int) -> float:
        return self.buckets[tenant].rate

    def level(self, tenant: int, now: float) -> float:
        return self.buckets[tenant].refill(now)

    def try_take(self, tenant: int, needed: float, take: float, now: float) -> Taken:
        bucket = self.buckets[tenant]
        level = bucket.refill(now)
        if level < needed:
            return Taken(False, level)
        bucket.level = level - take
        return Taken(True, bucket.level)

    def take_whole(self, tenant: int, unit: float, wanted: int, now: float) -> int:
        bucket = self.buckets[tenant]
        level = bucket.refill(now)
        afford = int(level / unit) if unit > 0 else wanted
        granted = max(0, min(wanted, afford))
        bucket.level = level - granted * unit
        return granted

    def debit(self, tenant: int, units: float, now: float, *, carry_debt: bool) -> float:
        bucket = self.buckets[tenant]
        level = bucket.refill(now) - units
        if level < 0 and not carry_debt:
            bucket.level = 0.0
            return -level
        bucket.level = level
        return 0.0

    def credit(self, tenant: int, units: float, now: float) -> None:
        bucket = self.buckets[tenant]
        bucket.level = min(bucket.depth, bucket.refill(now) + units)
