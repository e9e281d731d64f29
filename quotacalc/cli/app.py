"""The ``quotacalc`` command line: parse, call the core, render. Nothing is computed here."""

from __future__ import annotations

import os
import sys
from typing import Annotated, Any

import typer

from quotacalc.cli.options import option_parameters, with_options
from quotacalc.core.deployment import Deployment, Tenant
from quotacalc.errors import QuotacalcError

app = typer.Typer(
    help="Price LLM serving in replica time and KV memory, and size tenants on shared replicas.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _print_version(value: bool) -> None:
    if value:
        from importlib.metadata import version

        sys.stdout.write(f"quotacalc {version('quotacalc')}\n")
        raise typer.Exit()


@app.callback()
def _root(
    show_version: Annotated[
        bool, typer.Option("--version", help="print the version and exit", callback=_print_version, is_eager=True)
    ] = False,
) -> None:
    """Price LLM serving in replica time and KV memory, and size tenants on shared replicas."""


PlanArgument = Annotated[
    str | None,
    typer.Argument(help="deployment YAML file (its keys are the flags' names with underscores)", show_default=False),
]
JsonOption = Annotated[bool, typer.Option("--json", help="print machine-readable JSON (SI units, stable keys)")]
ExplainOption = Annotated[bool, typer.Option("--explain", help="print each formula with its numbers substituted")]
FormatOption = Annotated[
    str, typer.Option("--format", help="table, json, csv or markdown; all but table print one row per GPU × TP")
]
StrictOption = Annotated[bool, typer.Option("--strict", help="turn every warning into an error (exit 1), for CI")]


def _warn(warnings: tuple[str, ...], *, strict: bool, printed: bool) -> None:
    """Warnings go to stderr (the table path prints its own); under --strict any warning fails the run."""
    if not printed:
        for warning in warnings:
            sys.stderr.write(f"quotacalc: warning: {warning}\n")
    if strict and warnings:
        raise QuotacalcError(
            f"{len(warnings)} warning(s) under --strict", field="--strict", fix="see the warnings above"
        )


COMPARABLE_OPTIONS = option_parameters(Deployment, panel="Deployment", lists=("gpu", "tp"))
DEPLOYMENT_OPTIONS_NO_CONTEXT = option_parameters(Deployment, panel="Deployment", exclude=("context",))
TENANT_OPTIONS = option_parameters(Tenant, panel="Tenant")


def _load(plan: str | None, deployment_flags: dict[str, Any], tenant_flags: dict[str, Any] | None = None):
    from quotacalc.inputs.deployment import build_deployment, build_tenant, load_plan_file

    plan_file = load_plan_file(plan) if plan else None
    deployment = build_deployment(plan_file.deployment if plan_file else {}, deployment_flags, source=plan)
    tenant = None
    if tenant_flags is not None:
        tenant = build_tenant(plan_file.tenant if plan_file else None, tenant_flags, source=plan)
    return deployment, tenant


def _price(deployment: Deployment):
    from quotacalc.core.price import price
    from quotacalc.inputs.resolve import resolve

    return price(resolve(deployment))


@app.command("price")
@with_options({"deployment_flags": COMPARABLE_OPTIONS})
def price_command(
    plan: PlanArgument = None,
    as_json: JsonOption = False,
    explain: ExplainOption = False,
    output_format: FormatOption = "table",
    strict: StrictOption = False,
    *,
    deployment_flags,
):
    """What one replica costs: token times, output weight W, budget, KV pool, $ per month and per million tokens."""
    from quotacalc.cli.compare import check_format, run_comparison, split_axes

    deployment_flags, axes = split_axes(deployment_flags)
    if axes.is_comparison or check_format(output_format, as_json) != "table":
        return run_comparison(
            "price", plan, deployment_flags, axes, "json" if as_json else output_format, strict=strict
        )
    deployment, _ = _load(plan, deployment_flags)
    result = _price(deployment)
    calibration = plan_calibration(plan, result.inputs)
    if as_json:
        from quotacalc.cli.json_out import emit_json, price_json

        emit_json(price_json(result, calibration=calibration))
    else:
        from quotacalc.cli.tables import price_table

        price_table(result, explain=explain, calibration=calibration)
    _warn(result.warnings + calibration[1:2] if calibration[1] else result.warnings, strict=strict, printed=not as_json)


@app.command("size")
@with_options({"deployment_flags": COMPARABLE_OPTIONS, "tenant_flags": TENANT_OPTIONS})
def size_command(
    plan: PlanArgument = None,
    as_json: JsonOption = False,
    explain: ExplainOption = False,
    output_format: FormatOption = "table",
    strict: StrictOption = False,
    *,
    deployment_flags,
    tenant_flags,
):
    """Size a tenant: units/s, replicas, token bucket, and monthly cost shared against dedicated."""
    from quotacalc.cli.compare import check_format, run_comparison, split_axes
    from quotacalc.core.tenant import size_tenant

    deployment_flags, axes = split_axes(deployment_flags)
    if axes.is_comparison or check_format(output_format, as_json) != "table":
        output_format = "json" if as_json else output_format
        return run_comparison("size", plan, deployment_flags, axes, output_format, tenant_flags, strict=strict)

    deployment, tenant = _load(plan, deployment_flags, tenant_flags)
    result = size_tenant(_price(deployment), tenant)
    calibration = plan_calibration(plan, result.replica.inputs)
    if as_json:
        from quotacalc.cli.json_out import emit_json, size_json

        emit_json(size_json(result, calibration=calibration))
    else:
        from quotacalc.cli.tables import size_table

        size_table(result, explain=explain, calibration=calibration)
    warnings = result.replica.warnings
    _warn(warnings + calibration[1:2] if calibration[1] else warnings, strict=strict, printed=not as_json)


@app.command("kv")
@with_options({"deployment_flags": DEPLOYMENT_OPTIONS_NO_CONTEXT})
def kv_command(
    plan: PlanArgument = None,
    context: Annotated[int | None, typer.Option("--context", help="the request's context length, tokens")] = None,
    as_json: JsonOption = False,
    explain: ExplainOption = False,
    strict: StrictOption = False,
    *,
    deployment_flags,
):
    """One request's KV at a context length: bytes, per GPU, share of the pool, how many fill a replica."""
    from quotacalc.core.kv import request_kv
    from quotacalc.errors import UsageError

    deployment, _ = _load(plan, deployment_flags)
    if context is None:
        raise UsageError("is required", field="--context", fix="the request's context length in tokens")
    if context <= 0:
        raise QuotacalcError(f"must be a positive integer, got {context}", field="--context")
    result = request_kv(_price(deployment), context)
    if as_json:
        from quotacalc.cli.json_out import emit_json, kv_json

        emit_json(kv_json(result))
    else:
        from quotacalc.cli.tables import kv_table

        kv_table(result, explain=explain)
    _warn(result.replica.warnings, strict=strict, printed=not as_json)


@app.command("models")
def models_command(
    as_json: JsonOption = False,
    markdown: Annotated[bool, typer.Option("--markdown", help="print docs/models.md (a table per model)")] = False,
):
    """List the shipped model configs: parameters, KV per token, layer kinds."""
    if markdown:
        from quotacalc.cli.models_doc import models_markdown

        sys.stdout.write(models_markdown())
        return
    from quotacalc.cli.tables import models_listing

    models_listing(as_json=as_json)


@app.command("gpus")
def gpus_command(
    as_json: JsonOption = False,
    sources: Annotated[bool, typer.Option("--sources", help="show where each figure comes from")] = False,
):
    """List the GPU catalog: memory, bandwidth, dense TFLOPS per dtype."""
    from quotacalc.cli.tables import gpus_listing

    gpus_listing(as_json=as_json, sources=sources)


from quotacalc.cli.calibrate import calibrate_command, plan_calibration  # noqa: E402  (the body lives there)

# The deployment's options are kv's (one set of option objects built at start-up; --context plays no part in a fit).
app.command("calibrate")(with_options({"deployment_flags": DEPLOYMENT_OPTIONS_NO_CONTEXT})(calibrate_command))


def main() -> None:
    """Entry point: one-line errors with exit codes, never a traceback for bad input."""
    try:
        app(standalone_mode=False)
    except QuotacalcError as error:
        sys.stderr.write(f"quotacalc: error: {error.one_line()}\n")
        sys.exit(error.exit_code)
    except KeyboardInterrupt:
        sys.exit(130)
    except Exception as error:
        # Command-line parse errors (typer's click): duck-typed, since typer vendors its own click.
        if hasattr(error, "format_message") and isinstance(getattr(error, "exit_code", None), int):
            message = " ".join(error.format_message().split())
            if message:  # empty when the help was printed instead (no arguments)
                command = getattr(getattr(error, "ctx", None), "command_path", "quotacalc")
                hint = f" (see '{command} --help')" if error.exit_code == 2 else ""
                sys.stderr.write(f"quotacalc: error: {message}{hint}\n")
            sys.exit(error.exit_code)
        if type(error).__name__ == "Abort":
            sys.exit(130)
        if os.environ.get("QUOTACALC_DEBUG"):
            raise
        sys.stderr.write(
            f"quotacalc: internal error: {type(error).__name__}: {error} (set QUOTACALC_DEBUG=1 for a traceback)\n"
        )
        sys.exit(3)
