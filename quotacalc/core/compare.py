"""Side-by-side figures for one model on several GPUs and TP sizes, for sales.

A comparison is a list of rows, one per deployment, in the order given. A deployment that cannot run
(weights do not fit, TP does not divide the heads, no tensor cores for the dtype, a tenant's request
larger than the pool...) is a row too, carrying the one-line reason, so the buyer sees why it is missing.
The caller supplies ``evaluate`` (resolve and price one deployment): the core stays free of file reads.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict

from quotacalc.core.deployment import Deployment, Traffic
from quotacalc.errors import QuotacalcError, UsageError

if TYPE_CHECKING:
    from quotacalc.core.price import PriceResult
    from quotacalc.core.traffic import SizeResult

#: Keys of a ``price`` comparison row, in column order (stable: JSON, CSV and Markdown use them).
PRICE_KEYS = (
    "gpu",
    "tp",
    "gpu_hour_usd",
    "feasible",
    "usd_per_million_prompt_tokens",
    "usd_per_million_output_tokens",
    "output_weight",
    "replica_units_per_s",
    "kv_pool_tokens",
    "kv_pool_source",
    "kv_pool_tokens_at_context",
    "dedicated_usd_per_month",
    "decode_batch",
    "itl_s",
    "ttft_s",
    "max_load_output_tokens_per_s",
    "calibrated",
    "reason",
    "warnings",
)
#: Keys a ``size`` comparison row adds: the tenant on that deployment.
SIZE_KEYS = ("units_per_s", "replicas", "shared_usd_per_month", "dedicated_replicas", "dedicated_total_usd_per_month")


class ComparisonRow(BaseModel):
    """One deployment's figures, or the reason it cannot run. Money in USD, times in seconds."""

    model_config = ConfigDict(defer_build=True, frozen=True)

    gpu: str
    tp: int
    #: The GPU-hour price the row is priced at (one for every row, or each GPU's: --gpu-hour-usd GPU=PRICE pairs).
    gpu_hour_usd: float | None = None
    feasible: bool
    #: The error's one line when the deployment cannot run; None when it can.
    reason: str | None = None
    usd_per_million_prompt_tokens: float | None = None
    usd_per_million_output_tokens: float | None = None
    output_weight: float | None = None
    replica_units_per_s: float | None = None
    kv_pool_tokens: int | None = None
    kv_pool_source: Literal["measured", "estimated"] | None = None
    #: Tokens the pool holds filled with sequences of --context (price's kv_pool_tokens_at_context): kv_pool_tokens
    #: where every layer grows; where windows or fixed state cost a sequence the same whatever its length, fewer at a
    #: short context and more at a long one.
    kv_pool_tokens_at_context: int | None = None
    #: One replica (TP GPUs) for a month.
    dedicated_usd_per_month: float | None = None
    #: The decode batch priced: the one asked for, or what the pool (or max_num_seqs) holds.
    decode_batch: int | None = None
    #: Inter-token latency at that batch, and the first token of one --context prompt on an idle replica.
    itl_s: float | None = None
    ttft_s: float | None = None
    max_load_output_tokens_per_s: float | None = None
    #: Whether the plan's calibration (quotacalc calibrate) holds for this deployment.
    calibrated: bool = False
    units_per_s: float | None = None
    replicas: float | None = None
    shared_usd_per_month: float | None = None
    dedicated_replicas: int | None = None
    dedicated_total_usd_per_month: float | None = None
    warnings: tuple[str, ...] = ()

    def keys_for(self, command: Literal["price", "size"]) -> tuple[str, ...]:
        return PRICE_KEYS if command == "price" else PRICE_KEYS[:-2] + SIZE_KEYS + PRICE_KEYS[-2:]


def _feasible_row(
    deployment: Deployment, priced: PriceResult, sized: SizeResult | None, calibrated: bool
) -> ComparisonRow:
    size_figures = {}
    if sized is not None:
        size_figures = {
            "units_per_s": sized.units_per_s,
            "replicas": sized.replicas,
            "shared_usd_per_month": sized.shared_usd_per_month,
            "dedicated_replicas": sized.dedicated_replicas,
            "dedicated_total_usd_per_month": sized.dedicated_total_usd_per_month,
        }
    return ComparisonRow(
        gpu=deployment.gpu,
        tp=deployment.tp,
        gpu_hour_usd=deployment.gpu_hour_usd,
        feasible=True,
        usd_per_million_prompt_tokens=priced.usd_per_million_prompt_tokens,
        usd_per_million_output_tokens=priced.usd_per_million_output_tokens,
        output_weight=priced.output_weight,
        replica_units_per_s=priced.replica_units_per_s,
        kv_pool_tokens=priced.kv_pool_tokens,
        kv_pool_source=priced.kv_pool_source,
        kv_pool_tokens_at_context=priced.kv_pool_tokens_at_context,
        dedicated_usd_per_month=priced.dedicated_usd_per_month,
        decode_batch=priced.decode_batch,
        itl_s=priced.itl_s,
        ttft_s=priced.ttft_s,
        max_load_output_tokens_per_s=priced.max_load_output_tokens_per_s,
        calibrated=calibrated,
        warnings=priced.warnings,
        **size_figures,
    )


def compare(
    deployments: Sequence[Deployment],
    evaluate: Callable[[Deployment], PriceResult],
    traffic: Traffic | None = None,
    size: Callable[[PriceResult, Traffic], SizeResult] | None = None,
    is_calibrated: Callable[[PriceResult], bool] | None = None,
) -> tuple[ComparisonRow, ...]:
    """One row per deployment: its prices (and the tenant's size when ``tenant`` is given), or why not.

    ``is_calibrated`` says whether a priced deployment's figures rest on a calibration that holds for it.

    A ``UsageError`` (an unknown GPU or dtype name: a typo, not an infeasible deployment) is raised,
    not turned into a row.
    """
    if traffic is not None and size is None:
        from quotacalc.core.traffic import size_traffic

        size = size_traffic
    rows = []
    for deployment in deployments:
        try:
            priced = evaluate(deployment)
            sized = size(priced, traffic) if traffic is not None and size is not None else None
        except UsageError:
            raise
        except QuotacalcError as error:
            rows.append(
                ComparisonRow(
                    gpu=deployment.gpu,
                    tp=deployment.tp,
                    gpu_hour_usd=deployment.gpu_hour_usd,
                    feasible=False,
                    reason=error.one_line(),
                )
            )
            continue
        calibrated = is_calibrated(priced) if is_calibrated is not None else False
        rows.append(_feasible_row(deployment, priced, sized, calibrated))
    return tuple(rows)
