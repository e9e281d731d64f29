"""DeepSeek V4 (deepseek_v4: DeepSeek-V4-Flash, DeepSeek-V4-Pro) priced against transformers' own counts, with
cache, read and FLOP goldens derived by hand from vLLM's layout.

``reference_params_dsv4.json`` holds the counts transformers 5.24 builds on the meta device for the folders
``deepseek_v4_flash`` and ``deepseek_v4_pro`` (the command is in its ``generated_by``); the totals are also checked
in tests/test_reference_counts.py.

vLLM's cache per layer (all whole on every TP rank; fp8 only, as fp8_ds_mla):

* an entry, window or compressed: (head_dim 512 − rope 64) = 448 fp8 + 448 / 64 = 7 UE8M0 scale bytes + 1 pad
  + 64 bf16 rope x 2 B = 584 B (``head_bytes``, vllm/model_executor/layers/deepseek_v4_attention.py @ 0a291a2e;
  ``DeepseekSparseSWABackend.get_kv_cache_shape``, sparse_swa.py @ 03dc5649);
* every layer: a window of sliding_window 128 entries = 74,752 B per sequence;
* CSA (ratio 4): one entry per 4 tokens and an indexer key of 128 fp8 + one float32 scale = 132 B
  (deepseek_compressor.py @ 0de10a27): (584 + 132) / 4 = 179 B a token; HCA (ratio 128): 584 / 128 = 4.5625 B;
* compressor state, float32 (``CompressorStateCache``): CSA 8 tokens x 2 x 2 x 512 = 65,536 B and its indexer's
  8 x 2 x 2 x 128 x 4 = 16,384 B; HCA 128 x 2 x 512 x 4 = 524,288 B per sequence.

V4-Flash's 43 layers (compress_ratios 0, 0, then 4, 128 alternating, then 4): 2 window-only, 21 CSA, 20 HCA. Growth:
21 x 179 + 20 x 4.5625 = 3,850.25 B a token; fixed: 43 x 74,752 + 21 x 81,920 + 20 x 524,288 = 15,420,416 B a
sequence.

vllm-project/vllm#51041 reads "56 bytes/token" from "150K tokens in 7.7 GiB" (7.7 GiB / 150K is about 55 KB, not
B): that count is vLLM's logged max_concurrency x max_model_len, whose per-request memory reserves the window and
compressor-state groups for window − 1 + max_num_batched_tokens tokens (SlidingWindowSpec.max_memory_usage_bytes)
and rounds pages across its groups; the thread itself shows the ratio is not a per-token cost (4 to 93 KiB on one
machine). quotacalc prices the steady state: 3,850.25 B a token plus 15.4 MB a sequence; the per-group pages are
not modelled (kv_groups leaves DeepSeek V4 out).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import config_with as _config_with
from conftest import fixture_arch as _arch
from conftest import one_line_error as _one_line_error

from quotacalc import Deployment, price, resolve
from quotacalc.core.arch import CompressedSparseAttention, ParamGroup
from quotacalc.core.kv_groups import hybrid_layout
from quotacalc.core.memory import (
    attention_flops_per_output_token,
    attention_flops_per_prompt_token,
    kv_bytes_per_token,
    kv_bytes_per_token_per_gpu,
    request_kv_bytes,
    state_bytes_per_sequence,
)
from quotacalc.core.replica import replica_model
from quotacalc.errors import QuotacalcError

DATA = Path(__file__).parent / "data"
CONFIGS = DATA / "configs"

ENTRY = 448 + 448 // 64 + 1 + 64 * 2  # 584
INDEXER_KEY = 128 + 4  # 132
WINDOW = 128 * ENTRY  # 74,752
CSA_STATE = 8 * (2 * 2 * 512) * 4 + 8 * (2 * 2 * 128) * 4  # 65,536 + 16,384
HCA_STATE = 128 * (2 * 512) * 4  # 524,288
#: Per attended entry, every head: 2 x heads x (512 + 512) (QK^T and AV over the shared 512-wide K = V).
FLASH_ENTRY_FLOPS = 2 * 64 * (512 + 512)  # 131,072
#: The indexer, per scored compressed entry: 2 x index heads x index_head_dim.
SCORING_FLOPS = 2 * 64 * 128  # 16,384


pytestmark = pytest.mark.usefixtures("private_cache")


def _ratios(arch) -> list[int]:
    return [layer.mixer.compress_ratio for layer in arch.layers]


# --------------------------------------------------------------------------- totals and layouts


@pytest.mark.parametrize("folder", ["deepseek_v4_flash", "deepseek_v4_pro"])
def test_total_matches_transformers(folder):
    reference = json.loads((DATA / "reference_params_dsv4.json").read_text(encoding="utf-8"))["models"][folder]
    arch = _arch(folder)
    assert arch.total_params() == reference["total_params"]
    assert arch.tie_word_embeddings is reference["tie_word_embeddings"] is False


@pytest.mark.parametrize(
    ("folder", "layers", "window_only", "csa", "hca"),
    [("deepseek_v4_flash", 43, 2, 21, 20), ("deepseek_v4_pro", 61, 0, 30, 31)],
)
def test_layer_layout(folder, layers, window_only, csa, hca):
    """Flash: 0, 0, then 4, 128 alternating, a last 4 (the 44th entry, 0, is the MTP layer's). Pro: 128, 128, then
    4, 128 alternating, a last 4. Every layer has experts and the indexer is CSA's alone."""
    arch = _arch(folder)
    ratios = _ratios(arch)
    assert len(ratios) == layers and arch.mixer_counts() == {"deepseek_v4_attention": layers}
    assert (ratios.count(1), ratios.count(4), ratios.count(128)) == (window_only, csa, hca)
    assert [layer.mixer.has_indexer for layer in arch.layers] == [ratio == 4 for ratio in ratios]
    assert len(arch.moe_layers()) == layers


def test_flash_parameters_by_hand():
    """One Flash CSA layer's attention, from transformers' modules: q_a 4,096 x 1,024 + norm 1,024; kv_proj 4,096 x
    512 + norm 512; q_b 1,024 x 32,768; o_a 1,024 x 32,768 (8 groups of 4,096 -> 1,024); o_b 8,192 x 4,096; 64
    sinks; compressor kv and gate 2 x 4,096 x 1,024, position_bias 4 x 1,024, norm 512; indexer kv and gate
    2 x 4,096 x 256, position_bias 4 x 256, norm 128, q_b 1,024 x 64 x 128, weights_proj 4,096 x 64.
    Hyper-connections per layer: 2 x (24 x 16,384 + 24 + 3); the head's 4 x 16,384 + 4 + 1."""
    arch = _arch("deepseek_v4_flash")
    csa = arch.layers[2]
    replicated = (4_096 * 1_024 + 1_024) + (4_096 * 512 + 512)
    replicated += 2 * 4_096 * 1_024 + 4 * 1_024 + 512
    replicated += 2 * 4_096 * 256 + 4 * 256 + 128 + 1_024 * 64 * 128 + 4_096 * 64
    split = 3 * 1_024 * 32_768 + 64
    assert replicated == 25_435_264
    assert csa.mixer.replicated_params() == {ParamGroup.ATTENTION: replicated}
    assert csa.mixer.params() == {ParamGroup.ATTENTION: replicated + split}
    assert csa.hyper_connection_params == 2 * (24 * 16_384 + 24 + 3) == 786_486
    assert arch.final_norm_params == 4_096 + 4 * 16_384 + 4 + 1
    hca = arch.layers[3].mixer
    assert hca.replicated_params()[ParamGroup.ATTENTION] == (
        (4_096 * 1_024 + 1_024) + (4_096 * 512 + 512) + 2 * 4_096 * 512 + 128 * 512 + 512
    )


def test_flash_active_params_by_hand():
    """All but top-6 of 256 experts idle: 43 layers x 250 x 3 x 4,096 x 2,048 fewer than the total."""
    arch = _arch("deepseek_v4_flash")
    assert arch.active_params() == 284_332_230_231 - 43 * 250 * 3 * 4_096 * 2_048 == 13_799_622_231


# --------------------------------------------------------------------------- cache


def test_kv_bytes_per_token_and_state_by_hand():
    """Flash: 21 CSA x (584 + 132) / 4 + 20 HCA x 584 / 128 = 3,850.25 B a token, whole on every rank; fixed per
    sequence 43 windows + 21 CSA states + 20 HCA states = 15,420,416 B (module docstring)."""
    arch = _arch("deepseek_v4_flash")
    growth = 21 * (ENTRY + INDEXER_KEY) / 4 + 20 * ENTRY / 128
    assert kv_bytes_per_token(arch, 1) == growth == 3_850.25
    assert kv_bytes_per_token_per_gpu(arch, 1, 8) == growth
    state = 43 * WINDOW + 21 * CSA_STATE + 20 * HCA_STATE
    assert state_bytes_per_sequence(arch, 2) == state_bytes_per_sequence(arch, 2, 8) == state == 15_420_416
    assert request_kv_bytes(arch, 131_072, 1, 2) == growth * 131_072 + state == 520_080_384


def test_pro_kv_bytes_per_token_by_hand():
    """Pro: 30 CSA x 179 + 31 HCA x 4.5625 = 5,511.4375 B a token; 61 windows, 30 CSA and 31 HCA states."""
    arch = _arch("deepseek_v4_pro")
    assert kv_bytes_per_token(arch, 1) == 30 * 179 + 31 * 4.5625 == 5_511.4375
    assert state_bytes_per_sequence(arch, 2) == 61 * WINDOW + 30 * CSA_STATE + 31 * HCA_STATE


def test_pool_is_priced_by_bytes_not_the_generic_hybrid_layout():
    """vLLM's V4 groups (window, compressed, indexer, compressor state) share pages by rules of their own: the
    generic hybrid layout must not stand for them."""
    assert hybrid_layout(_arch("deepseek_v4_flash"), 1, 2, 8) is None


@pytest.mark.parametrize("kv_dtype", ["bf16", "fp16", "nvfp4"])
def test_kv_dtype_other_than_fp8_is_refused(kv_dtype):
    """DeepseekV4MLAAttention asserts an fp8 KV cache dtype (and makes it fp8_ds_mla)."""
    with pytest.raises(QuotacalcError) as caught:
        resolve(Deployment(model=str(CONFIGS / "deepseek_v4_flash"), gpu="h200", tp=8, kv_dtype=kv_dtype))
    message = str(caught.value)
    assert caught.value.field == "kv_dtype" and "fp8 KV cache only" in message and "\n" not in message


def test_without_kv_dtype_the_cache_is_fp8_and_the_engine_is_told_so():
    """The only dtype vLLM keeps V4's cache in is the default (the checkpoint's bf16 would be refused), and the
    generated vLLM settings name it, since vLLM's 'auto' means the checkpoint's dtype."""
    from quotacalc.core.plan import Plan, PlanTenant, Pool, Tier
    from quotacalc.core.policy import build_policy

    deployment = Deployment(model=str(CONFIGS / "deepseek_v4_flash"), gpu="h200", tp=8)
    inputs = resolve(deployment)
    assert inputs.kv_dtype.name == "fp8" and inputs.arch.checkpoint_dtype == "bf16"
    explicit = resolve(deployment.model_copy(update={"kv_dtype": "fp8"}))
    assert price(inputs).kv_pool_tokens == price(explicit).kv_pool_tokens
    tier = Tier(
        name="t",
        max_context_tokens=8_192,
        kv_cap_tokens_per_replica=100_000,
        max_concurrent_sequences=8,
        max_output_tokens=1_024,
        priority=0,
    )
    plan = Plan(
        pools=(Pool(name="p", deployment=deployment, replicas=1),),
        tiers=(tier,),
        tenants=(PlanTenant(name="a", tier="t", units_per_s=100),),
    )
    (pool,) = build_policy(plan, {"p": price(inputs)}).pools
    assert pool.engine.kv_cache_dtype == "fp8"


# --------------------------------------------------------------------------- reads and FLOPs


def test_decode_reads_and_flops_at_128k():
    """Flash at 131,072 tokens, TP 8, per sequence and GPU. Reads: HCA 20 x 131,072 x 4.5625 = 11,960,320; every
    indexer key 21 x 131,072 x 33 = 90,832,896; the selected CSA entries 21 x (512 x 4 tokens) x 146 = 6,279,168;
    the fixed state, read whole as the replica model reads any state, 15,420,416: 124,492,800 B.

    FLOPs of one output token (131,072 a window or compressed entry): 2 window-only layers x 128 entries; 20 HCA x
    (128 + 1,024); 21 CSA x (128 + 512) + 21 x 32,768 entries scored at 16,384. The replica's: each rank's 8 heads
    padded to FlashMLA's 64 (8 x 131,072 an entry), and the scoring on each of the 8 ranks."""
    inputs = resolve(
        Deployment(model=str(CONFIGS / "deepseek_v4_flash"), gpu="h200", tp=8, context=131_072, kv_dtype="fp8")
    )
    model = replica_model(inputs, kv_pool_bytes_per_gpu=1e11)
    read = 20 * 131_072 * ENTRY / 128 + 21 * 131_072 * INDEXER_KEY / 4 + 21 * 2_048 * ENTRY / 4 + 15_420_416
    assert model.sequence_kv_read_bytes_per_gpu(131_072) == read == 124_492_800
    assert model.sequence_kv_bytes_per_gpu(131_072) == 520_080_384
    flops = FLASH_ENTRY_FLOPS * (2 * 128 + 20 * (128 + 1_024) + 21 * (128 + 512))
    assert attention_flops_per_output_token(inputs.arch, 131_072) == flops + 21 * SCORING_FLOPS * 32_768
    assert model.attention_flops(131_072) == 8 * flops + 8 * 21 * SCORING_FLOPS * 32_768 == 128_714_801_152


def test_prompt_attention_flops_are_the_exact_mean():
    """An 8-token prompt: positions see 1..8 window entries (mean 4.5) and floor(p / 4) = 0, 0, 0, 1, 1, 1, 1, 2 CSA
    entries (mean 0.75, all selected, all scored); no HCA entry closes. Flash: 21 CSA x (131,072 x 5.25 + 16,384 x
    0.75) + 22 others x 131,072 x 4.5 = 27,684,864. At TP 8 all of it 8 times: the scoring on every rank, and each
    rank's 8 heads computed as FlashMLA's 64."""
    arch = _arch("deepseek_v4_flash")
    assert attention_flops_per_prompt_token(arch, 8) == 27_684_864
    assert attention_flops_per_prompt_token(arch, 8, 8) == 8 * 27_684_864


def test_prompt_attention_caps_the_selected_entries_at_index_topk():
    """A small CSA layer (ratio 4, index_topk 2) over a 20-token prompt: position p attends min(floor(p / 4), 2)
    compressed entries and scores floor(p / 4), counted position by position here."""
    layer = CompressedSparseAttention(
        hidden_size=64,
        num_heads=2,
        head_dim=512,
        qk_rope_head_dim=64,
        q_lora_rank=16,
        o_groups=1,
        o_lora_rank=8,
        window_tokens=4,
        compress_ratio=4,
        has_indexer=True,
        index_topk=2,
        index_n_heads=1,
        index_head_dim=128,
    )
    positions = range(1, 21)
    window = sum(min(p, 4) for p in positions) / 20
    selected = sum(min(p // 4, 2) for p in positions) / 20
    scored = sum(p // 4 for p in positions) / 20
    # Its 2 heads are computed as FlashMLA's 64 (vLLM pads them), even on one GPU.
    entry, scoring = 2 * 64 * (512 + 512), 2 * 1 * 128
    assert layer.prompt_attention_flops_per_token(20) == pytest.approx(entry * (window + selected) + scoring * scored)


# --------------------------------------------------------------------------- tensor parallelism and weights


def test_flashmla_pads_a_ranks_heads():
    """vLLM pads a rank's query heads to 64 or 128 (FlashMLA's sparse kernels): Pro's 128 heads are 128 a rank at TP 1,
    16 padded to 64 at TP 8; a rank of more than 128 heads is refused."""
    pro = _arch("deepseek_v4_pro").layers[0].mixer
    assert [pro.padded_heads_per_rank(tp) for tp in (1, 2, 4, 8)] == [128, 64, 64, 64]
    wide = pro.model_copy(update={"num_heads": 256, "o_groups": 16})
    assert "more than vLLM's FlashMLA kernels take" in wide.tp_problem(1) and wide.tp_problem(2) is None


def test_tp_splits_heads_and_output_groups():
    """vLLM splits the 64 heads and the 8 output groups (wo_a's bmm batch): TP 16 leaves no whole group."""
    mixer = _arch("deepseek_v4_flash").layers[2].mixer
    assert mixer.tp_problem(8) is None
    assert "8 output-projection groups" in mixer.tp_problem(16)
    with pytest.raises(QuotacalcError) as caught:
        price(resolve(Deployment(model=str(CONFIGS / "deepseek_v4_flash"), gpu="h200", tp=16, kv_dtype="fp8")))
    assert "\n" not in str(caught.value)


def test_routed_experts_are_mxfp4_from_expert_dtype():
    """expert_dtype fp4: routed experts in MXFP4 (4 + 8/32 bits), the rest in block fp8 (1 B + a float32 scale per
    128 x 128)."""
    inputs = resolve(Deployment(model=str(CONFIGS / "deepseek_v4_flash"), gpu="h200", tp=8, kv_dtype="fp8"))
    assert inputs.weights.storage(ParamGroup.ROUTED_EXPERTS).dtype == "mxfp4"
    assert inputs.weights.storage(ParamGroup.ROUTED_EXPERTS).bytes_per_param == (4 + 8 / 32) / 8
    assert inputs.weights.storage(ParamGroup.ATTENTION).bytes_per_param == 1 + 4 / (128 * 128)


# --------------------------------------------------------------------------- bad input


@pytest.mark.parametrize("key", ["index_topk", "sliding_window", "o_groups", "hc_mult", "n_routed_experts"])
def test_missing_size_fails_in_one_line(tmp_path, key):
    """transformers' defaults are V4-Flash's: a config without its own sizes would price Flash silently."""
    message = _one_line_error(_config_with(tmp_path, "deepseek_v4_pro", lambda c: c.pop(key)))
    assert key in message and "missing" in message


def test_shared_expert_count_the_engines_read_differently_is_refused(tmp_path):
    message = _one_line_error(_config_with(tmp_path, "deepseek_v4_flash", lambda c: c.update(n_shared_experts=2)))
    assert "n_shared_experts" in message and "transformers builds one" in message


def test_csa_ratio_vllm_does_not_build_is_refused(tmp_path):
    """transformers would compress CSA by 8 with its indexer; vLLM builds the indexer at a ratio of 4 only."""
    message = _one_line_error(_config_with(tmp_path, "deepseek_v4_flash", lambda c: c.update(compress_rate_csa=8)))
    assert "compress_rates" in message and "ratio of 4 only" in message


def test_head_width_vllms_kernels_do_not_take_is_refused(tmp_path):
    message = _one_line_error(_config_with(tmp_path, "deepseek_v4_flash", lambda c: c.update(head_dim=256)))
    assert "head_dim" in message and "512" in message


def test_unknown_expert_dtype_is_refused(tmp_path):
    path = _config_with(tmp_path, "deepseek_v4_flash", lambda c: c.update(expert_dtype="int4"))
    with pytest.raises(QuotacalcError) as caught:
        resolve(Deployment(model=path, gpu="h200", tp=8, kv_dtype="fp8"))
    assert "expert_dtype" in str(caught.value) and "\n" not in str(caught.value)


@pytest.mark.parametrize("folder", ["deepseek_v4_flash", "deepseek_v4_pro"])
def test_architecture_survives_the_spec_json_round_trip(folder):
    """The shipped-spec path stores an architecture as JSON: the new layer kind and the hyper-connection weights
    come back whole (a layer without them stores no such key, so other specs are unchanged)."""
    from quotacalc.core.arch import Layer, ModelArch

    arch = _arch(folder)
    again = ModelArch.model_validate_json(arch.model_dump_json())
    assert again == arch and again.total_params() == arch.total_params()
    assert "hyper_connection_params" not in Layer(mixer=None, feed_forward=None, norm_params=1).model_dump()


def test_explain_names_what_v4_keeps_whole_and_its_state_layout():
    result = price(resolve(Deployment(model=str(CONFIGS / "deepseek_v4_flash"), gpu="h200", tp=8)))
    steps = {step.name: step for step in result.steps}
    assert "DeepSeek V4's compressors and indexers" in steps["weight_bytes_per_gpu"].note
    assert "fp8_ds_mla entries and its compressor state in float32" in steps["state_bytes_per_sequence"].substituted
