"""The core used as a library, the on-disk config cache, and generated docs kept in sync."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import quotacalc
from quotacalc.cli.models_doc import models_markdown

ROOT = Path(__file__).resolve().parent.parent


def test_public_api_without_the_cli():
    replica = quotacalc.price(quotacalc.resolve(quotacalc.Deployment(model="Qwen3-8B", gpu="h200", kv_dtype="fp8")))
    assert isinstance(replica, quotacalc.PriceResult)
    assert replica.inputs.deployment.kv_dtype == "fp8"
    tenant = quotacalc.size_traffic(replica, quotacalc.Traffic(rps=1, prompt_tokens=100, output_tokens=10))
    # Qwen3-8B: 36 layers x 2 x 32 heads x (128 + 128) x 50.5 mean attended tokens of a 100-token prompt,
    # beside 2 x active params per token: a prompt token costs 1.0018 units inside it.
    token_units = 1 + 36 * 2 * 32 * 256 * 50.5 / (2 * replica.active_params)
    assert tenant.units_per_s == pytest.approx(100 * token_units + replica.output_weight * 10)


def test_library_import_does_not_load_the_cli_or_transformers():
    code = "import sys, quotacalc; quotacalc.Deployment; print(sorted(m for m in ('typer', 'rich', 'transformers', 'yaml') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert json.loads(out.replace("'", '"')) == []


def test_warm_call_never_imports_transformers(tmp_path):
    """A config that is not shipped pays the transformers import once; the cached resolution skips it."""
    folder = tmp_path / "llama-copy"
    folder.mkdir()
    (folder / "config.json").write_bytes((ROOT / "models" / "Llama-3.1-8B-Instruct" / "config.json").read_bytes())
    env = {**os.environ, "QUOTACALC_CACHE_DIR": str(tmp_path / "cache")}
    code = (
        f"import sys; from quotacalc import load_arch; load_arch({str(folder)!r}); print('transformers' in sys.modules)"
    )
    cold = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    warm = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert cold.stdout.strip() == "True"
    assert warm.stdout.strip() == "False"
    assert "PyTorch was not found" not in cold.stderr + warm.stderr


def test_cache_follows_the_config_bytes(tmp_path):
    folder = tmp_path / "tiny"
    folder.mkdir()
    config = {
        "model_type": "llama",
        "hidden_size": 512,
        "intermediate_size": 1024,
        "num_hidden_layers": 2,
        "num_attention_heads": 8,
        "num_key_value_heads": 2,
        "vocab_size": 1000,
    }
    (folder / "config.json").write_text(json.dumps(config))
    first, _ = quotacalc.load_arch(str(folder))
    (folder / "config.json").write_text(json.dumps({**config, "num_hidden_layers": 3}))
    second, _ = quotacalc.load_arch(str(folder))
    assert (len(first.layers), len(second.layers)) == (2, 3)


def test_unwritable_cache_only_costs_speed(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("QUOTACALC_CACHE_DIR", str(blocker / "cache"))
    arch, _ = quotacalc.load_arch("Qwen3-8B")
    assert arch.total_params() == 8_190_735_360


def test_models_doc_is_generated_not_typed():
    """docs/models.md is `quotacalc models --markdown`; regenerate it when a figure moves."""
    assert (ROOT / "docs" / "models.md").read_text() == models_markdown()


def test_plan_file_model_path_is_relative_to_the_file(tmp_path, monkeypatch):
    from quotacalc.inputs.plan import load_plan_file

    (tmp_path / "plans" / "my-model").mkdir(parents=True)
    (tmp_path / "plans" / "my-model" / "config.json").write_text("{}")
    (tmp_path / "plans" / "plan.yaml").write_text("model: my-model\ngpu: h100-sxm\n")
    monkeypatch.chdir(tmp_path)
    plan = load_plan_file(str(tmp_path / "plans" / "plan.yaml"))
    assert plan.deployment["model"] == str(tmp_path / "plans" / "my-model")
    shipped = tmp_path / "shipped.yaml"
    shipped.write_text("model: Qwen3-8B\ngpu: h100-sxm\n")
    assert load_plan_file(str(shipped)).deployment["model"] == "Qwen3-8B"


def test_atomic_writes_keep_normal_permissions(tmp_path) -> None:
    """A new file gets 0o666 less the umask, an existing one keeps its mode, a secret gets what it asks."""
    import os
    import stat

    from quotacalc.fileio import write_text_atomic

    def mode_of(path):
        return stat.S_IMODE(path.stat().st_mode)

    umask = os.umask(0o022)
    try:
        fresh = tmp_path / "plan.yaml"
        write_text_atomic(fresh, "a: 1\n")
        assert mode_of(fresh) == 0o644
        fresh.chmod(0o640)
        write_text_atomic(fresh, "a: 2\n")
        assert mode_of(fresh) == 0o640 and fresh.read_text() == "a: 2\n"
        secret = tmp_path / "salts.json"
        write_text_atomic(secret, "{}", mode=0o600)
        assert mode_of(secret) == 0o600
        assert sorted(p.name for p in tmp_path.iterdir()) == ["plan.yaml", "salts.json"]  # no temporaries left
    finally:
        os.umask(umask)


def _library_plan(**changes):
    """A plan built in code, as a library user builds one: two standard pools, a long-context pool, a tier."""
    from quotacalc.core.plan import Plan, PlanTenant, Pool, Tier

    deployment = quotacalc.Deployment(model="Llama-3.1-8B-Instruct", gpu="h100-sxm")
    parts = {
        "pools": (
            Pool(
                name="main", deployment=deployment, replicas=2, long_context_pool="long", route_above_prompt_tokens=8192
            ),
            Pool(name="spare", deployment=deployment, replicas=1),
            Pool(name="long", deployment=deployment, replicas=1, role="long_context"),
        ),
        "tiers": (
            Tier(
                name="gold",
                max_context_tokens=16384,
                kv_cap_tokens_per_replica=100_000,
                max_concurrent_sequences=8,
                max_output_tokens=2048,
                priority=0,
            ),
        ),
        "tenants": (PlanTenant(name="acme", tier="gold", pool="main", units_per_s=100.0),),
    }
    return Plan(**{**parts, **changes})


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"tenant": {"tier": "golden"}}, "tenants[0].tier: unknown tier 'golden' (did you mean 'gold'?)"),
        ({"tenant": {"pool": "nowhere"}}, "tenants[0].pool: unknown pool 'nowhere'"),
        ({"tenant": {"pool": "long"}}, "tenants[0].pool: pool 'long' is a long-context pool"),
        ({"tenant": {"pool": None}}, "tenants[0].pool: the plan has 2 standard pools (name one of: main, spare)"),
        ({"pool": {"long_context_pool": "spare"}}, "pools[0].long_context_pool: pool 'spare' is not a long-context"),
        ({"pool": {"long_context_pool": "lung"}}, "pools[0].long_context_pool: unknown pool 'lung' (did you mean"),
        ({"pool": {"name": "spare"}}, "pools[1].name: duplicate name 'spare' (also pools[0])"),
    ],
)
def test_a_plan_built_in_code_checks_its_references(change, message):
    """Plan() refuses what a plan file is refused for, so build_policy never meets a name it cannot find."""
    from pydantic import ValidationError

    plan = _library_plan()
    pools, tenants = list(plan.pools), list(plan.tenants)
    pools[0] = pools[0].model_copy(update=change.get("pool", {}))
    tenants[0] = tenants[0].model_copy(update=change.get("tenant", {}))
    with pytest.raises(ValidationError, match=re.escape(message)):
        _library_plan(pools=tuple(pools), tenants=tuple(tenants))


def test_a_plan_with_no_standard_pool_is_refused_in_code():
    from pydantic import ValidationError

    plan = _library_plan()
    with pytest.raises(ValidationError, match=r"pools: no standard pool"):
        _library_plan(pools=(plan.pools[2],), tenants=())


@pytest.mark.parametrize("replicas", [0, -1, float("nan"), float("inf")])
def test_check_plan_refuses_a_reversal_threshold_that_is_no_replica_count(replicas):
    from quotacalc.core.checks import check_plan
    from quotacalc.core.policy import QuotaPolicy

    with pytest.raises(ValueError, match="reversal_replicas must be a positive finite number"):
        check_plan(QuotaPolicy.model_construct(pools=(), tenants=()), reversal_replicas=replicas)


def test_library_calls_with_the_wrong_object_say_what_they_take():
    deployment = quotacalc.Deployment(model="Qwen3-8B", gpu="h200")
    with pytest.raises(TypeError, match=re.escape("price() takes PricingInputs, got Deployment: price(resolve(")):
        quotacalc.price(deployment)
    with pytest.raises(TypeError, match=re.escape("resolve() takes a quotacalc.Deployment, got dict")):
        quotacalc.resolve({"model": "Qwen3-8B", "gpu": "h200"})
    with pytest.raises(TypeError, match=re.escape("request_kv() takes the PriceResult of price(), got NoneType")):
        quotacalc.request_kv(None, 100)


@pytest.mark.parametrize(("experts", "top_k", "batch"), [(0, 8, 128), (8, 16, 1), (8, 0, 4), (8, 2, -1)])
def test_distinct_experts_refuses_a_routing_no_model_has(experts, top_k, batch):
    with pytest.raises(ValueError, match="needs 0 < top_k <= num_experts and batch >= 0"):
        quotacalc.expected_distinct_experts(experts, top_k, batch)


def test_a_library_deployment_with_a_pool_measured_elsewhere_is_refused():
    from quotacalc.inputs.plan import load_plan_file

    plan = load_plan_file(str(ROOT / "examples" / "llama-3.3-70b-h100.yaml"))
    moved = quotacalc.Deployment(**{**plan.deployment, "tp": 8})
    with pytest.raises(quotacalc.QuotacalcError, match=r"measured on another deployment \(tp 4 -> 8\)"):
        quotacalc.resolve(moved)
    # Where it was measured, it holds.
    assert quotacalc.price(quotacalc.resolve(quotacalc.Deployment(**plan.deployment))).kv_pool_tokens == 646_503


def test_a_model_is_read_once_per_process_and_again_when_its_config_changes(tmp_path):
    """The measured pool's check and the price ask for the same model: one read serves both, until the file's
    bytes change."""
    from quotacalc.catalog.models import find_shipped
    from quotacalc.inputs.resolve import load_arch

    folder = tmp_path / "model"
    folder.mkdir()
    config = json.loads(find_shipped("Llama-3.1-8B-Instruct").config_path.read_text(encoding="utf-8"))
    (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
    first = load_arch(str(folder))
    assert load_arch(str(folder)) is first
    (folder / "config.json").write_text(json.dumps({**config, "num_hidden_layers": 16}), encoding="utf-8")
    changed, _ = load_arch(str(folder))
    assert len(changed.layers) == 16 and len(first[0].layers) == 32
