"""Loading a deployment and a traffic profile from a YAML file and/or flags into the core's typed values.

How a key or value that does not validate is worded is ``inputs.key_errors``; whether a measured KV pool holds
for the deployment given, ``inputs.measured_pool``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from quotacalc.core.deployment import Deployment, Traffic
from quotacalc.errors import QuotacalcError
from quotacalc.inputs.key_errors import _one_line_validation_error, flag_name
from quotacalc.inputs.measured_pool import (
    check_measured_pool,
    check_unrecorded_pool,
    measured_pool_mismatch,
    model_max_context,
    unrecorded_pool_change,
)
from quotacalc.inputs.origins import ValueOrigin, placed, value_origins

__all__ = [
    "build_deployment",
    "build_traffic",
    "check_measured_pool",
    "check_unrecorded_pool",
    "flag_name",
    "measured_pool_mismatch",
    "model_max_context",
    "unrecorded_pool_change",
]


def build_deployment(
    file_values: dict[str, Any],
    flag_values: dict[str, Any],
    *,
    source: str | None,
    check_pool: bool = True,
    origins: Mapping[str, ValueOrigin] | None = None,
    within: str | None = None,
) -> Deployment:
    """Flags override the file; an error names the flag or the file's key, from each value's origin.

    ``origins``: where each value came from, as recorded when the plan was read (a platform plan's pool: its own
    key, or one it inherits); without them, the file's top-level keys and the flags (a flat plan). ``within``: where
    the deployment sits in ``source`` (``pools[1].deployment``), for an error about no one key.

    A measured ``kv_pool_tokens`` from the file holds only for the deployment it was measured on
    (``kv_pool_measured_with``): a run that differs is an error naming what changed, unless the
    pool itself is given on the command line.
    """
    given = {key: value for key, value in flag_values.items() if value is not None}
    if origins is None:
        origins = value_origins(Deployment.model_fields, given, own=file_values, source=source)
    try:
        deployment = Deployment.model_validate({**file_values, **given})
    except ValidationError as error:
        # Worded for the bare key (or the flag's absence), then placed where that key's value was read.
        problem = _one_line_validation_error(
            error, Deployment, source=None, from_flags=set(), missing_in_file=source is not None
        )
        raise placed(problem, origins, source=source, within=within) from None
    try:
        if "kv_pool_tokens" in given:
            if measured_pool_mismatch(deployment) is not None:
                # The pool on the command line is this deployment's: the file's record of another one no longer
                # applies.
                deployment = deployment.model_copy(update={"kv_pool_measured_with": None})
        elif check_pool:  # (a comparison checks each deployment in its own row)
            check_measured_pool(deployment, source=None)
            check_unrecorded_pool(file_values, deployment, source=None)
    except QuotacalcError as error:
        # A value read while comparing with the record (an unknown dtype), or the record itself: where it was read.
        raise placed(error, origins, source=source, within=within) from None
    return deployment


def build_traffic(file_values: dict[str, Any] | None, flag_values: dict[str, Any], *, source: str | None) -> Traffic:
    given = {key: value for key, value in flag_values.items() if value is not None}
    try:
        return Traffic.model_validate({**(file_values or {}), **given})
    except ValidationError as error:
        raise _one_line_validation_error(
            error, Traffic, source=source, from_flags=set(given), prefix="tenant."
        ) from None
