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
PoolOption = Annotated[str | None, typer.Option("--pool", help="platform plan: the pool to use (needed if several)")]

DEPLOYMENT_OPTIONS = option_parameters(Deployment, panel="Deployment")
DEPLOYMENT_OPTIONS_NO_CONTEXT = option_parameters(Deployment, panel="Deployment", exclude=("context",))
TENANT_OPTIONS = option_parameters(Tenant, panel="Tenant")


def _load(
    plan: str | None,
    deployment_flags: dict[str, Any],
    tenant_flags: dict[str, Any] | None = None,
    pool: str | None = None,
):
    from quotacalc.inputs.deployment import build_deployment, build_tenant
    from quotacalc.inputs.plan import deployment_source

    if pool is not None and not plan:
        from quotacalc.errors import UsageError

        raise UsageError("needs a plan file", field="--pool")
    plan_file = deployment_source(plan, pool) if plan else None
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
@with_options({"deployment_flags": DEPLOYMENT_OPTIONS})
def price_command(
    plan: PlanArgument = None,
    as_json: JsonOption = False,
    explain: ExplainOption = False,
    pool: PoolOption = None,
    *,
    deployment_flags,
):
    """What one replica costs: token times, output weight W, budget, KV pool, $ per month and per million tokens."""
    deployment, _ = _load(plan, deployment_flags, pool=pool)
    result = _price(deployment)
    if as_json:
        from quotacalc.cli.json_out import emit_json, price_json

        emit_json(price_json(result))
    else:
        from quotacalc.cli.tables import price_table

        price_table(result, explain=explain)


@app.command("size")
@with_options({"deployment_flags": DEPLOYMENT_OPTIONS, "tenant_flags": TENANT_OPTIONS})
def size_command(
    plan: PlanArgument = None,
    as_json: JsonOption = False,
    explain: ExplainOption = False,
    pool: PoolOption = None,
    *,
    deployment_flags,
    tenant_flags,
):
    """Size a tenant: units/s, replicas, token bucket, and monthly cost shared against dedicated.

    On a platform plan (without tenant flags): one row per tenant, and totals."""
    from quotacalc.core.tenant import size_tenant
    from quotacalc.inputs.plan import is_platform_file

    if plan and all(value is None for value in tenant_flags.values()) and is_platform_file(plan):
        from quotacalc.cli.plan_cmds import size_platform

        return size_platform(plan, pool, deployment_flags, as_json=as_json, explain=explain)
    deployment, tenant = _load(plan, deployment_flags, tenant_flags, pool)
    result = size_tenant(_price(deployment), tenant)
    if as_json:
        from quotacalc.cli.json_out import emit_json, size_json

        emit_json(size_json(result))
    else:
        from quotacalc.cli.tables import size_table

        size_table(result, explain=explain)


@app.command("kv")
@with_options({"deployment_flags": DEPLOYMENT_OPTIONS_NO_CONTEXT})
def kv_command(
    plan: PlanArgument = None,
    context: Annotated[int | None, typer.Option("--context", help="the request's context length, tokens")] = None,
    as_json: JsonOption = False,
    explain: ExplainOption = False,
    pool: PoolOption = None,
    *,
    deployment_flags,
):
    """One request's KV at a context length: bytes, per GPU, share of the pool, how many fill a replica."""
    from quotacalc.core.kv import request_kv
    from quotacalc.errors import UsageError

    deployment, _ = _load(plan, deployment_flags, pool=pool)
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


SecretFileOption = Annotated[
    str | None,
    typer.Option("--salt-secret-file", help="file holding the salt secret (else $QUOTACALC_SALT_SECRET)"),
]
PlanFileArgument = Annotated[str, typer.Argument(help="plan YAML file (platform or flat)", show_default=False)]


@app.command("schema")
def schema_command(
    what: Annotated[str, typer.Argument(help="plan (a plan file) or policy (the canonical policy)")] = "plan",
):
    """Print a JSON Schema: of the plan file (default), or of the canonical policy."""
    from quotacalc.cli.plan_cmds import schema

    schema(what)


@app.command("check")
def check_command(
    plan: PlanFileArgument,
    as_json: JsonOption = False,
    strict: Annotated[bool, typer.Option("--strict", help="treat warnings as errors")] = False,
    salt_secret_file: SecretFileOption = None,
    reversal_replicas: Annotated[
        float, typer.Option("--reversal-replicas", help="a shared tenant above this many replicas of load is flagged")
    ] = 2.0,
):
    """Is the plan sound? Capacity, KV caps, max context, the reversal condition, salts; exit 1 on an error."""
    from quotacalc.cli.plan_cmds import check

    sys.exit(
        check(plan, as_json=as_json, strict=strict, secret_file=salt_secret_file, reversal_replicas=reversal_replicas)
    )


@app.command("generate")
def generate_command(
    plan: PlanFileArgument,
    out: Annotated[str, typer.Option("--out", help="output directory")],
    target: Annotated[
        str | None, typer.Option("--target", help="comma-separated: canonical,envoy,kong,litellm,vllm,gie (all)")
    ] = None,
    check: Annotated[
        bool, typer.Option("--check", help="write nothing; print a diff and exit 1 if DIR differs")
    ] = False,
    salt_secret_file: SecretFileOption = None,
    gie_objectives: Annotated[
        bool, typer.Option("--gie-objectives", help="also emit InferenceObjective (v1alpha2) per tier")
    ] = False,
    as_json: JsonOption = False,
):
    """Generate the canonical policy and gateway/engine configs into DIR (atomic, manifest-guarded)."""
    from quotacalc.cli.plan_cmds import generate

    sys.exit(
        generate(
            plan,
            out=out,
            target=target,
            check_only=check,
            secret_file=salt_secret_file,
            gie_objectives=gie_objectives,
            as_json=as_json,
        )
    )


@app.command("simulate")
def simulate_command(
    scenario: Annotated[
        str, typer.Argument(help="scenario YAML: a plan (named or embedded) and each tenant's workload")
    ],
    seed: Annotated[int | None, typer.Option("--seed", help="random seed (default: the scenario's)")] = None,
    as_json: JsonOption = False,
    plot: Annotated[str | None, typer.Option("--plot", help="also write a PNG or SVG of the comparison")] = None,
    requests: Annotated[int | None, typer.Option("--requests", help="stop arrivals after N requests")] = None,
):
    """Simulate admission policies and queueing on a plan's pool, side by side (rejects, overshoot, latency)."""
    from quotacalc.cli.simulate import run_simulate

    run_simulate(scenario, seed=seed, as_json=as_json, plot=plot, requests=requests)


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
