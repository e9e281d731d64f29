"""``price``/``size`` over several GPUs and TP sizes: parse the lists, build the deployments, call the core."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from quotacalc.errors import QuotacalcError, UsageError

FORMATS = ("table", "json", "csv", "markdown")


@dataclass(frozen=True)
class Axes:
    """The GPUs and TP sizes given on the command line (None: the plan's or the default)."""

    gpus: tuple[str, ...] | None
    tps: tuple[int, ...] | None
    #: $/GPU-hour by GPU catalog id, where --gpu-hour-usd gave one per GPU (None: one price, the flag's or the plan's).
    gpu_prices: dict[str, float] | None = None

    @property
    def is_comparison(self) -> bool:
        return len(self.gpus or ()) > 1 or len(self.tps or ()) > 1


def _items(text: str, flag: str) -> list[str]:
    if "," not in text:  # one value: the field's own validation judges it (an empty GPU name, ...)
        return [text]
    items = [item.strip() for item in text.split(",")]
    if not all(items):
        raise UsageError(f"empty item in '{text}'", field=flag, fix="a value or a comma-separated list, e.g. 2,4,8")
    return list(dict.fromkeys(items))  # a repeated value is one column, in first-given order


def _tp_size(item: str) -> int:
    """Digits only, as every count on the command line (cli/options.whole_number): '4.0' is no TP size."""
    import re

    if not re.fullmatch(r"[+-]?[0-9]+", item.strip()):
        raise UsageError(f"'{item}' is not a whole number", field="--tp", fix="a TP size or a list, e.g. 2,4,8")
    try:
        return int(item)
    except ValueError:  # more digits than Python converts
        raise UsageError(f"has {len(item):,} digits; far out of range", field="--tp") from None


def split_axes(flags: dict[str, Any]) -> tuple[dict[str, Any], Axes]:
    """Parse ``--gpu a,b`` and ``--tp 2,4``; a single value goes back into the flags as the field's type."""
    gpus = tuple(_items(flags["gpu"], "--gpu")) if flags.get("gpu") is not None else None
    tps = tuple(_tp_size(item) for item in _items(flags["tp"], "--tp")) if flags.get("tp") is not None else None
    if gpus is not None and len(gpus) > 1:
        from quotacalc.catalog.gpus import load_gpu_catalog

        # Rows under the catalog's ids (h100 -> h100-sxm), once each: CI joins them on the id.
        catalog = load_gpu_catalog()
        gpus = tuple(dict.fromkeys(catalog.get(name).id for name in gpus))
    if tps is not None:
        tps = tuple(dict.fromkeys(tps))
    single = dict(flags)
    single["gpu"] = gpus[0] if gpus and len(gpus) == 1 else None
    single["tp"] = tps[0] if tps and len(tps) == 1 else None
    single["gpu_hour_usd"], prices = _gpu_prices(flags.get("gpu_hour_usd"), gpus)
    if prices is not None and gpus is not None and len(gpus) == 1:
        single["gpu_hour_usd"], prices = prices[_gpu_id(gpus[0])], None
    return single, Axes(gpus, tps, prices)


def _gpu_id(name: str) -> str:
    from quotacalc.catalog.gpus import load_gpu_catalog

    return load_gpu_catalog().get(name).id


def _price_value(text: str) -> float:
    import math

    try:
        value = float(text)
    except ValueError:
        raise UsageError(
            f"'{text}' is not a price", field="--gpu-hour-usd", fix="a number, or GPU=PRICE pairs: h100-sxm=2.5,b200=6"
        ) from None
    if not math.isfinite(value):  # as every number flag words it (a bad value: exit 1)
        raise QuotacalcError(f"must be a finite number, got {value}", field="--gpu-hour-usd")
    return value


def _gpu_prices(text: str | None, gpus: tuple[str, ...] | None) -> tuple[float | None, dict[str, float] | None]:
    """--gpu-hour-usd as typed, as (one price, None) or (None, the price of each GPU compared): GPU=PRICE pairs name
    every GPU of --gpu once (a GPU's cost differs, and one price for a B200 and an L4 compares nothing)."""
    if text is None:
        return None, None
    if "=" not in text:
        if "," in text:
            raise UsageError(
                f"'{text}' lists prices without their GPUs",
                field="--gpu-hour-usd",
                fix="one price, or GPU=PRICE pairs: h100-sxm=2.5,b200=6",
            )
        return _price_value(text.strip()), None
    if gpus is None:
        raise UsageError(
            "prices per GPU need the GPUs compared", field="--gpu-hour-usd", fix="give --gpu with the same GPUs"
        )
    prices: dict[str, float] = {}
    for item in _items(text, "--gpu-hour-usd"):
        name, equals, value = item.partition("=")
        if not equals or not name.strip():
            raise UsageError(f"'{item}' is not GPU=PRICE", field="--gpu-hour-usd", fix="e.g. h100-sxm=2.5,b200=6")
        gpu = _gpu_id(name.strip())
        if gpu in prices:
            raise UsageError(f"{gpu} is priced twice", field="--gpu-hour-usd", fix="give each GPU one price")
        prices[gpu] = _price_value(value.strip())
    compared = [_gpu_id(name) for name in gpus]
    missing = [gpu for gpu in compared if gpu not in prices]
    if missing:
        raise UsageError(
            f"no price for {', '.join(missing)}", field="--gpu-hour-usd", fix="give GPU=PRICE for every GPU of --gpu"
        )
    extra = [gpu for gpu in prices if gpu not in compared]
    if extra:
        raise UsageError(
            f"{', '.join(extra)} is priced but not compared", field="--gpu-hour-usd", fix="price the GPUs of --gpu only"
        )
    return None, prices


def check_format(output_format: str, as_json: bool) -> str:
    """The ``--format`` given, checked: table (the per-deployment output), json, csv or markdown (rows)."""
    if output_format not in FORMATS:
        raise UsageError(f"unknown format '{output_format}'", field="--format", fix=f"one of {', '.join(FORMATS)}")
    if as_json and output_format not in ("table", "json"):
        raise UsageError(f"--json conflicts with --format {output_format}", field="--format", fix="give one of them")
    return output_format


def _check_context(deployment: Any) -> str:
    """A context above the model's maximum is the input's error, not a row's: no GPU or TP serves it.

    Returns the model's name as resolved (``meta-llama/Llama-3.3-70B-Instruct`` is Llama-3.3-70B-Instruct), for the
    title."""
    from quotacalc.inputs.resolve import load_arch

    arch = load_arch(deployment.model)[0]
    maximum = arch.max_context_tokens
    if maximum and deployment.context > maximum:
        raise QuotacalcError(
            f"{deployment.context:,} tokens exceed the model's maximum context of {maximum:,}",
            field="context",
            fix=f"use a context of at most {maximum:,} tokens",
        )
    return arch.name


def _catalog_ids(deployments: list[Any]) -> list[Any]:
    """Each deployment's GPU under its catalog id (h100 -> h100-sxm), as every row names it, one GPU or several:
    CI joins rows on the id. A name the catalog does not know is left as given, for the row's own error to name."""
    from quotacalc.catalog.gpus import load_gpu_catalog

    catalog = load_gpu_catalog()
    named = []
    for deployment in deployments:
        try:
            gpu_id = catalog.get(deployment.gpu).id
        except QuotacalcError:
            named.append(deployment)
            continue
        named.append(deployment if gpu_id == deployment.gpu else deployment.model_copy(update={"gpu": gpu_id}))
    return named


def run_comparison(
    command: Literal["price", "size"],
    plan: str | None,
    flags: dict[str, Any],
    axes: Axes,
    output_format: str,
    traffic_flags: dict[str, Any] | None = None,
    *,
    strict: bool = False,
    pool: str | None = None,
) -> None:
    """Price (or size the tenant on) every GPU and TP combination and print the rows side by side."""
    from quotacalc.cli.compare_out import render_comparison
    from quotacalc.core.compare import compare
    from quotacalc.core.price import price
    from quotacalc.core.traffic import size_traffic
    from quotacalc.inputs.deployment import (
        build_deployment,
        build_traffic,
        measured_pool_mismatch,
        unrecorded_pool_change,
    )
    from quotacalc.inputs.plan import deployment_source, read_document
    from quotacalc.inputs.resolve import resolve
    from quotacalc.priced.deployment import deployment_origins

    if pool is not None and not plan:
        raise UsageError("needs a plan file", field="--pool")
    document = read_document(plan) if plan else None
    plan_file = deployment_source(plan, pool, document) if plan else None
    file_values = plan_file.deployment if plan_file else {}
    row_flags = [
        {**flags, "gpu": gpu, "tp": tp, **({"gpu_hour_usd": axes.gpu_prices[gpu]} if axes.gpu_prices else {})}
        for gpu in axes.gpus or (None,)
        for tp in axes.tps or (None,)
    ]
    deployments = _catalog_ids(
        [build_deployment(file_values, given, source=plan, check_pool=False) for given in row_flags]
    )
    traffic = None
    if command == "size":
        traffic = build_traffic(plan_file.tenant if plan_file else None, traffic_flags or {}, source=plan)
    section = plan_file.calibration if plan_file else None

    # Whether the plan's calibration holds for each row, read once in evaluate (by the row's inputs).
    calibrated: dict[int, bool] = {}

    def is_calibrated(priced) -> bool:
        return calibrated.get(id(priced.inputs), False)

    # The axes are flags too: a row's error about its TP names --tp.
    row_origins = deployment_origins(plan, pool, {**flags, "gpu": axes.gpus or None, "tp": axes.tps or None}, document)
    # Each row's warnings name a key where its value was set, as price of one deployment does.
    namer = row_origins.key_namer()

    def evaluate(deployment):
        try:
            priced = _evaluate(deployment)
        except QuotacalcError as error:
            raise row_origins.located(error, source=None) from None
        notes = []
        if traffic is not None:
            # The tenant's own warnings on this row (a bucket that cannot admit its mean request), as size gives them.
            # A tenant this row cannot serve raises again in compare's own sizing, which makes the row's reason.
            try:
                sized = size_traffic(priced, traffic)
            except QuotacalcError:
                pass
            else:
                notes.extend(warning.worded(namer) for warning in sized.traffic_warnings)
        if flags.get("kv_pool_tokens") is not None and len(deployments) > 1:
            # One measured pool for every GPU and TP: a pool holds only where it was measured.
            notes.append(
                f"KV pool {priced.kv_pool_tokens:,} tokens from --kv-pool-tokens, used as given on every row: a "
                "pool measured on one GPU and TP holds only there (leave it out to estimate each row's)"
            )
        if section is not None:
            from quotacalc.core.calibrate import calibration_status

            holds, why_not = calibration_status(section, priced.inputs)
            calibrated[id(priced.inputs)] = holds is not None
            if why_not:
                notes.append(why_not)
        if not notes:
            return priced
        return priced.model_copy(update={"warnings": (*priced.warnings, *notes)})

    def _evaluate(deployment):
        # A plan's measured pool holds for the deployment it was measured on. Elsewhere a comparison still
        # wants the row (sales compare GPUs before anyone measures them): the pool is estimated, and the
        # row's warning says which measurement it replaces.
        mismatch = (
            measured_pool_mismatch(deployment) or unrecorded_pool_change(file_values, deployment)
            if flags.get("kv_pool_tokens") is None
            else None
        )
        if mismatch is None:
            return _worded(price(resolve(deployment)))
        estimated = deployment.model_copy(update={"kv_pool_tokens": None, "kv_pool_measured_with": None})
        priced = _worded(price(resolve(estimated)))
        return priced.model_copy(update={"warnings": (f"KV pool estimated: {mismatch}", *priced.warnings)})

    def _worded(priced):
        return priced.model_copy(update={"warnings": tuple(w.worded(namer) for w in priced.pricing_warnings)})

    try:
        model_name = _check_context(deployments[0])
    except QuotacalcError as error:
        raise deployment_origins(plan, pool, flags, document).located(error, source=None) from None
    rows = compare(deployments, evaluate, traffic, is_calibrated=is_calibrated)
    render_comparison(command, deployments[0], traffic, rows, output_format, model_name=model_name)
    if not any(row.feasible for row in rows):
        raise QuotacalcError(f"none of the {len(rows)} GPU and TP combinations can run it", fix="see each row's reason")
    warned = [row for row in rows if row.warnings]
    if strict and warned:
        raise QuotacalcError(
            f"{len(warned)} deployment(s) with warnings under --strict", field="--strict", fix="see each row's notes"
        )
