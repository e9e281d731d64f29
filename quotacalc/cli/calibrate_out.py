"""``calibrate``'s output: the fitted values, each point's error before and after and left out, the KV pool."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from quotacalc.cli import units
from quotacalc.cli.json_out import JSON_SCHEMA_VERSION
from quotacalc.core.words import plural

if TYPE_CHECKING:
    from quotacalc.core.calibrate import CalibrationProvenance, CalibrationResult
    from quotacalc.core.pricing_inputs import PricingInputs


def calibrate_json(
    result: CalibrationResult,
    section: CalibrationProvenance,
    notes: list[str],
    *,
    written: str | None,
    pool: str | None = None,
) -> dict[str, Any]:
    return {
        "schema_version": JSON_SCHEMA_VERSION,
        "command": "calibrate",
        # The platform plan's pool calibrated (and written with --write); null for a flat plan.
        "pool": pool,
        "results": result.model_dump(mode="json", exclude={"deployment", "warnings"}),
        "calibration": section.model_dump(mode="json"),
        "written": written,
        "warnings": list(result.warnings),
        "notes": notes,
        "inputs": {"deployment": result.deployment.model_dump(mode="json")},
    }


def _value(name: str, value: float) -> str:
    if value == 0:
        return "0"
    return units.seconds(value) if name.endswith("_s") else f"{value:.4g}"


def _benchmark_points(runs: int, figures: int) -> str:
    # No point at all is a calibration from a start-up log alone: it fitted the KV pool, not the timings.
    if runs == 0:
        return "KV pool only"
    # A run gives a TTFT, an ITL or both: the table below lists each figure.
    return f"{plural(runs, 'benchmark run')}, {plural(figures, 'measured figure')}"


def _percent(error: float | None) -> str:
    return "-" if error is None else f"{error:+.1%}"


def calibrate_table(
    result: CalibrationResult,
    inputs: PricingInputs,
    notes: list[str],
    *,
    written: str | None,
    pool: str | None = None,
) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(highlight=False, soft_wrap=False)
    d = inputs.deployment
    console.print(
        f"Calibration of {inputs.arch.name} on {d.tp}× {inputs.gpu.id} "
        f"({_benchmark_points(len({(p.source, p.row) for p in result.points}), len(result.points))})",
        style="bold",
        markup=False,
    )
    if result.parameters:
        table = Table(show_edge=False, pad_edge=False)
        for column in ("fitted", "before", "after", "bounds"):
            table.add_column(column, justify="left" if column == "fitted" else "right")
        for parameter in result.parameters:
            bound = " (at bound)" if parameter.at_bound else ""
            table.add_row(
                parameter.name,
                _value(parameter.name, parameter.before),
                _value(parameter.name, parameter.after) + bound,
                f"[{_value(parameter.name, parameter.lower)}, {_value(parameter.name, parameter.upper)}]",
            )
        console.print(table)
        console.print()
        points = Table(show_edge=False, pad_edge=False)
        for column in ("point", "conc.", "prompt", "output", "figure", "measured", "before", "after", "left out"):
            points.add_column(column, justify="left" if column in ("point", "figure") else "right")
        for fit in result.points:
            points.add_row(
                f"{fit.source.replace(chr(92), '/').rsplit('/', 1)[-1]} {fit.row}".strip(),
                f"{fit.concurrency}",
                f"{fit.prompt_tokens:,.0f}",
                f"{fit.output_tokens:,.0f}",
                "TTFT" if fit.quantity == "ttft_s" else "ITL",
                units.seconds(fit.measured),
                _percent(fit.error_before),
                _percent(fit.error_after),
                _percent(fit.leave_one_out_error),
            )
        if not console.is_terminal:  # piped: the whole table rather than squeezed to 80 columns
            console.width = max(
                console.width, console.measure(points, options=console.options.update_width(1000)).maximum
            )
        console.print(points)
        console.print(
            "errors are predicted / measured − 1; 'left out': predicted by a fit on the other points; "
            + (
                "TTFT at conc. > 1: the clients' prompts prefilled together (lock-step closed loop)"
                if result.ttft_under_load == "lockstep"
                else "TTFT at conc. > 1 ignored (--ttft-under-load ignore)"
            ),
            style="dim",
            markup=False,
        )
        rms = [
            f"{label} {value:.1%}"
            for label, value in (
                ("before", result.rms_error_before),
                ("after", result.rms_error_after),
                ("left out", result.rms_leave_one_out_error),
            )
            if value is not None
        ]
        console.print(f"RMS error: {', '.join(rms)}", markup=False)
    if result.kv_pool is not None:
        kv = result.kv_pool
        parts = []
        if kv.kv_pool_tokens is not None:
            parts.append(f"pool {kv.kv_pool_tokens:,} tokens (measured on this deployment)")
        if kv.available_kv_gib is not None:
            parts.append(f"{kv.available_kv_gib:g} GiB of KV per GPU")
        if kv.runtime_reserve_gib is not None:
            parts.append(f"runtime reserve {kv.runtime_reserve_gib:g} GiB per GPU")
        console.print(f"KV pool from {kv.source}: {', '.join(parts)}", markup=False)
    # Warnings and skip notes go to stderr, as every command's do: a table piped to a file carries only the result.
    from quotacalc.cli.streams import print_warnings

    print_warnings([*result.warnings, *notes])
    if written:
        where = f"{written}, pool '{pool}'" if pool else written
        console.print(f"wrote the fitted values and their provenance into {where}", markup=False)
    else:
        console.print("--write PLAN saves these values with their provenance", style="dim", markup=False)
