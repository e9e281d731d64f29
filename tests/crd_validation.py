"""Validate Kubernetes manifests against the real CRDs, offline, the way an API server would.

No API server or kubeconform runs here (TARGETS.md), so this does the server's three steps itself:
1. apply the schema's defaults;
2. check the result against the CRD's ``openAPIV3Schema`` with ``jsonschema``: ``nullable`` and
   ``x-kubernetes-int-or-string`` mapped to JSON Schema, unknown fields an error (structural schemas
   prune them; a manifest that relies on pruning is wrong), ``x-kubernetes-preserve-unknown-fields`` honoured;
3. evaluate every ``x-kubernetes-validations`` rule with cel-expr-python (the CEL C++ runtime, whose type
   checks match the API server's cel-go) against ``self`` at the node that declares it.
"""

from __future__ import annotations

import copy
import functools
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema
import yaml
from cel_expr_python import cel
from cel_expr_python.ext.ext_strings import ExtStrings

CRD_DIR = Path(__file__).parent / "targets" / "crds"


@dataclass(frozen=True)
class Crd:
    group: str
    kind: str
    version: str
    schema: dict[str, Any]


@functools.cache
def crds() -> dict[tuple[str, str], Crd]:
    """Every CRD version in tests/targets/crds, keyed by (apiVersion, kind)."""
    found: dict[tuple[str, str], Crd] = {}
    for path in sorted(CRD_DIR.glob("*.yaml")):
        # libyaml's loader where present: the pure-Python one takes seconds on these 100-200 KB files.
        loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
        for document in yaml.load_all(path.read_text(encoding="utf-8"), Loader=loader):
            if not document or document.get("kind") != "CustomResourceDefinition":
                continue
            spec = document["spec"]
            for version in spec["versions"]:
                api_version = f"{spec['group']}/{version['name']}"
                schema = version["schema"]["openAPIV3Schema"]
                found[(api_version, spec["names"]["kind"])] = Crd(
                    spec["group"], spec["names"]["kind"], version["name"], schema
                )
    return found


def to_json_schema(node: dict[str, Any]) -> dict[str, Any]:
    """A structural OpenAPI v3 schema as a JSON Schema (Draft 7) that rejects unknown fields."""
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key == "properties":
            out[key] = {name: to_json_schema(child) for name, child in value.items()}
        elif key == "items" or (key == "additionalProperties" and isinstance(value, dict)):
            out[key] = to_json_schema(value)
        elif key.startswith("x-kubernetes-") or key in ("description", "nullable", "default", "format"):
            continue
        else:
            out[key] = copy.deepcopy(value)
    if node.get("x-kubernetes-int-or-string"):
        out.pop("type", None)
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    if node.get("nullable") and "type" in out:
        out["type"] = [out["type"], "null"]
    closed = "properties" in node and "additionalProperties" not in node
    if closed and not node.get("x-kubernetes-preserve-unknown-fields"):
        out["additionalProperties"] = False
    if node.get("format") == "int32":
        out.setdefault("minimum", -(2**31))
        out.setdefault("maximum", 2**31 - 1)
    return out


def apply_defaults(value: Any, node: dict[str, Any]) -> Any:
    """The value with the schema's defaults filled in where a field is absent (as the API server does)."""
    if isinstance(value, dict):
        result = dict(value)
        for name, child in (node.get("properties") or {}).items():
            if name not in result and "default" in child:
                result[name] = copy.deepcopy(child["default"])
            if name in result:
                result[name] = apply_defaults(result[name], child)
        extra = node.get("additionalProperties")
        if isinstance(extra, dict):
            for name in result:
                if name not in (node.get("properties") or {}):
                    result[name] = apply_defaults(result[name], extra)
        return result
    if isinstance(value, list) and isinstance(node.get("items"), dict):
        return [apply_defaults(item, node["items"]) for item in value]
    return value


@functools.cache
def _cel_env() -> Any:
    # Kubernetes enables CEL's strings extension for CRD rules (upperAscii, ...).
    return cel.NewEnv(variables={"self": cel.Type.DYN}, extensions=[ExtStrings()])


@functools.cache
def compile_rule(rule: str) -> Any:
    """A compiled x-kubernetes-validations rule (``self`` dynamically typed, as in a CRD)."""
    return _cel_env().compile(rule)


def _nodes(value: Any, node: dict[str, Any], path: str) -> Iterator[tuple[Any, dict[str, Any], str]]:
    """Every value of a manifest with the schema node that describes it and its path, parents first."""
    yield value, node, path
    if isinstance(value, dict):
        for name, child in (node.get("properties") or {}).items():
            if name in value:
                yield from _nodes(value[name], child, f"{path}.{name}")
        extra = node.get("additionalProperties")
        if isinstance(extra, dict):
            for name, item in value.items():
                if name not in (node.get("properties") or {}):
                    yield from _nodes(item, extra, f"{path}.{name}")
    elif isinstance(value, list) and isinstance(node.get("items"), dict):
        for index, item in enumerate(value):
            yield from _nodes(item, node["items"], f"{path}[{index}]")


def _rules(value: Any, node: dict[str, Any], path: str) -> Iterator[tuple[str, dict[str, str], Any]]:
    for item, schema, where in _nodes(value, node, path):
        for rule in schema.get("x-kubernetes-validations") or ():
            yield where, rule, item


def _list_type_problems(value: Any, node: dict[str, Any], path: str) -> Iterator[str]:
    """What the API server's list types refuse: two items of a ``map`` list with the same keys, or two equal items
    of a ``set`` (JSON Schema knows neither)."""
    for item, schema, where in _nodes(value, node, path):
        if not isinstance(item, list):
            continue
        kind = schema.get("x-kubernetes-list-type")
        if kind == "map":
            keys = schema.get("x-kubernetes-list-map-keys") or ()
            seen = [tuple(entry.get(key) for key in keys) for entry in item if isinstance(entry, dict)]
            for duplicate in sorted({entry for entry in seen if seen.count(entry) > 1}, key=str):
                yield f"{where}: duplicate entries for key {dict(zip(keys, duplicate, strict=True))}"
        elif kind == "set":
            dumped = [json.dumps(entry, sort_keys=True) for entry in item]
            if len(set(dumped)) != len(dumped):
                yield f"{where}: duplicate entries in a set"


@functools.cache
def _validator(key: tuple[str, str]) -> jsonschema.Draft7Validator:
    return jsonschema.Draft7Validator(to_json_schema(crds()[key].schema))


def validate_manifest(manifest: dict[str, Any]) -> list[str]:
    """Problems the API server would report for this object (empty when it would accept it)."""
    key = (manifest.get("apiVersion"), manifest.get("kind"))
    crd = crds().get(key)  # type: ignore[arg-type]
    if crd is None:
        return [f"no CRD for {key[0]} {key[1]} in {CRD_DIR}"]
    defaulted = apply_defaults(manifest, crd.schema)
    problems = [
        f"{'.'.join(str(part) for part in error.absolute_path) or '<root>'}: {error.message}"
        for error in _validator(key).iter_errors(defaulted)
    ]
    problems += _list_type_problems(defaulted, crd.schema, "")
    for path, rule, value in _rules(defaulted, crd.schema, ""):
        if "oldSelf" in rule["rule"]:
            continue  # transition rules compare with a stored object; a create has none
        result = compile_rule(rule["rule"]).eval(data={"self": value})
        if result.type() != cel.Type.BOOL or result.value() is not True:
            problems.append(f"{path or '<root>'}: {rule.get('message') or rule['rule']} (rule evaluated to {result})")
    return problems


def all_rules() -> list[str]:
    """Every x-kubernetes-validations rule in the copied CRDs (each must compile)."""
    found: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            found.extend(rule["rule"] for rule in node.get("x-kubernetes-validations") or ())
            for child in node.values():
                walk(child)
        elif isinstance(node, list):
            for child in node:
                walk(child)

    for crd in crds().values():
        walk(crd.schema)
    return found
