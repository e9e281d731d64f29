"""Shipped models come pre-resolved: no transformers import on any call, and no drift from AutoConfig.

Each spec in ``quotacalc/catalog/specs`` is rebuilt here from its config.json through AutoConfig
and the family reader (this test imports transformers) and must equal the shipped file byte for
byte; ``python scripts/build_specs.py`` rewrites them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from quotacalc.catalog.models import shipped_models, shipped_specs_dir
from quotacalc.inputs.architectures import read_arch
from quotacalc.inputs.shipped_specs import build_spec_document, load_spec, spec_arch, spec_path, spec_text

MODELS = {model.name: model for model in shipped_models()}


def test_one_spec_per_shipped_model():
    assert {path.stem for path in shipped_specs_dir().glob("*.json")} == set(MODELS)  # catalogs/ holds the twins


@pytest.mark.parametrize("name", sorted(MODELS))
def test_spec_matches_a_fresh_resolution(name):
    model = MODELS[name]
    assert spec_path(model).read_text(encoding="utf-8") == spec_text(build_spec_document(model)), (
        "stale spec: run python scripts/build_specs.py"
    )


@pytest.mark.parametrize("name", sorted(MODELS))
def test_spec_arch_is_the_readers_arch(name):
    """The shipped ModelArch is what the reader builds from the shipped resolved config (no hand edits)."""
    model = MODELS[name]
    document = load_spec(model, model.config_path.read_bytes())
    assert document is not None
    resolved = document["resolved"]
    rebuilt = read_arch(
        resolved["config"], name=name, source=str(model.config_path), given_keys=frozenset(resolved["given_keys"])
    )
    assert spec_arch(document, name) == rebuilt


def test_a_spec_for_other_config_bytes_is_ignored():
    model = MODELS["Llama-3.1-8B-Instruct"]
    data = model.config_path.read_bytes()
    assert load_spec(model, data) is not None
    edited = json.dumps({**json.loads(data), "num_hidden_layers": 33}).encode()
    assert load_spec(model, edited) is None


def test_first_call_on_a_fresh_machine_imports_no_transformers(tmp_path):
    """Every shipped model resolves and prices with an empty cache without importing transformers."""
    env = {**os.environ, "QUOTACALC_CACHE_DIR": str(tmp_path / "empty-cache")}
    code = (
        "import sys\n"
        "from quotacalc import Deployment, price, resolve\n"
        "from quotacalc.catalog.models import shipped_models\n"
        "for model in shipped_models():\n"
        "    inputs = resolve(Deployment(model=model.name, gpu='b200', kv_pool_tokens=10**6))\n"
        "    # A GPU as large as any shipped model's pool needs: the test is the imports, not the fit.\n"
        "    roomy = inputs.gpu.model_copy(update={'memory_bytes': 10**15})\n"
        "    price(inputs.model_copy(update={'gpu': roomy}))\n"
        "print('transformers' in sys.modules)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"


def test_catalog_twins_match_their_yaml():
    """The pre-parsed JSON twins of gpus.yaml and models/index.yaml equal a strict parse of the YAML."""
    from quotacalc.catalog.entries import preparsed_twin
    from quotacalc.inputs.shipped_specs import build_twin_document, shipped_yaml_files, twin_text

    for path in shipped_yaml_files():
        assert preparsed_twin(path).read_text(encoding="utf-8") == twin_text(build_twin_document(path)), (
            "stale: run python scripts/build_specs.py"
        )


def test_first_call_imports_no_yaml_either(tmp_path):
    env = {**os.environ, "QUOTACALC_CACHE_DIR": str(tmp_path / "empty-cache")}
    code = (
        "import sys\n"
        "from quotacalc import Deployment, price, resolve\n"
        "price(resolve(Deployment(model='Qwen3-8B', gpu='h100')))\n"
        "print(sorted(m for m in ('yaml', 'transformers') if m in sys.modules))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"
