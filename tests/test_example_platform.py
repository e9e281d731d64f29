"""The checked-in example's generated configs, built by the real policy (not a hand-built sample), pass the
same real validators as the exporters' own tests: the CRD schemas and their CEL rules, decK, vLLM's flags."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

PLATFORM_DIR = Path(__file__).resolve().parent.parent / "examples" / "platform"
TARGETS_DIR = Path(__file__).resolve().parent / "targets"


def _manifests(target: str) -> list[dict]:
    files = sorted((PLATFORM_DIR / target).glob("*.yaml"))
    if not files:
        pytest.skip(f"no {target} files in examples/platform (target not in this build)")
    return [doc for file in files for doc in yaml.safe_load_all(file.read_text(encoding="utf-8")) if doc]


@pytest.mark.parametrize("target", ["envoy", "gie"])
def test_kubernetes_manifests_pass_their_crds(target: str) -> None:
    pytest.importorskip("cel_expr_python", reason="cel-expr-python (Python 3.11+) evaluates the CRDs' CEL rules")
    from crd_validation import validate_manifest

    manifests = _manifests(target)
    problems = {f"{m['kind']}/{m['metadata']['name']}": validate_manifest(m) for m in manifests}
    assert {name: found for name, found in problems.items() if found} == {}


def test_kong_file_passes_deck_validate() -> None:
    deck = shutil.which("deck") or ("/usr/bin/deck" if Path("/usr/bin/deck").exists() else None)
    if deck is None:
        pytest.skip("deck not installed (Debian package `deck`)")
    path = PLATFORM_DIR / "kong" / "kong.yaml"
    if not path.exists():
        pytest.skip("no kong files in examples/platform (target not in this build)")
    checked = subprocess.run([deck, "validate", "-s", str(path)], capture_output=True, text=True, timeout=60)
    assert checked.returncode == 0, checked.stderr


def test_vllm_configs_use_real_flags_and_the_policys_engine_settings() -> None:
    flags_file = TARGETS_DIR / "vllm-0.33.0-flags.json"
    configs = sorted((PLATFORM_DIR / "vllm").glob("*.yaml"))
    if not configs or not flags_file.exists():
        pytest.skip("no vllm files or flag list in this build")
    flags = json.loads(flags_file.read_text(encoding="utf-8"))
    known = set(flags["flags"]) if isinstance(flags, dict) and "flags" in flags else set(flags)
    policy = json.loads((PLATFORM_DIR / "canonical" / "policy.json").read_text(encoding="utf-8"))
    engines = {pool["name"]: pool["engine"] for pool in policy["pools"]}
    for config in configs:
        settings = yaml.safe_load(config.read_text(encoding="utf-8"))
        unknown = [key for key in settings if key not in known and f"--{key}" not in known]
        assert unknown == [], f"{config.name}: not flags of vLLM 0.33.0: {unknown}"
        engine = engines[config.stem]
        assert settings["max-model-len"] == engine["max_model_len"]
        assert settings["max-num-seqs"] == engine["max_num_seqs"]
        assert settings["scheduling-policy"] == engine["scheduling_policy"]
