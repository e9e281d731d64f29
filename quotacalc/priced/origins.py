"""How a message names a value from the record of where it came from (``inputs.origins``, kept as it is read).

A value's origin decides every place a message names it: a fix's key (``--batch``, ``pools.chat.deployment.batch``)
and an error's location (``--batch``, ``plan.yaml: pools[0].deployment.batch``). Nothing guesses it after the fact.
"""

from __future__ import annotations

from collections.abc import Mapping

from quotacalc.core.pricing_warning import KeyNamer, PricingError, flag_words
from quotacalc.errors import QuotacalcError
from quotacalc.inputs.origins import ValueOrigin, placed, value_origins

__all__ = ["ValueOrigin", "key_namer", "located", "value_origins"]


def key_namer(origins: Mapping[str, ValueOrigin], own: str | None) -> KeyNamer:
    """How a message names a key of values from ``origins``: as the flag, when a flag gave it or no file can (there
    is none, ``own`` None, or the key is not the pool's); else as the plan writes it. A fix that removes a key the pool inherits names it where it is
    written (``deployment.KEY``); one that sets a key names the pool's own, after ``own`` (it changes that pool
    alone)."""
    if own is None:
        return flag_words

    def name(key: str, value: str | None, removal: bool) -> str:
        origin = origins.get(key)
        if origin is not None and (origin.kind == "flag" or origin.source is None):
            return flag_words(key, value, removal)
        inherited = origin is not None and origin.kind == "inherited" and removal
        written = origin.written if inherited and origin is not None else own + key
        return f"{written}: {value}" if value is not None else written

    return name


def located(
    error: QuotacalcError,
    origins: Mapping[str, ValueOrigin],
    namer: KeyNamer,
    *,
    source: str | None,
    within: str | None = None,
) -> QuotacalcError:
    """``error``, about values whose origins are ``origins``, at the place its value was read (``placed``), a fix's
    keys named by ``namer``."""
    if error.source is not None:
        return error
    fix = (error.worded_fix(namer) or None) if isinstance(error, PricingError) else error.fix
    return placed(error, origins, source=source, within=within, fix=fix)
