"""Relations inside a model config that each field alone cannot show: heads against KV heads, experts
against top-k, groups against heads. A config that breaks one describes no model that can run."""

from __future__ import annotations

from quotacalc.core.arch import ModelArch
from quotacalc.errors import QuotacalcError

#: More experts than any published model by two orders of magnitude; routing sums loop over them.
MAX_EXPERTS = 65_536
#: Multimodal wrappers whose decoder sizes sit under ``text_config``.
_WRAPPED_TYPES = frozenset(
    {
        "gemma3",
        "gemma4",
        "llama4",
        "mistral3",
        "qwen3_5",
        "qwen3_5_moe",
        "exaone4_5",
        "qwen3_vl",
        "llava",
        "llava_next",
        "llava_onevision",
        "internvl",
        "idefics3",
        "smolvlm",
        "paligemma",
    }
)
#: Where a family states its expert count and top-k, when not as ``num_experts`` / ``num_experts_per_tok``.
_LOCAL_EXPERTS = ("num_local_experts", "num_experts_per_tok")
_ROUTED_EXPERTS = ("n_routed_experts", "num_experts_per_tok")
_EXPERT_FIELDS = {
    "gemma4": ("num_experts", "top_k_experts"),
    "gemma4_text": ("num_experts", "top_k_experts"),
    "granitemoe": _LOCAL_EXPERTS,
    "granitemoehybrid": _LOCAL_EXPERTS,
    "phimoe": _LOCAL_EXPERTS,
    "mixtral": _LOCAL_EXPERTS,
    "gpt_oss": _LOCAL_EXPERTS,
    "minimax_m2": _LOCAL_EXPERTS,
    "llama4": _LOCAL_EXPERTS,
    "llama4_text": _LOCAL_EXPERTS,
    "deepseek_v2": _ROUTED_EXPERTS,
    "deepseek_v3": _ROUTED_EXPERTS,
    "glm4_moe": _ROUTED_EXPERTS,
    "glm4_moe_lite": _ROUTED_EXPERTS,
    "dots1": _ROUTED_EXPERTS,
    "nemotron_h": _ROUTED_EXPERTS,
    "kimi_linear": ("num_experts", "num_experts_per_token"),
    "ernie4_5_moe": ("moe_num_experts", "moe_k"),
    "hunyuan_v1_moe": ("num_experts", "moe_topk"),
    "dbrx": ("ffn_config.moe_num_experts", "ffn_config.moe_top_k"),
    "longcat_flash": ("n_routed_experts", "moe_topk"),
}


def check_arch(arch: ModelArch, source: str) -> None:
    """Raise a one-line error naming the config field whose relation to another does not hold."""
    prefix = "text_config." if arch.model_type in _WRAPPED_TYPES else ""
    seen: set[int] = set()
    for layer in arch.layers:
        for part in (layer.mixer, layer.feed_forward):
            if part is None or id(part) in seen:
                continue
            seen.add(id(part))
            _check_part(
                part, source, prefix, _EXPERT_FIELDS.get(arch.model_type, ("num_experts", "num_experts_per_tok"))
            )


def _check_part(part: object, source: str, prefix: str, expert_fields: tuple[str, str]) -> None:
    heads = getattr(part, "num_heads", None)
    kv_heads = getattr(part, "num_kv_heads", None)
    if heads and kv_heads:
        if kv_heads > heads:
            raise QuotacalcError(
                f"{kv_heads} KV heads is more than the {heads} attention heads",
                source=source,
                field=f"{prefix}num_key_value_heads",
                fix="grouped-query attention has at most as many KV heads as query heads",
            )
        if heads % kv_heads:
            raise QuotacalcError(
                f"{kv_heads} KV heads does not divide the {heads} attention heads",
                source=source,
                field=f"{prefix}num_key_value_heads",
                fix="each KV head serves a whole group of query heads",
            )
    groups = getattr(part, "n_groups", None)
    if heads and groups and heads % groups:
        raise QuotacalcError(
            f"{groups} Mamba groups do not divide the {heads} Mamba heads", source=source, field=f"{prefix}n_groups"
        )
    k_heads = getattr(part, "num_k_heads", None)
    v_heads = getattr(part, "num_v_heads", None)
    if k_heads and v_heads and v_heads % k_heads:
        raise QuotacalcError(
            f"{k_heads} linear-attention key heads do not divide the {v_heads} value heads",
            source=source,
            field=f"{prefix}linear_num_value_heads",
            fix="each key head serves a whole group of value heads",
        )
    experts = getattr(part, "num_experts", None)
    top_k = getattr(part, "top_k", None)
    if experts and top_k:
        if experts > MAX_EXPERTS:
            raise QuotacalcError(
                f"{experts:,} experts is more than quotacalc prices ({MAX_EXPERTS:,})",
                source=source,
                field=f"{prefix}{expert_fields[0]}",
            )
        if top_k > experts:
            raise QuotacalcError(
                f"routes each token to {top_k} experts, but there are only {experts}",
                source=source,
                field=f"{prefix}{expert_fields[1]}",
                fix="top-k is at most the number of experts",
            )
