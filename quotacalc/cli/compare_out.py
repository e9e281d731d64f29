"""Comparison rows as a rich table, JSON, CSV or Markdown. Formatting only: every figure comes from the core.

JSON and CSV carry the raw SI values under the rows' stable keys; the table and Markdown are for people.
"""

from __future__ import annotations

import csv
import io
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Literal

from quotacalc.cli import units
from quotacalc.cli.json_out import JSON_SCHEMA_VERSION, emit_json

if TYPE_CHECKING:
    from quotacalc.core.compare import ComparisonRow
    from quotacalc.core.deployment import Deployment, Traffic

Command = Literal["price", "size"]

#: (heading, key, rendering) of each human column; the status column comes last.
_PRICE_COLUMNS: tuple[tuple[str, str, Callable[[Any], str]], ...] = (
    ("GPU", "gpu", str),
    ("TP", "tp", str),
    ("$/M prompt", "usd_per_million_prompt_tokens", units.usd),
    ("$/M output", "usd_per_million_output_tokens", units.usd),
    ("W", "output_weight", lambda value: f"{value:.2f}"),
    ("units/s", "replica_units_per_s", lambda value: f"{value:,.0f}"),
    ("KV pool", "kv_pool_tokens", lambda value: f"{value:,}"),
    ("replica $/month", "dedicated_usd_per_month", units.usd),
)
_SIZE_COLUMNS: tuple[tuple[str, str, Callable[[Any], str]], ...] = (
    ("replicas", "replicas", lambda value: f"{value:,.2f}"),
    ("shared $/month", "shared_usd_per_month", units.usd),
    ("dedicated $/month", "dedicated_total_usd_per_month", units.usd),
)


def _columns(command: Command, rows: Sequence[ComparisonRow]) -> tuple[tuple[str, str, Callable[[Any], str]], ...]:
    """The human columns; the pool at --context beside the pool where windows or fixed state make them differ."""
    columns = _PRICE_COLUMNS
    if len({row.gpu_hour_usd for row in rows}) > 1:
        # Each GPU at its own price (--gpu-hour-usd GPU=PRICE): the row says which.
        columns = (*columns[:2], ("$/GPU-h", "gpu_hour_usd", units.usd), *columns[2:])
    if any(row.kv_pool_tokens_at_context not in (None, row.kv_pool_tokens) for row in rows):
        at = columns.index(next(c for c in columns if c[1] == "kv_pool_tokens")) + 1
        pool_at_context = ("KV pool at context", "kv_pool_tokens_at_context", lambda value: f"{value:,}")
        columns = (*columns[:at], pool_at_context, *columns[at:])
    return columns + (_SIZE_COLUMNS if command == "size" else ())


def _cell(row: ComparisonRow, key: str, render: Callable[[Any], str]) -> str:
    value = getattr(row, key)
    return "-" if value is None else render(value)


def _notes(rows: Sequence[ComparisonRow]) -> tuple[list[str], list[str]]:
    """Each row's status cell, and the numbered notes (reasons, warnings) listed under the table."""
    statuses, notes = [], []
    for row in rows:
        lines = [row.reason] if row.reason else list(row.warnings)
        marks = []
        for line in lines:
            notes.append(f"{row.gpu} TP {row.tp}: {line}")
            marks.append(f"[{len(notes)}]")
        word = ("ok, calibrated" if row.calibrated else "ok") if row.feasible else "no"
        statuses.append(" ".join([word, *marks]))
    return statuses, notes


def _title(
    command: Command,
    deployment: Deployment,
    traffic: Traffic | None,
    model_name: str | None = None,
    rows: Sequence[ComparisonRow] = (),
) -> str:
    """The rows' shared inputs; the model by its resolved name (a hub id or a path names the model it resolves to)."""
    d = deployment
    price = "each GPU at its own $/GPU-h" if len({row.gpu_hour_usd for row in rows}) > 1 else f"${d.gpu_hour_usd}/GPU-h"
    title = (
        f"{model_name or d.model}: batch {d.batch} at {d.context:,} tokens, MFU {d.mfu}, MBU {d.mbu}, ceiling {d.ceiling}, "
        f"{price}{units.engine_note(d.engine)}"
    )
    if command == "size" and traffic is not None:
        title = (
            f"Tenant: {units.number(traffic.rps)} req/s × ({units.number(traffic.prompt_tokens)} prompt, "
            f"{units.number(traffic.output_tokens)} output tokens, {traffic.cached_fraction:.0%} cached) on {title}"
        )
    return title


def _row_values(command: Command, row: ComparisonRow) -> dict[str, Any]:
    values = row.model_dump(mode="json")
    return {key: values[key] for key in row.keys_for(command)}


def comparison_json(
    command: Command,
    rows: Sequence[ComparisonRow],
    deployment: Deployment | None = None,
    traffic: Traffic | None = None,
) -> dict[str, Any]:
    """The rows, and the inputs they share (the deployment less its GPU and TP, the tenant)."""
    document: dict[str, Any] = {
        "schema_version": JSON_SCHEMA_VERSION,
        "command": command,
        "rows": [_row_values(command, row) for row in rows],
    }
    if deployment is not None:
        shared = deployment.model_dump(mode="json", exclude={"gpu", "tp"})
        document["inputs"] = {"deployment": shared, "tenant": traffic.model_dump() if traffic is not None else None}
    return document


def comparison_csv(command: Command, rows: Sequence[ComparisonRow]) -> str:
    """CSV with the JSON's keys as header; empty cells where a deployment cannot run; warnings joined by '; '."""
    buffer = io.StringIO()
    keys = rows[0].keys_for(command) if rows else ()
    writer = csv.DictWriter(buffer, fieldnames=keys, lineterminator="\n")
    writer.writeheader()
    for row in rows:
        values = _row_values(command, row)
        values["warnings"] = "; ".join(values["warnings"])
        # Booleans as JSON spells them (true, false), not Python's True; an empty cell for no figure.
        writer.writerow(
            {
                key: "" if value is None else ("true" if value else "false") if isinstance(value, bool) else value
                for key, value in values.items()
            }
        )
    return buffer.getvalue()


def markdown_escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")


def comparison_markdown(
    command: Command, deployment: Deployment, traffic: Traffic | None, rows, model_name: str | None = None
) -> str:
    columns = _columns(command, rows)
    statuses, notes = _notes(rows)
    header = [heading for heading, _, _ in columns] + ["status"]
    lines = [
        f"**{markdown_escape(_title(command, deployment, traffic, model_name, rows))}**",
        "",
        "| " + " | ".join(header) + " |",
        "|" + "|".join("---" if key in ("gpu", "tp") else "---:" for _, key, _ in columns) + "|---|",
    ]
    for row, status in zip(rows, statuses, strict=True):
        cells = [_cell(row, key, render) for _, key, render in columns] + [status]
        lines.append("| " + " | ".join(markdown_escape(cell) for cell in cells) + " |")
    if notes:
        lines.append("")
        lines.extend(f"{number}. {markdown_escape(note)}" for number, note in enumerate(notes, 1))
    return "\n".join(lines) + "\n"


def comparison_table(
    command: Command, deployment: Deployment, traffic: Traffic | None, rows, model_name: str | None = None
) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(highlight=False, soft_wrap=False)
    table = Table(show_edge=False, pad_edge=False)
    columns = _columns(command, rows)
    for heading, key, _ in columns:
        if key == "gpu":  # the row's name: never cut
            table.add_column(heading, no_wrap=True, min_width=max(len(row.gpu) for row in rows))
        else:
            table.add_column(heading, justify="right")
    table.add_column("status")
    statuses, notes = _notes(rows)
    for row, status in zip(rows, statuses, strict=True):
        table.add_row(*(_cell(row, key, render) for _, key, render in columns), status)
    if not console.is_terminal:  # piped to a file: print the table whole rather than squeezed to 80 columns
        console.width = max(console.width, console.measure(table, options=console.options.update_width(1000)).maximum)
    console.print(_title(command, deployment, traffic, model_name, rows), style="bold", markup=False)
    console.print(table)
    for number, note in enumerate(notes, 1):
        console.print(f"[{number}] {note}", markup=False)


def render_comparison(
    command: Command,
    deployment: Deployment,
    traffic: Traffic | None,
    rows: Sequence[ComparisonRow],
    output_format: str,
    *,
    model_name: str | None = None,
) -> None:
    """Print the rows in ``output_format``; ``model_name`` (the model as resolved) titles the table and Markdown."""
    if output_format == "json":
        emit_json(comparison_json(command, rows, deployment, traffic))
    elif output_format == "csv":
        sys.stdout.write(comparison_csv(command, rows))
    elif output_format == "markdown":
        sys.stdout.write(comparison_markdown(command, deployment, traffic, rows, model_name))
    else:
        comparison_table(command, deployment, traffic, rows, model_name)
