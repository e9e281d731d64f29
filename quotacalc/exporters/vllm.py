"""vLLM: one ``vllm serve --config`` file per pool, keys being the long flag names (``tensor-parallel-size``, ...).

The engine is sized by the policy (EngineSettings) so its queue stays shallow: fair queueing and quotas belong
to the gateway, and the engine only orders what it is given (``scheduling-policy: priority``, lower first).
Flags and choices are checked in the tests against the list extracted from a stated vLLM release
(scripts/extract_vllm_flags.py).
"""

from __future__ import annotations

from collections.abc import Mapping

from quotacalc.core.deployment import GENERIC_ENGINE
from quotacalc.core.policy import (
    VLLM_KV_CACHE_DTYPES,
    VLLM_MAMBA_SSM_CACHE_DTYPES,
    EngineSettings,
    PoolPolicy,
    QuotaPolicy,
)
from quotacalc.exporters.base import Export, ExportOptions
from quotacalc.exporters.engine_files import (
    config_files,
    lora_limits,
    pool_documents,
    weight_limits,
)

#: The release whose flags the generated files are checked against (tests/targets/vllm-<version>-flags.json).
VLLM_VERSION = "0.33.0"

#: EngineSettings field -> vLLM long flag, in the order written.
FLAGS = (
    ("model", "model"),
    ("served_model_name", "served-model-name"),
    ("tensor_parallel_size", "tensor-parallel-size"),
    ("enable_expert_parallel", "enable-expert-parallel"),
    ("max_model_len", "max-model-len"),
    ("max_num_seqs", "max-num-seqs"),
    ("max_num_batched_tokens", "max-num-batched-tokens"),
    ("gpu_memory_utilization", "gpu-memory-utilization"),
    ("kv_cache_dtype", "kv-cache-dtype"),
    ("mamba_ssm_cache_dtype", "mamba-ssm-cache-dtype"),
    ("enable_prefix_caching", "enable-prefix-caching"),
    ("scheduling_policy", "scheduling-policy"),
)


#: Fields written only when set: unset, vLLM's default is what the price assumed (experts split by TP, the model's
#: state dtype), and a file without them stays as it was.
_WRITTEN_WHEN_SET = frozenset({"enable_expert_parallel", "mamba_ssm_cache_dtype"})
#: Fields whose value vLLM checks against its choices: one outside them (int8 KV cache) would stop vLLM at start-up,
#: so it is left out and LIMITS.md says so.
_CHOICES = {"kv_cache_dtype": VLLM_KV_CACHE_DTYPES, "mamba_ssm_cache_dtype": VLLM_MAMBA_SSM_CACHE_DTYPES}


def _writable(field: str, value: object) -> bool:
    if field in _WRITTEN_WHEN_SET and (value is None or value is False):
        return False
    return field not in _CHOICES or value in _CHOICES[field]


def engine_config(engine: EngineSettings) -> dict:
    """The config file's mapping for one pool's engine."""
    config = {flag: getattr(engine, field) for field, flag in FLAGS if _writable(field, getattr(engine, field))}
    if engine.quantization is not None:
        config["quantization"] = engine.quantization  # FP8 weights priced on a plain checkpoint: quantized at load
    return config


def documents(policy: QuotaPolicy) -> dict[str, dict]:
    """Each vLLM pool's config file, by path: a pool priced as another engine (SGLang) gets none."""
    return pool_documents(policy, "vllm", GENERIC_ENGINE, engine_config)


def _runs_vllm(pool: PoolPolicy) -> bool:
    return pool.serving_engine == GENERIC_ENGINE


def export(policy: QuotaPolicy, salts: Mapping[str, str], options: ExportOptions) -> Export:
    """A ``vllm serve --config`` file per pool."""
    files = config_files(documents(policy), f"vLLM {VLLM_VERSION}: vllm serve --config")
    return Export(target="vllm", files=files, notes=_limits(policy))


def _limits(policy: QuotaPolicy) -> tuple[tuple[str, str], ...]:
    limits: list[tuple[str, str]] = []
    others = [f"{pool.name} ({pool.serving_engine})" for pool in policy.pools if not _runs_vllm(pool)]
    if others:
        limits.append(
            (
                "files",
                f"No vllm serve file for {', '.join(others)}: the plan prices those pools as another engine (SGLang's "
                "file is the sglang target's; any other: the canonical target's engine block).",
            )
        )
    limits += [("files", line) for line in _dtype_limits(policy)]
    limits += [("files", line) for line in weight_limits(policy, lambda engine: engine == GENERIC_ENGINE)]
    limits += [
        ("lora", line)
        for line in lora_limits(policy, "enable-lora and lora-modules", lambda engine: engine == GENERIC_ENGINE)
    ]
    return tuple(limits)


def _dtype_limits(policy: QuotaPolicy) -> list[str]:
    """A line per vLLM pool whose KV cache or recurrent state dtype vLLM has no choice for: the file leaves the key
    out, so vLLM keeps its default and the replica's KV pool differs from the price's."""
    limits = []
    for pool in filter(_runs_vllm, policy.pools):
        engine = pool.engine
        if engine.kv_cache_dtype not in VLLM_KV_CACHE_DTYPES:
            limits.append(
                f"Pool {pool.name}: KV cache dtype {engine.kv_cache_dtype} has no vLLM {VLLM_VERSION} kv-cache-dtype "
                "choice, so the file leaves it out and vLLM keeps the checkpoint's dtype, which the price did not "
                "assume: price the pool with a kv_dtype vLLM keeps (auto, bf16, fp16, fp8, nvfp4)."
            )
        state = engine.mamba_ssm_cache_dtype
        if state is not None and state not in VLLM_MAMBA_SSM_CACHE_DTYPES:
            limits.append(
                f"Pool {pool.name}: recurrent state dtype {state} has no vLLM {VLLM_VERSION} "
                "mamba-ssm-cache-dtype choice, so the file leaves it out and vLLM keeps the model's, which the "
                "price did not assume: price the pool with a state_dtype vLLM keeps (bf16, fp16, fp32)."
            )
    return limits
