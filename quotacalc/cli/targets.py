"""The targets on the command line, all read from their declarations (``exporters.registry``): ``generate``'s
``--target`` and option flags, ``check``'s per-target findings, and ``quotacalc targets``'s table."""

from __future__ import annotations

import importlib
import inspect
from types import ModuleType
from typing import TYPE_CHECKING, Annotated, Any, Union

import typer

from quotacalc.errors import UsageError
from quotacalc.exporters import registry

if TYPE_CHECKING:
    from quotacalc.core.checks import Finding
    from quotacalc.core.policy import QuotaPolicy
    from quotacalc.exporters.base import ExportOptions

PANEL = "Targets"


def target_parameters() -> list[inspect.Parameter]:
    """``--target`` and one flag per declared target option, for ``generate`` (cli/options.py ``with_options``)."""
    names = ",".join(registry.names())
    parameters = [
        inspect.Parameter(
            "target",
            inspect.Parameter.KEYWORD_ONLY,
            default=None,
            annotation=Annotated[
                Union[str, None],
                typer.Option("--target", help=f"comma-separated: {names} (all)", rich_help_panel=PANEL),
            ],
        )
    ]
    for _target, option in registry.options().values():
        if option.choices is None:
            annotation: Any = Annotated[bool, typer.Option(option.flag, help=option.help, rich_help_panel=PANEL)]
            default: Any = False
        else:
            said = f"{option.help} [default: {option.default}]"
            metavar = "|".join(option.choices)
            annotation = Annotated[
                Union[str, None],
                typer.Option(option.flag, help=said, metavar=metavar, show_default=False, rich_help_panel=PANEL),
            ]
            default = None  # not given: the declared default, and no complaint when its target is left out
        parameters.append(
            inspect.Parameter(option.name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotation)
        )
    return parameters


def export_options(given: dict[str, Any], targets: list[str]) -> ExportOptions:
    """The options as given on the command line (``target`` aside), checked: a value among its choices, and an
    option given only where its target is generated (else the flag would do nothing, silently)."""
    from quotacalc.exporters.base import ExportOptions

    declared = registry.options()
    values: dict[str, Any] = {}
    for name, value in given.items():
        if name == "target" or value is None:
            continue
        target, option = declared[name]
        if option.choices is not None and value not in option.choices:
            raise UsageError(
                f"must be one of {', '.join(option.choices)}, got {value!r}",
                field=option.flag,
                fix=f"e.g. {option.flag} {option.default}",
            )
        if value != option.default and target.name not in targets:
            raise UsageError(
                f"applies to the {target.name} target, which --target leaves out",
                field=option.flag,
                fix=f"add {target.name} to --target, or drop {option.flag}",
            )
        values[name] = value
    return ExportOptions(**values)


def target_module(name: str) -> ModuleType | None:
    """A declared target's module, or None when it is not in this build (its module is missing)."""
    module_name = registry.get(name).module
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as error:
        if error.name != module_name:
            raise
        return None


def target_findings(policy: QuotaPolicy) -> list[Finding]:
    """Every declared target's pre-check findings on the policy, in the targets' order (a target not in this build
    has none to give)."""
    found: list[Finding] = []
    for target in registry.TARGETS.values():
        if target.prechecks is None or target_module(target.name) is None:
            continue
        module_name, _, function = target.prechecks.partition(":")
        found += getattr(importlib.import_module(module_name), function)(policy)
    return found


def targets_listing(*, as_json: bool) -> None:
    """``quotacalc targets``: each target, its options, how it salts, and how far it enforces each capability."""
    if as_json:
        from quotacalc.cli.json_out import JSON_SCHEMA_VERSION, emit_json

        emit_json(
            {
                "schema_version": JSON_SCHEMA_VERSION,
                "command": "targets",
                "capabilities": registry.CAPABILITIES,
                "parts": registry.PARTS,
                "targets": [
                    {
                        "name": target.name,
                        "summary": target.summary,
                        "files": target.files,
                        "salts": target.salts,
                        "salting": target.salting,
                        "options": [
                            {
                                "flag": option.flag,
                                "help": option.help,
                                "default": option.default,
                                "choices": option.choices,
                            }
                            for option in target.options
                        ],
                        "enforces": {
                            name: {"support": capability.support, "how": capability.how, "fix": capability.fix}
                            for name, capability in target.enforces.items()
                        },
                        # What an option's value changes of ``enforces`` (LIMITS.md renders the options chosen).
                        "variants": {
                            option: {
                                str(value).lower() if isinstance(value, bool) else value: {
                                    name: {"support": capability.support, "how": capability.how, "fix": capability.fix}
                                    for name, capability in changes.items()
                                }
                                for value, changes in by_value.items()
                            }
                            for option, by_value in target.variants.items()
                        },
                    }
                    for target in registry.TARGETS.values()
                ],
            }
        )
        return
    import sys

    sys.stdout.write(capability_table())


def capability_table() -> str:
    """The targets against the capabilities, as a Markdown table (also what docs/targets.md shows)."""
    header = ["target", *registry.CAPABILITIES, "options"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for target in registry.TARGETS.values():
        cells = [f"`{target.name}`"]
        cells += [target.enforces[name].support for name in registry.CAPABILITIES]
        cells.append(", ".join(f"`{option.flag}`" for option in target.options) or "")
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    lines += [f"- **{name}**: {what}." for name, what in registry.CAPABILITIES.items()]
    return "\n".join(lines) + "\n"
