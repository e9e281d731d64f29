"""Rich tables for each command. Formatting only: every figure comes from the core."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.cells import cell_len
from rich.console import Console
from rich.markup import MarkupError, escape
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

from quotacalc.cli import units
from quotacalc.cli.json_out import Calibration
from quotacalc.cli.streams import print_warnings
from quotacalc.core.deployment import GIB
from quotacalc.core.figures import Command, declared
from quotacalc.core.words import plural
from quotacalc.errors import printable

if TYPE_CHECKING:  # each command imports only the core modules it runs
    from quotacalc.catalog.engines import EngineCatalog
    from quotacalc.catalog.gpus import GpuCatalog
    from quotacalc.core.explain import Step
    from quotacalc.core.kv import RequestKvResult
    from quotacalc.core.price import PriceResult
    from quotacalc.core.traffic import SizeResult


def _console(*, stderr: bool = False, width: int | None = None) -> Console:
    return Console(highlight=False, soft_wrap=False, stderr=stderr, width=width)


def _table(**settings) -> Table:
    table = Table(show_edge=False, pad_edge=False, **settings)
    table.add_column("quantity", overflow="fold")
    table.add_column("value", justify="right", no_wrap=True)
    table.add_column("how", style="dim", overflow="fold")
    return table


def _plain(value: object) -> Text:
    """A cell as plain text: never read as rich markup, control characters shown as '?'."""
    return Text(printable(str(value), limit=10_000))


def _text(value: str) -> str:
    """Text for a markup string: brackets escaped, control characters (from a config's values) as '?'."""
    return escape(printable(value, limit=10_000))


def _add_row(table: Table, *cells: object) -> None:
    table.add_row(*(_plain(cell) for cell in cells))


def _width(cell: object) -> int:
    if isinstance(cell, Text):
        return cell_len(cell.plain)
    if isinstance(cell, str):
        try:
            return cell_len(Text.from_markup(cell).plain)
        except MarkupError:
            return cell_len(cell)
    return 0


def print_whole(console: Console, table: Table, *, wrap: tuple[str, ...] = ()) -> None:
    """Print a table whose cells are ids and figures (except the columns named in ``wrap``) without
    cutting one, at any terminal width: see ``_print_table``."""
    for column in table.columns:
        column.no_wrap = str(column.header) not in wrap
        column.overflow = "fold"
    _print_table(console, table)


def _print_table(console: Console, table: Table) -> None:
    """Print ``table`` without cutting an id or a number: a no-wrap column keeps its widest cell whole,
    and when the terminal (or ``COLUMNS``) is narrower than that, the table is printed wider than it,
    so lines wrap in the terminal instead of losing characters."""
    for column in table.columns:
        if column.no_wrap:
            cells = [*column.cells, column.header, column.footer]
            column.min_width = max(_width(cell) for cell in cells)
    needed = Measurement.get(console, console.options.update_width(1_000_000), table).minimum
    if needed > console.width:
        console = _console(stderr=console.stderr, width=needed)
    console.print(table)


def _header(result: PriceResult) -> str:
    inputs = result.inputs
    d = inputs.deployment
    return (
        f"{inputs.arch.name} on {d.tp}× {inputs.gpu.id}: weights {inputs.weights.describe(inputs.arch.params_by_group())}, KV {inputs.kv_dtype.name}, "
        f"batch {d.batch} at {d.context:,} tokens, MFU {d.mfu}, MBU {d.mbu}, ceiling {d.ceiling}, ${d.gpu_hour_usd}/GPU-h"
        f"{units.engine_note(d.engine)}"
    )


def _figure_rows(table: Table, command: Command, result: PriceResult | SizeResult | RequestKvResult) -> None:
    """A row per declared figure of ``command`` that has one and shows for this result (``core/figures.py``)."""
    for figure in declared(command):
        row = figure.row
        if row is not None and row.shown(result):
            _add_row(table, row.label(result, units), row.value(result, units), row.how(result, units))


def _show(console: Console, title: str, table: Table) -> None:
    # A title line above the table wraps to the terminal's width, not the table's.
    # soft_wrap: the terminal wraps a long title; rich would break an id in the middle.
    console.print(printable(title, limit=10_000), style="bold", markup=False, soft_wrap=True)
    _print_table(console, table)


def _print_footer(
    console: Console,
    steps: tuple[Step, ...],
    result: PriceResult,
    explain: bool,
    warnings: tuple[str, ...] | None = None,
) -> None:
    """The warnings (the replica's, unless ``warnings`` gives the command's own), then with ``explain`` each step."""
    # Formulas hold brackets (E[max ...]) that rich would read as markup: escape every text.
    print_warnings(result.warnings if warnings is None else warnings)
    # What was assumed about the model (a size left to transformers' class default, an unstated dtype) moves the
    # figures: shown with every table, not only with --explain.
    notes = list(result.inputs.arch.notes)
    if notes:
        console.print("[bold]Assumptions about the model[/]")
        for note in notes:
            console.print(f"  - {_text(note)}")
    if not explain:
        return
    console.print()
    console.print("[bold]How each figure is derived[/]")
    for step in steps:
        console.print(f"[bold]{step.name}[/] = {_text(step.formula)}")
        console.print(f"    = {_text(step.substituted)}")
        note = f"   [dim]({_text(step.note)})[/]" if step.note else ""
        console.print(f"    = {_text(units.render(step.value, step.unit))}{note}")


def _calibration_row(table: Table, calibration: Calibration) -> None:
    """A plan calibrated by ``quotacalc calibrate --write`` says so (nothing when the plan has no calibration)."""
    summary, note = calibration
    if summary is not None:
        errors = [
            f"{label} {value:.1%}"
            for label, value in (
                ("RMS error", summary["fit_rms_error"]),
                ("left out", summary["leave_one_out_rms_error"]),
            )
            if value is not None
        ]
        how = "; ".join([", ".join(source.rsplit("/", 1)[-1] for source in summary["sources"]), *errors])
        rows = summary["rows"]
        _add_row(table, "calibrated", "KV pool only" if rows == 0 else plural(rows, "point"), how)
    elif note is not None:
        _add_row(table, "calibrated", "no", "see the warning below")


def _calibration_warning(calibration: Calibration) -> None:
    if calibration[1]:  # on stderr, with the other warnings
        print_warnings([calibration[1]])


def price_table(result: PriceResult, *, explain: bool, calibration: Calibration = (None, None)) -> None:
    console = _console()
    title = _header(result)
    table = _table()
    _figure_rows(table, "price", result)
    _calibration_row(table, calibration)
    _show(console, title, table)
    _calibration_warning(calibration)
    _print_footer(console, result.steps, result, explain)


def size_table(
    result: SizeResult,
    *,
    explain: bool,
    calibration: Calibration = (None, None),
    warnings: tuple[str, ...] | None = None,
) -> None:
    """The tenant's figures; ``warnings``: the command's own (the result's and the plan's), else the result's."""
    console = _console()
    traffic = result.traffic
    table = _table()
    title = (
        f"Tenant: {units.number(traffic.rps)} req/s × ({units.number(traffic.prompt_tokens)} prompt, "
        f"{units.number(traffic.output_tokens)} output tokens, {traffic.cached_fraction:.0%} cached) on {_header(result.replica)}"
    )
    _figure_rows(table, "size", result)
    _calibration_row(table, calibration)
    _show(console, title, table)
    _calibration_warning(calibration)
    _print_footer(
        console,
        result.steps + result.replica.steps,
        result.replica,
        explain,
        result.warnings if warnings is None else warnings,
    )


def kv_table(result: RequestKvResult, *, explain: bool) -> None:
    console = _console()
    title = f"One {result.context_tokens:,}-token request on {_header(result.replica)}"
    table = _table()
    _figure_rows(table, "kv", result)
    _show(console, title, table)
    _print_footer(console, result.steps + result.replica.steps, result.replica, explain)


# --------------------------------------------------------------------------- catalogs


_SHORT_KIND = {
    "full_attention": "full",
    "sliding_attention": "sliding",
    "mamba1": "mamba",
    "mamba2": "mamba2",
    "gated_attention": "gated",
    "gated_deltanet": "deltanet",
}


def models_table(rows: list[dict]) -> None:
    """The shipped models as cli/listings.py lists them, one row each."""
    table = Table(title="Shipped models (models/; provenance in models/SOURCES.md)", title_justify="left")
    for column in ("name", "type", "params", "active", "KV B/token", "layers", "weights"):
        numeric = column in ("params", "active", "KV B/token")
        # Names, types, dtypes and figures are never cut; only the layer summary wraps.
        table.add_column(column, justify="right" if numeric else "left", no_wrap=column != "layers", overflow="fold")
    for row in rows:
        _add_row(
            table,
            row["name"],
            row["model_type"],
            units.count(row["total_params"]),
            units.count(row["active_params"]),
            f"{row['kv_bytes_per_token_bf16']:,.0f}",
            " + ".join(f"{n} {_SHORT_KIND.get(kind, kind)}" for kind, n in row["layer_kinds"].items()),
            row["quantization"] or row["checkpoint_dtype"],
        )
    table.caption = "KV B/token: bf16 KV growth per token at long context. Hub ids: quotacalc models --json."
    _print_table(_console(), table)


def engines_table(catalog: EngineCatalog) -> None:
    """The engine catalog, one row per engine (what it changes in the engine model's defaults), then each source."""
    table = Table(title="Engine profiles (an input given explicitly still wins)", title_justify="left")
    for column in ("id", "changes", "aliases"):
        table.add_column(column, overflow="fold", no_wrap=column == "id")
    for engine in catalog.engines.values():
        changes = ", ".join(f"{name} {units.setting(value)}" for name, value in engine.defaults.given().items())
        if engine.max_num_batched_tokens is not None:
            steps = [
                f"{step.tokens:,}" + (f" below {step.below_gib:g} GiB" if step.below_gib is not None else "")
                for step in engine.max_num_batched_tokens
            ]
            budget = steps[0] if len(steps) == 1 else ", ".join(steps[:-1]) + f", else {steps[-1]}"
            changes = ", ".join(filter(None, (changes, f"max_num_batched_tokens {budget}")))
        if (rule := engine.static_memory_fraction) is not None:
            memory = (
                "memory_utilization (mem_fraction_static) = round((memory − reserved) / memory, 3), reserved MiB = "
                f"{rule.base_mib:g} + {rule.per_batched_token_mib:g} × max(token budget, {rule.min_batched_tokens:,}) + "
                f"{rule.per_graph_sequence_mib:g} × CUDA-graph batch + {rule.per_tp_rank_mib:g} × TP, at least "
                f"{rule.floor_mib:,g} above {rule.floor_above_gib:g} GiB; activations outside it"
            )
            changes = ", ".join(filter(None, (changes, memory)))
        _add_row(table, engine.id, changes or "none (the defaults)", ", ".join(engine.aliases) or "-")
    console = _console()
    _print_table(console, table)
    for engine in catalog.engines.values():
        console.print(f"[bold]{engine.id}[/]: {escape(engine.name)}")
        console.print(f"  {escape(engine.source)}")


def gpus_table(catalog: GpuCatalog, *, sources: bool) -> None:
    """The GPU catalog, one row per GPU; with ``sources``, where each figure comes from."""
    reference = catalog.mfu_reference
    table = Table(
        title="GPU catalog (dense peak; efficiencies are deployment inputs; matmul: the share of the peak the best "
        f"matmul reaches, which scales MFU against the {reference.gpu} at {reference.dtype})",
        title_justify="left",
    )
    for column in ("id", "name", "memory", "bandwidth", "fp8 TFLOPS", "bf16 TFLOPS", "fp4 TFLOPS", "matmul bf16/fp8"):
        table.add_column(
            column, justify="left" if column in ("id", "name") else "right", no_wrap=column != "name", overflow="fold"
        )
    for gpu in catalog.gpus.values():
        tflops = gpu.dense_tflops
        _add_row(
            table,
            gpu.id,
            gpu.name,
            f"{gpu.memory_bytes / GIB:.2f} GiB",
            f"{gpu.memory_bandwidth_bytes_per_s / 1e12:.3g} TB/s",
            *(f"{tflops[key]:g}" if key in tflops else "-" for key in ("fp8", "bf16", "fp4")),
            "/".join(
                f"{gpu.matmul_efficiency[key]:.1%}" if key in gpu.matmul_efficiency else "-" for key in ("bf16", "fp8")
            ),
        )
    console = _console()
    _print_table(console, table)
    if sources:
        for gpu in catalog.gpus.values():
            console.print(f"[bold]{gpu.id}[/]")
            for figure, source in gpu.sources.model_dump(exclude_none=True).items():
                console.print(f"  {figure}: {escape(source)}")
