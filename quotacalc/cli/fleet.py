"""``quotacalc fleet``: read usage logs, run the one aggregation where they live, render the figures, and write the
measured oversubscription ratio into the plan. Parse, call, render: the arithmetic is the query's (quotacalc.fleet).
"""

from __future__ import annotations

import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from quotacalc.errors import QuotacalcError, UsageError

if TYPE_CHECKING:
    from quotacalc.core.plan import Plan
    from quotacalc.core.policy import QuotaPolicy
    from quotacalc.fleet.engines import Rows
    from quotacalc.fleet.report import FleetReport
    from quotacalc.fleet.sources import SourceFormat

FORMAT_NAMES = ("quotacalc", "litellm", "envoy", "openai", "csv")
#: The default bad-row budget: a log with more rejected rows than this share is not measured.
DEFAULT_MAX_BAD_ROWS = 0.01
#: The longest window: peaks over more than an hour say little about capacity.
MAX_WINDOW_S = 3600.0


def _require(*modules: str) -> None:
    import importlib.util

    missing = [name for name in modules if importlib.util.find_spec(name) is None]
    if missing:
        raise QuotacalcError(
            f"quotacalc fleet needs {' and '.join(missing)}, not installed", fix="pip install 'quotacalc[fleet]'"
        )


def parse_windows(text: str) -> tuple[float, ...]:
    """``1,10,60`` -> (1.0, 10.0, 60.0): seconds, each from 1 to 3600, each once."""
    windows: list[float] = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        try:
            value = float(part)
        except ValueError:
            raise UsageError(
                f"'{part}' is not a number of seconds", field="--window", fix="e.g. --window 1,10,60"
            ) from None
        if not 1 <= value <= MAX_WINDOW_S:
            raise UsageError(f"{part} s is outside 1 to {MAX_WINDOW_S:g} s", field="--window")
        if value not in windows:
            windows.append(value)
    if not windows:
        raise UsageError("names no window", field="--window", fix="e.g. --window 1,10,60")
    return tuple(sorted(windows))


class _Progress:
    """A progress bar on stderr, shown only once a run has taken a second and only on a terminal."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled and sys.stderr.isatty()
        self.started = time.monotonic()
        self.bar: Any = None
        self.task: Any = None

    def __call__(self, percent: float) -> None:
        if not self.enabled or time.monotonic() - self.started < 1.0:
            return
        if self.bar is None:
            from rich.console import Console
            from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

            self.bar = Progress(
                TextColumn("aggregating"),
                BarColumn(),
                TextColumn("{task.percentage:>3.0f}%"),
                TimeElapsedColumn(),
                console=Console(stderr=True),
                transient=True,
            )
            self.bar.start()
            self.task = self.bar.add_task("fleet", total=100)
        self.bar.update(self.task, completed=min(percent, 100.0))

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()


def fleet_command(
    sources: Annotated[
        list[str] | None,
        typer.Argument(
            help="log files (JSON lines, CSV or Parquet); or none with --from", show_default=False, metavar="SOURCE"
        ),
    ] = None,
    plan: Annotated[
        str | None,
        typer.Option(
            "--plan", help="plan whose pool's weights price each request, and whose tenants' contracts are compared"
        ),
    ] = None,
    pool: Annotated[
        str | None, typer.Option("--pool", help="the pool measured (needed if the plan has several)")
    ] = None,
    source_format: Annotated[
        str,
        typer.Option(
            "--format",
            help="quotacalc, litellm (LiteLLM_SpendLogs), envoy (AI Gateway JSON log), openai (usage export) or csv",
        ),
    ] = "quotacalc",
    column_map: Annotated[
        str | None,
        typer.Option(
            "--map", help="FIELD=COLUMN pairs: which column or key holds each field (tenant=team_alias,start=ts,...)"
        ),
    ] = None,
    database: Annotated[
        str | None,
        typer.Option(
            "--from", help="postgresql://user:password@host/db: run the aggregation inside LiteLLM's database"
        ),
    ] = None,
    table: Annotated[
        str, typer.Option("--table", help="the spend-log table in --from's database")
    ] = "LiteLLM_SpendLogs",
    window: Annotated[
        str, typer.Option("--window", help="window lengths in seconds, comma-separated (1 to 3600)")
    ] = "1,10,60",
    attribution: Annotated[
        str, typer.Option("--attribution", help="spread: a request's units over its duration; start: all at its start")
    ] = "spread",
    engine: Annotated[str, typer.Option("--engine", help="duckdb (embedded) or spark (pyspark)")] = "duckdb",
    spark_master: Annotated[
        str, typer.Option("--spark-master", help="Spark master URL for --engine spark")
    ] = "local[2]",
    memory_limit: Annotated[
        str, typer.Option("--memory-limit", help="DuckDB's memory before it spills to disk")
    ] = "2GB",
    max_bad_rows: Annotated[
        float, typer.Option("--max-bad-rows", help="fail (exit 1) when more than this share of the rows is rejected")
    ] = DEFAULT_MAX_BAD_ROWS,
    reversal_replicas: Annotated[
        float,
        typer.Option("--reversal-replicas", help="a tenant whose peak alone needs more replicas than this is flagged"),
    ] = 2.0,
    write: Annotated[
        str | None,
        typer.Option("--write", help="record the measured ratio in this platform plan's oversubscription block"),
    ] = None,
    write_window: Annotated[
        float | None,
        typer.Option(
            "--write-window", help="the window whose ratio --write records (default: the one with the smallest ratio)"
        ),
    ] = None,
    print_sql: Annotated[
        str | None, typer.Option("--print-sql", help="print the query for duckdb, postgres or spark and exit")
    ] = None,
    plot: Annotated[str | None, typer.Option("--plot", help="also write a PNG or SVG of the load over time")] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="print machine-readable JSON (SI units, stable keys)")
    ] = False,
    *,
    deployment_flags: dict[str, Any],
):
    """Measure peaks, tenants over contract and the oversubscription ratio from usage logs, and record the ratio."""
    _require("duckdb", "sqlglot")
    from quotacalc.fleet import aggregate
    from quotacalc.fleet import sources as formats
    from quotacalc.fleet.weights import pool_weights

    windows, paths = _checked_flags(
        source_format, attribution, engine, max_bad_rows, print_sql, window, write_window, sources, database
    )
    plan_object, policy = _measured_policy(plan, pool, write, deployment_flags)
    if plot:
        from quotacalc.cli.sim_plot import require_matplotlib

        require_matplotlib()
    measured_pool, tenant_weights, contracts, default = pool_weights(policy, plan_object, pool)
    spec = formats.FORMATS[source_format]
    fields = formats.field_map(spec, formats.parse_map(column_map), policy.tenant_header)
    params = aggregate.AggregationParams(
        windows_s=windows,
        spread=attribution == "spread",
        tenants=tenant_weights,
        default=default,
        series_window_s=max(windows) if plot else None,
    )
    query = aggregate.aggregation_sql(params)
    if spec.kind == "pages" and paths and engine == "duckdb":
        _check_page_buckets(paths, spec, fields, query, windows)
    if print_sql is not None:
        sys.stdout.write(_printed_sql(print_sql, paths, spec, fields, query, table).rstrip() + "\n")
        return
    rows, shown_sources = _run_query(database, table, engine, paths, spec, fields, query, spark_master, memory_limit)

    from quotacalc.fleet.report import build_report

    report = build_report(
        rows,
        contracts=contracts,
        replica_units_per_s=measured_pool.replica_units_per_s,
        reversal_replicas=reversal_replicas,
        attribution=attribution,
    )
    where = ", ".join(shown_sources)
    too_many_bad = report.rows_rejected_fraction > max_bad_rows
    if report.rows_used == 0 and not too_many_bad:
        raise QuotacalcError(
            f"no usable rows in pool {measured_pool.name} ({report.rows_read} read)",
            source=where,
            fix="check --format, --map and --pool",
        )
    written = None
    if write and not too_many_bad:
        written = _write_chosen_window(
            write, write_window, plan, report, shown_sources, source_format, measured_pool.name
        )
    if plot and not too_many_bad:
        from quotacalc.cli.fleet_out import plot_report

        plot_report(report, [row for row in rows if row[0] == "series"], Path(plot))
    if as_json:
        from quotacalc.cli.fleet_out import report_json
        from quotacalc.cli.json_out import emit_json

        emit_json(
            report_json(
                report,
                sources=shown_sources,
                source_format=source_format,
                engine="postgres" if database else engine,
                pool=measured_pool.name,
                default=default,
                tenants=tenant_weights,
                max_bad_rows=max_bad_rows,
                written=written,
            )
        )
    else:
        from quotacalc.cli.fleet_out import render_report

        render_report(report, pool=measured_pool.name, written=written)
    if too_many_bad:
        _fail_bad_rows(report, max_bad_rows, where)


def _measured_policy(
    plan: str | None, pool: str | None, write: str | None, deployment_flags: dict[str, Any]
) -> tuple[Plan, QuotaPolicy]:
    """The policy whose weights price each request: the plan's, its deployments overridden by any of price's
    deployment flags, or a one-pool deployment of those flags alone (no tenant, so no contract)."""
    from quotacalc.cli.plan_cmds import load_flags_policy, load_policy

    given = {name: value for name, value in deployment_flags.items() if value is not None}
    if plan is not None:
        return load_policy(plan, given)
    if not given:
        raise UsageError(
            "is needed: the pool's weights price each request",
            field="--plan",
            fix="name a platform plan or a deployment file, or give the deployment as price's flags (--model ...)",
        )
    if write:
        raise UsageError("needs --plan: the ratio is recorded in the plan whose pool is measured", field="--write")
    if pool is not None:
        raise UsageError("needs a plan file", field="--pool")
    return load_flags_policy(given)


def _checked_flags(
    source_format: str,
    attribution: str,
    engine: str,
    max_bad_rows: float,
    print_sql: str | None,
    window: str,
    write_window: float | None,
    sources: list[str] | None,
    database: str | None,
) -> tuple[tuple[float, ...], list[str]]:
    """Every flag checked before a plan or a log is read: the windows and the log paths."""
    from quotacalc.fleet import aggregate

    if source_format not in FORMAT_NAMES:
        raise UsageError(f"unknown format '{source_format}'", field="--format", fix=f"one of {', '.join(FORMAT_NAMES)}")
    if attribution not in ("spread", "start"):
        raise UsageError(f"'{attribution}' is not spread or start", field="--attribution")
    if engine not in ("duckdb", "spark"):
        raise UsageError(
            f"unknown engine '{engine}'", field="--engine", fix="duckdb or spark (--from runs on Postgres)"
        )
    if not 0 <= max_bad_rows <= 1:
        raise UsageError(f"{max_bad_rows:g} is not a share from 0 to 1", field="--max-bad-rows", fix="e.g. 0.01 for 1%")
    if print_sql is not None and print_sql not in aggregate.DIALECTS:
        raise UsageError(
            f"unknown dialect '{print_sql}'", field="--print-sql", fix=f"one of {', '.join(aggregate.DIALECTS)}"
        )
    windows = parse_windows(window)
    if write_window is not None and write_window not in windows:
        raise UsageError(f"{write_window:g} s is not among --window", field="--write-window")
    return windows, _checked_sources(sources, database, source_format, engine, print_sql)


def _checked_sources(
    sources: list[str] | None, database: str | None, source_format: str, engine: str, print_sql: str | None
) -> list[str]:
    paths = list(sources or [])
    if database and paths:
        raise UsageError("give log files or --from, not both", field="--from")
    if database and source_format != "litellm":
        raise UsageError("--from reads LiteLLM's table: use --format litellm", field="--format")
    if not database and not paths and print_sql not in ("postgres", "spark"):
        raise UsageError("no log files", field="SOURCE", fix="name the log files, or --from postgresql://...")
    for path in paths:
        # A URL (s3a://, hdfs://) is for the Spark cluster to read, not for this machine.
        if not (engine == "spark" and "://" in path) and not Path(path).is_file():
            raise QuotacalcError("no such file", source=path)
    return paths


def _check_page_buckets(
    paths: list[str], spec: SourceFormat, fields: dict[str, str], query: str, windows: tuple[float, ...]
) -> None:
    """Each file is an export page before anything is read, and no window is shorter than its buckets."""
    from quotacalc.fleet import engines

    engines.duckdb_sql(paths, spec, fields, query)
    bucket_s = engines.duckdb_shortest_row_s(paths, spec, fields)
    if bucket_s is not None and min(windows) < bucket_s - 1e-9:
        raise UsageError(
            f"{min(windows):g} s is shorter than the export's buckets ({bucket_s:g} s): rates within a bucket "
            "are not in it",
            field="--window",
            fix=f"windows of {bucket_s:g} s or more",
        )


def _printed_sql(
    dialect: str, paths: list[str], spec: SourceFormat, fields: dict[str, str], query: str, table: str
) -> str:
    from quotacalc.fleet import engines

    if dialect == "postgres":
        return engines.postgres_sql(fields, query, table)
    if dialect == "spark":
        # Read without the files: every mapped column taken as present, and LiteLLM's JSON columns.
        columns = {*fields.values(), "metadata", "proxy_server_request"}
        return engines.spark_script(engines.spark_sql(spec, fields, columns, query))
    if not paths:
        raise UsageError("--print-sql duckdb reads the log files: name them", field="SOURCE")
    return engines.duckdb_sql(paths, spec, fields, query)


def _run_query(
    database: str | None,
    table: str,
    engine: str,
    paths: list[str],
    spec: SourceFormat,
    fields: dict[str, str],
    query: str,
    spark_master: str,
    memory_limit: str,
) -> tuple[Rows, list[str]]:
    """The aggregation's result rows, run where the logs are, and the sources as shown (no password)."""
    from quotacalc.fleet import engines

    progress = _Progress(enabled=True)
    try:
        if database:
            rows = engines.run_postgres(database, fields, engines.postgres_sql(fields, query, table), table)
            return rows, [f"{engines.redact_url(database)} table {table}"]
        if engine == "spark":
            return engines.run_spark(paths, spec, fields, query, spark_master), paths
        sql = engines.duckdb_sql(paths, spec, fields, query)
        rows = engines.run_duckdb(
            sql,
            engines.EngineSettings(memory_limit=memory_limit),
            progress if progress.enabled else None,
            source=", ".join(paths),
        )
        return rows, paths
    finally:
        progress.close()


def _write_chosen_window(
    write: str,
    write_window: float | None,
    plan: str,
    report: FleetReport,
    shown_sources: list[str],
    source_format: str,
    pool: str,
) -> dict[str, Any]:
    """Write the ratio of --write-window, or of the window claiming the least multiplexing."""
    from quotacalc.fleet.report import conservative_window

    chosen = (
        next(w for w in report.windows if w.window_s == write_window) if write_window else conservative_window(report)
    )
    return write_oversubscription(
        write, plan, report, chosen.window_s, chosen.oversubscription_ratio, shown_sources, source_format, pool
    )


def _fail_bad_rows(report: FleetReport, max_bad_rows: float, where: str) -> None:
    counts = ", ".join(f"{reason} {count}" for reason, count in report.rows_rejected.items() if count)
    raise QuotacalcError(
        f"{report.rows_rejected_total} of {report.rows_read} rows rejected "
        f"({100 * report.rows_rejected_fraction:.2f}%, above --max-bad-rows {100 * max_bad_rows:g}%): {counts}",
        source=where,
        fix="fix the log, or raise --max-bad-rows",
    )


def write_oversubscription(
    target: str,
    plan: str,
    report: FleetReport,
    window_s: float,
    ratio: float,
    sources: list[str],
    source_format: str,
    pool: str,
) -> dict[str, Any]:
    """Set the plan's ``oversubscription:`` block (ratio, source line, measurement) in its text, every other key and
    comment kept; the new text is read back as a plan before it replaces the file (atomically)."""
    from quotacalc.fileio import write_text_atomic
    from quotacalc.inputs.plan import document_from_text, is_platform, read_document, read_plan
    from quotacalc.inputs.plan_write import plan_text, set_top_level_keys, with_line_ends

    path = Path(target)
    source_path = path if path.exists() else Path(plan)
    if not is_platform(read_document(str(source_path))):
        raise QuotacalcError(
            "is a flat plan: oversubscription is a platform plan's key (pools, tiers, tenants)",
            source=target,
            field="--write",
        )
    text = plan_text(source_path)
    today = datetime.now(timezone.utc).date().isoformat()
    shown = sources if len(sources) <= 3 else [*sources[:3], f"and {len(sources) - 3} more"]
    line = (
        f"quotacalc fleet: sum of per-tenant peaks / fleet peak over {window_s:g} s windows, {report.attribution} "
        f"attribution, pool {pool}, {report.rows_used:,} requests from {report.period_start} to {report.period_end} "
        f"({', '.join(shown)}), measured {today}"
    )
    block = {
        "ratio": round(ratio, 6),
        "source": line[:1000],
        "pool": pool,
        "measured": {
            "sources": list(sources),
            "format": source_format,
            "pool": pool,
            "rows_used": report.rows_used,
            "rows_read": report.rows_read,
            "period_start": report.period_start,
            "period_end": report.period_end,
            "window_s": window_s,
            "attribution": report.attribution,
            "measured_on": today,
        },
    }
    updated = set_top_level_keys(text.replace("\r\n", "\n"), {"oversubscription": block}, source=target)
    # Read back as the plan at target (its errors name it, relative model paths resolve beside it) before anything
    # is replaced.
    read_plan(target, document_from_text(updated, target))
    write_text_atomic(path, with_line_ends(updated, text))
    return {"path": target, **block}
