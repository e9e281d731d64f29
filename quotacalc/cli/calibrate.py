"""``quotacalc calibrate``: fit the deployment to the user's benchmark runs and start-up log; optionally write the plan."""

from __future__ import annotations

import os
from typing import Annotated, Any, NamedTuple

import typer

from quotacalc.core.deployment import Deployment
from quotacalc.errors import QuotacalcError, UsageError


def _version() -> str:
    from importlib.metadata import version

    return version("quotacalc")


def plan_calibration(plan_file, inputs) -> tuple[dict[str, Any] | None, str | None]:
    """Whether the plan's figures are calibrated for the deployment priced: (summary, None), (None, why not) or
    (None, None); ``plan_file`` is the plan as ``price`` read it (None without a plan), so it is not read again."""
    if plan_file is None:
        return None, None
    from quotacalc.core.calibrate import calibration_status

    return calibration_status(plan_file.calibration, inputs)


def _digest(path: str, what: str = "benchmark file") -> str:
    """A benchmark file's sha256; a path that is not a readable regular file is refused here, in one line (a FIFO
    opened plainly would wait for a writer forever)."""
    import hashlib

    from quotacalc.fileio import open_regular

    digest = hashlib.sha256()
    with open_regular(path, what=what) as handle:
        try:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
        except OSError as error:
            raise QuotacalcError(f"cannot read: {error.strerror or error}", source=path) from None
    return digest.hexdigest()


def _file_record(path: str, rows: list[str], plan_path: str | None, digest: str | None = None):
    """A file's provenance: its path (relative to the plan written), hash (``digest`` when already taken) and rows."""
    import os

    from quotacalc.core.calibrate import CalibratedFile

    digest = digest or _digest(path)
    shown = path
    if plan_path is not None:
        # Relative to the plan's directory (through '..' where the file lies elsewhere): the path resolves from
        # the plan wherever the command ran, and the plan and its data can move together.
        plan_dir = os.path.dirname(os.path.realpath(plan_path))
        try:
            shown = os.path.relpath(os.path.realpath(path), plan_dir)
        except ValueError:  # another drive (Windows): no relative path exists
            shown = os.path.abspath(path)
    return CalibratedFile(path=shown.replace(os.sep, "/"), sha256=digest, rows=tuple(rows))


def calibrate_command(
    plan: Annotated[
        str | None, typer.Argument(help="deployment YAML file to calibrate (its keys are the flags' names)")
    ] = None,
    bench: Annotated[
        list[str] | None,
        typer.Option(
            "--bench",
            help="benchmark runs: 'vllm bench serve --save-result' JSON (one run, a list, or --append-result lines), "
            "SGLang bench_serving lines, a GuideLLM JSON or YAML report, or a CSV (concurrency, prompt_tokens, "
            "output_tokens, ttft_s, itl_s); repeat the flag for several files",
            metavar="FILE",
        ),
    ] = None,
    log: Annotated[
        str | None,
        typer.Option(
            "--log",
            help="engine start-up log: vLLM's 'GPU KV cache size' and 'Available KV cache memory', or SGLang's "
            "'KV Cache is allocated' (with --engine sglang)",
        ),
    ] = None,
    fit: Annotated[
        str | None,
        typer.Option(
            "--fit",
            help="comma-separated fields to fit (mfu, mbu, step_overhead_s, layer_overhead_s, request_overhead_s, allreduce_latency_s, "
            "sequence_overhead_s, moe_slot_overhead_s, prefill_layer_overhead_s); default: what the runs determine (TTFT: mfu where a prompt's prefill is "
            "compute-bound, else request_overhead_s, and both from two prompt lengths; ITL: mbu, sequence_overhead_s "
            "from two concurrencies, step_overhead_s from two contexts at one concurrency)",
        ),
    ] = None,
    write: Annotated[
        str | None,
        typer.Option(
            "--write",
            help="write the fitted values and a 'calibration:' section into this plan (other keys and comments kept)",
        ),
    ] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="print machine-readable JSON (SI units, stable keys)")
    ] = False,
    pool: Annotated[
        str | None,
        typer.Option(
            "--pool", help="platform plan: the pool whose deployment is calibrated (and written with --write)"
        ),
    ] = None,
    ttft_under_load: Annotated[
        str,
        typer.Option(
            "--ttft-under-load",
            help="TTFTs measured at concurrency > 1: 'lockstep' predicts them as a closed loop whose clients' "
            "prompts are prefilled together (fixed lengths: vllm bench serve's random dataset, GuideLLM's "
            "synthetic data) and fits them; 'ignore' leaves them out (varied lengths, e.g. ShareGPT)",
        ),
    ] = "lockstep",
    strict: Annotated[
        bool,
        typer.Option("--strict", help="turn every warning into an error (exit 1) before anything is written, for CI"),
    ] = False,
    *,
    deployment_flags,
):
    """Fit MFU, MBU and engine overheads to your benchmark runs, and the KV pool to a vLLM or SGLang start-up log.

    \f
    ``deployment_flags``: the deployment's options (cli/app.py adds them with ``with_options``); the form feed
    above keeps this line out of ``--help``.
    """
    from quotacalc.core.calibrate import calibrate, provenance
    from quotacalc.errors import UsageError
    from quotacalc.inputs.deployment import build_deployment
    from quotacalc.inputs.resolve import resolve

    if not bench and not log:
        raise UsageError("nothing to calibrate on", field="--bench", fix="give --bench FILE and/or --log FILE")
    plan_file, platform, pool, written_document = _plan_to_calibrate(plan, pool, write)
    deployment = build_deployment(plan_file.deployment if plan_file else {}, deployment_flags, source=plan)
    points, notes, files, reading = _read_runs(bench, log)
    parameters = _fit_parameters(fit)
    _check_ttft_under_load(ttft_under_load)
    inputs = resolve(deployment)
    result = calibrate(
        inputs,
        points,
        parameters=parameters,
        kv_reading=reading,
        ttft_under_load=ttft_under_load,
        start=_before_earlier_fit(plan, plan_file, deployment_flags),
    )
    if write is not None and result.kv_pool is not None and result.kv_pool.mismatch:
        # A pool whose bytes per token are not this deployment's is another deployment's: recorded, it would be
        # priced as measured here.
        from quotacalc.errors import QuotacalcError

        raise QuotacalcError(
            result.kv_pool.mismatch.removeprefix(f"{log}: ").split(": is the log", 1)[0],
            source=log,
            fix="not this deployment's log: give its own, or leave out --write to only read this one",
        )
    notes += _earlier_fit_notes(plan, plan_file, points, result.fitted_values, deployment_flags)
    from quotacalc.cli.streams import fail_under_strict

    fail_under_strict((*notes, *result.warnings), strict=strict, nothing="written")
    records = [_file_record(path, rows, write, digest) for path, rows, digest in files]
    section = provenance(result, inputs, records, _version())
    if write is not None and platform:
        _write_pool(write, plan, pool, deployment, deployment_flags, result.fitted_values, section, written_document)
    elif write is not None:
        _write_plan(write, plan, deployment, deployment_flags, result.fitted_values, section, written_document)
    _report(result, inputs, section, notes, as_json=as_json, written=write, pool=pool if platform else None)


class _PlanToCalibrate(NamedTuple):
    """The plan ``calibrate`` reads: its deployment keys (None without a plan), whether it is a platform plan, the
    pool calibrated, and the plan's mapping when --write names the plan itself (else None)."""

    plan_file: Any
    platform: bool
    pool: str | None
    written_document: dict[str, Any] | None


def _plan_to_calibrate(plan: str | None, pool: str | None, write: str | None) -> _PlanToCalibrate:
    """The plan read once (None without one), whether it is a platform plan, the pool calibrated (a platform
    plan's only pool when none is named), and the plan's mapping when --write names the plan itself (else None);
    a --write target of the other kind of plan is refused."""
    from quotacalc.errors import UsageError
    from quotacalc.inputs.plan import _pool_names, deployment_source, is_platform, is_platform_file, read_document

    if pool is not None and not plan:
        raise UsageError("needs a plan file", field="--pool", fix="give the platform plan before the options")
    document = read_document(plan) if plan else None
    plan_file = deployment_source(plan, pool, document) if plan else None
    platform = document is not None and is_platform(document)
    if platform and pool is None:
        pool = _pool_names(document)[0]  # deployment_source has refused several pools without --pool
    same = plan is not None and write is not None and os.path.abspath(write) == os.path.abspath(plan)
    if write and os.path.isfile(write) and (platform if same else is_platform_file(write)) != platform:
        raise UsageError(
            "is a platform plan: calibrate writes a pool's values into the platform plan it read"
            if not platform
            else "is a flat plan: a platform pool's values go into a platform plan",
            source=write,
            field="--write",
            fix="give the platform plan as the plan to calibrate, with --pool NAME"
            if not platform
            else "write into the platform plan (or a new file: a copy of it)",
        )
    return _PlanToCalibrate(plan_file, platform, pool, document if same else None)


class _Runs(NamedTuple):
    """What --bench and --log gave: the points, the notes on what was skipped or repeated, the files read (path,
    rows, digest) and the --log reading (None without one)."""

    points: list[Any]
    notes: list[str]
    files: list[tuple[str, list[str], str | None]]
    reading: Any


def _read_runs(bench: list[str] | None, log: str | None) -> _Runs:
    """The benchmark points of every --bench file (each file once, by its bytes), the notes on what was skipped or
    repeated, the files read (path, rows, digest) and the --log reading (None without one)."""
    from quotacalc.errors import UsageError
    from quotacalc.inputs.benchmarks import read_benchmark, read_start_up_log

    points, notes, files = [], [], []
    seen: dict[str, str] = {}
    for path in bench or ():
        digest = _digest(path)
        if digest in seen:
            # The same runs twice would each keep its twin in the fit (and in every leave-one-out fit).
            raise UsageError(
                f"the same file as {seen[digest]} (the same bytes)", source=path, field="--bench", fix="give it once"
            )
        seen[digest] = path
        read, skipped = read_benchmark(path)
        points += read
        notes += skipped
        files.append((path, [point.row or "result" for point in read], digest))
    notes += _repeated_runs(points)
    reading = read_start_up_log(log) if log else None
    if log:
        files.append((log, [], None))
    return _Runs(points, notes, files, reading)


def _fit_parameters(fit: str | None) -> list[str] | None:
    """The fields --fit names (None: what the runs determine); an empty or unknown one is a usage error."""
    if fit is None:
        return None
    from quotacalc.core.calibrate import BOUNDS
    from quotacalc.errors import UsageError

    parameters = [name.strip() for name in fit.split(",") if name.strip()]
    if not parameters:
        raise UsageError("no field named", field="--fit", fix="e.g. --fit mbu,step_overhead_s")
    unknown = [name for name in parameters if name not in BOUNDS]
    if unknown:  # a choice the command line got wrong: a usage error (exit 2), as --ttft-under-load's is
        raise UsageError(f"cannot fit {', '.join(unknown)}", field="--fit", fix=f"choose from {', '.join(BOUNDS)}")
    return parameters


def _check_ttft_under_load(value: str) -> None:
    from typing import get_args

    from quotacalc.core.calibrate import TtftUnderLoad
    from quotacalc.errors import UsageError

    if value not in get_args(TtftUnderLoad):
        raise UsageError(
            f"unknown value '{value}'",
            field="--ttft-under-load",
            fix=f"give {' or '.join(get_args(TtftUnderLoad))}",
        )


def _report(result, inputs, section, notes: list[str], *, as_json: bool, written: str | None, pool: str | None):
    """The fit as JSON (its warnings on stderr too, as price's are) or as tables."""
    if as_json:
        from quotacalc.cli.calibrate_out import calibrate_json
        from quotacalc.cli.json_out import emit_json

        emit_json(calibrate_json(result, section, notes, written=written, pool=pool))
        from quotacalc.cli.streams import print_warnings

        print_warnings([*result.warnings, *notes])  # on stderr too, as price's are
    else:
        from quotacalc.cli.calibrate_out import calibrate_table

        calibrate_table(result, inputs, notes, written=written, pool=pool)


def _before_earlier_fit(plan, plan_file, given: dict[str, Any]):
    """The plan's deployment without the values an earlier benchmark fit wrote into it (None when there are none):
    the fit starts from the plan as it was, not from its own last answer, which it would otherwise drift from
    with every run on the same files."""
    from quotacalc.core.calibrate import BOUNDS
    from quotacalc.inputs.deployment import build_deployment
    from quotacalc.inputs.resolve import resolve

    previous = plan_file.calibration if plan_file is not None else None
    earlier = {name for name in (previous.parameters if previous else ()) if name in BOUNDS and given.get(name) is None}
    if not earlier:
        return None
    keys = {name: value for name, value in plan_file.deployment.items() if name not in earlier}
    return resolve(build_deployment(keys, given, source=plan))


def _repeated_runs(points) -> list[str]:
    """Runs that repeat an earlier one figure for figure (a line appended twice, a file given reformatted): each
    copy counts again in the fit, and predicts its twin in the leave-one-out error."""
    first: dict[tuple, str] = {}
    notes = []
    for point in points:
        figures = (point.concurrency, point.prompt_tokens, point.output_tokens, point.ttft_s, point.itl_s)
        where = f"{point.source}: {point.row}"
        if figures in first:
            notes.append(
                f"{where} repeats {first[figures]} figure for figure: it counts twice in the fit (give it once)"
            )
        else:
            first[figures] = where
    return notes


def _earlier_fit_notes(plan, plan_file, points, fitted: dict[str, Any], given: dict[str, Any]) -> list[str]:
    """The values an earlier benchmark fit wrote that this one does not refit: this fit started from them, and
    --write keeps them beside its own."""
    from quotacalc.core.calibrate import LOG_PARAMETERS

    previous = plan_file.calibration if plan_file is not None else None
    if previous is None or not points:
        return []
    return [
        f"{plan}: {name} {plan_file.deployment[name]} is an earlier fit's, not refitted now: this fit started from it "
        "and --write keeps it (remove it from the plan to fit from the default)"
        for name in previous.parameters
        if name not in LOG_PARAMETERS
        and name not in fitted
        and given.get(name) is None
        and plan_file.deployment.get(name) is not None
    ]


#: Deployment inputs a fit neither reads nor depends on: what a plan sells at and how it is priced.
PRICING_ONLY = frozenset(
    {
        "ceiling",
        "gpu_hour_usd",
        "hours_per_month",
        "batch",
        "context",
        "burst_s",
        "cached_prompt_weight",
        "pricing_basis",
        "load_prompt_tokens",
        "load_output_tokens",
        "serve_model",
    }
)


def calibrated_flags(given: dict[str, Any]) -> list[str]:
    """The flags given that define the deployment a calibration holds for (GPU, TP, dtypes, engine settings)."""
    return [name for name, value in given.items() if value is not None and name not in PRICING_ONLY]


def _write_target(path: str):
    """The file --write replaces: a link's target (the link stays a link), never a directory."""
    import os
    from pathlib import Path

    from quotacalc.errors import QuotacalcError

    target = Path(os.path.realpath(path)) if os.path.islink(path) else Path(path)
    if target.is_dir():
        raise UsageError("is a directory", source=path, field="--write", fix="name the plan file to write")
    # A rename replaces a file whatever its mode: a plan its owner made read-only is refused here instead.
    if target.exists() and not target.stat().st_mode & 0o222:
        raise QuotacalcError(
            "is read-only", source=path, field="--write", fix="make it writable (chmod u+w) to let calibrate write it"
        )
    return target


def _write_plan(
    path: str,
    plan: str | None,
    deployment: Deployment,
    given: dict[str, Any],
    values: dict[str, Any],
    section,
    document: dict[str, Any] | None = None,
) -> None:
    """Set the deployment's given flags, the fitted keys and the ``calibration:`` section in ``path``,
    atomically, once the result reads back as a plan. ``document``: ``path``'s mapping when it is the plan
    calibrated, already read."""
    from pathlib import Path

    from quotacalc.core.calibrate import merge_provenance
    from quotacalc.inputs.deployment import build_deployment
    from quotacalc.inputs.plan import document_from_text, load_plan_file, plan_file_from_document
    from quotacalc.inputs.plan_write import plan_text, set_top_level_keys, with_line_ends

    target = _write_target(path)
    dumped = deployment.model_dump(mode="json")
    # Flags on the command line that define the deployment calibrated are recorded in the plan too; pricing
    # choices (--ceiling, --batch...) play no part in a fit, and stay the plan's.
    keys: dict[str, Any] = {name: dumped[name] for name in calibrated_flags(given)}
    if target.exists():
        # The file must be a valid plan before it is changed (the plan calibrated has been read already).
        read = plan_file_from_document(document, path) if document is not None else load_plan_file(path)
        previous = read.calibration
        text = plan_text(target)
    elif plan is not None:  # a new plan: a copy of the one read, comments and tenant included
        previous, text = load_plan_file(plan).calibration, plan_text(Path(plan))
    else:  # a new plan from flags alone
        previous, text = None, ""
        keys = deployment.model_dump(mode="json", exclude_defaults=True)
    keys.update(values)
    merged = merge_provenance(previous, section)
    keys["calibration"] = merged.model_dump(mode="json")
    updated = set_top_level_keys(text.replace("\r\n", "\n"), keys, source=path)
    # Read the new text back as the plan at path before it replaces anything: its errors name path.
    _check_folder(path, target)
    written = plan_file_from_document(document_from_text(updated, path), path)
    _holds_for_the_plan(path, build_deployment(written.deployment, {}, source=path), merged)
    _write_file(path, target, with_line_ends(updated, text))


def _write_pool(
    path: str,
    plan: str,
    pool: str,
    deployment: Deployment,
    given: dict[str, Any],
    values: dict[str, Any],
    section,
    document: dict[str, Any] | None = None,
) -> None:
    """Set the given flags and fitted keys in pool ``pool``'s ``deployment`` of platform plan ``path`` (a
    copy of ``plan`` when new) and its ``calibration:`` section, atomically, once the result reads back.
    ``document``: ``path``'s mapping when it is the plan calibrated, already read."""
    from pathlib import Path

    from quotacalc.core.calibrate import merge_provenance
    from quotacalc.inputs.deployment import build_deployment
    from quotacalc.inputs.plan import _pool_names, deployment_source, document_from_text, read_document, read_plan
    from quotacalc.inputs.plan_write import plan_text, set_pool_keys, with_line_ends

    target = _write_target(path)
    source = path if target.exists() else plan
    if document is None or source != path:
        document = read_document(source)
    previous = deployment_source(source, pool, document).calibration  # names the file and --pool if it is not there
    names = _pool_names(document)
    text = plan_text(Path(source))
    dumped = deployment.model_dump(mode="json")
    keys: dict[str, Any] = {name: dumped[name] for name in calibrated_flags(given)}
    keys.update(values)
    merged = merge_provenance(previous, section)
    updated = set_pool_keys(
        text.replace("\r\n", "\n"), names.index(pool), keys, merged.model_dump(mode="json"), source=path
    )
    # Read the new text back as the plan at path before it replaces anything: its errors name path.
    _check_folder(path, target)
    written_document = document_from_text(updated, path)
    read_plan(path, written_document)  # the whole plan still reads (references, measured pools)
    written = deployment_source(path, pool, written_document)
    _holds_for_the_plan(path, build_deployment(written.deployment, {}, source=path), merged)
    _write_file(path, target, with_line_ends(updated, text))


def _holds_for_the_plan(path: str, written: Deployment, section) -> None:
    """Refuse to write a fit into a plan of another deployment (another model, GPU, TP, dtype or engine): its
    values would price that plan, which the fit never measured. (A flag over a value an earlier fit wrote is the
    user's choice, not another deployment.)"""
    from quotacalc.core.calibrate import deployment_changes
    from quotacalc.errors import UsageError
    from quotacalc.inputs.resolve import resolve

    changed = deployment_changes(section.calibrated_on, resolve(written))
    if changed:
        raise UsageError(
            f"the plan is another deployment than the one calibrated ({'; '.join(changed)})",
            source=path,
            field="--write",
            fix="write into the plan that was calibrated, or into a new file",
        )


def _check_folder(path: str, target) -> None:
    """A new file goes into a folder that exists: a mistyped folder is not created on the way."""
    from quotacalc.errors import UsageError

    if not target.parent.is_dir():
        raise UsageError(
            f"no such directory '{target.parent}'", source=path, field="--write", fix="create it first, or fix the path"
        )


def _write_file(path: str, target, text: str) -> None:
    """The plan's new text, atomically; an unwritable place is the user's to fix, in one line."""
    from quotacalc.errors import QuotacalcError
    from quotacalc.fileio import write_text_atomic

    try:
        write_text_atomic(target, text)
    except OSError as error:
        raise QuotacalcError(
            f"cannot write in '{target.parent}': {error.strerror or error}",
            source=path,
            field="--write",
            fix="write to a writable path",
        ) from None
