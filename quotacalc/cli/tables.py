"""Rich tables for each command. Formatting only: every figure comes from the core."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from quotacalc.cli import units
from quotacalc.cli.json_out import JSON_SCHEMA_VERSION, Calibration, emit_json
from quotacalc.core.deployment import GIB

if TYPE_CHECKING:  # each command imports only the core modules it runs
    from quotacalc.core.explain import Step
    from quotacalc.core.kv import RequestKvResult
    from quotacalc.core.price import PriceResult
    from quotacalc.core.tenant import SizeResult


def _console() -> Console:
    return Console(highlight=False, soft_wrap=False)


def _table() -> Table:
    table = Table(show_edge=False, pad_edge=False)
    table.add_column("quantity")
    table.add_column("value", justify="right")
    table.add_column("how", style="dim")
    return table


def _header(result: PriceResult) -> str:
    inputs = result.inputs
    d = inputs.deployment
    return (
        f"{inputs.arch.name} on {d.tp}× {inputs.gpu.id}: weights {inputs.weights.describe(inputs.arch.params_by_group())}, KV {inputs.kv_dtype.name}, "
        f"batch {d.batch} at {d.context:,} tokens, MFU {d.mfu}, MBU {d.mbu}, ceiling {d.ceiling}, ${d.gpu_hour_usd}/GPU-h"
    )


def _price_rows(table: Table, result: PriceResult) -> None:
    d = result.inputs.deployment
    table.add_row("parameters (total)", f"{result.total_params:,}", result.inputs.arch.model_type)
    if result.active_params != result.total_params:
        table.add_row("parameters (active)", f"{result.active_params:,}", "per text token")
    table.add_row(
        "weights per GPU",
        units.data_bytes(result.weight_bytes_per_gpu),
        f"{units.data_bytes(result.weight_bytes)} / TP {d.tp}",
    )
    table.add_row(
        "KV per token",
        f"{result.kv_bytes_per_token:,.0f} B",
        f"{units.data_bytes(result.kv_bytes_per_token_per_gpu)} per GPU",
    )
    if result.state_bytes_per_sequence:
        table.add_row("state per sequence", units.data_bytes(result.state_bytes_per_sequence), "Mamba conv + SSM state")
    table.add_row("prompt token", units.seconds(result.prompt_token_s), "1 unit; parameters only")
    table.add_row(
        f"prompt token at {d.context:,} context",
        units.seconds(result.prompt_token_at_context_s),
        "with attention FLOPs",
    )
    table.add_row(
        "decode step",
        units.seconds(result.decode_step_s),
        f"roofline, {result.decode_bound}-bound, batch {result.decode_batch}",
    )
    table.add_row(
        "inter-token latency",
        units.seconds(result.itl_s),
        f"engine: + {units.seconds(result.decode_overhead_s)} overhead, {units.seconds(result.allreduce_s)} all-reduce",
    )
    table.add_row("time to first token", units.seconds(result.ttft_s), f"{d.context:,}-token prompt, idle replica")
    table.add_row(
        "full-load output",
        f"{result.max_load_output_tokens_per_s:,.0f} tokens/s",
        f"{result.load_prompt_tokens:,} in / {result.load_output_tokens:,} out, batch {result.max_load_batch:,}",
    )
    step = "inter-token latency" if result.pricing_basis == "engine" else "decode step"
    table.add_row(
        "output token", units.seconds(result.output_token_s), f"{step} / batch ({result.pricing_basis} basis)"
    )
    table.add_row("output weight W", f"{result.output_weight:.2f}", "units per output token")
    table.add_row("replica budget", f"{result.replica_units_per_s:,.0f} units/s", f"ceiling {d.ceiling} / prompt token")
    table.add_row("KV pool", f"{result.kv_pool_tokens:,} tokens", result.kv_pool_source)
    table.add_row(
        f"resident at {d.context:,} tokens", f"{result.max_resident_sequences:,} sequences", "KV + state fit at once"
    )
    table.add_row(
        "dedicated replica",
        f"{units.usd(result.dedicated_usd_per_month)}/month",
        f"{d.tp} GPU{'s' if d.tp > 1 else ''} × ${d.gpu_hour_usd} × {d.hours_per_month:g} h",
    )
    table.add_row("$ per 1M prompt tokens", units.usd(result.usd_per_million_prompt_tokens), "at the ceiling")
    table.add_row(
        "$ per 1M cached prompt tokens",
        units.usd(result.usd_per_million_cached_prompt_tokens),
        f"× {d.cached_prompt_weight}",
    )
    table.add_row("$ per 1M output tokens", units.usd(result.usd_per_million_output_tokens), "× W")


def _show(console: Console, title: str, table: Table) -> None:
    # A title line above the table wraps to the terminal's width, not the table's.
    console.print(title, style="bold", markup=False)
    console.print(table)


def _print_footer(console: Console, steps: tuple[Step, ...], result: PriceResult, explain: bool) -> None:
    # Formulas hold brackets (E[max ...]) that rich would read as markup: escape every text.
    errors = Console(stderr=True, highlight=False)
    for warning in result.warnings:
        errors.print(f"[yellow]warning:[/] {escape(warning)}")
    if not explain:
        return
    console.print()
    console.print("[bold]How each figure is derived[/]")
    for step in steps:
        console.print(f"[bold]{step.name}[/] = {escape(step.formula)}")
        console.print(f"    = {escape(step.substituted)}")
        note = f"   [dim]({escape(step.note)})[/]" if step.note else ""
        console.print(f"    = {escape(units.render(step.value, step.unit))}{note}")
    notes = list(result.inputs.arch.notes)
    if notes:
        console.print("[bold]Assumptions about the model[/]")
        for note in notes:
            console.print(f"  - {escape(note)}")


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
        table.add_row("calibrated", f"{summary['rows']} points", how)
    elif note is not None:
        table.add_row("calibrated", "no", "see the warning below")


def _calibration_warning(calibration: Calibration) -> None:
    if calibration[1]:  # on stderr, with the other warnings
        Console(stderr=True, highlight=False).print(f"[yellow]warning:[/] {escape(calibration[1])}")


def price_table(result: PriceResult, *, explain: bool, calibration: Calibration = (None, None)) -> None:
    console = _console()
    title = _header(result)
    table = _table()
    _price_rows(table, result)
    _calibration_row(table, calibration)
    _show(console, title, table)
    _calibration_warning(calibration)
    _print_footer(console, result.steps, result, explain)


def size_table(result: SizeResult, *, explain: bool, calibration: Calibration = (None, None)) -> None:
    console = _console()
    tenant = result.tenant
    table = _table()
    title = (
        f"Tenant: {units.number(tenant.rps)} req/s × ({units.number(tenant.prompt_tokens)} prompt, "
        f"{units.number(tenant.output_tokens)} output tokens, {tenant.cached_fraction:.0%} cached) on {_header(result.replica)}"
    )
    table.add_row(
        "units per request", units.number(result.units_per_request), f"W = {result.replica.output_weight:.2f}"
    )
    table.add_row("load", f"{result.units_per_s:,.0f} units/s", "")
    table.add_row("replicas", f"{result.replicas:.2f}", f"of {result.replica.replica_units_per_s:,.0f} units/s each")
    table.add_row("token bucket rate", f"{result.bucket_rate_units_per_s:,.0f} units/s", "refill")
    table.add_row(
        "token bucket depth",
        f"{result.bucket_depth_units:,.0f} units",
        f"{result.replica.inputs.deployment.burst_s:g} s of quota",
    )
    table.add_row("shared", f"{units.usd(result.shared_usd_per_month)}/month", "its share of replicas")
    table.add_row(
        "dedicated",
        f"{units.usd(result.dedicated_total_usd_per_month)}/month",
        f"{result.dedicated_replicas} whole replica(s)",
    )
    table.add_row(
        "one request's KV",
        units.data_bytes(result.request_kv_bytes),
        f"{result.request_pool_share:.2%} of a replica's pool",
    )
    _calibration_row(table, calibration)
    _show(console, title, table)
    _calibration_warning(calibration)
    _print_footer(console, result.steps + result.replica.steps, result.replica, explain)


def kv_table(result: RequestKvResult, *, explain: bool) -> None:
    console = _console()
    title = f"One {result.context_tokens:,}-token request on {_header(result.replica)}"
    table = _table()
    gib = result.request_kv_bytes / GIB
    table.add_row("request KV", f"{gib:,.1f} GiB", units.data_bytes(result.request_kv_bytes))
    table.add_row(
        "per GPU", units.data_bytes(result.request_kv_bytes_per_gpu), f"TP {result.replica.inputs.deployment.tp}"
    )
    if result.window_kv_bytes:
        table.add_row("of which sliding-window KV", units.data_bytes(result.window_kv_bytes), "capped at the windows")
    if result.state_bytes:
        table.add_row("of which SSM state", units.data_bytes(result.state_bytes), "fixed per sequence")
    table.add_row("share of the KV pool", f"{result.pool_share:.1%}", f"pool {result.replica.kv_pool_tokens:,} tokens")
    table.add_row("resident at once", f"{result.requests_resident}", "requests that fit")
    table.add_row("fill the replica", f"{result.requests_to_fill_pool}", "requests")
    table.add_row(
        "prompt token at this context",
        f"{result.prompt_token_units_at_context:.2f} units",
        "parameters + attention FLOPs",
    )
    table.add_row("prefill of the whole prompt", f"{result.prefill_units:,.0f} units", "before the first output token")
    _show(console, title, table)
    _print_footer(console, result.steps + result.replica.steps, result.replica, explain)


# --------------------------------------------------------------------------- catalogs


_SHORT_KIND = {"full_attention": "full", "sliding_attention": "sliding", "mamba1": "mamba", "mamba2": "mamba2"}


def models_listing(*, as_json: bool) -> None:
    from quotacalc.catalog.models import shipped_models
    from quotacalc.core import memory
    from quotacalc.inputs.resolve import load_arch

    rows = []
    for shipped in shipped_models():
        arch, resolved = load_arch(shipped.name)
        rows.append(
            {
                "name": shipped.name,
                "hf_ids": list(shipped.hf_ids),
                "model_type": arch.model_type,
                "total_params": arch.total_params(),
                "active_params": arch.active_params(),
                "layer_kinds": arch.mixer_counts(),
                "kv_bytes_per_token_bf16": memory.kv_bytes_per_token(arch, 2),
                "checkpoint_dtype": arch.checkpoint_dtype,
                "quantization": (resolved.config.get("quantization_config") or {}).get("quant_method"),
                "max_context_tokens": arch.max_context_tokens,
            }
        )
    if as_json:
        emit_json({"schema_version": JSON_SCHEMA_VERSION, "models": rows})
        return
    table = Table(title="Shipped models (models/; provenance in models/SOURCES.md)", title_justify="left")
    for column in ("name", "type", "params", "active", "KV B/token", "layers", "weights"):
        table.add_column(column, justify="right" if column in ("params", "active", "KV B/token") else "left")
    for row in rows:
        table.add_row(
            row["name"],
            row["model_type"],
            units.count(row["total_params"]),
            units.count(row["active_params"]),
            f"{row['kv_bytes_per_token_bf16']:,.0f}",
            " + ".join(f"{n} {_SHORT_KIND.get(kind, kind)}" for kind, n in row["layer_kinds"].items()),
            row["quantization"] or row["checkpoint_dtype"],
        )
    table.caption = "KV B/token: bf16 KV growth per token at long context. Hub ids: quotacalc models --json."
    _console().print(table)


def gpus_listing(*, as_json: bool, sources: bool) -> None:
    from quotacalc.catalog.gpus import load_gpu_catalog

    catalog = load_gpu_catalog()
    if as_json:
        emit_json({"schema_version": JSON_SCHEMA_VERSION, "gpus": [gpu.model_dump() for gpu in catalog.gpus.values()]})
        return
    table = Table(title="GPU catalog (dense peak; efficiencies are deployment inputs)", title_justify="left")
    for column in ("id", "name", "memory", "bandwidth", "fp8 TFLOPS", "bf16 TFLOPS", "fp4 TFLOPS"):
        table.add_column(column, justify="left" if column in ("id", "name") else "right")
    for gpu in catalog.gpus.values():
        tflops = gpu.dense_tflops
        table.add_row(
            gpu.id,
            gpu.name,
            f"{gpu.memory_bytes / GIB:.2f} GiB",
            f"{gpu.memory_bandwidth_bytes_per_s / 1e12:.3g} TB/s",
            *(f"{tflops[key]:g}" if key in tflops else "-" for key in ("fp8", "bf16", "fp4")),
        )
    console = _console()
    console.print(table)
    if sources:
        for gpu in catalog.gpus.values():
            console.print(f"[bold]{gpu.id}[/]")
            for figure, source in gpu.sources.model_dump().items():
                console.print(f"  {figure}: {escape(source)}")
