"""YAML loading that rejects duplicate and non-string keys, and reports malformed files in one line."""

from __future__ import annotations

import re
from typing import Any

import yaml

from quotacalc.errors import QuotacalcError
from quotacalc.inputs.text_file import MAX_TEXT_BYTES, read_text_file

__all__ = ["MAX_YAML_BYTES", "load_yaml_text", "read_text_file"]

# libyaml's parser is ~7x faster than PyYAML's pure-Python one; the constructor stays Python.
_BaseLoader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

#: A deployment or plan file is a few kB; past this, reading it is a mistake (or an attack).
MAX_YAML_BYTES = MAX_TEXT_BYTES


class _StrictLoader(_BaseLoader):
    """A safe loader whose mappings refuse duplicate keys (PyYAML silently keeps the last) and keys that
    are not strings (a list or mapping as a key, or ``1:``, ``yes:`` and ``null:``, which YAML reads as
    numbers, booleans and nothing). Merge keys (``<<: *a``, ``<<: [*a, *b]``) follow https://yaml.org/type/merge.html:
    a key written in the mapping overrides a merged one, and an earlier merged mapping overrides a later one."""


_MERGE_TAG = "tag:yaml.org,2002:merge"
_VALUE_TAG = "tag:yaml.org,2002:value"  # a bare '=' key, which PyYAML reads as the string '='


def _error(problem: str, node: yaml.Node) -> yaml.constructor.ConstructorError:
    return yaml.constructor.ConstructorError(None, None, problem, node.start_mark)


def _merged_mappings(loader: _StrictLoader, key_node: yaml.Node, value_node: yaml.Node) -> list[dict]:
    """The mappings a ``<<`` key merges, first (strongest) first."""
    line = key_node.start_mark.line + 1
    nodes = value_node.value if isinstance(value_node, yaml.SequenceNode) else [value_node]
    for node in nodes:
        if not isinstance(node, yaml.MappingNode):
            kind = "list" if isinstance(node, yaml.SequenceNode) else "plain value"
            raise _error(f"'<<' (line {line}) merges a mapping or a list of mappings, not a {kind}", node)
    return [loader.construct_object(node) for node in nodes]


def _construct_mapping(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    explicit: dict = {}
    merged: dict = {}
    merging = False
    for key_node, value_node in node.value:
        line = key_node.start_mark.line + 1
        if key_node.tag == _MERGE_TAG:
            if merging:
                raise _error(
                    f"duplicate key '<<' (line {line}); merge several mappings with one <<: [*a, *b]", key_node
                )
            merging = True
            for mapping in _merged_mappings(loader, key_node, value_node):
                for key, value in mapping.items():
                    merged.setdefault(key, value)  # an earlier mapping in the list wins
            continue
        if not isinstance(key_node, yaml.ScalarNode):
            kind = "list" if isinstance(key_node, yaml.SequenceNode) else "mapping"
            raise _error(f"a {kind} cannot be a key (line {line}); keys are names", key_node)
        if key_node.tag == _VALUE_TAG:
            key = loader.construct_scalar(key_node)
        else:
            key = loader.construct_object(key_node, deep=deep)
        if not isinstance(key, str):
            raise _error(
                f"key {key_node.value!r} (line {line}) is read as {type(key).__name__}, not a name; quote it", key_node
            )
        if key in explicit:
            raise _error(f"duplicate key '{key}' (line {line}); keep one", key_node)
        explicit[key] = loader.construct_object(value_node, deep=deep)
    if not merged:
        return explicit
    merged.update(explicit)  # a key written in the mapping overrides a merged one
    return merged


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)

# Numbers as YAML 1.2's core schema reads them, not PyYAML's YAML 1.1: there `replicas: 010` is 8 (octal),
# `1:30` is 90 (base 60) and `6_0` is 60, silently; in YAML 1.2 010 is 10, and 1:30 and 6_0 are strings, which a
# number field then refuses. Octal and hexadecimal keep their 1.2 prefixes (0o17, 0x1F).
_INT_TAG = "tag:yaml.org,2002:int"
_FLOAT_TAG = "tag:yaml.org,2002:float"
# The loader's own copy of PyYAML's resolvers, without its int and float rules (SafeLoader keeps them).
_StrictLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag not in (_INT_TAG, _FLOAT_TAG)]
    for first, resolvers in _StrictLoader.yaml_implicit_resolvers.items()
}
_StrictLoader.add_implicit_resolver(
    _INT_TAG, re.compile(r"^(?:[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)$"), list("-+0123456789")
)


#: Digits Python converts to an int (its default limit); a longer number is refused with its line here, since no
#: key can then say what was wrong with it (a shorter one is refused at its key, as out of range).
MAX_INT_DIGITS = 4300


def _construct_int(loader: _StrictLoader, node: yaml.ScalarNode) -> int:
    text = loader.construct_scalar(node)
    if len(text) > MAX_INT_DIGITS:
        line = node.start_mark.line + 1
        raise _error(f"a number of {len(text):,} digits (line {line}) is far out of range", node)
    if text.startswith(("0o", "0x")):
        return int(text[2:], 8 if text[1] == "o" else 16)
    return int(text, 10)  # a leading zero is decimal (YAML 1.2), not octal


_StrictLoader.add_constructor(_INT_TAG, _construct_int)
# A whole mantissa to a positive power (1e3, 2E6) is a whole number, so a count (context: 1e3) takes it: tried
# before the float rule below (PyYAML tries a first character's resolvers in the order they were added).
_WHOLE_TAG = "tag:quotacalc,2026:whole"
_StrictLoader.add_implicit_resolver(_WHOLE_TAG, re.compile(r"^[-+]?[0-9]+[eE]\+?[0-9]{1,3}$"), list("-+0123456789"))


def _construct_whole(loader: _StrictLoader, node: yaml.ScalarNode) -> int:
    from decimal import Decimal

    return int(Decimal(loader.construct_scalar(node)))  # exact: float(1e30) is not 10**30


_StrictLoader.add_constructor(_WHOLE_TAG, _construct_whole)

# YAML 1.2 reads 1e4 and 2E-3 as numbers; PyYAML (YAML 1.1) wants a dot (1.0e4) and reads them as strings, which a
# number field would then refuse. Unquoted, they are numbers here too; quoted ('1e4'), still a string.
_StrictLoader.add_implicit_resolver(
    _FLOAT_TAG,
    re.compile(
        r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"
    ),
    list("-+.0123456789"),
)


#: YAML 1.1 types beyond plain scalars, lists and mappings, which SafeLoader builds and no input of quotacalc means:
#: a set (``!!set {a, b}``) would be iterated in Python's hash order, which changes from run to run
#: (PYTHONHASHSEED), so a list made from it (public prefixes) and every file generated from that would too.
_REFUSED_TAGS = {
    "tag:yaml.org,2002:set": "a set, whose order changes from run to run; write a list",
    "tag:yaml.org,2002:omap": "an ordered map; write a mapping",
    "tag:yaml.org,2002:pairs": "a list of pairs; write a mapping",
    "tag:yaml.org,2002:binary": "binary data; write text",
}


def _refuse_tag(loader: _StrictLoader, node: yaml.Node) -> None:
    line = node.start_mark.line + 1
    short = node.tag.replace("tag:yaml.org,2002:", "!!")
    raise _error(f"{short} (line {line}) is {_REFUSED_TAGS[node.tag]}", node)


for _tag in _REFUSED_TAGS:
    _StrictLoader.add_constructor(_tag, _refuse_tag)


#: How many nodes aliases may add to a document, each use of an anchor counting its whole subtree again. A plan
#: with 10,000 tenants that each merge an anchored mapping adds ~100,000; nine nested lists of nine aliases (a
#: 700-byte "billion laughs") add 435 million, which every reader after the parser would walk one by one.
MAX_ALIAS_NODES = 1_000_000


class _AliasBomb(Exception):
    pass


class _SelfReference(Exception):
    pass


def _check_aliases(root: yaml.Node) -> None:
    """Refuse a node graph that holds itself (``x: &a [*a]``), or whose aliases expand it by more than
    ``MAX_ALIAS_NODES`` nodes. One depth-first walk without recursion over the distinct nodes: a node's expanded
    size (itself and its children's expanded sizes) is worked out once, however many aliases reach it."""
    size: dict[int, int] = {}  # id(node) -> nodes in its subtree, written out
    open_ids: set[int] = set()  # on the current path
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, leaving = stack.pop()
        key = id(node)
        if leaving:
            children = (
                (item for pair in node.value for item in pair) if isinstance(node, yaml.MappingNode) else node.value
            )
            total = 1 + sum(size[id(child)] for child in children)
            open_ids.discard(key)
            size[key] = total
            # Every node not yet walked is outside this subtree and counts at least once in the document, so the
            # aliases add at least ``total - len(size)`` nodes: stop here, before the counts grow without bound.
            if total - len(size) > MAX_ALIAS_NODES:
                raise _AliasBomb
            continue
        if key in size:
            continue
        if key in open_ids:
            raise _SelfReference
        if isinstance(node, yaml.ScalarNode):
            size[key] = 1
            continue
        open_ids.add(key)
        stack.append((node, True))
        if isinstance(node, yaml.MappingNode):
            stack.extend((item, False) for pair in node.value for item in pair)
        else:
            stack.extend((child, False) for child in node.value)


#: Deeper YAML is refused before it is composed: libyaml's composer recurses in C, and at some tens of thousands
#: of levels it overflows the thread's stack and kills the interpreter (no RecursionError to catch). No plan,
#: scenario or report nests beyond a dozen levels.
MAX_YAML_DEPTH = 256
#: Each level of nesting needs one of these indicators, so a text with fewer of them cannot nest too deep.
_NESTING_INDICATORS = "[{-?:"


def _too_deep(text: str) -> bool:
    """Whether the text nests collections beyond ``MAX_YAML_DEPTH``, read from libyaml's event stream (its parser
    keeps its own stack, so this pass is safe at any depth); a text with too few indicators is not parsed here."""
    if sum(text.count(indicator) for indicator in _NESTING_INDICATORS) <= MAX_YAML_DEPTH:
        return False
    depth = 0
    opening = (yaml.SequenceStartEvent, yaml.MappingStartEvent)
    closing = (yaml.SequenceEndEvent, yaml.MappingEndEvent)
    try:
        for event in yaml.parse(text, Loader=_BaseLoader):
            if isinstance(event, opening):
                depth += 1
                if depth > MAX_YAML_DEPTH:
                    return True
            elif isinstance(event, closing):
                depth -= 1
    except yaml.YAMLError as error:
        # Some libyaml builds bound the depth themselves ("exceeded maximum nesting depth"): one verdict for all.
        if "nesting depth" in str(error):
            return True
        raise
    return False


def _load(text: str, source: str) -> object:
    if _too_deep(text):
        raise QuotacalcError(f"YAML nested too deeply to read (more than {MAX_YAML_DEPTH} levels)", source=source)
    loader = _StrictLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        if "*" in text:  # without an alias, no node is reached twice
            try:
                _check_aliases(node)
            except _AliasBomb:
                raise QuotacalcError(
                    f"too many YAML nodes through aliases (more than {MAX_ALIAS_NODES:,}): is it an alias bomb?",
                    source=source,
                    fix="write the values out, or use fewer nested aliases",
                ) from None
            except _SelfReference:
                raise QuotacalcError(
                    "an alias refers to its own anchor (a structure inside itself)", source=source
                ) from None
        return loader.construct_document(node)
    finally:
        loader.dispose()


def load_yaml_text(text: str, *, source: str) -> object:
    """Parse YAML text strictly; any problem becomes a one-line error naming the source."""
    try:
        return _load(text, source)
    except yaml.constructor.ConstructorError as error:
        problem = error.problem or str(error)
        if problem.startswith("could not determine a constructor for the tag"):
            # The tag itself is not shown: in a file that is not YAML (a .env), it may be part of a secret.
            mark = error.problem_mark
            where = f" (line {mark.line + 1})" if mark else ""
            problem = f"an unknown YAML tag{where}: quotacalc reads plain values, lists and mappings"
        raise QuotacalcError(problem, source=source) from None
    except yaml.reader.ReaderError as error:
        line = text[: error.position].count("\n") + 1
        code = error.character if isinstance(error.character, int) else ord(str(error.character)[:1] or "\0")
        raise QuotacalcError(
            f"malformed YAML at line {line}: control character 0x{code:02x} is not allowed", source=source
        ) from None
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(error, "problem", None) or "not valid YAML"
        raise QuotacalcError(f"malformed YAML{where}: {problem}", source=source) from None
    except RecursionError:
        raise QuotacalcError("YAML nested too deeply to read", source=source) from None
    except (ValueError, OverflowError) as error:  # a date like 2024-13-45, an integer of 5,000 digits
        raise QuotacalcError(f"a value cannot be read: {error}", source=source) from None
