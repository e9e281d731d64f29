"""`quotacalc schema`: editors validate plan files against it, flat and platform alike (docs/plans.md)."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
import yaml

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
SHIPPED_PLANS = sorted(path for path in EXAMPLES.glob("*.yaml") if not path.name.startswith("simulate"))


@pytest.fixture(scope="module")
def validator(run_cli_module):
    code, out, err = run_cli_module("schema")
    assert code == 0, err
    schema = json.loads(out)
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


@pytest.fixture(scope="module")
def run_cli_module():
    from typer.testing import CliRunner

    from quotacalc.cli.app import app

    def run(*args: str):
        result = CliRunner().invoke(app, list(args))
        return result.exit_code, result.stdout, result.stderr

    return run


def test_every_shipped_plan_validates(validator):
    assert {"platform.yaml", "llama-3.3-70b-h100.yaml", "gpt-oss-120b-h100.yaml"} <= {p.name for p in SHIPPED_PLANS}
    for path in SHIPPED_PLANS:
        errors = list(validator.iter_errors(yaml.safe_load(path.read_text(encoding="utf-8"))))
        assert errors == [], (path.name, errors[0].message if errors else None)


@pytest.mark.parametrize(
    "document",
    [
        {"model": "Llama-3.3-70B-Instruct", "gpu": "h100-sxm", "tpp": 4},  # a misspelt deployment key
        {"model": "Llama-3.3-70B-Instruct", "tenant": {"rps": 5, "prompt_token": 2000}},  # a misspelt tenant key
        {"model": "Llama-3.3-70B-Instruct", "replicas": 0},
        {"model": "Llama-3.3-70B-Instruct", "tp": "four"},
        {"model": "Llama-3.3-70B-Instruct", "pools": []},  # a platform plan needs a pool; a flat one has no pools
    ],
)
def test_a_bad_plan_fails(validator, document):
    assert list(validator.iter_errors(document))


def test_a_flat_plan_with_a_tenant_and_replicas_validates(validator):
    document = {
        "model": "Llama-3.3-70B-Instruct",
        "gpu": "h100-sxm",
        "tp": 4,
        "replicas": 2,
        "burst_s": 30,
        "tenant": {"rps": 5, "prompt_tokens": 2000, "output_tokens": 500},
    }
    assert list(validator.iter_errors(document)) == []
