#!/usr/bin/env python3
"""Extract `vllm serve`'s long flags and their choices from a vLLM release wheel, without installing vLLM.

    python scripts/extract_vllm_flags.py --version 0.33.0 --out tests/targets/vllm-0.33.0-flags.json
    python scripts/extract_vllm_flags.py --version 0.33.0 --wheel path/to/vllm-0.33.0-....whl --out ...

The wheel is fetched with ``pip download vllm==VERSION --no-deps`` (no dependencies, nothing installed) unless
given. Its sources are read from the zip and parsed with ``ast``, never imported:
- ``vllm/engine/arg_utils.py``: every ``*.add_argument("--flag", ..., **kwargs["field"])`` of
  ``EngineArgs.add_cli_args``, where ``kwargs = get_kwargs(SomeConfig)``;
- ``vllm/entrypoints/common/cli_args.py``: ``make_arg_parser``'s own flags, and one flag per field of
  ``FrontendArgs`` (its ``add_cli_args`` adds ``--<field-name>`` for each field);
- the config dataclasses' field annotations (``vllm/config/*.py``): a ``Literal[...]`` (directly or through a
  module-level alias) gives the choices, ``bool`` gives a ``--no-`` twin (argparse.BooleanOptionalAction).
"""

from __future__ import annotations

import ast
import sys
import zipfile
from pathlib import Path

ARG_UTILS = "vllm/engine/arg_utils.py"
FRONTEND = "vllm/entrypoints/common/cli_args.py"


def _modules(wheel: zipfile.ZipFile) -> dict[str, ast.Module]:
    wanted = [
        name
        for name in wheel.namelist()
        if name in (ARG_UTILS, FRONTEND) or (name.startswith("vllm/config/") and name.endswith(".py"))
    ]
    return {name: ast.parse(wheel.read(name).decode("utf-8"), filename=name) for name in wanted}


def _aliases(modules: dict[str, ast.Module]) -> dict[str, ast.expr]:
    """Module-level ``Name = <type expression>`` assignments (e.g. ``CacheDType = Literal[...]``)."""
    found: dict[str, ast.expr] = {}
    for tree in modules.values():
        for node in tree.body:
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                found[node.targets[0].id] = node.value
            elif (
                isinstance(node, ast.AnnAssign)
                and isinstance(node.target, ast.Name)
                and node.value is not None
                and ast.unparse(node.annotation).endswith("TypeAlias")
            ):
                found[node.target.id] = node.value
    return found


def _classes(modules: dict[str, ast.Module]) -> dict[str, ast.ClassDef]:
    return {node.name: node for tree in modules.values() for node in tree.body if isinstance(node, ast.ClassDef)}


def _fields(cls: ast.ClassDef, classes: dict[str, ast.ClassDef]) -> dict[str, ast.expr]:
    """A dataclass's annotated fields, base classes first (ClassVar and private names left out)."""
    fields: dict[str, ast.expr] = {}
    for base in cls.bases:
        if isinstance(base, ast.Name) and base.id in classes:
            fields.update(_fields(classes[base.id], classes))
    for node in cls.body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            if "ClassVar" in ast.unparse(node.annotation) or node.target.id.startswith("_"):
                continue
            fields[node.target.id] = node.annotation
    return fields


def _describe(annotation: ast.expr, aliases: dict[str, ast.expr], depth: int = 0) -> tuple[list, bool]:
    """(Literal choices, is a bool) of a type annotation, following aliases and unions."""
    if depth > 8:
        return [], False
    if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
        try:
            return _describe(ast.parse(annotation.value, mode="eval").body, aliases, depth + 1)
        except SyntaxError:
            return [], False
    if isinstance(annotation, ast.BinOp) and isinstance(annotation.op, ast.BitOr):
        left, left_bool = _describe(annotation.left, aliases, depth + 1)
        right, right_bool = _describe(annotation.right, aliases, depth + 1)
        return left + right, left_bool or right_bool
    if isinstance(annotation, ast.Subscript):
        head = ast.unparse(annotation.value)
        if head.endswith("Literal"):
            elements = annotation.slice.elts if isinstance(annotation.slice, ast.Tuple) else [annotation.slice]
            choices = []
            for element in elements:
                if isinstance(element, ast.Constant):
                    choices.append(element.value)
                else:
                    choices.extend(_describe(element, aliases, depth + 1)[0])
            return choices, False
        if head.endswith(("Optional", "Annotated")):
            inner = annotation.slice.elts[0] if isinstance(annotation.slice, ast.Tuple) else annotation.slice
            return _describe(inner, aliases, depth + 1)
        if head.endswith("Union"):
            choices, is_bool = [], False
            for element in annotation.slice.elts if isinstance(annotation.slice, ast.Tuple) else [annotation.slice]:
                more, more_bool = _describe(element, aliases, depth + 1)
                choices, is_bool = choices + more, is_bool or more_bool
            return choices, is_bool
        return [], False
    if isinstance(annotation, ast.Name):
        if annotation.id == "bool":
            return [], True
        if annotation.id in aliases:
            return _describe(aliases[annotation.id], aliases, depth + 1)
    return [], False


def _kwargs_classes(tree: ast.Module) -> dict[str, str]:
    """``cache_kwargs = get_kwargs(CacheConfig)`` -> {"cache_kwargs": "CacheConfig"}."""
    found: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) and len(node.targets) == 1:
            call = node.value
            if ast.unparse(call.func).endswith("get_kwargs") and call.args and isinstance(node.targets[0], ast.Name):
                found[node.targets[0].id] = ast.unparse(call.args[0])
    return found


def _flag_entry(choices: list, is_bool: bool, source: str) -> dict:
    entry: dict = {"source": source}
    if choices:
        entry["choices"] = sorted({str(choice) for choice in choices if choice is not None})
    if is_bool:
        entry["type"] = "bool"
    return entry


def _add_argument_calls(tree: ast.Module) -> list[ast.Call]:
    return [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "add_argument"
    ]


def extract(wheel_path: Path) -> dict:
    """The flag table of the wheel's `vllm serve`: {long flag: {source, choices?, type?}}."""
    with zipfile.ZipFile(wheel_path) as wheel:
        modules = _modules(wheel)
    aliases = _aliases(modules)
    classes = _classes(modules)
    flags: dict[str, dict] = {}

    def add(flag: str, entry: dict) -> None:
        flags[flag] = entry
        if entry.get("type") == "bool":
            flags[f"no-{flag}"] = {"source": entry["source"], "type": "bool"}

    for module_name in (ARG_UTILS, FRONTEND):
        tree = modules[module_name]
        kwargs_of = _kwargs_classes(tree)
        for call in _add_argument_calls(tree):
            names = [arg.value for arg in call.args if isinstance(arg, ast.Constant) and isinstance(arg.value, str)]
            longs = [name[2:] for name in names if name.startswith("--")]
            if not longs:
                continue
            choices: list = []
            is_bool = False
            source = module_name
            for keyword in call.keywords:
                if keyword.arg == "choices" and isinstance(keyword.value, ast.List | ast.Tuple):
                    choices = [element.value for element in keyword.value.elts if isinstance(element, ast.Constant)]
                if keyword.arg == "action" and "BooleanOptionalAction" in ast.unparse(keyword.value):
                    is_bool = True
                if keyword.arg is not None:
                    continue
                # **kwargs["field"], or **{**kwargs["field"], "default": ...}
                spreads = [keyword.value]
                if isinstance(keyword.value, ast.Dict):
                    spreads = [v for k, v in zip(keyword.value.keys, keyword.value.values, strict=True) if k is None]
                for value in spreads:
                    if not (isinstance(value, ast.Subscript) and isinstance(value.value, ast.Name)):
                        continue
                    cls_name = kwargs_of.get(value.value.id)
                    field = value.slice.value if isinstance(value.slice, ast.Constant) else None
                    if cls_name in classes and isinstance(field, str):
                        annotation = _fields(classes[cls_name], classes).get(field)
                        if annotation is not None:
                            more, more_bool = _describe(annotation, aliases)
                            choices, is_bool = choices + more, is_bool or more_bool
                        source = f"{cls_name}.{field}"
            for flag in longs:
                add(flag, _flag_entry(choices, is_bool, source))

    # FrontendArgs.add_cli_args adds --<field> for every field of the class and its bases.
    for name, annotation in _fields(classes["FrontendArgs"], classes).items():
        choices, is_bool = _describe(annotation, aliases)
        add(name.replace("_", "-"), _flag_entry(choices, is_bool, f"FrontendArgs.{name}"))
    return dict(sorted(flags.items()))


if __name__ == "__main__":
    from wheel_flags import main

    sys.exit(main("vllm", "vLLM", "0.33.0", extract, __doc__))
