"""A token bucket in units: refilled continuously at the contracted rate up to its depth.

Its level may go below zero only where a policy carries debt (real-time streamed debit): a tenant
that streamed past its bucket pays the debt back from its refill before anything is admitted again.
"""

from __future__ import annotations

import math


class Bucket:
    """Rate in units/s, depth in units, level as of ``updated_s``; refilled lazily on each read."""

    __slots__ = ("depth", "level", "rate", "updated_s")

    def __init__(self, rate: float, depth: float, *, now: float = 0.0) -> None:
        self.rate = rate
        self.depth = depth
        self.level = depth
        self.updated_s = now

    def refill(self, now: float) -> float:
        """The level at ``now`` (an earlier ``now`` leaves it as it is: time never runs back)."""
        if now > self.updated_s:
            self.level = min(self.depth, self.level + self.rate * (now - self.updated_s))
            self.updated_s = now
        return self.level

    def retry_after_s(self, needed: float) -> int:
        """Whole seconds until the bucket holds ``needed`` units: ceil(deficit / refill rate), at least 1."""
        return max(1, math.ceil((needed - self.level) / self.rate))

    def admissible(self, needed: float) -> bool:
        """Whether a full bucket holds ``needed``: if not, waiting never admits the request."""
        return needed <= self.depth
