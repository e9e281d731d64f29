"""Command-line options generated from the input models, so flags, YAML keys and docs never drift.

Built when a command that takes them runs (cli/app.py), not at start-up: only that command's tables. Typer is
imported only to build them: cli/fast.py reads the same options (``option_fields``) without it.
"""

from __future__ import annotations

import functools
import inspect
import re
import types
import typing
from collections.abc import Callable
from typing import Annotated, Any, NamedTuple, Union

from quotacalc.cli import units

if typing.TYPE_CHECKING:
    from pydantic import BaseModel
    from pydantic.fields import FieldInfo


def _plain_type(annotation: Any) -> Any:
    """``int | None`` -> ``int``: typer needs the bare type; None means 'not given'."""
    if typing.get_origin(annotation) in (Union, types.UnionType):
        members = [arg for arg in typing.get_args(annotation) if arg is not type(None)]
        return members[0]
    return annotation


def _is_model(annotation: Any) -> bool:
    from pydantic import BaseModel

    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


class OptionField(NamedTuple):
    """One generated option: the model's field, its flag and the type its text is coerced to (``str`` for lists)."""

    name: str
    flag: str
    kind: Any
    field: FieldInfo


def option_fields(
    model: type[BaseModel],
    *,
    exclude: tuple[str, ...] = (),
    lists: tuple[str, ...] = (),
    per_gpu: tuple[str, ...] = (),
) -> list[OptionField]:
    """The options ``option_parameters`` makes of ``model``'s fields, in field order, without typer."""
    from quotacalc.inputs.key_errors import flag_name

    options = []
    for name, field in model.model_fields.items():
        # A structured field (a mapping) is a file's business; it has no flag.
        if name in exclude or _is_model(_plain_type(field.annotation)):
            continue
        kind = str if name in lists or name in per_gpu else _plain_type(field.annotation)
        options.append(OptionField(name, flag_name(name), kind, field))
    return options


def option_parameters(
    model: type[BaseModel],
    *,
    panel: str,
    exclude: tuple[str, ...] = (),
    lists: tuple[str, ...] = (),
    per_gpu: tuple[str, ...] = (),
) -> list[inspect.Parameter]:
    """One keyword-only typer option per field of ``model``; every default is None ('not given').

    Fields named in ``lists`` take a comma-separated list as text (``--tp 2,4,8``), and those in ``per_gpu`` a value
    or one per GPU of a comparison (``--gpu-hour-usd h100-sxm=2.5,b200=6``); the command parses them.
    """
    import typer
    from pydantic_core import PydanticUndefined

    parameters = []
    for name, flag, kind, field in option_fields(model, exclude=exclude, lists=lists, per_gpu=per_gpu):
        if kind is bool:  # a switch both ways, so a flag can undo a plan file's true
            flag = f"{flag}/--no-{flag.removeprefix('--')}"
        # The default is shown from the model (the option's own default is None: 'not given').
        stated = field.default not in (None, PydanticUndefined)
        default = f"  [default: {units.setting(field.default)}]" if stated else ""
        listed = "; a comma-separated list compares each" if name in lists else ""
        if name in per_gpu:
            listed = "; or one per GPU of a comparison, GPU=VALUE pairs (h100-sxm=2.5,b200=6)"
        strict = {"parser": whole_number, "metavar": "<int>"} if kind is int else {}
        option = typer.Option(
            flag, help=f"{field.description}{listed}{default}", rich_help_panel=panel, show_default=False, **strict
        )
        annotation = Annotated[Union[kind, None], option]
        parameters.append(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=annotation))
    return parameters


def whole_number(text: str) -> int:
    """A count as typed: digits only (typer would take '4.0' as 4), and no more than Python converts."""
    import typer

    if not re.fullmatch(r"[+-]?[0-9]+", text.strip()):
        raise typer.BadParameter(f"must be a whole number, got {text!r}")
    try:
        return int(text)
    except ValueError:  # more digits than Python converts (4,300)
        raise typer.BadParameter(f"has {len(text):,} digits; far out of range") from None


def with_options(groups: dict[str, list[inspect.Parameter]]) -> Callable[[Callable], Callable]:
    """Add generated options to a command; the command receives each group as a dict named by its key."""

    def decorate(command: Callable) -> Callable:
        signature = inspect.signature(command, eval_str=True)
        own = [p for p in signature.parameters.values() if p.name not in groups]

        @functools.wraps(command)
        def wrapper(**kwargs: Any) -> Any:
            grouped = {group: {p.name: kwargs.pop(p.name) for p in params} for group, params in groups.items()}
            return command(**kwargs, **grouped)

        extra = [p for params in groups.values() for p in params]
        wrapper.__signature__ = signature.replace(parameters=own + extra)  # type: ignore[attr-defined]
        return wrapper

    return decorate
