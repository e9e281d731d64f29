"""A request's state as it moves through the gateway and an engine."""

from __future__ import annotations

from typing import Any

QUEUED, WAITING, PREFILL, DECODE, DONE = range(5)


class Request:
    """One admitted or rejected request. Mutable and slotted: the simulator touches millions of them."""

    __slots__ = (
        "abort",
        "admitted_s",
        "arrival",
        "arrival_s",
        "attempt",
        "base",
        "bucket_wait_s",
        "cached_tokens",
        "checkpoint",
        "client_max_tokens",
        "first_scheduled_s",
        "first_token_s",
        "generated",
        "granted",
        "hold",
        "id",
        "kv_alloc",
        "kv_estimate",
        "limit_tokens",
        "measured",
        "output_weight",
        "pool",
        "preempted_s",
        "prefill_left",
        "prefill_started",
        "priority",
        "prompt_tokens",
        "prompt_units",
        "replica",
        "sent_s",
        "state",
        "stop_at",
        "stop_reason",
        "tenant",
    )

    def __init__(self, id: int, tenant: int, arrival_s: float, prompt_tokens: int, cached_tokens: int) -> None:
        self.id = id
        self.tenant = tenant
        self.arrival_s = arrival_s
        self.prompt_tokens = prompt_tokens
        self.cached_tokens = cached_tokens
        self.state = QUEUED
        self.generated = 0
        self.hold = 0.0
        self.granted = 0
        self.base = 0
        self.checkpoint = -1
        self.kv_alloc = 0
        self.kv_estimate = 0
        self.prefill_left = 0
        self.prefill_started = False
        self.first_scheduled_s: float | None = None
        self.first_token_s: float | None = None
        self.preempted_s: float | None = None
        self.abort: str | None = None
        self.replica: Any = None
        self.pool: Any = None
        self.priority = 0
        self.prompt_units = 0.0
        self.output_weight = 0.0
        self.client_max_tokens = 0
        self.limit_tokens = 0
        self.stop_at = 0
        self.stop_reason = "eos"
        #: Whether it arrived inside the measured window (after the warm-up, before arrivals stop).
        self.measured = False
        #: The client's request (None for one built by hand), and which attempt at it this is (0: the first).
        self.arrival: Any = None
        self.attempt = 0
        self.sent_s = 0.0
        self.admitted_s = arrival_s
        #: Seconds its client waited on 429s before this attempt was admitted.
        self.bucket_wait_s = 0.0
