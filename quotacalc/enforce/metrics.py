"""The enforcement point's Prometheus metrics, per tenant, as Prometheus's text format."""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Mapping

from quotacalc.enforce.gate import Gate

#: Upper bounds (seconds) of the plugin's own time buckets: fine below the 1-3 ms the plugin is meant to add.
PLUGIN_SECONDS_BOUNDS = (
    0.00005, 0.0001, 0.00015, 0.0002, 0.0003, 0.0005, 0.00075, 0.001, 0.0015, 0.002, 0.003, 0.005, 0.0075, 0.01,
    0.025, 0.05, 0.1, 0.25, 1.0, 2.5,
)  # fmt: skip


class Histogram:
    """A Prometheus histogram of seconds: counts per upper bound (cumulated when rendered), their sum."""

    __slots__ = ("bounds", "counts", "total_s")

    def __init__(self, bounds: tuple[float, ...] = PLUGIN_SECONDS_BOUNDS) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.total_s = 0.0

    def observe(self, seconds: float) -> None:
        self.counts[bisect_left(self.bounds, seconds)] += 1
        self.total_s += seconds

    def rows(self, name: str, labels: str) -> list[str]:
        lines = []
        cumulated = 0
        for bound, count in zip((*self.bounds, float("inf")), self.counts, strict=True):
            cumulated += count
            le = "+Inf" if bound == float("inf") else f"{bound:g}"
            lines.append(f'{name}_bucket{{{labels},le="{le}"}} {cumulated}')
        lines.append(f"{name}_sum{{{labels}}} {self.total_s:.17g}")
        lines.append(f"{name}_count{{{labels}}} {cumulated}")
        return lines


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def render(gate: Gate, store_failures: int, plugin_seconds: Mapping[str, Histogram] | None = None) -> str:
    """Units reserved, debited and released; admitted requests, rejects by reason, queue wait, live sequences and
    live KV tokens, each per tenant; the bucket store's failures; and the plugin's own time, per hook."""
    lines: list[str] = []

    def family(name: str, kind: str, help_text: str, rows: list[tuple[str, float]]) -> None:
        lines.append(f"# HELP {name} {help_text}")
        lines.append(f"# TYPE {name} {kind}")
        lines.extend(f"{name}{{{labels}}} {value:.17g}" for labels, value in rows)

    tenants = [(f'tenant="{_label(t.name)}"', stats) for t, stats in zip(gate.tenants, gate.stats, strict=True)]
    family("quotacalc_admitted_total", "counter", "requests admitted", [(lb, s.admitted) for lb, s in tenants])
    family(
        "quotacalc_rejects_total",
        "counter",
        "requests refused, by reason",
        [(f'{lb},reason="{_label(r)}"', n) for lb, s in tenants for r, n in sorted(s.rejects.items())],
    )
    family("quotacalc_units_reserved_total", "counter", "units held at admission and by renewals",
           [(lb, s.units_reserved) for lb, s in tenants])  # fmt: skip
    family("quotacalc_units_debited_total", "counter", "units billed", [(lb, s.units_debited) for lb, s in tenants])
    family(
        "quotacalc_units_released_total", "counter", "units given back", [(lb, s.units_released) for lb, s in tenants]
    )
    family(
        "quotacalc_output_tokens_total", "counter", "output tokens served", [(lb, s.output_tokens) for lb, s in tenants]
    )
    family("quotacalc_queue_wait_seconds_sum", "counter", "seconds admitted requests waited in the fair queue",
           [(lb, s.queue_wait_s_sum) for lb, s in tenants])  # fmt: skip
    family("quotacalc_queue_wait_seconds_count", "counter", "requests that left the fair queue",
           [(lb, s.queue_waits) for lb, s in tenants])  # fmt: skip
    family(
        "quotacalc_live_sequences", "gauge", "requests at the engines", [(lb, s.live_sequences) for lb, s in tenants]
    )
    family("quotacalc_live_kv_tokens", "gauge", "KV tokens (prompt + granted output) at the engines",
           [(lb, s.live_kv_tokens) for lb, s in tenants])  # fmt: skip
    family("quotacalc_store_failures_total", "counter", "bucket store calls that failed", [("", store_failures)])
    if plugin_seconds:
        name = "quotacalc_plugin_seconds"
        lines.append(
            f"# HELP {name} wall time inside the plugin's hooks (store round trips included, the fair queue's wait "
            "and the engine's time not), per hook; hook=request: a request's total, at its settlement; hook=request_cpu: "
            "its thread CPU time"
        )
        lines.append(f"# TYPE {name} histogram")
        for hook, histogram in plugin_seconds.items():
            lines.extend(histogram.rows(name, f'hook="{_label(hook)}"'))
    return "\n".join(lines) + "\n"
