"""Where each value came from, recorded as it is read, and how a message names it from that record.

A value's origin decides every place a message names it: a fix's key (``--batch``, ``pools.chat.deployment.batch``)
and an error's location (``--batch``, ``plan.yaml: pools[0].deployment.batch``). Nothing guesses it after the fact.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from quotacalc.core.pricing_warning import KeyNamer, PricingError, flag_words
from quotacalc.errors import QuotacalcError

#: Where a value came from: a flag, the pool's own key (a flat plan's top-level key), the platform plan's
#: top-level ``deployment:`` the pool inherits, or the field's default.
OriginKind = Literal["flag", "pool", "inherited", "default"]


@dataclass(frozen=True)
class ValueOrigin:
    """Where one value came from, and the names the user knows it by."""

    kind: OriginKind
    #: How a fix names it: ``--batch``, ``pools.chat.deployment.batch``, ``deployment.batch`` or (a flat plan)
    #: ``batch``; a default's is the key (or, with no file, the flag) that would set it.
    written: str
    #: The file it was read from (or would be set in); None for a flag, and for a default with no file.
    source: str | None = None
    #: Where an error about it points in ``source``: ``pools[0].deployment.batch`` (a YAML path), ``batch`` in a flat
    #: plan or with no file; a flag's is the flag.
    at: str = ""

    def error_field(self, rest: str = "") -> str:
        """An error's location for this value, or for ``rest`` inside it (``.gpu`` of ``kv_pool_measured_with``); an
        inherited key names both the pool's place and where it is written."""
        if self.kind == "flag":
            return self.written
        field = self.at + rest
        return f"{field} (inherited from {self.written})" if self.kind == "inherited" else field


def value_origins(
    fields: Any,
    flags: Mapping[str, Any],
    *,
    own: Mapping[str, Any] | None = None,
    inherited: Mapping[str, Any] | None = None,
    source: str | None = None,
    written: str = "",
    at: str = "",
    inherited_written: str = "deployment.",
) -> dict[str, ValueOrigin]:
    """Each of ``fields``' origin, read as the values are: a flag wins over the file's own key (``own``, written after
    ``written`` and located after ``at``), which wins over one it inherits (``inherited``, written after
    ``inherited_written``); else the default, named where it would be set (the flag where there is no file)."""
    from quotacalc.inputs.key_errors import flag_name

    result = {}
    for key in fields:
        if flags.get(key) is not None:
            result[key] = ValueOrigin("flag", flag_name(key))
        elif source is None:
            result[key] = ValueOrigin("default", flag_name(key), None, key)
        elif own is not None and key in own:
            result[key] = ValueOrigin("pool", written + key, source, at + key)
        elif inherited is not None and key in inherited:
            result[key] = ValueOrigin("inherited", inherited_written + key, source, at + key)
        else:
            result[key] = ValueOrigin("default", written + key, source, at + key)
    return result


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
    """``error``, about values whose origins are ``origins``, at the place its value was read: the flag, or the file
    and key; a fix's keys named by ``namer``. An error about another file (a model's config) is left as it is. One
    about no recorded value is ``source``'s, under ``within`` (a pool's ``pools[0].deployment``) where given."""
    if error.source is not None:
        return error
    fix = (error.worded_fix(namer) or None) if isinstance(error, PricingError) else error.fix
    root, rest = _split(error.field or "")
    origin = origins.get(root) if root else None
    if origin is not None:
        return type(error)(error.problem, source=origin.source, field=origin.error_field(rest), fix=fix)
    if within is not None:
        field = within + (f".{error.field}" if error.field else "")
        return type(error)(error.problem, source=source, field=field, fix=fix)
    return type(error)(error.problem, source=source, field=error.field, fix=fix)


def _split(field: str) -> tuple[str, str]:
    """``kv_pool_measured_with.gpu`` -> (``kv_pool_measured_with``, ``.gpu``); ``engine_args[0]`` -> its key too."""
    end = min((i for i in (field.find("."), field.find("[")) if i >= 0), default=len(field))
    return field[:end], field[end:]
