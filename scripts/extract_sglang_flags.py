#!/usr/bin/env python3
"""Extract `python -m sglang.launch_server`'s long flags and their choices from an SGLang release wheel, without
installing SGLang.

    python scripts/extract_sglang_flags.py --version 0.5.23 --out tests/targets/sglang-0.5.23-flags.json
    python scripts/extract_sglang_flags.py --version 0.5.23 --wheel path/to/sglang-0.5.23-....whl --out ...

The wheel is fetched with ``pip download sglang==VERSION --no-deps`` (no dependencies, nothing installed) unless
given. Its sources are read from the zip and parsed with ``ast``, never imported. ``launch_server`` builds its parser
with ``prepare_server_args`` -> ``ServerArgs.add_cli_args`` (``sglang/srt/server_args.py``), which
- calls ``add_cli_args_from_dataclass(parser, ServerArgs)`` (``sglang/srt/arg_groups/arg_utils.py``) over the fields
  of the namespace Structs listed in ``_INPUT_NAMESPACES`` (``sglang/srt/arg_groups/fields/*.py``). Only fields
  annotated ``A[T, "help"]`` or ``A[T, Arg(...)]`` become flags, and not those with ``Arg(no_cli=True)``. The flag is
  ``Arg.cli_name`` or ``--<field-name>``, plus ``Arg.aliases``. As in that function, in this order: ``Arg.action``
  is passed through (``argparse.BooleanOptionalAction`` also makes ``--no-<name>``); a ``Literal[...]`` type gives
  choices (``Arg.choices`` wins); a ``List[T]`` type (without ``type_parser``) takes ``nargs`` (default ``+``); a
  ``bool`` becomes ``store_true``; anything else takes one value (``Arg.choices``, ``Arg.nargs``);
- then adds a few flags by hand with ``parser.add_argument`` (dynamic choices, ``--config``, deprecated flags).

Choices written as names (e.g. ``ATTENTION_BACKEND_CHOICES`` from ``sglang/srt/arg_groups/choices.py``, or
``Backend.ALL``) are followed through imports and resolved when they are literal; a list that the module also
``.extend``s at runtime (plugin hooks) keeps its shipped value and gets a note. Choices computed when the parser is
built (function calls, lists changed under a runtime condition) are written as ``null`` with a note.

Each flag is keyed by every long spelling (without ``--``; aliases and ``--no-`` forms included), each entry naming
all of them in ``names`` (the field's own spelling first), its ``kind`` (``store_true``: takes no value;
``boolean_optional``: ``--x``/``--no-x``; ``value``: takes a value, ``nargs`` if not exactly one), ``choices``
(list, or ``null``: none, or not statically known, then with a ``note``) and its ``source``.
"""

from __future__ import annotations

import ast
import sys
import zipfile
from pathlib import Path

SERVER_ARGS = "sglang.srt.server_args"
ARG_UTILS = "sglang.srt.arg_groups.arg_utils"
MUTATORS = ("extend", "append", "add", "insert", "update")


class Dynamic(Exception):
    """A value that the wheel's sources do not fix statically."""


class Wheel:
    """The wheel's Python modules, parsed on demand."""

    def __init__(self, wheel: zipfile.ZipFile) -> None:
        self._zip = wheel
        self._names = set(wheel.namelist())
        self._trees: dict[str, ast.Module | None] = {}

    def path(self, module: str) -> str | None:
        base = module.replace(".", "/")
        for candidate in (f"{base}.py", f"{base}/__init__.py"):
            if candidate in self._names:
                return candidate
        return None

    def module(self, module: str) -> ast.Module | None:
        if module not in self._trees:
            path = self.path(module)
            self._trees[module] = (
                None if path is None else ast.parse(self._zip.read(path).decode("utf-8"), filename=path)
            )
        return self._trees[module]

    def _top_statements(self, module: str) -> list[ast.stmt]:
        tree = self.module(module)
        if tree is None:
            return []
        out: list[ast.stmt] = []
        pending = list(tree.body)
        while pending:
            node = pending.pop(0)
            out.append(node)
            if isinstance(node, ast.If | ast.Try):  # e.g. try: from x import y / except ImportError
                pending[:0] = [*node.body, *getattr(node, "orelse", []), *getattr(node, "finalbody", [])]
        return out

    def lookup(self, module: str, name: str, depth: int = 0) -> tuple[str, ast.AST] | None:
        """The last top-level binding of ``name`` in ``module`` as (defining module, node), following
        ``from x import name``; the node is an expression, a ClassDef or a FunctionDef."""
        if depth > 16:
            return None
        found: tuple[str, ast.AST] | None = None
        for node in self._top_statements(module):
            if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
                found = (module, node.value)
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == name:
                if node.value is not None:
                    found = (module, node.value)
            elif isinstance(node, ast.ClassDef | ast.FunctionDef) and node.name == name:
                found = (module, node)
            elif isinstance(node, ast.ImportFrom):
                for alias in node.names:
                    if (alias.asname or alias.name) != name:
                        continue
                    source = node.module or ""
                    if node.level:
                        package = module.split(".")
                        is_package = (self.path(module) or "").endswith("__init__.py")
                        package = package[: len(package) - node.level + (1 if is_package else 0)]
                        source = ".".join([*package, *([source] if source else [])])
                    if self.path(f"{source}.{alias.name}") is not None:
                        found = None  # a submodule, not a value
                    else:
                        found = self.lookup(source, alias.name, depth + 1)
        return found

    def mutated(self, module: str, name: str) -> list[str]:
        """Top-level statements of ``module`` that take a mutating method of ``name`` (``X.extend`` ...)."""
        lines = []
        for node in self._top_statements(module):
            for sub in ast.walk(node):
                if (
                    isinstance(sub, ast.Attribute)
                    and sub.attr in MUTATORS
                    and isinstance(sub.value, ast.Name)
                    and sub.value.id == name
                ):
                    lines.append(ast.unparse(node).splitlines()[0])
                    break
        return lines


class Evaluator:
    """Static evaluation of literal expressions (constants, lists, names bound to them, ``a + b``, ``list(x)``)."""

    def __init__(self, wheel: Wheel) -> None:
        self.wheel = wheel
        self.notes: list[str] = []

    def value(self, module: str, node: ast.AST, local: dict[str, ast.expr] | None = None, depth: int = 0):
        if depth > 24:
            raise Dynamic(ast.unparse(node))
        local = local or {}
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.List | ast.Tuple | ast.Set):
            items: list = []
            for element in node.elts:
                if isinstance(element, ast.Starred):
                    items.extend(self.value(module, element.value, local, depth + 1))
                else:
                    items.append(self.value(module, element, local, depth + 1))
            return {ast.List: list, ast.Tuple: tuple, ast.Set: set}[type(node)](items)
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            return self.value(module, node.left, local, depth + 1) + self.value(module, node.right, local, depth + 1)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and not node.keywords:
            convert = {"list": list, "tuple": tuple, "set": set, "frozenset": frozenset, "sorted": sorted}
            if node.func.id in convert and len(node.args) <= 1:
                args = [self.value(module, arg, local, depth + 1) for arg in node.args]
                return convert[node.func.id](*args)
        if isinstance(node, ast.Name):
            if node.id in local:
                return self.value(module, local[node.id], {}, depth + 1)
            bound = self.wheel.lookup(module, node.id)
            if bound is not None and isinstance(bound[1], ast.expr):
                mutations = self.wheel.mutated(bound[0], node.id)
                if mutations:
                    self.notes.append(
                        f"{node.id} ({self.wheel.path(bound[0])}) is the list the wheel ships; "
                        f"it may be extended at runtime: {'; '.join(mutations)}"
                    )
                return self.value(bound[0], bound[1], {}, depth + 1)
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            bound = self.wheel.lookup(module, node.value.id)
            if bound is not None and isinstance(bound[1], ast.ClassDef):
                body = _class_assignments(bound[1])
                if node.attr in body:
                    return self.value(bound[0], body[node.attr], body, depth + 1)
        raise Dynamic(ast.unparse(node))


def _class_assignments(cls: ast.ClassDef) -> dict[str, ast.expr]:
    found: dict[str, ast.expr] = {}
    for node in cls.body:
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    found[target.id] = node.value
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            found[node.target.id] = node.value
    return found


def _head(node: ast.expr) -> str:
    """``typing.Optional[X]`` -> "Optional"; ``List`` -> "List"."""
    target = node.value if isinstance(node, ast.Subscript) else node
    return ast.unparse(target).rsplit(".", 1)[-1]


def _elements(node: ast.Subscript) -> list[ast.expr]:
    return list(node.slice.elts) if isinstance(node.slice, ast.Tuple) else [node.slice]


class Types:
    """The parts of ``add_cli_args_from_dataclass``'s type dispatch, over annotation ASTs."""

    def __init__(self, wheel: Wheel, evaluator: Evaluator) -> None:
        self.wheel = wheel
        self.evaluator = evaluator

    def _alias(self, module: str, node: ast.expr) -> tuple[str, ast.expr]:
        """Follow ``Name = <type expression>`` aliases (not classes)."""
        for _ in range(8):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                node = ast.parse(node.value, mode="eval").body
                continue
            if not isinstance(node, ast.Name) or node.id in ("bool", "int", "float", "str", "list", "List", "None"):
                break
            bound = self.wheel.lookup(module, node.id)
            if bound is None or not isinstance(bound[1], ast.Subscript | ast.BinOp | ast.Name):
                break
            module, node = bound[0], bound[1]
        return module, node

    def members(self, module: str, node: ast.expr) -> list[tuple[str, ast.expr]]:
        """A union's members, flattened (``Optional``, ``Union``, ``X | Y``)."""
        module, node = self._alias(module, node)
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
            return self.members(module, node.left) + self.members(module, node.right)
        if isinstance(node, ast.Subscript) and _head(node) == "Optional":
            return [*self.members(module, _elements(node)[0]), (module, ast.Constant(None))]
        if isinstance(node, ast.Subscript) and _head(node) == "Union":
            return [member for element in _elements(node) for member in self.members(module, element)]
        return [(module, node)]

    def inner(self, module: str, node: ast.expr) -> tuple[str, ast.expr]:
        """``_unwrap_optional``: ``X | None`` -> X; a union of several types stays as it is."""
        members = self.members(module, node)
        kept = [
            (m, n)
            for m, n in members
            if not (isinstance(n, ast.Constant) and n.value is None)
            and not (isinstance(n, ast.Name) and n.id == "NoneType")
        ]
        return kept[0] if len(kept) == 1 else (module, ast.Name("Union"))

    def literal(self, module: str, node: ast.expr) -> list | None:
        if isinstance(node, ast.Subscript) and _head(node) == "Literal":
            return [self.evaluator.value(module, element) for element in _elements(node)]
        return None

    @staticmethod
    def is_list(node: ast.expr) -> bool:
        return (isinstance(node, ast.Subscript) and _head(node) in ("List", "list")) or (
            isinstance(node, ast.Name | ast.Attribute) and _head(node) == "List"
        )

    @staticmethod
    def type_name(node: ast.expr) -> str:
        """``_infer_type_func``: int, float and str are themselves; any other type parses as str."""
        name = ast.unparse(node) if isinstance(node, ast.Name) else ""
        return name if name in ("int", "float", "str") else "str"


def _arg_metadata(annotation: ast.expr) -> tuple[ast.expr, dict[str, ast.expr]] | None:
    """(inner type, Arg keywords) of ``A[T, "help"]`` / ``A[T, Arg(...)]`` (``_unwrap_annotated``), else None."""
    if not (isinstance(annotation, ast.Subscript) and _head(annotation) in ("A", "Annotated")):
        return None
    elements = _elements(annotation)
    for extra in elements[1:]:
        if isinstance(extra, ast.Call) and ast.unparse(extra.func).rsplit(".", 1)[-1] == "Arg":
            return elements[0], {keyword.arg: keyword.value for keyword in extra.keywords if keyword.arg}
        if isinstance(extra, ast.Constant | ast.JoinedStr | ast.BinOp) and not (
            isinstance(extra, ast.Constant) and not isinstance(extra.value, str)
        ):
            return elements[0], {"help": extra}
    return None


def _choices_list(values) -> list[str]:
    return sorted({str(value) for value in values if value is not None})


class Extractor:
    def __init__(self, wheel: zipfile.ZipFile) -> None:
        self.wheel = Wheel(wheel)
        self.evaluator = Evaluator(self.wheel)
        self.types = Types(self.wheel, self.evaluator)
        self.arguments: list[dict] = []

    # -- values -------------------------------------------------------------------------------------------------

    def _choices(self, module: str, node: ast.expr | None, local: dict | None = None, why: str = "") -> dict:
        """{"choices": [...]} or {"choices": None, "note": ...}, with any note about runtime extension."""
        if node is None:
            return {"choices": None}
        self.evaluator.notes = []
        try:
            values = self.evaluator.value(module, node, local)
        except Dynamic:
            return {"choices": None, "note": f"choices computed when the parser is built: {why}{ast.unparse(node)}"}
        entry: dict = {"choices": _choices_list(values) if values else None}
        if self.evaluator.notes:
            entry["note"] = "; ".join(dict.fromkeys(self.evaluator.notes))
        return entry

    def _constant(self, module: str, node: ast.expr | None, default=None):
        if node is None:
            return default
        try:
            return self.evaluator.value(module, node)
        except Dynamic:
            return default

    def _action_nargs(self, module: str, action: ast.expr) -> tuple[str, object]:
        """(action name, nargs) for an action class: its ``__init__``'s ``nargs`` default, if any."""
        name = ast.unparse(action)
        if isinstance(action, ast.Constant):
            return str(action.value), {"store_true": 0, "store_false": 0, "store_const": 0, "count": 0}.get(
                action.value
            )
        bound = self.wheel.lookup(module, name) if isinstance(action, ast.Name) else None
        nargs = None
        if bound is not None and isinstance(bound[1], ast.ClassDef):
            for node in bound[1].body:
                if isinstance(node, ast.FunctionDef) and node.name == "__init__":
                    arguments = node.args
                    positional = arguments.posonlyargs + arguments.args
                    defaults = dict(
                        zip(
                            [a.arg for a in positional[len(positional) - len(arguments.defaults) :]],
                            arguments.defaults,
                            strict=True,
                        )
                    )
                    defaults.update(
                        {
                            a.arg: d
                            for a, d in zip(arguments.kwonlyargs, arguments.kw_defaults, strict=True)
                            if d is not None
                        }
                    )
                    if "nargs" in defaults:
                        nargs = self._constant(bound[0], defaults["nargs"])
        return name.rsplit(".", 1)[-1], nargs

    # -- recording ----------------------------------------------------------------------------------------------

    def _record(self, names: list[str], entry: dict, source: str) -> None:
        longs = [name for name in names if name.startswith("--")]
        if not longs:
            return
        kind = entry.pop("kind")
        if kind == "boolean_optional":  # argparse.BooleanOptionalAction adds --no-<name> for each --<name>
            longs = longs + [f"--no-{name[2:]}" for name in longs]
        ordered: dict = {"source": source, "names": longs, "kind": kind}
        for key in ("nargs", "type", "choices", "required", "action", "note"):
            if key in entry and (entry[key] is not None or key == "choices"):
                ordered[key] = entry[key]
        ordered.setdefault("choices", None)
        self.arguments.append(ordered)

    def _kind(self, nargs) -> dict:
        return {"kind": "store_true"} if nargs == 0 else {"kind": "value", "nargs": nargs}

    # -- ServerArgs fields --------------------------------------------------------------------------------------

    def fields(self) -> None:
        server_args = self.wheel.module(SERVER_ARGS)
        namespaces = next(
            node.value
            for node in server_args.body
            if isinstance(node, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == "_INPUT_NAMESPACES" for t in node.targets)
        )
        for element in namespaces.elts:
            module, cls = self.wheel.lookup(SERVER_ARGS, element.id)
            for node in cls.body:
                if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                    self._field(module, cls.name, node)

    def _field(self, module: str, cls_name: str, node: ast.AnnAssign) -> None:
        metadata = _arg_metadata(node.annotation)
        if metadata is None:
            return  # not an A[...] field: no CLI flag (add_cli_args_from_dataclass skips it)
        raw_type, arg = metadata
        if self._constant(module, arg.get("no_cli"), False):
            return
        name = node.target.id
        cli_name = self._constant(module, arg.get("cli_name")) or "--" + name.replace("_", "-")
        aliases = self._constant(module, arg.get("aliases")) or []
        names = [cli_name, *aliases]
        source = f"{cls_name}.{name} ({self.wheel.path(module)})"
        has_default = node.value is not None
        type_parser = arg.get("type_parser")
        parser_name = ast.unparse(type_parser) if type_parser is not None else None
        arg_choices = arg.get("choices")

        if "action" in arg:
            action, nargs = self._action_nargs(module, arg["action"])
            kwargs = arg.get("action_kwargs")
            extra: dict[str, ast.expr] = {}
            if isinstance(kwargs, ast.Dict):
                extra = {
                    k.value: v for k, v in zip(kwargs.keys, kwargs.values, strict=True) if isinstance(k, ast.Constant)
                }
            if "nargs" in extra:
                nargs = self._constant(module, extra["nargs"])
            if action == "BooleanOptionalAction":
                entry = {"kind": "boolean_optional"}
            else:
                entry = {**self._kind(nargs), "action": action}
                if entry["kind"] == "value" and "type" in extra:
                    entry["type"] = ast.unparse(extra["type"])
            entry.update(self._choices(module, extra.get("choices")))
            self._record(names, entry, source)
            return

        inner_module, inner = self.types.inner(module, raw_type)
        literal = self.types.literal(inner_module, inner)
        if literal is not None:
            entry = {"kind": "value"}
            if arg_choices is not None:
                entry.update(self._choices(module, arg_choices))
            else:
                entry["choices"] = _choices_list(literal)
            first = type(literal[0]).__name__ if literal else "str"
            entry["type"] = parser_name or (first if first in ("int", "float", "str") else "str")
            self._record(names, entry, source)
            return
        if self.types.is_list(inner) and type_parser is None:
            element = _elements(inner)[0] if isinstance(inner, ast.Subscript) else ast.Name("str")
            entry = {"kind": "value", "nargs": self._constant(module, arg.get("nargs")) or "+"}
            entry["type"] = self.types.type_name(element)
            entry.update(self._choices(module, arg_choices))
            self._record(names, entry, source)
            return
        if isinstance(inner, ast.Name) and inner.id == "bool":
            self._record(names, {"kind": "store_true"}, source)
            return
        entry = {"kind": "value", "type": parser_name or self.types.type_name(inner)}
        entry["nargs"] = self._constant(module, arg.get("nargs"))
        entry.update(self._choices(module, arg_choices))
        required = self._constant(module, arg.get("required"))
        if required is True or (required is None and not has_default):
            entry["required"] = True
        self._record(names, entry, source)

    # -- flags added by hand in ServerArgs.add_cli_args ---------------------------------------------------------

    def manual(self) -> None:
        # ServerArgs is rebound to a msgspec.defstruct(...) of the class later on: take the class statement.
        cls = next(
            n for n in self.wheel.module(SERVER_ARGS).body if isinstance(n, ast.ClassDef) and n.name == "ServerArgs"
        )
        function = next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "add_cli_args")
        local: dict[str, ast.expr] = {}
        for statement in function.body:
            if isinstance(statement, ast.Assign) and len(statement.targets) == 1:
                target = statement.targets[0]
                if isinstance(target, ast.Name):
                    local[target.id] = statement.value
        # Locals changed after assignment (e.g. `choices.add(...)` under an `if`) are not static.
        changed: dict[str, list[str]] = {}
        for statement in function.body:
            for sub in ast.walk(statement):
                if (
                    isinstance(sub, ast.Attribute)
                    and sub.attr in MUTATORS
                    and isinstance(sub.value, ast.Name)
                    and sub.value.id in local
                ):
                    changed.setdefault(sub.value.id, []).append(" ".join(ast.unparse(statement).split()))
                    break
        path = self.wheel.path(SERVER_ARGS)
        for call in ast.walk(function):
            if not (
                isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr == "add_argument"
            ):
                continue
            names = [arg.value for arg in call.args if isinstance(arg, ast.Constant) and isinstance(arg.value, str)]
            keywords = {keyword.arg: keyword.value for keyword in call.keywords if keyword.arg}
            entry: dict
            if "action" in keywords:
                action, nargs = self._action_nargs(SERVER_ARGS, keywords["action"])
                if "nargs" in keywords:
                    nargs = self._constant(SERVER_ARGS, keywords["nargs"])
                if action == "BooleanOptionalAction":
                    entry = {"kind": "boolean_optional"}
                else:
                    entry = self._kind(nargs)
                    if action != "store_true":
                        entry["action"] = action
            else:
                entry = {"kind": "value", "nargs": self._constant(SERVER_ARGS, keywords.get("nargs"))}
            if entry["kind"] == "value":
                entry["type"] = ast.unparse(keywords["type"]) if "type" in keywords else "str"
            choices = keywords.get("choices")
            used = sorted(n.id for n in ast.walk(choices) if isinstance(n, ast.Name)) if choices is not None else []
            dynamic = [name for name in used if name in changed]
            if dynamic:
                where = "; ".join(
                    f"{name} = {ast.unparse(local[name])}, then {' '.join(changed[name])}" for name in dynamic
                )
                entry.update({"choices": None, "note": f"choices computed when the parser is built: {where}"})
            else:
                why = "".join(f"{name} = {ast.unparse(local[name])}; " for name in used if name in local)
                entry.update(self._choices(SERVER_ARGS, choices, local, why))
            if self._constant(SERVER_ARGS, keywords.get("required")) is True:
                entry["required"] = True
            self._record(names, entry, f"ServerArgs.add_cli_args ({path}:{call.lineno})")


def extract(wheel_path: Path) -> dict:
    """The flag table of the wheel's `launch_server`: ({long flag: entry}, number of distinct arguments)."""
    with zipfile.ZipFile(wheel_path) as wheel:
        extractor = Extractor(wheel)
        extractor.fields()
        extractor.manual()
    flags: dict[str, dict] = {}
    for entry in extractor.arguments:
        for name in entry["names"]:
            if name[2:] in flags:
                raise SystemExit(f"{name} registered twice: {flags[name[2:]]['source']} and {entry['source']}")
            flags[name[2:]] = entry
    return dict(sorted(flags.items()))


if __name__ == "__main__":
    from wheel_flags import main

    sys.exit(main("sglang", "SGLang", "0.5.23", extract, __doc__))
