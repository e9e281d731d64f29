"""``quotacalc fleet``'s output: the JSON document, the rich tables and the plot."""

from __future__ import annotations

import io
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from quotacalc.cli.json_out import JSON_SCHEMA_VERSION

if TYPE_CHECKING:
    from quotacalc.fleet.aggregate import TenantWeights
    from quotacalc.fleet.report import FleetReport


def report_json(
    report: FleetReport,
    *,
    sources: list[str],
    source_format: str,
    engine: str,
    pool: str,
    default: TenantWeights,
    tenants: tuple[TenantWeights, ...],
    max_bad_rows: float,
    written: dict[str, Any] | None,
) -> dict[str, Any]:
    """The stable keys: per window the ratio and both peaks, the rows read and rejected by reason, and per tenant
    its peak, p99 and contract; the weights each request was priced with (the formula's inputs)."""
    body = report.model_dump(mode="json")
    weights = {w.tenant: {k: v for k, v in asdict(w).items() if k != "tenant"} for w in tenants if w.tenant is not None}
    return {
        "schema_version": JSON_SCHEMA_VERSION,
        "command": "fleet",
        "sources": sources,
        "format": source_format,
        "engine": engine,
        "pool": pool,
        "max_bad_rows": max_bad_rows,
        **body,
        "oversubscription_ratio": {f"{w.window_s:g}": w.oversubscription_ratio for w in report.windows},
        "units_formula": "max(prompt − cached, 0) × (prompt + prompt_per_prompt_token × prompt_tokens) "
        "+ cached × cached_prompt + output × output",
        "weights": {"default": {k: v for k, v in asdict(default).items() if k != "tenant"}, "tenants": weights},
        "written": written,
    }


def render_report(report: FleetReport, *, pool: str, written: dict[str, Any] | None) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    console.print(f"pool {pool}: {report.period_start} to {report.period_end}")
    rows = Table(title="Rows")
    rows.add_column("rows")
    rows.add_column("count", justify="right")
    rows.add_row("read", f"{report.rows_read:,}")
    rows.add_row("used", f"{report.rows_used:,}")
    if report.rows_other_pool:
        rows.add_row("routed to another pool", f"{report.rows_other_pool:,}")
    for reason, count in report.rows_rejected.items():
        if count:
            rows.add_row(f"rejected: {reason}", f"{count:,}")
    console.print(rows)

    windows = Table(title=f"Oversubscription by window ({report.attribution} attribution)")
    for name in ("window s", "fleet peak u/s", "fleet p99 u/s", "Σ tenant peaks u/s", "ratio", "replicas"):
        windows.add_column(name, justify="right")
    windows.add_column("over contract")
    windows.add_column("reversal")
    for w in report.windows:
        windows.add_row(
            f"{w.window_s:g}",
            f"{w.fleet_peak_units_per_s:,.0f}",
            f"{w.fleet_p99_units_per_s:,.0f}",
            f"{w.sum_tenant_peaks_units_per_s:,.0f}",
            f"{w.oversubscription_ratio:.3f}",
            "" if w.replicas_at_ceiling is None else f"{w.replicas_at_ceiling} ({w.fleet_peak_replicas:.2f})",
            _names(w.tenants_over_contract),
            _names(w.reversal_tenants),
        )
    console.print(windows)

    tenants = Table(title="Tenants: peak / p99 units/s by window, against contract")
    tenants.add_column("tenant")
    tenants.add_column("contract u/s", justify="right")
    for w in report.windows:
        tenants.add_column(f"{w.window_s:g} s", justify="right")
    tenants.add_column("reserved / served output", justify="right")
    usage = {t.tenant: t for t in report.tenants}
    for index, name in enumerate(t.tenant for t in report.tenants):
        contract = usage[name].contract_units_per_s
        cells = []
        for w in report.windows:
            figures = w.tenants[index]
            mark = " over" if contract is not None and figures.peak_units_per_s > contract else ""
            cells.append(f"{figures.peak_units_per_s:,.0f} / {figures.p99_units_per_s:,.0f}{mark}")
        ratio = usage[name].output_reserved_over_served
        tenants.add_row(
            name, "" if contract is None else f"{contract:,.0f}", *cells, "" if ratio is None else f"{ratio:.2f}×"
        )
    console.print(tenants)
    if written:
        console.print(f"wrote oversubscription ratio {written['ratio']:g} to {written['path']}")


def _names(names: list[str], shown: int = 3) -> str:
    more = f" and {len(names) - shown} more" if len(names) > shown else ""
    return ", ".join(names[:shown]) + more


def plot_report(report: FleetReport, series: list[tuple[Any, ...]], path: Path) -> None:
    """The fleet's load against the sum of tenant peaks over time, and each tenant's load against its contract,
    at the longest window; deterministic bytes for the same report."""
    from quotacalc.cli.sim_plot import require_matplotlib
    from quotacalc.errors import QuotacalcError
    from quotacalc.fileio import write_bytes_atomic

    require_matplotlib()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    matplotlib.rcParams["svg.hashsalt"] = "quotacalc"
    figures = report.windows[-1]
    window_s = figures.window_s
    lines: dict[str | None, list[tuple[float, float]]] = {}
    for _kind, _window, tenant, _label, k, load, rate_after, next_k, _e in sorted(
        series, key=lambda row: (row[2] or "", row[4])
    ):
        points = lines.setdefault(tenant, [])
        points.append((k * window_s, load))
        if next_k is not None and next_k > k + 1:  # the windows between hold the rate left running
            points.append(((k + 1) * window_s, rate_after))
    figure, (top, bottom) = plt.subplots(2, 1, figsize=(12, 9), sharex=True)
    fleet = lines.get(None, [])
    if fleet:
        top.step([t for t, _ in fleet], [v for _, v in fleet], where="post", label="fleet load")
    top.axhline(figures.sum_tenant_peaks_units_per_s, color="#c44e52", linestyle="--", label="sum of tenant peaks")
    top.set_title(f"fleet load, {window_s:g} s windows (ratio {figures.oversubscription_ratio:.2f})")
    top.set_ylabel("units/s")
    top.legend(fontsize=8)
    contracts = {t.tenant: t.contract_units_per_s for t in report.tenants}
    for tenant in sorted(name for name in lines if name is not None):
        points = lines[tenant]
        drawn = bottom.step([t for t, _ in points], [v for _, v in points], where="post", label=tenant)
        if contracts.get(tenant) is not None:
            bottom.axhline(contracts[tenant], color=drawn[0].get_color(), linestyle=":", linewidth=1)
    bottom.set_title("each tenant's load (dotted: its contract)")
    bottom.set_xlabel("seconds since the Unix epoch")
    bottom.set_ylabel("units/s")
    bottom.legend(fontsize=7)
    figure.tight_layout()
    buffer = io.BytesIO()
    kind = path.suffix.lower().lstrip(".") or "png"
    figure.savefig(buffer, format=kind, metadata={"Date": None} if kind == "svg" else {"Software": None})
    plt.close(figure)
    try:
        write_bytes_atomic(path, buffer.getvalue())
    except OSError as error:
        raise QuotacalcError(
            f"cannot write the plot: {error.strerror or error}", source=str(path), field="--plot"
        ) from None
