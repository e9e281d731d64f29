"""SGLang config files (``python -m sglang.launch_server --config``) checked against the flags of a stated SGLang
release, extracted from its wheel without importing it (scripts/extract_sglang_flags.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from policy_samples import platform_policy, sample_salts

from quotacalc.exporters import sglang, vllm
from quotacalc.exporters.base import ExportOptions

FLAGS_FILE = Path(__file__).parent / "targets" / f"sglang-{sglang.SGLANG_VERSION}-flags.json"
ROOT = Path(__file__).resolve().parent.parent


def _flags() -> dict[str, dict]:
    table = json.loads(FLAGS_FILE.read_text(encoding="utf-8"))
    assert table["sglang_version"] == sglang.SGLANG_VERSION
    return table["flags"]


def _on_sglang(policy, *names: str, **engine_changes):
    """The policy with the named pools priced as SGLang, their engine settings changed as given."""
    pools = tuple(
        pool.model_copy(update={"serving_engine": "sglang", "engine": pool.engine.model_copy(update=engine_changes)})
        if pool.name in names
        else pool
        for pool in policy.pools
    )
    return policy.model_copy(update={"pools": pools})


def test_the_extracted_flag_table_holds_what_sglang_0_5_23_defines():
    """Read in the 0.5.23 wheel's sglang/srt/arg_groups/fields: --tp-size has the alias --tensor-parallel-size,
    --kv-cache-dtype's and --schedule-policy's choices, and the scheduling switches are store_true flags."""
    flags = _flags()
    assert flags["tp-size"]["names"] == ["--tp-size", "--tensor-parallel-size"]
    assert flags["model-path"]["names"] == ["--model-path", "--model"]
    assert {"auto", "bf16", "fp8_e4m3", "fp8_e5m2", "nvfp4"} <= set(flags["kv-cache-dtype"]["choices"])
    assert {"fcfs", "lof", "lpm", "priority"} <= set(flags["schedule-policy"]["choices"])
    for switch in ("enable-priority-scheduling", "schedule-low-priority-values-first", "disable-radix-cache"):
        assert flags[switch]["kind"] == "store_true", switch
    assert flags["config"]["kind"] == "value"


def test_every_generated_key_and_choice_is_a_flag_of_the_stated_release():
    """SGLang's config reader passes each key on as --key (store_true keys only when true): every key must be a
    dashed long flag of the release, a store_true one set to true, a value within its choices."""
    flags = _flags()
    policy = _on_sglang(platform_policy(), "standard", "long")
    result = sglang.export(policy, sample_salts(policy), ExportOptions())
    assert [f.path for f in result.files] == ["sglang/standard.yaml", "sglang/long.yaml"]
    for generated in result.files:
        config = yaml.safe_load(generated.text)
        for key, value in config.items():
            assert key in flags and "_" not in key, f"{generated.path}: {key} is not an SGLang flag"
            if flags[key]["kind"] == "store_true":
                assert value is True, (key, value)
            else:
                assert not isinstance(value, bool), (key, value)
            if flags[key].get("choices"):
                assert str(value) in flags[key]["choices"], (key, value)


def test_engine_values_come_from_the_policy_and_round_trip():
    policy = _on_sglang(platform_policy(), "long", gpu_memory_utilization=0.823, kv_cache_dtype="fp8")
    result = sglang.export(policy, {}, ExportOptions())
    assert [f.path for f in result.files] == ["sglang/long.yaml"]
    data = sglang.documents(policy)
    assert yaml.safe_load(result.files[0].text) == data["sglang/long.yaml"]
    assert not result.files[0].secret
    assert data["sglang/long.yaml"] == {
        "model-path": "RedHatAI/Llama-3.3-70B-Instruct-FP8-dynamic",
        "served-model-name": "llama-3.3-70b",
        "tp-size": 4,
        "context-length": 131072,
        "max-running-requests": 16,
        "chunked-prefill-size": 8192,
        "mem-fraction-static": 0.823,
        # SGLang's own default is 127.0.0.1:30000: every gateway file sends to the pool's service on port 8000.
        "host": "0.0.0.0",
        "port": 8000,
        "kv-cache-dtype": "fp8_e4m3",
        # The policy's order is vLLM's, lower first; SGLang serves larger values first unless told, and orders by
        # priority only under fcfs or lof.
        "schedule-policy": "fcfs",
        "enable-priority-scheduling": True,
        "schedule-low-priority-values-first": True,
        # SGLang preempts only for a priority gap above this (10 by default): the tiers are 1 apart.
        "priority-scheduling-preemption-threshold": 0,
        # A request without a priority ranks with the least urgent tier, not behind everything.
        "default-priority-value": max(tier.priority for tier in policy.tiers),
    }
    assert data["sglang/long.yaml"]["default-priority-value"] == 2  # premium 0, standard 1, batch 2


def test_no_prefix_cache_no_priority_and_an_unmapped_cache_dtype():
    policy = _on_sglang(
        platform_policy(), "long", enable_prefix_caching=False, scheduling_policy="fcfs", kv_cache_dtype="float16"
    )
    config = sglang.documents(policy)["sglang/long.yaml"]
    assert config["disable-radix-cache"] is True and config["schedule-policy"] == "fcfs"
    assert "enable-priority-scheduling" not in config and "kv-cache-dtype" not in config
    assert "default-priority-value" not in config
    assert "priority-scheduling-preemption-threshold" not in config
    limits = sglang.export(policy, {}, ExportOptions()).limits
    assert not any(line.startswith("Priority preemption") for line in limits)
    assert any(line.startswith("KV cache dtype float16: no SGLang 0.5.23 choice") for line in limits)


def test_a_plan_without_sglang_pools_gets_no_file_and_the_limit_says_so():
    result = sglang.export(platform_policy(), {}, ExportOptions())
    assert result.files == ()
    assert result.limits == (
        "No pool of this plan is priced as SGLang (engine: sglang), so no file: its pools' engine files are the "
        "vllm target's.",
    )


@pytest.mark.parametrize("memory_utilization", [None, 0.88])
def test_generate_writes_an_sglang_pools_file_with_the_share_the_price_assumed(tmp_path, run_cli, memory_utilization):
    """A plan's pool on SGLang: its file carries SGLang's token budget and memory share as the price resolved them
    (SGLang 0.5's default share at TP 4 on an H100: reserved 512 + 1.5 × 8,192 + 2 × 512 + 128 × 4 = 14,336 MiB of
    81,090.125: 0.823), and the vllm target leaves the pool out."""
    document = yaml.safe_load((ROOT / "examples" / "platform.yaml").read_text(encoding="utf-8"))
    # The plan's measured pool was measured on vLLM: this pool's is estimated.
    for key in ("kv_pool_tokens", "kv_pool_measured_with"):
        document["deployment"].pop(key, None)
    pool = document["pools"][-1]
    pool.setdefault("deployment", {})["engine"] = "sglang"
    if memory_utilization is not None:
        pool["deployment"]["memory_utilization"] = memory_utilization
    plan = tmp_path / "plan.yaml"
    plan.write_text(yaml.safe_dump(document), encoding="utf-8")
    secret = tmp_path / "secret"
    secret.write_text("s" * 64, encoding="utf-8")
    out = tmp_path / "out"
    code, _, err = run_cli("generate", plan, "--out", out, "--salt-secret-file", secret, "--target", "sglang,vllm")
    assert code == 0, err
    config = yaml.safe_load((out / "sglang" / f"{pool['name']}.yaml").read_text(encoding="utf-8"))
    assert config["mem-fraction-static"] == (memory_utilization or 0.823)
    assert config["chunked-prefill-size"] == 8192 and config["tp-size"] == 4
    assert not (out / "vllm" / f"{pool['name']}.yaml").exists()
    assert (out / "vllm" / f"{document['pools'][0]['name']}.yaml").exists()


def test_fp8_weights_on_a_plain_checkpoint_are_quantized_at_load_and_other_formats_are_a_limit():
    flags = _flags()
    policy = _on_sglang(platform_policy(), "standard", quantization="fp8")
    policy = _on_sglang(policy, "long", checkpoint_weight_dtype="int4")
    result = sglang.export(policy, sample_salts(policy), ExportOptions())
    standard, long = (yaml.safe_load(generated.text) for generated in result.files)
    assert standard["quantization"] == "fp8" and "fp8" in flags["quantization"]["choices"]
    assert "quantization" not in long
    (limit,) = [line for line in result.limits if line.startswith("Pool long:")]
    assert "priced with int4 weights, which no load flag makes of" in limit


def test_the_engine_listens_where_every_gateway_sends():
    """LiteLLM's api_base, Kong's upstream and the InferencePool's target port all name one port: SGLang's file
    must serve on it, on every interface (its defaults are 127.0.0.1 and 30000)."""
    from quotacalc.exporters import gie, kong, litellm

    policy = _on_sglang(platform_policy(), "long")
    config = sglang.documents(policy)["sglang/long.yaml"]
    assert (config["host"], config["port"]) == ("0.0.0.0", 8000)
    text = "\n".join(
        file.text
        for module in (gie, kong, litellm)
        for file in module.export(policy, sample_salts(policy), ExportOptions()).files
    )
    assert f"http://long:{config['port']}/v1" in text and f"number: {config['port']}" in text
    # LiteLLM reaches each replica, on the same port.
    assert f"http://long-0.long:{config['port']}/v1" in text and f"http://long-1.long:{config['port']}/v1" in text


def test_the_lora_line_names_only_the_adapters_of_the_pools_this_target_serves():
    """Pool long on SGLang, pool standard on vLLM: acme (acme-support-v2) routes its long prompts to long, so both
    engines load its adapter; initech (initech-sql) uses standard only, so SGLang's line leaves it out."""
    policy = _on_sglang(platform_policy(), "long")
    sglang_line = (
        "LoRA adapters (pool long: acme-support-v2) are not loaded by these files: add enable-lora and lora-paths "
        "with the adapters' paths, which the policy does not hold."
    )
    vllm_line = (
        "LoRA adapters (pool standard: acme-support-v2, initech-sql) are not loaded by these files: add enable-lora "
        "and lora-modules with the adapters' paths, which the policy does not hold."
    )
    assert sglang_line in sglang.export(policy, {}, ExportOptions()).limits
    assert vllm_line in vllm.export(policy, {}, ExportOptions()).limits
    # No tenant of the SGLang pool has an adapter: no LoRA line at all.
    tenants = tuple(
        tenant.model_copy(update={"long_context_pool": None, "route_above_prompt_tokens": None})
        for tenant in policy.tenants
    )
    alone = policy.model_copy(update={"tenants": tenants})
    assert not any("LoRA" in line for line in sglang.export(alone, {}, ExportOptions()).limits)


def test_generate_names_each_engines_adapters_only(tmp_path, run_cli):
    """The QA plan: tenant a (adapter a-v1) on the vLLM pool, d (d-v1) on a TensorRT-LLM pool no engine target
    writes, b and c on the SGLang pool: vLLM names a-v1 only, SGLang none."""
    plan = tmp_path / "plan.yaml"
    plan.write_text(
        "deployment: {model: Llama-3.1-8B-Instruct, gpu: h100-sxm, tp: 1}\n"
        "pools:\n  - {name: vl, replicas: 2}\n"
        "  - {name: sg, replicas: 2, deployment: {engine: sglang}}\n"
        "  - {name: trt, replicas: 1, deployment: {engine: trtllm-serve}}\n"
        "tiers:\n  - {name: gold, max_context_tokens: 32768, kv_cap_tokens_per_replica: 100000,"
        " max_concurrent_sequences: 16, max_output_tokens: 4096, priority: 0}\n"
        "tenants:\n  - {name: a, tier: gold, pool: vl, units_per_s: 3000, lora_adapters: [a-v1]}\n"
        "  - {name: b, tier: gold, pool: sg, units_per_s: 3000}\n"
        "  - {name: d, tier: gold, pool: trt, units_per_s: 3000, lora_adapters: [d-v1]}\n",
        encoding="utf-8",
    )
    code, out, err = run_cli("generate", plan, "--out", tmp_path / "out", "--target", "vllm,sglang", "--json")
    assert code == 0, err
    limits = json.loads(out)["limits"]
    assert [line for line in limits["vllm"] if "LoRA" in line] == [
        "LoRA adapters (pool vl: a-v1) are not loaded by these files: add enable-lora and lora-modules with the "
        "adapters' paths, which the policy does not hold."
    ]
    assert not any("LoRA" in line or "d-v1" in line for line in limits["sglang"])


def test_the_tiers_preempt_one_another_and_the_file_names_the_salts_first_release():
    """SGLang preempts a running request only where ``priority_diff > threshold`` (PrefillAdder.preempt_to_schedule
    in the 0.5.23 wheel's sglang/srt/managers/schedule_policy.py), the threshold 10 unless set: the sample's tiers
    (0, 1, 2) differ by at most 2, so none would preempt another. With the written threshold every more urgent tier
    preempts every less urgent one, and a tier never preempts its own. The file's header names the first release
    that keys the prefix cache by cache_salt, and LIMITS.md says what earlier ones do."""
    policy = _on_sglang(platform_policy(), "long")
    result = sglang.export(policy, {}, ExportOptions())
    config = yaml.safe_load(result.files[0].text)
    threshold = config["priority-scheduling-preemption-threshold"]
    flags = json.loads(FLAGS_FILE.read_text(encoding="utf-8"))["flags"]
    assert flags["priority-scheduling-preemption-threshold"]["type"] == "int"
    priorities = sorted({tier.priority for tier in policy.tiers})
    for urgent in priorities:
        for running in priorities:
            # Lower values first (schedule-low-priority-values-first): priority_sign 1, so the diff is running - urgent.
            preempts = (running - urgent) > threshold
            assert preempts == (urgent < running), (urgent, running)
    assert not any((running - urgent) > 10 for urgent in priorities for running in priorities)  # SGLang's default
    assert result.files[0].text.startswith(
        f"# Generated by quotacalc for SGLang >= {sglang.SGLANG_CACHE_SALT_MIN_VERSION} "
    )
    assert sglang.SGLANG_CACHE_SALT_MIN_VERSION == "0.5.18"
    assert any(line.startswith("cache_salt needs SGLang 0.5.18 or later") for line in result.limits)
    assert any(line.startswith("Priority preemption (pools long)") for line in result.limits)
