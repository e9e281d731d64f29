"""Rich output of the plan commands. Formatting only: every figure comes from the core."""

from __future__ import annotations

from collections.abc import Collection
from typing import TYPE_CHECKING

from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from quotacalc.cli import units
from quotacalc.cli.tables import print_whole  # never cuts an id or a number
from quotacalc.core.words import plural
from quotacalc.errors import printable

if TYPE_CHECKING:
    from quotacalc.core.checks import CheckResult
    from quotacalc.core.plan_size import PlanSize
    from quotacalc.core.policy import QuotaPolicy
    from quotacalc.exporters.writer import WriteReport

_STYLES = {"error": "bold red", "warning": "yellow", "info": "dim"}


def _console() -> Console:
    return Console(highlight=False, soft_wrap=False)


def check_table(path: str, result: CheckResult) -> None:
    console = _console()
    table = Table(show_edge=False, pad_edge=False)
    table.add_column("severity", no_wrap=True)
    table.add_column("about", no_wrap=True)
    table.add_column("finding", min_width=40)
    for finding in result.findings:
        # Plain Text, never markup: messages quote names from the plan (control characters shown as '?').
        text = Text(printable(finding.message, limit=10_000))
        if finding.fix:
            text.append(f" ({printable(finding.fix, limit=10_000)})", style="dim")
        table.add_row(Text(finding.severity, style=_STYLES[finding.severity]), Text(printable(finding.subject)), text)
    print_whole(console, table, wrap=("finding",))
    errors, warnings = result.count("error"), result.count("warning")
    verdict = "not sound" if errors else "sound"
    counts = ", ".join((plural(errors, "error"), plural(warnings, "warning"), plural(result.count("info"), "note")))
    console.print(f"{escape(path)}: {verdict}: {counts}")


def plan_size_table(
    path: str,
    result: PlanSize,
    policy: QuotaPolicy,
    *,
    formulas: dict[str, str] | None,
    pools: Collection[str] | None = None,
) -> None:
    """The tenants' rows and totals, then a line for each pool the totals' pool cost counts (``pools``: every one
    when None; ``size --pool`` passes the pool and the long-context pools its tenants use)."""
    console = _console()
    table = Table(show_edge=False, pad_edge=False, show_footer=True)
    totals = result.totals
    columns = [
        ("tenant", plural(totals.tenants, "tenant"), "left"),
        ("tier", "", "left"),
        ("pool", "", "left"),
        ("units/s", f"{totals.units_sold_per_s:,.0f}", "right"),
        ("replicas", f"{totals.replicas:,.2f}", "right"),
        ("bucket rate", "", "right"),
        ("bucket depth", "", "right"),
        ("shared $/month", units.usd(totals.shared_usd_per_month), "right"),
        ("dedicated $/month", units.usd(totals.dedicated_usd_per_month), "right"),
    ]
    for header, footer, justify in columns:
        table.add_column(header, footer=footer, justify=justify, no_wrap=True)  # type: ignore[arg-type]
    for row in result.tenants:
        shared = units.usd(row.shared_usd_per_month)
        dedicated = f"{units.usd(row.dedicated_usd_per_month)} ({row.dedicated_replicas})"
        if row.placement == "dedicated":
            shared, dedicated = f"[dim]{shared}[/dim]", f"[bold]{dedicated}[/bold]"
        else:
            dedicated = f"[dim]{dedicated}[/dim]"
        cells = (
            escape(row.name) + (" [dim](sized)[/dim]" if row.rate_source == "traffic" else ""),
            escape(row.tier),
            escape(row.pool)
            # Traffic whose mean prompt routes long: its units and replicas are the long-context pool's.
            + (f" [dim]→[/dim] {escape(row.load_pool)}" if row.load_pool != row.pool else "")
            + (" [dim](dedicated)[/dim]" if row.placement == "dedicated" else ""),
            f"{row.units_per_s:,.0f}",
            f"{row.replicas:,.2f}",
            f"{row.bucket_rate_units_per_s:,.0f}/s",
            f"{row.bucket_depth_units:,.0f}",
            shared,
            dedicated,
        )
        table.add_row(*(Text.from_markup(cell) for cell in cells))
    print_whole(console, table)
    console.print(
        f"units sold {totals.units_sold_per_s:,.0f}/s = {totals.replicas:,.2f} replicas of load; "
        f"shared tenants {units.usd(totals.shared_usd_per_month)}/month (their shares), dedicated tenants "
        f"{units.usd(totals.dedicated_usd_per_month)}/month (whole replicas); pools "
        f"{units.usd(totals.pools_usd_per_month)}/month"
    )
    if policy.oversubscription is not None:
        console.print(
            f"at the measured oversubscription {totals.oversubscription_ratio:g}: "
            f"{totals.replicas_at_measured_peak:,.2f} replicas of load at the fleet's peak"
        )
    for pool in policy.pools:
        if pools is not None and pool.name not in pools:
            continue
        console.print(
            f"[dim]pool {escape(pool.name)} ({pool.role}): {pool.replicas} × {pool.replica_units_per_s:,.0f} units/s, "
            f"W {pool.output_weight:.2f}, {units.usd(pool.usd_per_replica_month)}/replica-month[/dim]"
        )
    if formulas:
        for name, formula in formulas.items():
            console.print(f"[dim]{name} = {escape(formula)}[/dim]")


#: Markdown columns of ``size PLAN``: (heading, TenantSizeRow key, rendering).
_PLAN_SIZE_MARKDOWN = (
    ("tenant", "name", str),
    ("tier", "tier", str),
    ("pool", "pool", str),
    ("load on", "load_pool", str),
    ("placement", "placement", str),
    ("units/s", "units_per_s", lambda value: f"{value:,.0f}"),
    ("replicas", "replicas", lambda value: f"{value:,.2f}"),
    ("bucket depth", "bucket_depth_units", lambda value: f"{value:,.0f}"),
    ("shared $/month", "shared_usd_per_month", units.usd),
    ("dedicated $/month", "dedicated_usd_per_month", units.usd),
)


def plan_size_csv(result: PlanSize) -> str:
    """One CSV row per tenant under the JSON's keys, raw values."""
    import csv
    import io

    from quotacalc.core.plan_size import TenantSizeRow

    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(TenantSizeRow.model_fields), lineterminator="\n")
    writer.writeheader()
    for row in result.tenants:
        writer.writerow(row.model_dump())
    return buffer.getvalue()


def plan_size_markdown(result: PlanSize) -> str:
    """The tenants as a Markdown table, and the totals under it."""
    from quotacalc.cli.compare_out import markdown_escape

    lines = [
        "| " + " | ".join(heading for heading, _, _ in _PLAN_SIZE_MARKDOWN) + " |",
        "|"
        + "|".join(
            "---:" if key not in ("name", "tier", "pool", "load_pool", "placement") else "---"
            for _, key, _ in _PLAN_SIZE_MARKDOWN
        )
        + "|",
    ]
    for row in result.tenants:
        cells = [render(getattr(row, key)) for _, key, render in _PLAN_SIZE_MARKDOWN]
        lines.append("| " + " | ".join(markdown_escape(cell) for cell in cells) + " |")
    totals = result.totals
    lines += [
        "",
        f"{plural(totals.tenants, 'tenant')}: {totals.units_sold_per_s:,.0f} units/s = {totals.replicas:,.2f} replicas of load; "
        f"shared {units.usd(totals.shared_usd_per_month)}/month, dedicated "
        f"{units.usd(totals.dedicated_usd_per_month)}/month; pools {units.usd(totals.pools_usd_per_month)}/month",
    ]
    return "\n".join(lines) + "\n"


def generate_summary(report: WriteReport) -> None:
    counts: dict[str, int] = {}
    for change in report.changes:
        counts[change.status] = counts.get(change.status, 0) + 1
    summary = ", ".join(f"{count} {status}" for status, count in sorted(counts.items()))
    if report.check:
        import sys

        for change in report.changes:
            if change.status == "permissions":
                want = "owner-only (0600)" if change.secret else "0644"
                sys.stderr.write(
                    f"quotacalc: note: {report.out_dir}/{change.path} has other permissions than {want}; "
                    "generate sets them\n"
                )
        if report.drift:
            sys.stdout.write(report.diff)
            # generate refuses to overwrite a hand edit or a file it did not write: say what to do with those first.
            edited, foreign = (
                [f"{report.out_dir}/{change.path}" for change in report.changes if change.status == status]
                for status in ("edited", "foreign")
            )
            first = [
                *([f"move any change into the plan and delete {', '.join(edited)}"] if edited else []),
                *([f"move {', '.join(foreign)} away (quotacalc did not write it)"] if foreign else []),
            ]
            advice = "; ".join([*first, "run generate without --check" if not first else "then run generate"])
            sys.stderr.write(f"quotacalc: {report.out_dir} differs from the plan ({summary}): {advice}\n")
        else:
            sys.stderr.write(f"quotacalc: {report.out_dir} is up to date ({summary})\n")
        return
    console = _console()
    for change in report.changes:
        if change.status != "unchanged":
            console.print(f"{change.status:9} {escape(report.out_dir)}/{escape(change.path)}")
    console.print(f"{escape(report.out_dir)}: {summary}")
