"""Engine settings the price assumes reach the engine files as flags the stated releases accept: a KV cache dtype vLLM
has no choice for is left out (and said), expert parallelism and the recurrent state dtype are written.

Flag names and choices are cited from the tables extracted from the releases' sources
(tests/targets/vllm-0.33.0-flags.json, tests/targets/sglang-0.5.23-flags.json)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from policy_samples import platform_policy

from quotacalc.core.policy import VLLM_KV_CACHE_DTYPES, VLLM_MAMBA_SSM_CACHE_DTYPES
from quotacalc.exporters import sglang, vllm
from quotacalc.exporters.base import ExportOptions

TARGETS = Path(__file__).parent / "targets"


def _table(engine: str, version: str) -> dict[str, dict]:
    table = json.loads((TARGETS / f"{engine}-{version}-flags.json").read_text(encoding="utf-8"))
    assert table[f"{engine}_version"] == version
    return table["flags"]


VLLM_FLAGS = _table("vllm", vllm.VLLM_VERSION)
SGLANG_FLAGS = _table("sglang", sglang.SGLANG_VERSION)


def _generate(tmp_path: Path, run_cli, plan_text: str, targets: str = "vllm") -> tuple[Path, dict]:
    """Generate a flat plan's files; returns the output folder and the canonical policy's one pool."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    plan = tmp_path / "plan.yaml"
    plan.write_text(plan_text, encoding="utf-8")
    out = tmp_path / "out"
    code, _, err = run_cli("generate", plan, "--target", f"canonical,{targets}", "--out", out)
    assert code == 0, err
    (pool,) = json.loads((out / "canonical" / "policy.json").read_text(encoding="utf-8"))["pools"]
    return out, pool


def _load(path: Path) -> dict:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def _assert_vllm_flags(config: dict) -> None:
    for key, value in config.items():
        assert key in VLLM_FLAGS, key
        if "choices" in VLLM_FLAGS[key]:
            assert str(value) in VLLM_FLAGS[key]["choices"], (key, value)
        if VLLM_FLAGS[key].get("type") == "bool":
            assert isinstance(value, bool), (key, value)


def _assert_sglang_flags(config: dict) -> None:
    for key, value in config.items():
        assert key in SGLANG_FLAGS, key
        if SGLANG_FLAGS[key].get("choices"):
            assert str(value) in SGLANG_FLAGS[key]["choices"], (key, value)


def test_the_dtypes_written_are_choices_of_the_stated_releases():
    """vLLM 0.33.0's CacheDType has no int8, int4, fp32/float32 or mxfp4 (int8_per_token_head is another format);
    its mamba-ssm-cache-dtype and SGLang 0.5.23's mamba-ssm-dtype take bfloat16, float16, float32 (vLLM also auto);
    expert parallelism is vLLM's enable-expert-parallel switch and SGLang's ep-size (an int)."""
    kv_choices = set(VLLM_FLAGS["kv-cache-dtype"]["choices"])
    assert kv_choices >= VLLM_KV_CACHE_DTYPES
    assert {"auto", "bfloat16", "float16", "fp8", "fp8_e4m3", "fp8_e5m2", "nvfp4"} == VLLM_KV_CACHE_DTYPES
    assert not {"int8", "int4", "fp32", "float32", "mxfp4"} & kv_choices
    assert set(VLLM_FLAGS["mamba-ssm-cache-dtype"]["choices"]) == VLLM_MAMBA_SSM_CACHE_DTYPES
    assert {"auto", "bfloat16", "float16", "float32"} == VLLM_MAMBA_SSM_CACHE_DTYPES
    assert VLLM_FLAGS["enable-expert-parallel"] == {"source": "ParallelConfig.enable_expert_parallel", "type": "bool"}
    assert set(sglang.MAMBA_SSM_DTYPES.values()) == set(SGLANG_FLAGS["mamba-ssm-dtype"]["choices"])
    assert SGLANG_FLAGS["ep-size"]["type"] == "int"
    assert SGLANG_FLAGS["ep-size"]["source"].startswith("Parallel.ep_size")


@pytest.mark.parametrize(("kv_dtype", "named"), [("int8", "int8"), ("int4", "int4"), ("float32", "fp32")])
def test_a_kv_dtype_vllm_has_no_choice_for_is_left_out_said_and_checked(tmp_path, run_cli, kv_dtype, named):
    """A KV dtype vLLM has no --kv-cache-dtype choice for (int8, which it refuses at start-up) is left out of
    vllm/default.yaml, and the policy says so. float32 is quotacalc's fp32 (catalog/dtypes.py alias); the canonical policy keeps the dtype the price assumed."""
    plan_text = f"model: Llama-3.1-8B-Instruct\ngpu: b200\ntp: 1\nkv_dtype: {kv_dtype}\n"
    out, pool = _generate(tmp_path, run_cli, plan_text)
    assert pool["engine"]["kv_cache_dtype"] == named
    config = _load(out / "vllm" / "default.yaml")
    assert "kv-cache-dtype" not in config
    _assert_vllm_flags(config)
    assert (
        f"- Pool default: KV cache dtype {named} has no vLLM 0.33.0 kv-cache-dtype choice, so the file leaves it out"
    ) in (out / "vllm" / "LIMITS.md").read_text(encoding="utf-8")
    plan = tmp_path / "plan.yaml"
    code, stdout, err = run_cli("check", plan, "--json")
    assert code == 0, err
    (finding,) = [f for f in json.loads(stdout)["findings"] if f["code"] == "engine-kv-cache-dtype"]
    assert finding["severity"] == "warning" and finding["subject"] == "pools.default"
    assert finding["fix"] == "set kv_dtype to one vLLM keeps (auto, bf16, fp16, fp8, nvfp4)"
    code, _, _ = run_cli("check", plan, "--strict")
    assert code == 1  # passed before the fix


def test_a_kv_dtype_vllm_keeps_is_written_and_not_reported(tmp_path, run_cli):
    """The contrast: fp8_e5m2 is a vLLM choice, written as given; check has nothing to say about it."""
    out, _ = _generate(tmp_path, run_cli, "model: Llama-3.1-8B-Instruct\ngpu: b200\ntp: 1\nkv_dtype: fp8_e5m2\n")
    assert _load(out / "vllm" / "default.yaml")["kv-cache-dtype"] == "fp8_e5m2"
    assert "KV cache dtype" not in (out / "vllm" / "LIMITS.md").read_text(encoding="utf-8")
    code, stdout, err = run_cli("check", tmp_path / "plan.yaml", "--json")
    assert code == 0, err
    assert not [f for f in json.loads(stdout)["findings"] if f["code"] == "engine-kv-cache-dtype"]


def test_expert_parallelism_reaches_both_engines(tmp_path, run_cli):
    """QA's qmoe plan: Qwen3-235B-A22B's 128 experts sharded whole over TP 4 (32 a GPU). vLLM: enable-expert-parallel
    (its EP group is the TP GPUs); SGLang: ep-size 4, the whole tp-size."""
    plan_text = "model: Qwen3-235B-A22B\ngpu: h200\ntp: 4\nexpert_parallel: true\nweight_dtype: fp8\n"
    out, pool = _generate(tmp_path, run_cli, plan_text)
    assert pool["engine"]["enable_expert_parallel"] is True
    config = _load(out / "vllm" / "default.yaml")
    assert config["enable-expert-parallel"] is True
    assert list(config)[:4] == ["model", "served-model-name", "tensor-parallel-size", "enable-expert-parallel"]
    _assert_vllm_flags(config)
    out, _ = _generate(tmp_path / "sglang", run_cli, plan_text + "engine: sglang\n", "sglang")
    config = _load(out / "sglang" / "default.yaml")
    assert config["ep-size"] == 4 and config["tp-size"] == 4
    _assert_sglang_flags(config)


@pytest.mark.parametrize(("state_dtype", "spelt"), [("float32", "float32"), ("bf16", "bfloat16"), ("fp16", "float16")])
def test_the_recurrent_state_dtype_reaches_both_engines(tmp_path, run_cli, state_dtype, spelt):
    """QA's jamba plan: Jamba 1.5 Mini's Mamba layers keep their SSM state at the deployment's state_dtype; vLLM's
    mamba-ssm-cache-dtype and SGLang's mamba-ssm-dtype spell quotacalc's bf16/fp16/fp32 bfloat16/float16/float32."""
    plan_text = f"model: AI21-Jamba-1.5-Mini\ngpu: h100-sxm\ntp: 2\nstate_dtype: {state_dtype}\n"
    out, pool = _generate(tmp_path, run_cli, plan_text)
    assert pool["engine"]["mamba_ssm_cache_dtype"] == spelt
    config = _load(out / "vllm" / "default.yaml")
    assert config["mamba-ssm-cache-dtype"] == spelt
    _assert_vllm_flags(config)
    out, _ = _generate(tmp_path / "sglang", run_cli, plan_text + "engine: sglang\n", "sglang")
    config = _load(out / "sglang" / "default.yaml")
    assert config["mamba-ssm-dtype"] == spelt
    _assert_sglang_flags(config)


def test_unset_settings_write_nothing_new(tmp_path, run_cli):
    """Jamba at its default state dtype, and a Llama (no recurrent state, no experts) given state_dtype float32,
    which prices it alike: no expert or state key, so files of plans without these settings are unchanged."""
    out, pool = _generate(tmp_path, run_cli, "model: AI21-Jamba-1.5-Mini\ngpu: h100-sxm\ntp: 2\n")
    assert pool["engine"]["mamba_ssm_cache_dtype"] is None and pool["engine"]["enable_expert_parallel"] is False
    assert not {"mamba-ssm-cache-dtype", "enable-expert-parallel"} & set(_load(out / "vllm" / "default.yaml"))
    plan_text = "model: Llama-3.1-8B-Instruct\ngpu: b200\ntp: 1\nstate_dtype: float32\n"
    out, pool = _generate(tmp_path / "llama", run_cli, plan_text)
    assert pool["engine"]["mamba_ssm_cache_dtype"] is None
    assert "mamba-ssm-cache-dtype" not in _load(out / "vllm" / "default.yaml")


def _with_engine(policy, sglang_pools: tuple[str, ...] = (), **engine_changes):
    """The sample policy, each pool's engine settings changed as given, the named pools priced as SGLang."""
    pools = tuple(
        pool.model_copy(
            update={
                "engine": pool.engine.model_copy(update=engine_changes),
                "serving_engine": "sglang" if pool.name in sglang_pools else pool.serving_engine,
            }
        )
        for pool in policy.pools
    )
    return policy.model_copy(update={"pools": pools})


def test_a_state_dtype_neither_engine_has_is_left_out_and_said():
    """An fp8 recurrent state (priced at 1 byte) is no choice of vLLM's (auto|bfloat16|float16|float32) nor
    SGLang's (bfloat16|float16|float32): the key is left out and LIMITS.md names the pool and the dtype."""
    policy = _with_engine(platform_policy(), ("long",), mamba_ssm_cache_dtype="fp8")
    assert "mamba-ssm-cache-dtype" not in vllm.documents(policy)["vllm/standard.yaml"]
    assert "mamba-ssm-dtype" not in sglang.documents(policy)["sglang/long.yaml"]
    (line,) = [line for line in vllm.export(policy, {}, ExportOptions()).limits if "recurrent state" in line]
    assert line.startswith("Pool standard: recurrent state dtype fp8 has no vLLM 0.33.0 mamba-ssm-cache-dtype choice")
    (line,) = [line for line in sglang.export(policy, {}, ExportOptions()).limits if "recurrent state" in line]
    assert line.startswith("Pool long: recurrent state dtype fp8 has no SGLang 0.5.23 mamba-ssm-dtype choice")


def test_each_target_reports_only_its_own_pools():
    """Pool long runs SGLang: an int8 KV cache there is the sglang target's line, not a vLLM one."""
    policy = _with_engine(platform_policy(), ("long",), kv_cache_dtype="int8")
    vllm_lines = [line for line in vllm.export(policy, {}, ExportOptions()).limits if "KV cache dtype" in line]
    assert vllm_lines == [
        "Pool standard: KV cache dtype int8 has no vLLM 0.33.0 kv-cache-dtype choice, so the file leaves it out and "
        "vLLM keeps the checkpoint's dtype, which the price did not assume: price the pool with a kv_dtype vLLM "
        "keeps (auto, bf16, fp16, fp8, nvfp4)."
    ]
    assert any(
        line.startswith("KV cache dtype int8: no SGLang 0.5.23 choice")
        for line in sglang.export(policy, {}, ExportOptions()).limits
    )
