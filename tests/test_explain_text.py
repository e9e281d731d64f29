"""The words of ``--explain``: what each descriptive step says about its inputs.

tests/test_explain_steps.py redoes the arithmetic of every step whose substituted text is a formula;
the steps here describe their inputs in words (the routing assumed, the MoE backend that pads the
experts, where a default came from, how many prefill chunks a prompt takes), so the words are the
figure a reader checks. Each expectation is worked from the model's config or the flags given.
"""

from __future__ import annotations

import pytest

from quotacalc import Deployment, price, resolve
from quotacalc.errors import QuotacalcError


def steps_of(**deployment) -> dict:
    return {step.name: step for step in price(resolve(Deployment(**deployment))).steps}


# --------------------------------------------------------------------------- MoE routing


def test_uniform_routing_is_named_in_the_expert_step():
    # Mixtral 8x7B: 8 experts, top 2; batch 4: 8 × (1 − (6/8)^4) experts a layer.
    steps = steps_of(model="Mixtral-8x7B-v0.1", gpu="h100-sxm", tp=2, batch=4)
    touched = steps["expected_experts_touched"]
    assert touched.formula == "E × (1 − (1 − k/E)^B)"
    assert touched.note == "per MoE layer per decode step, assuming uniform routing"
    decode = steps["decode_weight_bytes_per_gpu"]
    assert decode.formula == "(non-expert bytes + moe_layers × experts_touched × expert_bytes) / TP"
    # 32 MoE layers; 8 × (1 − 0.75^4) = 5.46875 experts touched, printed to 5 significant digits.
    assert " + 32 × 5.4688 × " in decode.substituted
    assert decode.substituted.endswith(") / 2")


def test_zipf_skew_is_named_with_its_exponent():
    steps = steps_of(model="Mixtral-8x7B-v0.1", gpu="h100-sxm", tp=2, batch=4, expert_skew=1.0)
    assert steps["expected_experts_touched"].note == "per MoE layer per decode step, assuming Zipf skew 1.0"
    assert steps["expected_experts_touched"].substituted == "E=8, k=2, B=4, skew=1.0"


def test_expert_parallel_names_whole_experts_per_rank():
    # EP 2 over 8 experts: 4 whole experts a GPU, each touched with p = 5.46875 / 8 = 0.68359375.
    steps = steps_of(model="Mixtral-8x7B-v0.1", gpu="h100-sxm", tp=2, batch=4, expert_parallel=True)
    busiest = steps["busiest_rank_experts_touched"]
    assert busiest.substituted == "E/EP = 4, p = 0.6836, EP = 2"
    decode = steps["decode_weight_bytes_per_gpu"]
    assert decode.formula == "non-expert bytes / TP + moe_layers × busiest_rank_experts_touched × expert_bytes"
    assert decode.substituted.startswith("3,211,272,192 / 2 + 32 × ")  # the non-expert bytes, split over TP 2


# --------------------------------------------------------------------------- MXFP4 padding backend


@pytest.mark.parametrize(
    ("gpu", "backend", "expected"),
    [
        ("a100-80gb-sxm", None, "marlin"),  # Ampere: the Triton kernels need SM90+, vLLM falls back to Marlin
        ("h100-sxm", None, "triton"),
        ("b200", None, "flashinfer-trtllm"),
        ("mi300x", None, "rocm"),  # chosen by vendor, not by the GPU's id
        ("h100-sxm", "marlin", "marlin"),  # --mxfp4-moe-backend wins over the GPU's default
    ],
)
def test_padding_note_names_the_backend(gpu, backend, expected):
    steps = steps_of(model="gpt-oss-120b", gpu=gpu, tp=2, mxfp4_moe_backend=backend)
    note = steps["weight_bytes_per_gpu"].note
    # gpt-oss's BF16 routers, 36 x (2,880 x 128 + 128) x 2 B, are whole on both ranks.
    assert note == (
        "26,551,296 B of layers the engine keeps whole on every rank (MLA latent down-projections, MoE routers: "
        "ReplicatedLinear in vLLM and SGLang) add (1 − 1/TP) of themselves; "
        f"vLLM's {expected} MoE backend rounds the experts' sizes up for its kernels (core/weights.py)"
    )


# --------------------------------------------------------------------------- KV and state, in words


def test_hybrid_kv_and_state_are_counted_over_their_own_layers():
    # Jamba 1.5 Mini: attention every 8th of 32 layers = 4 layers, each 2 × 8 KV heads × 128 = 2,048
    # values a token; the 28 Mamba layers hold (4 − 1) × 8,192 conv values + 8,192 × 16 SSM values each.
    steps = steps_of(model="AI21-Jamba-1.5-Mini", gpu="h100-sxm", tp=2)
    assert steps["kv_bytes_per_token"].substituted == "4 layers, 8,192 values × 2 B (bf16)"
    state_values = 28 * ((4 - 1) * 8192 + 8192 * 16)
    assert state_values == 4_358_144
    assert steps["state_bytes_per_sequence"].substituted == "4,358,144 values × 2 B (bf16)"


def test_ttft_counts_the_prefill_chunks_of_the_prompt():
    # 20,000 tokens in chunks of vLLM's default 8,192 on an H100: 8,192 + 8,192 + 3,616, three chunks.
    steps = steps_of(model="Llama-3.1-8B-Instruct", gpu="h100-sxm", context=20_000)
    # Each chunk's terms: (max(FLOP time, weight read) + overheads + all-reduces), after the request overhead.
    assert steps["ttft_s"].substituted.startswith("0.003 + (max(")
    assert steps["ttft_s"].substituted.count("(max(") == 3
    one = steps_of(model="Llama-3.1-8B-Instruct", gpu="h100-sxm", context=8192)
    assert one["ttft_s"].substituted.count("(max(") == 1
    many = steps_of(model="Llama-3.1-8B-Instruct", gpu="h100-sxm", context=100_000)
    # 100,000 tokens: 13 chunks (12 × 8,192 + 1,696); the first and last in full, the 11 between summed.
    assert many["ttft_s"].substituted.count("(max(") == 2 and "(the middle 11 chunks)" in many["ttft_s"].substituted


# --------------------------------------------------------------------------- pool: defaults and given values


def test_the_reserve_says_whether_the_token_budget_is_the_default():
    default = steps_of(model="Llama-3.1-8B-Instruct", gpu="h100-sxm")
    assert "max(8,192 (vLLM default) × " in default["runtime_reserve_bytes_per_gpu"].substituted
    # SGLang keeps activations outside its memory share: its budget sizes the share (mem_fraction_static) instead.
    sglang = steps_of(model="Llama-3.1-8B-Instruct", gpu="b200", engine="sglang")
    assert "max(16,384 (sglang default), 2,048)" in sglang["kv_pool_bytes_estimate_per_gpu"].note
    given = steps_of(model="Llama-3.1-8B-Instruct", gpu="h100-sxm", max_num_batched_tokens=4096)
    assert "max(4,096 (given) × " in given["runtime_reserve_bytes_per_gpu"].substituted
    assert default["kv_pool_bytes_estimate_per_gpu"].formula == (
        "memory_utilization × HBM − weight_bytes_per_gpu − runtime_reserve_bytes_per_gpu"
    )


@pytest.mark.parametrize("basis", ["roofline", "engine"])
def test_prices_name_their_basis(basis):
    steps = steps_of(model="Llama-3.1-8B-Instruct", gpu="h100-sxm", pricing_basis=basis)
    for name in ("output_token_s", "output_weight", "replica_units_per_s"):
        assert steps[name].note == f"pricing_basis {basis}"


# --------------------------------------------------------------------------- the errors' field and fix


def test_a_pool_of_exactly_nothing_is_refused_with_the_reserve_to_blame():
    # Llama 3.1 8B in BF16 on one H100 (16,060,522,496 B of weights) with the whole card given to the
    # engine and a reserve of exactly the rest: the pool is 0 bytes, not a tiny positive one. The weights take a
    # fifth of the card: the reserve the user set leaves no pool, and the error names it.
    hbm_bytes, weight_bytes = 85_029_158_912, 16_060_522_496
    reserve_gib = (hbm_bytes - weight_bytes) / 2**30
    with pytest.raises(QuotacalcError) as refused:
        price(
            resolve(
                Deployment(
                    model="Llama-3.1-8B-Instruct",
                    gpu="h100-sxm",
                    memory_utilization=1.0,
                    runtime_reserve_gib=reserve_gib,
                )
            )
        )
    assert refused.value.field == "runtime_reserve_gib"
    assert refused.value.fix == "lower --runtime-reserve-gib or raise --memory-utilization"
    assert refused.value.problem.startswith("1 of h100-sxm's 85.0 GB less 16.1 GB of weights and 69.0 GB of runtime ")


def test_a_context_above_the_models_maximum_names_the_maximum():
    with pytest.raises(QuotacalcError) as refused:
        price(resolve(Deployment(model="Llama-3.1-8B-Instruct", gpu="h100-sxm", context=200_000)))
    assert refused.value.field == "context"
    assert refused.value.fix == "use a context of at most 131,072 tokens"  # max_position_embeddings
