"""Commands built when they run: start-up declares every command, and builds only the one asked for.

Building a command means generating its options from the input models, turning its signature into
click parameters and importing the module that holds it; doing that for eleven commands on every
call cost more than pricing a deployment. ``quotacalc --help`` lists the commands from their
one-line help alone, so it builds none of them.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable, Iterator, MutableMapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import typer
from typer.core import TyperCommand, TyperGroup

if TYPE_CHECKING:
    from typer._click import Command, Context, HelpFormatter

#: A command's generated option groups (``with_options``'s argument), made when the command is built.
OptionGroups = Callable[[], dict[str, list[inspect.Parameter]]]


@dataclass(frozen=True)
class Declared:
    """A command as declared: enough to list it, and to build it when it runs."""

    load: Callable[[], Callable[..., Any]]
    #: The first paragraph of its help: what ``quotacalc --help`` shows, cut to the terminal's width.
    summary: str
    options: OptionGroups | None


class LazyCommands(MutableMapping[str, "Command"]):
    """The CLI's commands by name, in declared order; a command is built on its first lookup and kept.

    Iterating yields names and builds nothing, so a group's name lookups and "did you mean" hints
    stay cheap. ``settings`` are the app's ``typer.Typer`` settings, so each command is built as the
    app itself would build it.
    """

    def __init__(self, **settings: Any) -> None:
        self._settings = settings
        self._declared: dict[str, Declared] = {}
        self.built: dict[str, Command] = {}

    def command(self, name: str, *, options: OptionGroups | None = None) -> Callable[[Callable], Callable]:
        """Declare the decorated function as command ``name``; its help's first paragraph is its summary."""

        def declare(function: Callable) -> Callable:
            self.declare(name, lambda: function, summary=_first_paragraph(inspect.getdoc(function)), options=options)
            return function

        return declare

    def declare(
        self, name: str, load: Callable[[], Callable] | str, *, summary: str, options: OptionGroups | None = None
    ) -> None:
        """Declare command ``name``; ``load`` returns its function, or names it as ``"module:function"``
        (imported only when the command runs, so ``summary`` states its help's first paragraph)."""
        if isinstance(load, str):
            module, _, attribute = load.partition(":")

            def import_function() -> Callable:
                return getattr(importlib.import_module(module), attribute)

            load = import_function
        self._declared[name] = Declared(load=load, summary=summary, options=options)

    def summary(self, name: str) -> str:
        return self._declared[name].summary

    def __getitem__(self, name: str) -> Command:
        if name not in self.built:
            self.built[name] = self._build(name)  # KeyError for a name never declared, as a dict
        return self.built[name]

    def _build(self, name: str) -> Command:
        declared = self._declared[name]
        function = declared.load()
        if declared.options is not None:
            from quotacalc.cli.options import with_options

            function = with_options(declared.options())(function)
        # A one-command app with the group's settings: typer builds the command as it would inside the group.
        single = typer.Typer(**self._settings)
        single.command(name)(function)
        return _coerce_given_values_only(typer.main.get_command(single))

    def __iter__(self) -> Iterator[str]:
        return iter(self._declared)

    def __len__(self) -> int:
        return len(self._declared)

    def __contains__(self, name: object) -> bool:
        return name in self._declared

    def __setitem__(self, name: str, command: Command) -> None:
        raise TypeError("declare commands with LazyCommands.command or .declare")

    def __delitem__(self, name: str) -> None:
        raise TypeError("commands are not removed")


class LazyGroup(TyperGroup):
    """typer's group over ``commands`` (set by a subclass): looking one up builds it; listing builds none."""

    commands_declared: ClassVar[LazyCommands]

    def __init__(self, **attrs: Any) -> None:
        attrs.pop("commands", None)  # typer passes the commands it built: none, since none are registered with it
        super().__init__(commands=self.commands_declared, **attrs)

    def list_commands(self, ctx: Context) -> list[str]:
        return list(self.commands)

    def format_commands(self, ctx: Context, formatter: HelpFormatter) -> None:
        # typer's own listing, over stand-ins that carry only the summary each command's help starts with.
        listing = {name: TyperCommand(name=name, help=self.commands_declared.summary(name)) for name in self.commands}
        TyperGroup(commands=listing, rich_markup_mode=self.rich_markup_mode).format_commands(ctx, formatter)


class _CoercionOnValue:
    """typer's coercion of one parameter, built when a value comes to coerce: typer (0.29) builds a pydantic
    TypeAdapter for each of a command's parameters, also the ones not given, which cost more than the price."""

    def __init__(self, build: Callable[[Any], Any], descriptor: Any) -> None:
        self._build = build
        self._descriptor = descriptor
        self._built: Any = None

    def coerce(self, value: Any, param: Any, ctx: Any) -> Any:
        if value is None:  # as typer's own coercion answers a parameter not given, without an adapter
            return () if param.multiple or param.nargs == -1 else None
        if self._built is None:
            self._built = self._build(self._descriptor)
        return self._built.coerce(value, param=param, ctx=ctx)


def _coerce_given_values_only(command: Command) -> Command:
    """``command`` with each parameter's coercion built on its first value (``_CoercionOnValue``); a typer without
    that per-parameter coercion is left as it is."""
    try:
        from typer._coercion import build_runtime_param
    except ImportError:
        return command
    for param in command.params:
        if getattr(param, "_runtime_param", False) is None and hasattr(param, "type_descriptor"):
            param._runtime_param = _CoercionOnValue(build_runtime_param, param.type_descriptor)
    return command


def _first_paragraph(text: str | None) -> str:
    return (text or "").split("\n\n", 1)[0]
