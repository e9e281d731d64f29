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


def plot_runs(runs: list[PolicyRun], ttft_samples: list[dict[str, list[float]]], path: Path) -> None:
    """Write a PNG or SVG comparing the runs; deterministic bytes for the same runs."""
    require_matplotlib()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    matplotlib.rcParams["svg.hashsalt"] = "quotacalc"  # stable element ids: same runs, same file
    labels = [f"{run.policy}\n{run.queueing}" for run in runs]
    metrics = (
        ("admission rejects (429)", [run.admission_rejects for run in runs]),
        ("quota overshoot, units", [run.quota_overshoot_units for run in runs]),
        ("unused reservation, unit·s", [run.unused_reservation_unit_s for run in runs]),
        ("TTFT p99, s", [run.ttft_p99_s or 0.0 for run in runs]),
        ("ITL p99, s", [run.itl_p99_s or 0.0 for run in runs]),
        ("goodput, units/s", [run.goodput_units_per_s for run in runs]),
    )
    modes = sorted({run.queueing for run in runs})
    figure, axes = plt.subplots(3, 3, figsize=(16, 13))
    for axis, (title, values) in zip(axes.flat[:6], metrics, strict=True):
        axis.bar(range(len(runs)), values, color="#4c72b0")
        axis.set_title(title)
        axis.set_xticks(range(len(runs)), labels, rotation=60, ha="right", fontsize=7)
    for axis, mode in zip(axes.flat[6:], modes, strict=False):
        index = next(i for i, run in enumerate(runs) if run.queueing == mode)
        for tenant, values in sorted(ttft_samples[index].items()):
            ordered = sorted(values)
            axis.step(ordered, [(i + 1) / len(ordered) for i in range(len(ordered))], where="post", label=tenant)
        axis.set_xscale("log")
        axis.set_title(f"TTFT by tenant ({runs[index].policy}, {mode})")
        axis.set_xlabel("seconds")
        axis.set_ylabel("share of requests")
        axis.legend(fontsize=7)
    for axis in axes.flat[6 + len(modes) :]:
        axis.axis("off")
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
