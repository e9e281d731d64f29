"""Where each value came from, recorded as it is read: a flag, a plan's key, a key a pool inherits, or a default.

The readers record it (``value_origins``) and place an error about a value where that value was read
(``placed``); ``quotacalc.priced.origins`` words a fix's keys from the same record. Nothing guesses an origin after
the fact.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import EllipsisType
from typing import Any, Literal

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
    fields: Iterable[str],
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


def placed(
    error: QuotacalcError,
    origins: Mapping[str, ValueOrigin],
    *,
    source: str | None,
    within: str | None = None,
    fix: str | EllipsisType | None = ...,
) -> QuotacalcError:
    """``error``, about values whose origins are ``origins``, at the place its value was read: the flag, or the file
    and key (``fix``: its fix, where not the error's own). An error about another file (a model's config) is left as it
    is. One about no recorded value is ``source``'s, under ``within`` (a pool's ``pools[0].deployment``) where
    given."""
    if error.source is not None:
        return error
    fix = error.fix if isinstance(fix, EllipsisType) else fix
    root, rest = split_field(error.field or "")
    origin = origins.get(root) if root else None
    if origin is not None:
        return type(error)(error.problem, source=origin.source, field=origin.error_field(rest), fix=fix)
    if within is not None:
        field = within + (f".{error.field}" if error.field else "")
        return type(error)(error.problem, source=source, field=field, fix=fix)
    return type(error)(error.problem, source=source, field=error.field, fix=fix)


def split_field(field: str) -> tuple[str, str]:
    """``kv_pool_measured_with.gpu`` -> (``kv_pool_measured_with``, ``.gpu``); ``engine_args[0]`` -> its key too."""
    end = min((i for i in (field.find("."), field.find("[")) if i >= 0), default=len(field))
    return field[:end], field[end:]
