"""``simulate --plot``: the compared metrics by policy, and per-tenant time-to-first-token distributions.

matplotlib is an optional extra (``pip install 'quotacalc[plot]'``), imported only here.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import TYPE_CHECKING

from quotacalc.errors import QuotacalcError
from quotacalc.fileio import write_bytes_atomic

if TYPE_CHECKING:
    from quotacalc.sim.metrics import PolicyRun


def require_matplotlib() -> None:
    """Fail before simulating, not after, when --plot cannot be honoured."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise QuotacalcError(
            "plotting needs matplotlib, which is not installed", field="--plot", fix="pip install 'quotacalc[plot]'"
        ) from None


def panels(runs: list[PolicyRun]) -> list[tuple[str, dict[str, list[float]]]]:
    """Each panel's title and its bars (series name -> one value per run); a panel with nothing to show is left out."""
    tenants = sorted({t.tenant for run in runs for t in run.tenants})

    def by_tenant(figure: str) -> dict[str, list[float]]:
        return {
            name: [next((getattr(t, figure) or 0.0 for t in run.tenants if t.tenant == name), 0.0) for run in runs]
            for name in tenants
        }

    def headline(figure: str, scale: float = 1.0) -> list[float]:
        return [(getattr(run.headline, figure) or 0.0) * scale for run in runs]

    candidates = [
        ("429 share of requests, %", {"429s": headline("admission_reject_share", 100.0)}),
        (
            "overshoot and unused reservation, % of contracted units/s",
            {
                "overshoot": headline("overshoot_pct_of_contract"),
                "unused reservation": headline("unused_reservation_pct_of_contract"),
            },
        ),
        (
            "TTFT p99, s: tenants within and above contract",
            {"within contract": headline("ttft_p99_within_s"), "above contract": headline("ttft_p99_above_s")},
        ),
        ("TTFT p99 by tenant, s", by_tenant("ttft_p99_s")),
        ("resident KV p99 by tenant, tokens (live KV)", by_tenant("resident_kv_p99_tokens")),
        ("served share while backlogged, % (weight's share: its fair share)", {
            **{name: [v * 100 for v in values] for name, values in by_tenant("served_share_backlogged").items()},
        }),
        ("goodput, units/s", {"goodput": [run.goodput_units_per_s for run in runs]}),
    ]  # fmt: skip
    return [(title, bars) for title, bars in candidates if any(v for values in bars.values() for v in values)]


def plot_runs(runs: list[PolicyRun], path: Path) -> None:
    """Write a PNG or SVG comparing the runs, one panel per figure with data; deterministic bytes for the same runs."""
    require_matplotlib()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    matplotlib.rcParams["svg.hashsalt"] = "quotacalc"  # stable element ids: same runs, same file
    labels = [f"{run.policy}\n{run.queueing}" for run in runs]
    shown = panels(runs)
    figure, axes = plt.subplots(max(1, len(shown)), 1, figsize=(14, 3.6 * max(1, len(shown))), squeeze=False)
    for axis, (title, bars) in zip(axes.flat, shown, strict=False):
        width = 0.8 / len(bars)
        for offset, (name, values) in enumerate(bars.items()):
            axis.bar([i + (offset - (len(bars) - 1) / 2) * width for i in range(len(runs))], values, width, label=name)
        axis.set_title(title)
        axis.set_xticks(range(len(runs)), labels, fontsize=7)
        if len(bars) > 1:
            axis.legend(fontsize=7, ncols=min(len(bars), 6))
    figure.tight_layout()
    buffer = io.BytesIO()
    kind = path.suffix.lower().lstrip(".")
    figure.savefig(buffer, format=kind, metadata={"Date": None} if kind == "svg" else {"Software": None})
    plt.close(figure)
    try:
        write_bytes_atomic(path, buffer.getvalue())
    except OSError as error:  # a directory without write permission, a file where its folder goes
        from quotacalc.errors import QuotacalcError

        raise QuotacalcError(
            f"cannot write the plot: {error.strerror or error}",
            source=str(path),
            field="--plot",
            fix="name a file in a directory you can write",
        ) from None
