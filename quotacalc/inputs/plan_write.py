"""Set top-level keys of a deployment YAML file in its text, keeping every other key and every comment.

Re-dumping a parsed file would drop the comments a plan's author wrote next to each assumption, so
the new values are spliced into the text at the positions PyYAML's composer reports: a scalar's
value is replaced where it stands (its trailing comment stays), a mapping is rewritten at the end.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from quotacalc.errors import QuotacalcError


def plan_text(path: str | Path) -> str:
    """A plan's text with its line ends as they are ('\\r\\n' kept: the rest of the file stays byte for byte)."""
    with open(path, encoding="utf-8", newline="") as handle:
        return handle.read()


def with_line_ends(updated: str, original: str) -> str:
    """The edited text with the original file's line ends: the edits insert '\\n', a CRLF file keeps CRLF."""
    return updated.replace("\n", "\r\n") if "\r\n" in original else updated


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


def _line_after(text: str, index: int) -> int:
    """Where a line may be inserted after the value ending at ``index``. A block collection's end mark is
    the next token's position, after its indentation: the line start, pulled back over the blank and
    comment lines before it (they belong to what follows)."""
    line_start = text.rfind("\n", 0, index) + 1
    if text[line_start:index].strip():
        line_end = text.find("\n", index)
        return len(text) if line_end < 0 else line_end + 1
    lines = text[:line_start].splitlines(keepends=True)
    while lines and (not lines[-1].strip() or lines[-1].lstrip().startswith("#")):
        line_start -= len(lines.pop())
    return line_start


def _shared_nodes(root: yaml.Node) -> set[int]:
    """Ids of the nodes a document reaches more than once (an anchor and its aliases are one node)."""
    seen: set[int] = set()
    shared: set[int] = set()
    stack = [root]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            shared.add(id(node))
            continue
        seen.add(id(node))
        if isinstance(node, yaml.MappingNode):
            stack.extend(item for pair in node.value for item in pair)
        elif isinstance(node, yaml.SequenceNode):
            stack.extend(node.value)
    return shared


def set_pool_keys(
    text: str, pool_index: int, deployment: dict[str, Any], calibration: dict[str, Any], *, source: str
) -> str:
    """A platform plan's ``text`` with keys set in ``pools[pool_index].deployment`` (added when absent)
    and its ``calibration`` section replaced; every other key and comment byte for byte.

    A scalar is replaced where it stands; a new deployment key joins the pool's mapping in its own
    style (flow ``{batch: 128, mfu: 0.5}`` or block); the calibration is written at the end of the pool.
    """
    if text and not text.endswith("\n"):
        text += "\n"  # lines are inserted after the last one
    try:
        root = yaml.compose(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except yaml.YAMLError as error:
        raise QuotacalcError(f"malformed YAML: {getattr(error, 'problem', None) or error}", source=source) from None

    def entries(node: yaml.Node) -> dict[str, tuple[yaml.Node, yaml.Node]]:
        return {key.value: (key, value) for key, value in node.value if isinstance(key, yaml.ScalarNode)}

    pools = entries(root).get("pools", (None, None))[1] if isinstance(root, yaml.MappingNode) else None
    if not isinstance(pools, yaml.SequenceNode) or not 0 <= pool_index < len(pools.value):
        raise QuotacalcError("no such pool in the file", source=source, field=f"pools[{pool_index}]")
    pool = pools.value[pool_index]
    if not isinstance(pool, yaml.MappingNode) or not pool.value:
        raise QuotacalcError("expected a mapping (name, replicas, ...)", source=source, field=f"pools[{pool_index}]")
    own = entries(pool)
    shared = _shared_nodes(root)
    indent = " " * pool.value[0][0].start_mark.column
    edits: list[tuple[int, int, str]] = []  # (start, end, replacement); insertions at one place keep their order
    mapping = own.get("deployment", (None, None))[1]
    new: dict[str, Any] = {}
    if mapping is not None and not isinstance(mapping, yaml.MappingNode):  # 'deployment:' left empty
        start = mapping.start_mark.index
        edits.append((start, mapping.end_mark.index, (" " if text[start - 1] == ":" else "") + _flow(deployment)))
    elif mapping is not None:
        present = entries(mapping)
        # Text written into an anchored node changes every alias of it: another pool's deployment too.
        touched = [mapping] + [present[key][1] for key in deployment if key in present]
        if any(id(node) in shared for node in touched):
            raise QuotacalcError(
                "is shared with another part of the plan through a YAML anchor: calibrating it would change both",
                source=source,
                field=f"pools[{pool_index}].deployment",
                fix="write this pool's deployment out (or merge the anchor with <<: and its own keys), then calibrate",
            )
        for key, value in deployment.items():
            node = present.get(key, (None, None))[1]
            if isinstance(node, yaml.ScalarNode) and node.style not in ("|", ">"):
                edits.append((node.start_mark.index, node.end_mark.index, _flow(value)))
            else:
                new[key] = value
        if new and mapping.flow_style:
            close = text.rfind("}", 0, mapping.end_mark.index)
            pairs = ", ".join(f"{key}: {_flow(value)}" for key, value in new.items())
            edits.append((close, close, (", " if mapping.value else "") + pairs))
        elif new:
            key_indent = " " * mapping.value[0][0].start_mark.column
            at = _line_after(text, mapping.value[-1][1].end_mark.index)
            lines = "".join(f"{key_indent}{key}: {_flow(value)}\n" for key, value in new.items())
            edits.append((at, at, lines))
    elif deployment:
        at = _line_after(text, pool.value[-1][1].end_mark.index)
        edits.append((at, at, f"{indent}deployment: {_flow(deployment)}\n"))
    if "calibration" in own:
        key_node, value_node = own["calibration"]
        start = text.rfind("\n", 0, key_node.start_mark.index) + 1
        end = _line_after(text, value_node.end_mark.index)
        edits.append((start, end, ""))
    last = [value for key, value in pool.value if key.value != "calibration"][-1]
    at = _line_after(text, last.end_mark.index)
    block = "".join(f"{indent}{line}\n" for line in _block("calibration", calibration).splitlines())
    edits.append((at, at, block))
    # From the end, so earlier positions hold; of two insertions at one place the first added comes first.
    ordered = sorted(enumerate(edits), key=lambda item: (item[1][0], item[1][1], item[0]), reverse=True)
    for _, (start, end, replacement) in ordered:
        text = text[:start] + replacement + text[end:]
    return text
