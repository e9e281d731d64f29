"""--max-model-len: the longest sequence the engine admits (vLLM's flag), what a windowed model's logged pool counts.

vLLM 0.21+ logs 'GPU KV cache size' as maximum concurrency x max_model_len, so a model whose layers keep a window
logs another count when served with --max-model-len than at its default (the model's maximum context), from the
same blocks; a full-attention model logs about its blocks x 16 either way.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import yaml

from quotacalc.core.deployment import Deployment, KvPoolMeasuredWith
from quotacalc.core.plan import Plan, PlanTenant, Pool, Tier
from quotacalc.core.policy import build_policy
from quotacalc.core.price import price
from quotacalc.inputs.benchmarks import read_start_up_log
from quotacalc.inputs.deployment import measured_pool_mismatch
from quotacalc.inputs.resolve import resolve

GPT_OSS = {"model": "gpt-oss-120b", "gpu": "h100-sxm", "tp": 1}


def test_a_windowed_models_logged_pool_counts_requests_of_max_model_len():
    """gpt-oss-120b at TP 1, BF16 KV: 8 KV heads x 64 x 2 (K, V) x 2 B = 2,048 B per token per layer, 16-token pages
    of 32,768 B, 18 window (128) + 18 full layers: two groups of 18, so pool bytes / 32,768 / 18 blocks. One request
    of L tokens takes ceil(L / 16) full blocks and ceil(min(128 - 1 + 8,192, L) / 16) + 1 window blocks (8,192: the
    H100's default max_num_batched_tokens): at L = 32,768, 2,048 + 521 = 2,569; at 131,072, 8,192 + 521 = 8,713.
    The logged count is floor(blocks / blocks per request x L)."""
    short = price(resolve(Deployment(**GPT_OSS, max_model_len=32_768)))
    default = price(resolve(Deployment(**GPT_OSS)))
    assert short.kv_pool_bytes_per_gpu == default.kv_pool_bytes_per_gpu  # the same memory
    blocks = int(short.kv_pool_bytes_per_gpu // 32_768 // 18)
    assert short.kv_pool_tokens == math.floor(blocks / 2_569 * 32_768)
    assert default.kv_pool_tokens == math.floor(blocks / 8_713 * 131_072)
    # What requests of --context hold does not depend on it.
    assert short.kv_pool_tokens_at_context == default.kv_pool_tokens_at_context


def test_a_full_attention_pool_is_the_same_at_any_max_model_len():
    at = {
        length: price(resolve(Deployment(model="Llama-3.1-8B-Instruct", gpu="h100-sxm", max_model_len=length)))
        for length in (None, 8_192)
    }
    assert at[None].kv_pool_tokens == at[8_192].kv_pool_tokens


@pytest.mark.parametrize(
    ("flags", "field", "code"),
    [
        (("--max-model-len", "200000"), "max_model_len", 1),  # above gpt-oss's 131,072
        (("--max-model-len", "1000"), "context", 1),  # the default context, 1,700, is longer
        (("--max-model-len", "0"), "--max-model-len", 1),
        (("--max-model-len", "32k"), "--max-model-len", 2),
    ],
)
def test_bad_max_model_len_is_one_line_naming_the_field(run_cli, flags, field, code):
    status, out, err = run_cli("price", "--model", "gpt-oss-120b", "--gpu", "h100-sxm", *flags)
    assert status == code and out == ""
    assert err.count("\n") == 1 and field in err and "Traceback" not in err


def test_the_engine_and_the_tiers_are_bounded_by_max_model_len():
    deployment = Deployment(**GPT_OSS, max_model_len=32_768)
    tier = Tier(
        name="gold",
        max_context_tokens=32_768,
        kv_cap_tokens_per_replica=30_000,
        max_concurrent_sequences=16,
        max_output_tokens=1_024,
        priority=0,
    )
    plan = Plan(
        pools=(Pool(name="main", deployment=deployment, replicas=1),),
        tiers=(tier,),
        tenants=(PlanTenant(name="t", tier="gold", units_per_s=100),),
    )
    (pool,) = build_policy(plan, {"main": price(resolve(deployment))}).pools
    assert pool.max_context_tokens == 32_768 and pool.engine.max_model_len == 32_768


def test_a_plan_tier_longer_than_the_pools_max_model_len_is_refused(run_cli, tmp_path):
    plan = {
        "pools": [{"name": "main", "replicas": 1, "deployment": {**GPT_OSS, "max_model_len": 16_384}}],
        "tiers": [
            {
                "name": "gold",
                "max_context_tokens": 32_768,
                "kv_cap_tokens_per_replica": 30_000,
                "max_concurrent_sequences": 16,
                "max_output_tokens": 1_024,
                "priority": 0,
            }
        ],
        "tenants": [{"name": "t", "tier": "gold", "units_per_s": 100}],
    }
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(plan), encoding="utf-8")
    status, out, err = run_cli("check", path, "--json")
    assert status == 1 and "Traceback" not in err
    (finding,) = [f for f in json.loads(out)["findings"] if f["subject"] == "tiers.gold" and f["severity"] == "error"]
    assert "above what pool 'main' serves (16,384 tokens" in finding["message"]


def _log(tmp_path: Path, *lines: str) -> str:
    path = tmp_path / "serve.log"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return str(path)


def test_the_log_states_max_model_len_in_its_config_and_concurrency_lines(tmp_path):
    config = "INFO Initializing a V1 LLM engine (v0.11.0) with config: model='openai/gpt-oss-120b', max_seq_len=32768, "
    reading = read_start_up_log(
        _log(
            tmp_path,
            config + "download_dir=None",
            "INFO [kv_cache_utils.py:1087] GPU KV cache size: 68,456 tokens",
            "INFO [kv_cache_utils.py:1091] Maximum concurrency for 32,768 tokens per request: 2.09x",
        )
    )
    assert reading.max_model_len == 32_768 and reading.kv_pool_tokens == 68_456
    with pytest.raises(Exception, match="2 different max_model_len values"):
        read_start_up_log(
            _log(
                tmp_path,
                config,
                "GPU KV cache size: 68,456 tokens",
                "Maximum concurrency for 65,536 tokens per request: 1.05x",
            )
        )


def test_calibrate_records_a_windowed_models_max_model_len_and_price_holds_to_it(run_cli, tmp_path):
    plan = tmp_path / "plan.yaml"
    plan.write_text(yaml.safe_dump(GPT_OSS), encoding="utf-8")
    log = _log(
        tmp_path,
        "with config: model='openai/gpt-oss-120b', max_seq_len=32768, tokenizer=...",
        "GPU KV cache size: 68,456 tokens",
    )
    status, _, err = run_cli("calibrate", plan, "--log", log, "--write", plan)
    assert status == 0, err
    deployment = yaml.safe_load(plan.read_text(encoding="utf-8"))
    assert deployment["max_model_len"] == 32_768 and deployment["kv_pool_tokens"] == 68_456
    assert deployment["kv_pool_measured_with"]["max_model_len"] == 32_768
    # Priced at the model's default max_model_len instead, the measured count would be read at another length.
    status, _, err = run_cli("price", plan, "--max-model-len", "131072")
    assert status == 1 and "max_model_len 32768 -> 131072" in err


def test_a_full_attention_log_does_not_record_max_model_len(run_cli, tmp_path):
    plan = tmp_path / "plan.yaml"
    plan.write_text(yaml.safe_dump({"model": "Llama-3.1-8B-Instruct", "gpu": "h100-sxm"}), encoding="utf-8")
    log = _log(tmp_path, "with config: max_seq_len=8192, x", "GPU KV cache size: 455,000 tokens")
    status, _, err = run_cli("calibrate", plan, "--log", log, "--write", plan)
    assert status == 0, err
    deployment = yaml.safe_load(plan.read_text(encoding="utf-8"))
    assert "max_model_len" not in deployment and "max_model_len" not in deployment["kv_pool_measured_with"]


def test_a_measured_pool_without_a_recorded_max_model_len_is_not_checked_for_it():
    measured = KvPoolMeasuredWith(gpu="h100-sxm", tp=1)
    deployment = Deployment(**GPT_OSS, kv_pool_tokens=68_456, kv_pool_measured_with=measured, max_model_len=32_768)
    assert measured_pool_mismatch(deployment) is None
    recorded = measured.model_copy(update={"max_model_len": 32_768})
    assert measured_pool_mismatch(deployment.model_copy(update={"kv_pool_measured_with": recorded})) is None
    unset = deployment.model_copy(update={"kv_pool_measured_with": recorded, "max_model_len": None})
    assert "max_model_len 32768 -> 131072" in measured_pool_mismatch(unset)
