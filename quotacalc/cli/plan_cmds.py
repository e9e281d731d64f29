"""The plan commands: ``schema``, ``check``, ``generate``, and ``size`` over a platform plan's tenants.

Parse, call inputs and core, render: no arithmetic here.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from quotacalc.cli.json_out import JSON_SCHEMA_VERSION, emit_json
from quotacalc.errors import QuotacalcError, UsageError

if TYPE_CHECKING:
    from quotacalc.core.checks import CheckResult
    from quotacalc.core.plan import Plan
    from quotacalc.core.policy import QuotaPolicy
    from quotacalc.exporters.base import Export
    from quotacalc.priced import PricedPlan


def load_policy(path: str, deployment_flags: dict[str, Any] | None = None) -> tuple[Plan, QuotaPolicy]:
    """Read any plan file and build its canonical policy."""
    priced = price_plan(path, deployment_flags)
    return priced.plan, priced.policy


def load_flags_policy(deployment_flags: dict[str, Any]) -> tuple[Plan, QuotaPolicy]:
    """The canonical policy of a deployment given by price's flags alone: one pool, ``default``, and no tenant."""
    from quotacalc.core.plan import Plan, Pool
    from quotacalc.core.policy import build_policy
    from quotacalc.inputs.plan import DEFAULT_POOL
    from quotacalc.priced.deployment import price_deployment

    replica = price_deployment(None, None, deployment_flags).price
    plan = Plan(pools=(Pool(name=DEFAULT_POOL, deployment=replica.inputs.deployment, replicas=1),))
    return plan, build_policy(plan, {DEFAULT_POOL: replica})


def price_plan(path: str, deployment_flags: dict[str, Any] | None = None) -> PricedPlan:
    """The plan file read once and priced (``quotacalc.priced``)."""
    from quotacalc.priced import price_plan as priced_plan

    return priced_plan(path, deployment_flags)


def _key_names(priced: PricedPlan) -> dict[str, Any]:
    """Pool name -> how its findings name a deployment key: where the plan (or a flag) set it."""
    return {pool.name: priced.key_namer(pool.name) for pool in priced.plan.pools}


def plan_traffic(plan: Plan) -> dict[str, Any]:
    """Tenant name -> the traffic profile it is sized on (tenants on a contract have none)."""
    return {tenant.name: tenant.traffic for tenant in plan.tenants if tenant.traffic is not None}


def _salts(policy: QuotaPolicy, secret_file: str | None, *, required: bool) -> dict[str, str] | None:
    """salt_ref -> salt, or None when no secret is given (an error when ``required`` and a tenant is salted)."""
    from quotacalc.core.salts import derive_salts
    from quotacalc.inputs.secret import SECRET_ENV, load_salt_secret, require_strong_secret

    salted = [tenant.name for tenant in policy.tenants if tenant.salt_ref]
    secret = load_salt_secret(secret_file)
    if secret is not None and required and salted:
        # Only salts written into files need a secret that cannot be searched for; check reads it as given.
        require_strong_secret(secret, secret_file)
    if secret is None:
        if required and salted:
            shown = ", ".join(salted[:3]) + (f" and {len(salted) - 3} more" if len(salted) > 3 else "")
            raise UsageError(
                f"{len(salted)} salted tenants ({shown}) need a salt secret; nothing was written",
                field="--salt-secret-file",
                fix=f"set {SECRET_ENV} or pass --salt-secret-file FILE",
            )
        return None
    return derive_salts(policy, secret) if salted else {}


# --- schema ----------------------------------------------------------------------------------------


def schema(what: str) -> None:
    """Print the JSON Schema of a plan file or of the canonical policy."""
    if what == "plan":
        from quotacalc.inputs.plan import plan_json_schema

        document = plan_json_schema()
    elif what == "policy":
        from quotacalc.exporters.canonical import policy_json_schema

        document = policy_json_schema()
    else:
        raise UsageError(f"unknown schema '{what}'", field="WHAT", fix="plan or policy")
    emit_json(document)


# --- check -----------------------------------------------------------------------------------------


def _strict(result: CheckResult) -> CheckResult:
    findings = tuple(
        finding.model_copy(update={"severity": "error"}) if finding.severity == "warning" else finding
        for finding in result.findings
    )
    return result.model_copy(update={"findings": findings})


#: --reversal-replicas above a pool's largest size would never be reached.
MAX_REVERSAL_REPLICAS = 100_000


def check(path: str, *, as_json: bool, strict: bool, secret_file: str | None, reversal_replicas: float) -> int:
    """Run the plan's checks; returns the exit code (1 on any error)."""
    if not 0 < reversal_replicas <= MAX_REVERSAL_REPLICAS:
        raise QuotacalcError(
            f"must be a number of replicas above 0 and at most {MAX_REVERSAL_REPLICAS:,} (a pool's most), got "
            f"{reversal_replicas:g}",
            field="--reversal-replicas",
            fix="e.g. --reversal-replicas 2",
        )
    return check_priced(
        price_plan(path), as_json=as_json, strict=strict, secret_file=secret_file, reversal_replicas=reversal_replicas
    )


def check_priced(
    priced: PricedPlan, *, as_json: bool, strict: bool, secret_file: str | None, reversal_replicas: float
) -> int:
    """``check`` of a plan read and priced; returns the exit code (1 on any error)."""
    from quotacalc.core.checks import calibration_findings, check_plan

    path, plan, policy, calibrated = priced.source, priced.plan, priced.policy, priced.calibrated
    salts = _salts(policy, secret_file, required=False)
    # check takes no deployment flags: its fixes name the keys of the file (a flat plan's are at its top level).
    flat_plan = priced.flat
    result = check_plan(
        policy,
        salts=salts,
        reversal_replicas=reversal_replicas,
        pool_warnings=priced.pricing_warnings,
        traffic=plan_traffic(plan),
        flat_plan=flat_plan,
        key_names=_key_names(priced),
    )
    result = _with_target_limits(result, policy)
    result = _with_secret_strength(result, policy, secret_file)
    result = _with_secret_file_mode(result, secret_file)
    # A calibration that does not hold, or holds only by extrapolation, is a finding like the pools' pricing
    # warnings: counted, in the JSON, and an error under --strict (as size --strict fails on it).
    priced_at = {pool.name: {"batch": pool.deployment.batch, "context": pool.deployment.context} for pool in plan.pools}
    result = _with_findings(result, calibration_findings(calibrated, priced_at, flat_plan=flat_plan, plan=path))
    if strict:
        result = _strict(result)
    errors = result.count("error")
    if as_json:
        emit_json(
            {
                "schema_version": JSON_SCHEMA_VERSION,
                "command": "check",
                "plan": path,
                "ok": errors == 0,
                "strict": strict,
                "counts": {severity: result.count(severity) for severity in ("error", "warning", "info")},
                "reversal_replicas": result.reversal_replicas,
                "salts_checked": result.salts_checked,
                "findings": [finding.model_dump() for finding in result.findings],
                # Each pool's calibration (quotacalc calibrate --write) as price reports it; null: none holds.
                "calibrated": {name: summary for name, (summary, _) in calibrated.items()},
            }
        )
    else:
        from quotacalc.cli.plan_tables import check_table

        check_table(path, result)
    return 1 if errors else 0


def _with_secret_strength(result: Any, policy: QuotaPolicy, secret_file: str | None) -> Any:
    """A salt secret too short for generate to write salts with: a warning in check, before generate refuses it."""
    from quotacalc.core.checks import Finding
    from quotacalc.inputs.secret import SECRET_ENV, load_salt_secret, short_secret_problem

    secret = load_salt_secret(secret_file)
    problem = None if secret is None else short_secret_problem(secret)
    if problem is None or not any(tenant.salt_ref for tenant in policy.tenants):
        return result
    finding = Finding(
        severity="warning",
        code="salt-secret-short",
        subject="--salt-secret-file" if secret_file is not None else SECRET_ENV,
        message=f"the salt secret {problem}: generate refuses to write salts with it",
        fix="use a random secret (e.g. openssl rand -hex 32) before the first generate: a new secret changes every salt",
    )
    return _with_findings(result, [finding])


def _with_secret_file_mode(result: Any, secret_file: str | None) -> Any:
    """A salt secret file others can read: a warning (an error under --strict), as ssh warns of an open key."""
    from quotacalc.core.checks import Finding
    from quotacalc.inputs.secret import open_secret_file_problem

    problem = open_secret_file_problem(secret_file)
    if problem is None:
        return result
    finding = Finding(
        severity="warning",
        code="salt-secret-file-open",
        subject="--salt-secret-file",
        message=f"{secret_file} {problem}",
        fix=f"chmod 600 {secret_file}",
    )
    return _with_findings(result, [finding])


def _with_findings(result: Any, found: list[Any]) -> Any:
    """``result`` with ``found`` among its findings, errors first, as check_plan orders them."""
    findings = [*result.findings, *found]
    findings.sort(key=lambda finding: ("error", "warning", "info").index(finding.severity))
    return result.model_copy(update={"findings": tuple(findings)})


def _with_target_limits(result: Any, policy: QuotaPolicy) -> Any:
    """What each target would refuse or lose, said by check before generate does (the core knows no target): the
    findings of every declared target's pre-checks (``exporters.registry``), whose module is in this build."""
    from quotacalc.cli.targets import target_findings

    found = target_findings(policy)
    return _with_findings(result, found) if found else result


# --- generate --------------------------------------------------------------------------------------


def _targets(requested: str | None) -> tuple[list[str], bool]:
    from quotacalc.exporters.registry import names as target_names

    known = target_names()
    if requested is None or requested.strip() == "all":
        return known, False
    names = [name.strip() for name in requested.split(",") if name.strip()]
    for name in names:
        if name not in known:
            from quotacalc.errors import close_names

            close = close_names(name, known, n=1)
            hint = f"did you mean '{close[0]}'?" if close else f"targets: all, {', '.join(known)}"
            raise UsageError(f"unknown target '{name}'", field="--target", fix=hint)
    if not names:
        raise UsageError("names no target", field="--target", fix=f"targets: all, {', '.join(known)}")
    return list(dict.fromkeys(names)), True


def _exporter(target: str, *, explicit: bool):
    """A target's ``export`` function, or None (with a note) when its module is not in this build."""
    from quotacalc.cli.targets import target_module

    module = target_module(target)
    if module is None:
        if explicit:
            from quotacalc.exporters.registry import get

            raise UsageError(
                f"target '{target}' is not available in this build ({get(target).module} is missing)", field="--target"
            ) from None
        return None
    return module.export


def _plan_error(error: QuotacalcError, priced: PricedPlan) -> QuotacalcError:
    """An exporter's refusal, at its YAML path in the policy, as an error of the plan file where the plan writes
    it (``PricedPlan.plan_field``)."""
    return type(error)(
        f"{error.problem}; nothing was written",
        source=priced.source,
        field=priced.plan_field(error.field),
        fix=error.fix,
    )


def generate(
    path: str | PricedPlan,
    *,
    out: str,
    target: str | None,
    check_only: bool,
    secret_file: str | None,
    target_options: dict[str, Any],
    as_json: bool,
) -> int:
    """Generate the targets' files into ``out`` (or diff them with ``check_only``); returns the exit code.
    ``path``: the plan file, or the plan read and priced. ``target_options``: the targets' declared options as given (``exporters.registry``)."""
    from quotacalc.cli.targets import export_options
    from quotacalc.core.checks import check_plan
    from quotacalc.exporters.base import GeneratedFile
    from quotacalc.exporters.limits import limit_lines, limits_markdown, lost_and_approximated
    from quotacalc.exporters.registry import get as declared_target
    from quotacalc.exporters.writer import check_files, write_files

    names, explicit = _targets(target)
    options = export_options(target_options, names)
    priced = path if not isinstance(path, str) else price_plan(path)
    path, plan, policy = priced.source, priced.plan, priced.policy
    needs_salts = any(declared_target(name).salts for name in names)
    salts = _salts(policy, secret_file, required=needs_salts) or {}
    result = check_plan(
        policy,
        salts=salts if salts else None,
        pool_warnings=priced.pricing_warnings,
        traffic=plan_traffic(plan),
        flat_plan=priced.flat,
        key_names=_key_names(priced),
    )
    errors = [finding for finding in result.findings if finding.severity == "error"]
    if errors:
        first = errors[0]
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        raise QuotacalcError(
            f"the plan is not sound: {first.subject}: {first.message}{more}; nothing was written",
            source=path,
            fix="see quotacalc check " + path,
        )
    # What the pools were priced with (a batch the pool cannot hold, a local model path) shapes the engine files.
    from quotacalc.cli.streams import print_warnings
    from quotacalc.inputs.secret import open_secret_file_problem

    print_warnings(
        [
            f"{finding.subject}: {finding.message}" + (f" ({finding.fix})" if finding.fix else "")
            for finding in result.findings
            if finding.code == "pool-price" and finding.severity == "warning"
        ]
    )
    exports: list[Export] = []
    skipped: list[dict[str, str]] = []
    for name in names:
        exporter = _exporter(name, explicit=explicit)
        if exporter is None:
            skipped.append({"target": name, "reason": "not available in this build"})
            continue
        try:
            exports.append(exporter(policy, salts, options))
        except QuotacalcError as error:
            if error.source is not None:
                raise
            raise _plan_error(error, priced) from None
    generated: dict[str, list[GeneratedFile]] = {}
    for export in exports:
        files = generated.setdefault(export.target, [])
        files.extend(export.files)
        limits_path = f"{export.target}/LIMITS.md"
        if all(file.path != limits_path for file in export.files):
            files.append(GeneratedFile(path=limits_path, text=limits_markdown(export, options)))
    out_dir = Path(out)
    try:
        report = check_files(out_dir, generated) if check_only else write_files(out_dir, generated)
    except OSError as error:  # a directory without write permission, a read-only or special file system
        from quotacalc.fileio import unwritable

        raise unwritable(error, out_dir, field="--out") from None
    # Said once the run is done, so a refused run's error stays its one line.
    if (problem := open_secret_file_problem(secret_file)) is not None:
        print_warnings([f"{secret_file}: --salt-secret-file: {problem} (chmod 600 {secret_file})"])
    if skipped:
        names = ", ".join(entry["target"] for entry in skipped)
        sys.stderr.write(f"quotacalc: note: skipped targets not in this build: {names}\n")
    for export in exports:
        lost, approximated = lost_and_approximated(export, options)
        if lost or approximated:
            sys.stderr.write(
                f"quotacalc: note: {export.target} loses {lost} and approximates {approximated} of the policy's "
                f"parts: see {out_dir / export.target / 'LIMITS.md'}\n"
            )
    if as_json:
        emit_json(
            {
                "schema_version": JSON_SCHEMA_VERSION,
                "command": "generate",
                "plan": path,
                "out": str(out_dir),
                "check": check_only,
                "drift": report.drift if check_only else None,
                "targets": [export.target for export in exports],
                "skipped": skipped,
                "files": [change.model_dump(exclude_none=True) for change in report.changes],
                "limits": {export.target: limit_lines(export, options) for export in exports},
                "diff": report.diff if check_only else None,
            }
        )
    else:
        from quotacalc.cli.plan_tables import generate_summary

        generate_summary(report)
    return 1 if check_only and report.drift else 0


# --- size over a platform plan ---------------------------------------------------------------------


def size_platform(
    path: str | PricedPlan,
    pool: str | None,
    deployment_flags: dict[str, Any],
    *,
    output_format: str,
    explain: bool,
    strict: bool,
) -> None:
    """``size PLAN`` on a platform plan: one row per tenant (of ``--pool``), and totals.

    A tenant whose mean request cannot be served (above its tier's max context or its pool's) is an error, as
    ``size`` of one tenant is; each pool's pricing warnings go to stderr and the JSON, and fail ``--strict``.
    ``path``: the plan file, priced here with ``deployment_flags``, or a ``PricedPlan`` priced with them already."""
    from quotacalc.core.checks import bucket_warnings, traffic_findings
    from quotacalc.core.plan_size import pools_shown, size_plan

    priced = path if not isinstance(path, str) else price_plan(path, deployment_flags)
    path, plan, policy, calibrated = priced.source, priced.plan, priced.policy, priced.calibrated
    if pool is not None and pool not in [entry.name for entry in plan.pools]:
        from quotacalc.errors import close_names

        names = [entry.name for entry in plan.pools]
        close = close_names(pool, names, n=1)
        hint = f"did you mean '{close[0]}'?" if close else f"pools: {', '.join(names)}"
        raise UsageError(f"no pool '{pool}' in the plan", source=path, field="--pool", fix=hint)
    traffic = plan_traffic(plan)
    if pool is not None:  # only the tenants of the pool shown: its own, and those whose load it carries
        from quotacalc.core.plan_size import load_pool_of

        members = {tenant.name for tenant in policy.tenants if pool in (tenant.pool, load_pool_of(tenant))}
        traffic = {name: profile for name, profile in traffic.items() if name in members}
    findings = traffic_findings(policy, traffic)
    errors = [finding for finding in findings if finding.severity == "error"]
    if errors:
        first = errors[0]
        more = f" (and {len(errors) - 1} more: quotacalc check {path})" if len(errors) > 1 else ""
        raise QuotacalcError(first.message + more, source=path, field=first.subject, fix=first.fix)
    # A bucket that admits no request is size's warning for one tenant, and check's: size of a plan gives it too.
    shown_tenants = members if pool is not None else {tenant.name for tenant in policy.tenants}
    findings += [
        finding for finding in bucket_warnings(policy) if finding.subject.removeprefix("tenants.") in shown_tenants
    ]
    result = size_plan(policy, pool=pool)
    shown = pools_shown(policy, pool)
    # Each key named where it was set: a flag given names the flag, a key of the file the key.
    warnings = [
        f"pool '{name}': {warning}"
        for name in priced.pricing_warnings
        if name in shown
        for warning in priced.worded_warnings(name)
    ]
    warnings += [
        f"{finding.subject}: {finding.message}" + (f" ({finding.fix})" if finding.fix else "") for finding in findings
    ]
    warnings += [f"pool '{name}': {note}" for name, (_, note) in calibrated.items() if note and name in shown]
    from quotacalc.cli.streams import fail_under_strict

    fail_under_strict(warnings, strict=strict)
    if output_format == "json":
        emit_json(
            {
                "schema_version": JSON_SCHEMA_VERSION,
                "command": "size",
                "plan": path,
                "pool": pool,
                "tenants": [row.model_dump() for row in result.tenants],
                "totals": result.totals.model_dump(),
                "pools": [
                    {
                        **entry.model_dump(
                            include={
                                "name",
                                "role",
                                "replicas",
                                "output_weight",
                                "replica_units_per_s",
                                "capacity_units_per_s",
                                "usd_per_replica_month",
                                "usd_per_month",
                            }
                        ),
                        "calibrated": calibrated[entry.name][0],
                    }
                    for entry in policy.pools
                ],
                "warnings": warnings,
                "formulas": _SIZE_FORMULAS,
            }
        )
    elif output_format in ("csv", "markdown"):
        from quotacalc.cli.plan_tables import plan_size_csv, plan_size_markdown

        render = plan_size_csv if output_format == "csv" else plan_size_markdown
        sys.stdout.write(render(result))
    else:
        from quotacalc.cli.plan_tables import plan_size_table

        plan_size_table(path, result, policy, formulas=_SIZE_FORMULAS if explain else None, pools=shown)
    from quotacalc.cli.streams import print_warnings

    print_warnings(warnings)


_SIZE_FORMULAS = {
    "units_per_s": "contract: units_per_s as sold; traffic: rps × (prompt × (1 − cached) × prompt_token_units(prompt) "
    "+ prompt × cached × cached_prompt_weight(tier) + W(pool) × output), on the pool its mean prompt goes to; "
    "prompt_token_units(prompt) = (2 × active_params + attention_flops_per_prompt_token(prompt)) / (2 × active_params)",
    "replicas": "units_per_s / replica_units_per_s(pool)",
    "bucket_depth_units": "burst_s(tier) × bucket_rate_units_per_s",
    "shared_usd_per_month": "replicas × usd_per_replica_month(pool)",
    "dedicated_total_usd_per_month": "max(1, ceil(replicas)) × usd_per_replica_month(pool)",
    "dedicated_usd_per_month": "dedicated_total_usd_per_month (the same figure, under its earlier key)",
}
