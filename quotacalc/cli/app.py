"""The ``quotacalc`` command line: parse, call the core, render. Nothing is computed here.

Commands are declared here and built only when they run (cli/lazy.py): a call pays for its own
command's options, imports and models, not for the other ten.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer

from quotacalc.cli.lazy import LazyCommands, LazyGroup
from quotacalc.cli.options import option_parameters, whole_number
from quotacalc.cli.pricing import COMPARABLE, plan_calibration, run_price
from quotacalc.cli.pricing import no_explain_in_rows as _no_explain_in_rows
from quotacalc.cli.pricing import strict_gate as _strict_gate
from quotacalc.cli.pricing import warn as _warn
from quotacalc.errors import QuotacalcError

if TYPE_CHECKING:
    from collections.abc import Callable

_SETTINGS: dict[str, Any] = {
    "add_completion": False,
    "pretty_exceptions_enable": False,
    # Plain help: it fits a pipe and a narrow terminal, shows each default, and no <bool> on flags.
    "rich_markup_mode": None,
}
commands = LazyCommands(**_SETTINGS)


class _Group(LazyGroup):
    commands_declared = commands


app = typer.Typer(
    cls=_Group,
    help="Price LLM serving in replica time and KV memory, and size tenants on shared replicas.",
    no_args_is_help=True,
    **_SETTINGS,
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
    str, typer.Option("--format", help="table, json, csv or markdown; all but table print one row per GPU and TP")
]
PoolOption = Annotated[str | None, typer.Option("--pool", help="platform plan: the pool to use (needed if several)")]
StrictOption = Annotated[bool, typer.Option("--strict", help="turn every warning into an error (exit 1), for CI")]


# Each command's generated options, made only when that command is built.
def _comparable_options() -> dict[str, list]:
    from quotacalc.core.deployment import Deployment

    return {"deployment_flags": option_parameters(Deployment, panel="Deployment", **COMPARABLE)}


def _traffic_options() -> dict[str, list]:
    from quotacalc.core.deployment import Traffic

    return {**_comparable_options(), "traffic_flags": option_parameters(Traffic, panel="Traffic")}


def _options_no_context() -> dict[str, list]:
    from quotacalc.core.deployment import Deployment

    return {"deployment_flags": option_parameters(Deployment, panel="Deployment", exclude=("context",))}


def _one_deployment(command: str, flag: str, what: str, given: str) -> NoReturn:
    from quotacalc.errors import UsageError

    raise UsageError(
        f"{command} prices one deployment: give one {what}, not '{given}'",
        field=flag,
        fix=f"comparisons: quotacalc price/size {flag} A,B",
    )


def _one_tp_size(text: str) -> int:
    """kv's --tp: one whole number; a list is a comparison, which kv does not make (price and size do)."""
    if "," in text:
        _one_deployment("kv", "--tp", "TP size", text)
    return whole_number(text)


def _kv_options() -> dict[str, list]:
    """kv's deployment options (no --context: kv's own is the request's); --tp says so when given a list."""
    from typing import get_args

    options = _options_no_context()
    for parameter in options["deployment_flags"]:
        if parameter.name == "tp":
            for info in get_args(parameter.annotation)[1:]:
                info.parser = _one_tp_size
    return options


@commands.command("price", options=_comparable_options)
def price_command(
    plan: PlanArgument = None,
    as_json: JsonOption = False,
    explain: ExplainOption = False,
    output_format: FormatOption = "table",
    pool: PoolOption = None,
    strict: StrictOption = False,
    *,
    deployment_flags,
):
    """What one replica costs: token times, output weight W, budget, KV pool, $ per month and per million tokens."""
    return run_price(plan, as_json, explain, output_format, pool, strict, deployment_flags)


def _plan_document(plan: str) -> dict[str, Any]:
    """The plan file's mapping, read once for the commands that pass it on."""
    from quotacalc.inputs.plan import read_document

    return read_document(plan)


def is_platform(document: dict[str, Any]) -> bool:
    from quotacalc.inputs.plan import is_platform as platform

    return platform(document)


@commands.command("size", options=_traffic_options)
def size_command(
    plan: PlanArgument = None,
    as_json: JsonOption = False,
    explain: ExplainOption = False,
    output_format: FormatOption = "table",
    pool: PoolOption = None,
    strict: StrictOption = False,
    *,
    deployment_flags,
    traffic_flags,
):
    """Size a tenant: units/s, replicas, token bucket, and monthly cost shared against dedicated.

    On a platform plan (without tenant flags): one row per tenant, and totals."""
    from quotacalc.cli.compare import check_format, run_comparison, split_axes

    deployment_flags, axes = split_axes(deployment_flags)
    document = _plan_document(plan) if plan else None
    if document is not None and all(value is None for value in traffic_flags.values()) and is_platform(document):
        from quotacalc.cli.plan_cmds import size_platform
        from quotacalc.priced import price_read_plan

        if axes.is_comparison:
            from quotacalc.errors import UsageError

            raise UsageError("compares one tenant, not a platform plan's", field="--gpu", fix="give the tenant's flags")
        if explain:
            from quotacalc.errors import UsageError

            # A row per tenant carries figures, not their explanation: say so rather than ignore the flag.
            raise UsageError(
                "explains one tenant, not a platform plan's rows",
                field="--explain",
                fix="size one tenant with --pool NAME and --rps, --prompt-tokens, --output-tokens, or read --json",
            )
        output_format = check_format(output_format, as_json)
        from quotacalc.inputs.plan import read_plan

        return size_platform(
            price_read_plan(read_plan(plan, document), deployment_flags),
            pool,
            deployment_flags,
            output_format="json" if as_json else output_format,
            explain=explain,
            strict=strict,
        )
    if axes.is_comparison or check_format(output_format, as_json) != "table":
        output_format = "json" if as_json else output_format
        _no_explain_in_rows(explain)
        return run_comparison(
            "size", plan, deployment_flags, axes, output_format, traffic_flags, strict=strict, pool=pool
        )
    from quotacalc.priced.deployment import price_deployment

    priced = price_deployment(plan, pool, deployment_flags, traffic_flags=traffic_flags, document=document)
    result = priced.size()
    traffic = result.traffic
    calibration = plan_calibration(priced.plan_file, result.replica.inputs)
    # The replica's warnings and the tenant's own (a bucket that cannot admit its mean request), worded by origin.
    warnings = [*result.replica.warnings, *priced.worded(result.traffic_warnings)]
    routing = priced.plan_file.long_routing if priced.plan_file else None
    if routing is not None and traffic.prompt_tokens > routing[1]:
        # The plan sends such prompts elsewhere: this pool's units and W are not what they cost.
        name, threshold, long_pool = routing
        warnings.append(
            f"prompts of {traffic.prompt_tokens:,.0f} tokens are above pool {name}'s route_above_prompt_tokens "
            f"({threshold:,}), so the plan serves them on pool {long_pool}: sized here on pool {name}, at its W "
            f"(size --pool {long_pool} for their cost there, or add the tenant to the plan with its traffic)"
        )
    own = tuple(warnings)
    warnings = _strict_gate(own, calibration, strict=strict)
    if as_json:
        from quotacalc.cli.json_out import emit_json, size_json

        emit_json(size_json(result, explain=explain, calibration=calibration, warnings=own))
    else:
        from quotacalc.cli.tables import size_table

        size_table(result, explain=explain, calibration=calibration, warnings=own)
    _warn(warnings, printed=not as_json)


@commands.command("kv", options=_kv_options)
def kv_command(
    plan: PlanArgument = None,
    context: Annotated[
        int | None,
        typer.Option(
            "--context",
            help="the request's context length, tokens (required: a plan's context is its decode batch's mean, not "
            "one request's)",
            parser=whole_number,
            metavar="<int>",
        ),
    ] = None,
    as_json: JsonOption = False,
    explain: ExplainOption = False,
    pool: PoolOption = None,
    strict: StrictOption = False,
    *,
    deployment_flags,
):
    """One request's KV at a context length: bytes, per GPU, share of the pool, how many fill a replica."""
    from quotacalc.core.deployment import MAX_CONTEXT_TOKENS
    from quotacalc.errors import UsageError

    if "," in (deployment_flags.get("gpu") or ""):
        _one_deployment("kv", "--gpu", "GPU", deployment_flags["gpu"])
    from quotacalc.priced.deployment import price_deployment
    from quotacalc.priced.origins import ValueOrigin

    priced = price_deployment(plan, pool, deployment_flags)
    if context is None:
        raise UsageError("is required", field="--context", fix="the request's context length in tokens")
    if context <= 0:
        raise QuotacalcError(f"must be a positive integer, got {context}", field="--context")
    if context > MAX_CONTEXT_TOKENS:
        raise QuotacalcError(f"must be at most {MAX_CONTEXT_TOKENS:,}, got {context}", field="--context")
    result = priced.request_kv(context, ValueOrigin("flag", "--context"))
    calibration = plan_calibration(priced.plan_file, result.replica.inputs)
    own = (*result.replica.warnings, *priced.worded(result.request_warnings))
    warnings = _strict_gate(own, calibration, strict=strict)
    if as_json:
        from quotacalc.cli.json_out import emit_json, kv_json

        document = kv_json(result, explain=explain, calibration=calibration)
        # The request's warning worded by origin, as the table's stderr line says it.
        document["warnings"] = list(warnings)
        emit_json(document)
    else:
        from quotacalc.cli.tables import kv_table

        kv_table(result, explain=explain)
        # The table's footer prints the replica's warnings; the request's own and the calibration's go to stderr.
        warnings = warnings[len(result.replica.warnings) :]
    _warn(warnings, printed=False)


@commands.command("models")
def models_command(
    as_json: JsonOption = False,
    markdown: Annotated[bool, typer.Option("--markdown", help="print docs/models.md (a table per model)")] = False,
    families: Annotated[
        bool, typer.Option("--families", help="list the config model_type values quotacalc prices, shipped or not")
    ] = False,
):
    """List the shipped model configs: parameters, KV per token, layer kinds."""
    if markdown and (as_json or families):
        from quotacalc.errors import UsageError

        raise UsageError(
            f"--markdown prints docs/models.md, not {'--json' if as_json else '--families'}",
            field="--markdown",
            fix="give one of them",
        )
    if families:
        from quotacalc.cli.listings import families_listing

        families_listing(as_json=as_json)
        return
    if markdown:
        from quotacalc.cli.models_doc import models_markdown

        sys.stdout.write(models_markdown())
        return
    from quotacalc.cli.listings import models_listing

    models_listing(as_json=as_json)


@commands.command("gpus")
def gpus_command(
    as_json: JsonOption = False,
    sources: Annotated[bool, typer.Option("--sources", help="show where each figure comes from")] = False,
):
    """List the GPU catalog: memory, bandwidth, dense TFLOPS per dtype."""
    from quotacalc.cli.listings import gpus_listing

    gpus_listing(as_json=as_json, sources=sources)


@commands.command("engines")
def engines_command(as_json: JsonOption = False):
    """List the engine profiles: the engine-model defaults each serving engine changes, with their source."""
    from quotacalc.cli.listings import engines_listing

    engines_listing(as_json=as_json)


SecretFileOption = Annotated[
    str | None,
    typer.Option("--salt-secret-file", help="file holding the salt secret (else $QUOTACALC_SALT_SECRET)"),
]
PlanFileArgument = Annotated[str, typer.Argument(help="plan YAML file (platform or flat)", show_default=False)]


@commands.command("schema")
def schema_command(
    what: Annotated[str, typer.Argument(help="plan (a plan file) or policy (the canonical policy)")] = "plan",
):
    """Print a JSON Schema: of the plan file (default), or of the canonical policy."""
    from quotacalc.cli.plan_cmds import schema

    schema(what)


@commands.command("check")
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


def _target_options() -> dict[str, list]:
    from quotacalc.cli.targets import target_parameters

    return {"target_options": target_parameters()}


@commands.command("generate", options=_target_options)
def generate_command(
    plan: PlanFileArgument,
    out: Annotated[str, typer.Option("--out", help="output directory")],
    check: Annotated[
        bool, typer.Option("--check", help="write nothing; print a diff and exit 1 if DIR differs")
    ] = False,
    salt_secret_file: SecretFileOption = None,
    as_json: JsonOption = False,
    target_options: dict[str, Any] | None = None,
):
    """Generate the canonical policy and gateway/engine configs into DIR (atomic, manifest-guarded).

    --target and the targets' own options come from the targets' declarations (quotacalc targets lists them)."""
    from quotacalc.cli.plan_cmds import generate
    from quotacalc.errors import UsageError

    if not out.strip():  # '' would be the current directory: a slip, not a choice
        raise UsageError("is empty", field="--out", fix="name the output directory, e.g. --out generated")
    given = dict(target_options or {})
    sys.exit(
        generate(
            plan,
            out=out,
            target=given.get("target"),
            check_only=check,
            secret_file=salt_secret_file,
            target_options=given,
            as_json=as_json,
        )
    )


@commands.command("targets")
def targets_command(as_json: JsonOption = False):
    """List the config targets: what each enforces of the policy, how it salts, and its options."""
    from quotacalc.cli.targets import targets_listing

    targets_listing(as_json=as_json)


@commands.command("examples")
def examples_command(
    name: Annotated[str | None, typer.Argument(help="an example's name; omit to list them", show_default=False)] = None,
    copy_to: Annotated[
        str | None, typer.Option("--copy", help="write the example(s) into this directory", show_default=False)
    ] = None,
    as_json: JsonOption = False,
):
    """The shipped example plans: list them, print one, or copy them out (they ship inside the package)."""
    from quotacalc.cli.examples import examples_command as run

    run(name, copy_to, as_json)


_SIMULATE_SUMMARY = (
    "Simulate admission policies and queueing on a plan's pool, side by side (rejects, overshoot, latency)."
)


def simulate_command(
    scenario: Annotated[
        str, typer.Argument(help="scenario YAML: a plan (named or embedded) and each tenant's workload")
    ],
    seed: Annotated[
        int | None,
        typer.Option("--seed", help="random seed (default: the scenario's)", parser=whole_number, metavar="<int>"),
    ] = None,
    as_json: JsonOption = False,
    plot: Annotated[str | None, typer.Option("--plot", help="also write a PNG or SVG of the comparison")] = None,
    requests: Annotated[
        int | None,
        typer.Option("--requests", help="stop arrivals after N requests", parser=whole_number, metavar="<int>"),
    ] = None,
    seeds: Annotated[
        int | None,
        typer.Option(
            "--seeds",
            help="run N seeds (the seed, then +1, ...): each headline figure's mean and 95% interval",
            parser=whole_number,
            metavar="<int>",
        ),
    ] = None,
    trace: Annotated[
        str | None, typer.Option("--trace", help="write one row per request to FILE.jsonl, .csv or .parquet")
    ] = None,
    timeseries: Annotated[
        str | None,
        typer.Option("--timeseries", help="write each tenant's bucket, queue, served units and live KV over time"),
    ] = None,
    max_seconds: Annotated[
        float | None,
        typer.Option("--max-seconds", help="stop after this much wall time, with what was simulated (exit 0)"),
    ] = None,
):
    from quotacalc.cli.simulate import run_simulate

    run_simulate(
        scenario,
        seed=seed,
        as_json=as_json,
        plot=plot,
        requests=requests,
        seeds=seeds,
        trace=trace,
        timeseries=timeseries,
        max_seconds=max_seconds,
    )


def _simulate_with_policy_help() -> Callable[..., None]:
    """simulate, its help closed by the admission policies as the registry declares them (built when it runs)."""
    from quotacalc.admission.policies import POLICIES

    listed = "\n\n".join(f"{d.name}: {d.help}." for d in POLICIES.values())
    simulate_command.__doc__ = f"{_SIMULATE_SUMMARY}\n\nAdmission policies (a scenario's policies: key):\n\n{listed}"
    return simulate_command


commands.declare("simulate", _simulate_with_policy_help, summary=_SIMULATE_SUMMARY)


# The body lives in cli/calibrate.py (imported when calibrate runs; the summary is its help's first paragraph,
# which tests/test_startup.py holds to it). The deployment's options are kv's: --context plays no part in a fit.
commands.declare(
    "calibrate",
    "quotacalc.cli.calibrate:calibrate_command",
    summary="Fit MFU, MBU and engine overheads to your benchmark runs, and the KV pool to a vLLM or SGLang start-up log.",
    options=_options_no_context,
)

# The body lives in cli/emulate.py (imported when emulate runs, with aiohttp: the `emulate` extra).
commands.declare(
    "emulate",
    "quotacalc.cli.emulate:emulate_command",
    summary="Serve a plan's pools as OpenAI-compatible engines at the priced speed (KV pool, prefix cache, priorities).",
)


def _fleet_options() -> dict[str, list]:
    """price's deployment options, but --engine: fleet's own names where its query runs."""
    from quotacalc.core.deployment import Deployment

    return {"deployment_flags": option_parameters(Deployment, panel="Deployment", exclude=("engine",))}


# The body lives in cli/fleet.py (DuckDB, SQLGlot and the engines are imported only when fleet runs).
commands.declare(
    "fleet",
    "quotacalc.cli.fleet:fleet_command",
    summary="Measure peaks, tenants over contract and the oversubscription ratio from usage logs, and record the ratio.",
    options=_fleet_options,
)


def main() -> None:
    """Entry point: one-line errors with exit codes, never a traceback for bad input (cli/outcome.py)."""
    from quotacalc.cli.outcome import report_outcome

    report_outcome(lambda: app(standalone_mode=False))
