"""Set top-level keys of a deployment YAML file in its text, keeping every other key and every comment.

Re-dumping a parsed file would drop the comments a plan's author wrote next to each assumption, so
the new values are spliced into the text at the positions PyYAML's composer reports: a scalar's
value is replaced where it stands (its trailing comment stays), a mapping is rewritten at the end.
"""

from __future__ import annotations

from typing import Any

import yaml

from quotacalc.errors import QuotacalcError


def _flow(value: Any) -> str:
    """One YAML scalar as PyYAML writes it (``1.0e-05``, not ``1e-05``, which YAML 1.1 reads as text)."""
    text = yaml.safe_dump(value, default_flow_style=True, allow_unicode=True, width=10_000)
    return text.removesuffix("\n").removesuffix("\n...").strip()


def _block(key: str, value: dict[str, Any]) -> str:
    return yaml.safe_dump({key: value}, default_flow_style=False, sort_keys=False, allow_unicode=True, width=10_000)


def _entry_end(text: str, end: int) -> int:
    """Pull a block's end back over the blank lines and unindented comments before the next key: they
    belong to that key, not to the block being replaced."""
    lines = text[:end].splitlines(keepends=True)
    while lines and (not lines[-1].strip() or lines[-1].startswith("#")):
        end -= len(lines.pop())
    return end


def set_top_level_keys(text: str, values: dict[str, Any], *, source: str) -> str:
    """``text`` with each key of ``values`` set (added when absent); everything else byte for byte."""
    try:
        root = yaml.compose(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)) if text.strip() else None
    except yaml.YAMLError as error:
        raise QuotacalcError(f"malformed YAML: {getattr(error, 'problem', None) or error}", source=source) from None
    if root is None:
        entries: dict[str, tuple[yaml.Node, yaml.Node]] = {}
    elif isinstance(root, yaml.MappingNode):
        entries = {key.value: (key, value) for key, value in root.value if isinstance(key, yaml.ScalarNode)}
    else:
        raise QuotacalcError("expected a mapping of deployment keys", source=source)
    edits: list[tuple[int, int, str]] = []  # (start, end, replacement), applied from the end
    appended: list[str] = []
    for key, value in values.items():
        structured = isinstance(value, dict)
        if key in entries:
            key_node, value_node = entries[key]
            # (libyaml's composer says '' where PyYAML's says None for a plain scalar.)
            if not structured and isinstance(value_node, yaml.ScalarNode) and value_node.style not in ("|", ">"):
                edits.append((value_node.start_mark.index, value_node.end_mark.index, _flow(value)))
                continue
            # A mapping (or a block scalar) is removed here and written again at the end.
            start = text.rfind("\n", 0, key_node.start_mark.index) + 1
            end = value_node.end_mark.index
            line_end = text.find("\n", end)
            rest = text[end:] if line_end < 0 else text[end:line_end]
            if not rest.strip() or rest.strip().startswith("#"):  # a flow mapping's line: take the whole line
                end = len(text) if line_end < 0 else line_end + 1
            edits.append((start, _entry_end(text, end), ""))
        appended.append(_block(key, value) if structured else f"{key}: {_flow(value)}\n")
    for start, end, replacement in sorted(edits, reverse=True):
        text = text[:start] + replacement + text[end:]
    if appended:
        text = text.rstrip("\n") + "\n" if text.strip() else ""
        text += "".join(appended)
    return text
