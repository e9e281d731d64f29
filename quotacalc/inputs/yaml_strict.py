"""YAML loading that rejects duplicate keys, and reports malformed files in one line."""

from __future__ import annotations

import yaml

from quotacalc.errors import QuotacalcError

# libyaml's parser is ~7x faster than PyYAML's pure-Python one; the constructor stays Python.
_BaseLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _StrictLoader(_BaseLoader):
    """A safe loader whose mappings refuse duplicate keys (PyYAML silently keeps the last)."""


def _construct_mapping(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    loader.flatten_mapping(node)
    mapping: dict = {}
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in mapping:
            line = key_node.start_mark.line + 1
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key '{key}' (line {line}); keep one", key_node.start_mark
            )
        mapping[key] = loader.construct_object(value_node, deep=deep)
    return mapping


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def load_yaml_text(text: str, *, source: str) -> object:
    """Parse YAML text strictly; any problem becomes a one-line error naming the source."""
    try:
        return yaml.load(text, Loader=_StrictLoader)
    except yaml.constructor.ConstructorError as error:
        raise QuotacalcError(error.problem or str(error), source=source) from None
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(error, "problem", None) or "not valid YAML"
        raise QuotacalcError(f"malformed YAML{where}: {problem}", source=source) from None
