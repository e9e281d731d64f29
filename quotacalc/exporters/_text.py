"""Deterministic YAML and JSON text for the target exporters (insertion order kept, no timestamps)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

import yaml


class _Dumper(yaml.SafeDumper):
    """SafeDumper that indents list items under their key, as kubectl and decK print them."""

    def increase_indent(self, flow: bool = False, indentless: bool = False) -> None:
        super().increase_indent(flow, False)


def yaml_text(data: Any, header: str = "") -> str:
    """One YAML document; ``header`` lines become comments at the top."""
    body = yaml.dump(data, Dumper=_Dumper, sort_keys=False, default_flow_style=False, allow_unicode=True, width=4096)
    return _comment(header) + body


def yaml_documents(documents: Iterable[Mapping[str, Any]], header: str = "") -> str:
    """Several YAML documents separated by ``---`` (how Kubernetes manifests are applied together)."""
    parts = [yaml_text(document) for document in documents]
    return _comment(header) + "---\n".join(parts)


def json_text(data: Any) -> str:
    """Strict, indented JSON (no NaN or Infinity) with a trailing newline."""
    return json.dumps(data, indent=2, allow_nan=False, ensure_ascii=False) + "\n"


def _comment(header: str) -> str:
    return "".join(f"# {line}\n" if line else "#\n" for line in header.splitlines())
