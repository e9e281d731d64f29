"""SGLang: one ``python -m sglang.launch_server --config`` file per pool priced as SGLang (``engine: sglang``).

Keys are the long flag names with their dashes (SGLang's config reader passes each key on as ``--key``), from
the same engine settings the vLLM target writes: the context, the decode batch, the chunk, and the memory share
the price assumed (``mem-fraction-static``: SGLang's own default rule or the plan's). Priorities keep the policy's
order (lower first, as vLLM's): SGLang serves larger values first unless told otherwise, and schedules by priority
only under ``fcfs`` or ``lof``; its preemption threshold is set to 0 so the tiers' gaps of 1 preempt. The header
names the first release that keys its prefix cache by ``cache_salt``. Flags and choices are checked in the tests against the list extracted from a stated
SGLang release (scripts/extract_sglang_flags.py).
"""

from __future__ import annotations

from collections.abc import Mapping

from quotacalc.core.policy import EngineSettings, PoolPolicy, QuotaPolicy
from quotacalc.exporters.base import ENGINE_PORT, Export, ExportOptions
from quotacalc.exporters.engine_files import (
    config_files,
    lora_limits,
    pool_documents,
    weight_limits,
)

#: The release whose flags the generated files are checked against (tests/targets/sglang-<version>-flags.json).
SGLANG_VERSION = "0.5.23"
#: The engine profile (quotacalc engines) whose pools this target starts.
SGLANG_ENGINE = "sglang"
#: The first release whose scheduler carries a request's cache_salt into its radix cache: read
#: in the wheels, Req.cache_salt first appears in 0.5.18's sglang/srt/managers/schedule_batch.py; 0.5.3 to 0.5.17
#: fold cache_salt into the radix cache's extra_key on the OpenAI-compatible endpoints only
#: (_compute_extra_key in sglang/srt/entrypoints/openai), and earlier releases ignore it.
SGLANG_CACHE_SALT_MIN_VERSION = "0.5.18"
#: SGLang preempts a running request only for one whose priority differs by more than
#: --priority-scheduling-preemption-threshold (``priority_diff > threshold`` in PrefillAdder.preempt_to_schedule,
#: sglang/srt/managers/schedule_policy.py; default 10), so tiers 0, 1 and 2 would never preempt one another. 0 lets
#: any more urgent tier preempt a less urgent one, as vLLM's priority scheduling does, and equal tiers never.
PREEMPTION_THRESHOLD = 0

#: The policy's KV cache dtype (vLLM's names) -> SGLang's --kv-cache-dtype choice; None: SGLang has none.
KV_CACHE_DTYPES = {
    "auto": "auto",
    "bfloat16": "bf16",
    "fp8": "fp8_e4m3",
    "fp8_e4m3": "fp8_e4m3",
    "fp8_e5m2": "fp8_e5m2",
    "nvfp4": "nvfp4",
}
#: The policy's recurrent state dtype (vLLM's names) -> SGLang's --mamba-ssm-dtype choice (bfloat16, float16,
#: float32; ExecMamba.mamba_ssm_dtype); None: SGLang has none.
MAMBA_SSM_DTYPES = {"bfloat16": "bfloat16", "float16": "float16", "float32": "float32"}


def engine_config(engine: EngineSettings, least_urgent_priority: int | None = None) -> dict:
    """The config file's mapping for one pool's engine; ``least_urgent_priority``: the value a request without a
    priority gets (the policy's least urgent tier's), where priorities are scheduled."""
    config: dict = {
        "model-path": engine.model,
        "served-model-name": engine.served_model_name,
        "tp-size": engine.tensor_parallel_size,
        "context-length": engine.max_model_len,
        "max-running-requests": engine.max_num_seqs,
        "chunked-prefill-size": engine.max_num_batched_tokens,
        "mem-fraction-static": engine.gpu_memory_utilization,
        # SGLang listens on 127.0.0.1:30000 unless told: the gateways send to the pool's service on this port.
        "host": "0.0.0.0",
        "port": ENGINE_PORT,
    }
    if engine.enable_expert_parallel:
        # The price shards the experts whole over the replica's GPUs: SGLang's expert-parallel group is ep-size GPUs
        # of the tp-size (Parallel.ep_size), all of them here, as vLLM's enable-expert-parallel.
        config["ep-size"] = engine.tensor_parallel_size
    if engine.quantization is not None:
        config["quantization"] = engine.quantization  # FP8 weights priced on a plain checkpoint: quantized at load
    if (kv_cache_dtype := KV_CACHE_DTYPES.get(engine.kv_cache_dtype)) is not None:
        config["kv-cache-dtype"] = kv_cache_dtype
    if (state_dtype := MAMBA_SSM_DTYPES.get(engine.mamba_ssm_cache_dtype or "")) is not None:
        config["mamba-ssm-dtype"] = state_dtype
    if not engine.enable_prefix_caching:
        config["disable-radix-cache"] = True
    config["schedule-policy"] = "fcfs"
    if engine.scheduling_policy == "priority":
        config["enable-priority-scheduling"] = True
        config["schedule-low-priority-values-first"] = True
        config["priority-scheduling-preemption-threshold"] = PREEMPTION_THRESHOLD
        if least_urgent_priority is not None:
            # SGLang otherwise ranks a request without a priority behind every other one.
            config["default-priority-value"] = least_urgent_priority
    return config


def documents(policy: QuotaPolicy) -> dict[str, dict]:
    """Each SGLang pool's config file, by path: a pool priced as another engine gets none."""
    least_urgent = max((tier.priority for tier in policy.tiers), default=None)
    return pool_documents(policy, "sglang", SGLANG_ENGINE, lambda engine: engine_config(engine, least_urgent))


def _runs_sglang(pool: PoolPolicy) -> bool:
    return pool.serving_engine == SGLANG_ENGINE


def export(policy: QuotaPolicy, salts: Mapping[str, str], options: ExportOptions) -> Export:
    """A ``sglang.launch_server --config`` file per SGLang pool."""
    files = config_files(
        documents(policy),
        f"SGLang >= {SGLANG_CACHE_SALT_MIN_VERSION} (the first release that keys its prefix cache by a request's "
        f"cache_salt; flags checked against {SGLANG_VERSION}): python -m sglang.launch_server --config",
    )
    return Export(target="sglang", files=files, notes=_limits(policy))


def _limits(policy: QuotaPolicy) -> tuple[tuple[str, str], ...]:
    pools = [pool for pool in policy.pools if _runs_sglang(pool)]
    if not pools:
        return (
            (
                "files",
                "No pool of this plan is priced as SGLang (engine: sglang), so no file: its pools' engine files are "
                "the vllm target's.",
            ),
        )
    limits = [
        (
            "salt",
            f"cache_salt needs SGLang {SGLANG_CACHE_SALT_MIN_VERSION} or later, the first release whose scheduler keys "
            "its prefix cache by it (read in the release wheels); 0.5.3 to 0.5.17 key it only through extra_key on "
            "the OpenAI-compatible endpoints (not the native /generate), and releases before 0.5.3 ignore it: salted "
            "tenants share the prefix cache there.",
        ),
    ]
    scheduled = [pool.name for pool in pools if pool.engine.scheduling_policy == "priority"]
    if scheduled:
        limits.append(
            (
                "priority",
                f"Priority preemption (pools {', '.join(scheduled)}): SGLang preempts a running request only for one "
                "whose priority differs by more than priority-scheduling-preemption-threshold (10 by default, under "
                f"which tiers 10 or fewer apart, such as 0, 1 and 2, never preempt); these files set it to "
                f"{PREEMPTION_THRESHOLD}, so a more urgent tier preempts a less urgent one, and the tiers' priorities "
                "stay the policy's.",
            )
        )
    unmapped = sorted({pool.engine.kv_cache_dtype for pool in pools} - set(KV_CACHE_DTYPES))
    if unmapped:
        limits.append(
            (
                "files",
                f"KV cache dtype {', '.join(unmapped)}: no SGLang {SGLANG_VERSION} choice; kv-cache-dtype is left to "
                "SGLang's default (the checkpoint's), which the price did not assume.",
            )
        )
    for pool in pools:
        state = pool.engine.mamba_ssm_cache_dtype
        if state is not None and state not in MAMBA_SSM_DTYPES:
            limits.append(
                (
                    "files",
                    f"Pool {pool.name}: recurrent state dtype {state} has no SGLang {SGLANG_VERSION} mamba-ssm-dtype "
                    "choice, so the file leaves it out and SGLang keeps the model's, which the price did not assume: "
                    "price the pool with a state_dtype SGLang keeps (bf16, fp16, fp32).",
                )
            )
    limits += [("files", line) for line in weight_limits(policy, lambda engine: engine == "sglang")]
    limits += [
        ("lora", line)
        for line in lora_limits(policy, "enable-lora and lora-paths", lambda engine: engine == SGLANG_ENGINE)
    ]
    return tuple(limits)
