"""The enforcement point's Prometheus metrics, per tenant, as Prometheus's text format."""

from __future__ import annotations

from quotacalc.enforce.gate import Gate


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def render(gate: Gate, store_failures: int) -> str:
    """Units reserved, debited and released; admitted requests, rejects by reason, queue wait, live sequences and
    live KV tokens, each per tenant; and the bucket store's failures."""
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
    return "\n".join(lines) + "\n"
