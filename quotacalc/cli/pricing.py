"""One deployment loaded, priced and reported: the steps ``price``, ``size`` and ``kv`` share, and ``price`` itself.

Free of typer (cli/app.py declares the options and calls these), so cli/fast.py runs ``price`` without building the
command line; both paths run the same functions.
"""

from __future__ import annotations

from typing import Any

#: ``price``'s and ``size``'s deployment options, as cli/options.py generates them from ``Deployment``'s fields:
#: ``--gpu`` and ``--tp`` take lists (a comparison), ``--gpu-hour-usd`` one price per GPU.
COMPARABLE: dict[str, tuple[str, ...]] = {"lists": ("gpu", "tp"), "per_gpu": ("gpu_hour_usd",)}


def plan_calibration(plan_file, inputs) -> tuple[dict[str, Any] | None, str | None]:
    """cli/calibrate.py's ``plan_calibration``, imported only when there is a plan calibration to read."""
    if plan_file is None or plan_file.calibration is None:
        return None, None
    from quotacalc.cli.calibrate import plan_calibration as of_plan

    return of_plan(plan_file, inputs)


def strict_gate(warnings: tuple[str, ...], calibration, *, strict: bool) -> tuple[str, ...]:
    """Every warning of the run, with the calibration's (``fail_under_strict`` before anything is printed)."""
    from quotacalc.cli.streams import fail_under_strict

    warnings = (*warnings, calibration[1]) if calibration[1] else tuple(warnings)
    fail_under_strict(warnings, strict=strict)
    return warnings


def warn(warnings: tuple[str, ...], *, printed: bool) -> None:
    """Warnings go to stderr (the table path prints its own)."""
    if not printed:
        from quotacalc.cli.streams import print_warnings

        print_warnings(warnings)


def no_explain_in_rows(explain: bool) -> None:
    """Rows (a comparison, --format json|csv|markdown) carry figures, not their explanation: say so, not ignore it."""
    if explain:
        from quotacalc.errors import UsageError

        raise UsageError(
            "explains one deployment, not rows of a comparison or of --format",
            field="--explain",
            fix="give one --gpu and --tp with --json --explain, or drop --explain",
        )


def run_price(
    plan: str | None,
    as_json: bool,
    explain: bool,
    output_format: str,
    pool: str | None,
    strict: bool,
    deployment_flags: dict[str, Any],
):
    """The ``price`` command, given its parsed arguments (each deployment flag's value, None where not given)."""
    from quotacalc.cli.compare import check_format, run_comparison, split_axes

    deployment_flags, axes = split_axes(deployment_flags)
    if axes.is_comparison or check_format(output_format, as_json) != "table":
        output_format = "json" if as_json else output_format
        no_explain_in_rows(explain)
        return run_comparison("price", plan, deployment_flags, axes, output_format, strict=strict, pool=pool)
    from quotacalc.priced.deployment import price_deployment

    priced = price_deployment(plan, pool, deployment_flags)
    result = priced.price
    calibration = plan_calibration(priced.plan_file, result.inputs)
    warnings = strict_gate(result.warnings, calibration, strict=strict)
    if as_json:
        from quotacalc.cli.json_out import emit_json, price_json

        emit_json(price_json(result, explain=explain, calibration=calibration))
    else:
        from quotacalc.cli.tables import price_table

        price_table(result, explain=explain, calibration=calibration)
    warn(warnings, printed=not as_json)
    return None
