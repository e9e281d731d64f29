"""The KV tokens a pool holds at its context, which tier caps and the simulator count against.

vLLM's logged 'GPU KV cache size' (kv_pool_tokens) counts tokens at max_model_len. Where every layer's cache grows
with the context that is what any request mix holds; where layers keep a window (Gemma 3: 52 of 62 layers keep
1,024 tokens) a short request pays its window layers almost in full, so far fewer of its tokens fit.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from quotacalc.core.checks import check_plan
from quotacalc.core.deployment import Deployment
from quotacalc.core.plan import Plan, PlanTenant, Pool, Tier
from quotacalc.core.policy import build_policy
from quotacalc.core.price import price
from quotacalc.inputs.resolve import resolve
from quotacalc.inputs.scenario import scenario_from_dict
from quotacalc.sim.events import build_setup

CONFIGS = Path(__file__).parent / "data" / "configs"
GEMMA = {"model": "gemma-3-27b-it", "gpu": "h100-sxm", "tp": 2, "context": 1_700}


@pytest.fixture(scope="module")
def gemma():
    deployment = Deployment(**GEMMA)
    return deployment, price(resolve(deployment))


def test_full_attention_holds_its_logged_tokens_at_any_context():
    result = price(resolve(Deployment(model="llama-3.3-70b-instruct", gpu="h100-sxm", tp=4, context=1_700)))
    assert result.kv_pool_tokens_at_context == result.kv_pool_tokens


def test_a_windowed_model_holds_fewer_tokens_of_short_requests(gemma):
    """Gemma 3 27B at TP 2 in vLLM's hybrid layout (docs/method.md): 8 KV heads a rank x 2 x 128 x 2 B = 4,096 B per
    token per layer, 16-token pages of 65,536 B; 52 window layers and 10 full ones in groups of 10 (6 window groups,
    8 padding layers), so the pool has pool bytes / 65,536 / 10 blocks. A decoding 1,700-token sequence takes
    ceil(1,024 / 16) + 1 = 65 blocks in each window group and ceil(1,700 / 16) = 107 in the full one: 497 blocks,
    where its 1,700 tokens at the logged count's rate would take 1,700 / 131,072 x 11,654 = 151."""
    _, result = gemma
    blocks = int(result.kv_pool_bytes_per_gpu // 65_536 // 10)
    assert result.max_resident_sequences == blocks // (6 * 65 + 107)
    assert result.kv_pool_tokens_at_context == result.max_resident_sequences * 1_700
    assert result.kv_pool_tokens_at_context < result.kv_pool_tokens / 3


def test_tier_cap_is_checked_against_the_tokens_held_at_the_pools_context(gemma):
    deployment, result = gemma
    held, logged = result.kv_pool_tokens_at_context, result.kv_pool_tokens
    cap = (held + logged) // 2  # within the logged count, above what 1,700-token requests can hold
    plan = Plan(
        pools=(Pool(name="main", deployment=deployment, replicas=1),),
        tiers=(
            Tier(
                name="gold",
                max_context_tokens=8_192,
                kv_cap_tokens_per_replica=cap,
                max_concurrent_sequences=64,
                max_output_tokens=1_024,
                priority=0,
            ),
        ),
        tenants=(PlanTenant(name="t", tier="gold", units_per_s=100),),
    )
    policy = build_policy(plan, {"main": result})
    assert policy.pools[0].kv_pool_tokens == held
    (finding,) = [f for f in check_plan(policy).findings if f.code == "kv-cap"]
    assert finding.severity == "error"
    assert finding.figures == {"kv_cap_tokens_per_replica": cap, "kv_pool_tokens": held}


def test_simulator_counts_kv_against_the_tokens_held_at_the_pools_context(gemma):
    _, result = gemma
    tier = {
        "name": "open",
        "max_context_tokens": 8_192,
        "kv_cap_tokens_per_replica": 10_000_000,
        "max_concurrent_sequences": 100_000,
        "max_output_tokens": 1_024,
        "priority": 0,
    }
    document = {
        "plan": {
            "pools": [{"name": "p", "replicas": 1, "deployment": GEMMA}],
            "tiers": [tier],
            "tenants": [{"name": "t", "tier": "open", "units_per_s": 1e9}],
        },
        "workload": {
            "tenants": [
                {
                    "tenant": "t",
                    "arrival": {"kind": "poisson", "rate_rps": 1},
                    "prompt_tokens": {"kind": "fixed", "tokens": 1_200},
                    "output_tokens": {"kind": "fixed", "tokens": 500},
                    "max_tokens": 500,
                }
            ]
        },
        "requests": 10,
    }
    setup = build_setup(scenario_from_dict(document))
    assert setup.pools[0].kv_pool_tokens == result.kv_pool_tokens_at_context < result.kv_pool_tokens


def test_price_shows_the_tokens_held_at_context_only_where_they_differ(run_cli, monkeypatch, gemma):
    _, result = gemma
    monkeypatch.setenv("COLUMNS", "200")
    code, out, _ = run_cli("price", "--model", "gemma-3-27b-it", "--gpu", "h100-sxm", "--tp", "2", "--context", "1700")
    assert code == 0
    (row,) = [line for line in out.splitlines() if line.startswith("KV pool at 1,700 tokens")]
    assert f"{result.kv_pool_tokens_at_context:,} tokens" in row
    code, out, _ = run_cli("price", "--model", "llama-3.3-70b-instruct", "--gpu", "h100-sxm", "--tp", "4")
    assert code == 0 and "KV pool at" not in out


def test_kv_labels_windowed_and_state_rows_as_whole_replica_figures(run_cli, monkeypatch):
    """Llama 4 Scout's chunked-local layers are windowed KV too, and the row is the whole replica's, beside the
    per-GPU total."""
    monkeypatch.setenv("COLUMNS", "200")
    scout = str(Path(__file__).parent / "data" / "configs" / "llama4_scout")
    code, out, _ = run_cli("kv", "--model", scout, "--gpu", "h100-sxm", "--tp", "8", "--context", "100000")
    assert code == 0
    (row,) = [line for line in out.splitlines() if line.startswith("of which windowed KV")]
    assert "whole replica" in row and "sliding-window" not in out


def test_kv_labels_a_short_convolution_models_state_as_fixed_state(run_cli, monkeypatch):
    """LFM2's state is its short convolutions' (no SSM): the row names every kind of fixed state."""
    monkeypatch.setenv("COLUMNS", "200")
    lfm2 = str(Path(__file__).parent / "data" / "configs" / "lfm2_1_2b")
    code, out, _ = run_cli("kv", "--model", lfm2, "--gpu", "l4", "--context", "4096")
    assert code == 0
    (row,) = [line for line in out.splitlines() if line.startswith("of which fixed state")]
    assert "whole replica; conv, SSM, recurrent" in row


def test_a_fixed_state_outside_vllms_hybrid_layout_counts_too():
    """DeepSeek V4-Flash (priced by bytes, not through the hybrid layout) grows by 3,850.25 B a token on each GPU
    and keeps 15,420,416 B of window and compressor state per sequence: a 1,700-token sequence takes
    3,850.25 x 1,700 + 15,420,416 = 21,965,841 B, so its tokens fill the pool about 3.4x sooner than the
    per-token count says."""
    result = price(resolve(Deployment(model=str(CONFIGS / "deepseek_v4_flash"), gpu="h200", tp=8, context=1_700)))
    assert result.kv_bytes_per_token_per_gpu == 3_850.25
    per_sequence = 3_850.25 * 1_700 + 15_420_416
    assert result.max_resident_sequences == int(result.kv_pool_bytes_per_gpu // per_sequence)
    assert result.kv_pool_tokens_at_context == result.max_resident_sequences * 1_700 < result.kv_pool_tokens / 3


@pytest.mark.parametrize(
    ("model", "gpu", "tp"),
    [
        ("gemma-3-27b-it", "h100-sxm", 2),  # sliding windows: vLLM's hybrid manager's blocks
        ("AI21-Jamba-1.5-Mini", "h200", 1),  # Mamba state pages beside attention blocks
        ("gpt-oss-120b", "h200", 1),  # alternating 128-token windows
        ("Llama-3.3-70B-Instruct", "h100-sxm", 4),  # full attention only: bytes
    ],
)
@pytest.mark.parametrize("context", [1_700, 20_000])
def test_kv_and_price_count_the_same_resident_requests(model, gpu, tp, context):
    """`kv --context N` and `price --context N` answer one question (how many such requests the pool holds at once):
    a hybrid model's answer is in its layout's blocks, so kv must count blocks as price does."""
    from quotacalc.core.kv import request_kv

    replica = price(resolve(Deployment(model=model, gpu=gpu, tp=tp, context=context)))
    request = request_kv(replica, context)
    assert request.requests_resident == replica.max_resident_sequences
    assert request.requests_to_fill_pool in (replica.max_resident_sequences, replica.max_resident_sequences + 1)


def test_kv_of_a_request_larger_than_the_pool_never_fills_it(run_cli):
    # Llama 3.1 8B on an L4 holds 28,766 tokens (BF16 weights, its default reserve): a 131,072-token request is 4.6 pools.
    code, out, err = run_cli("kv", "--model", "Llama-3.1-8B-Instruct", "--gpu", "l4", "--context", "131072")
    assert code == 0 and "it can never be resident" in err
    row = next(line for line in out.splitlines() if line.startswith("fill the replica"))
    assert "never" in row and " 0 " not in row


@pytest.mark.parametrize(
    ("model", "gpu", "tp", "context"),
    [
        # Full attention, bytes: Llama 3.1 8B on an L4 holds 28,766 tokens; 40,000 is 1.39 pools.
        ("Llama-3.1-8B-Instruct", "l4", 1, 40_000),
        # Gemma 3 27B's hybrid blocks on one H100: a 131,072-token request needs 1.8% more blocks than the pool has.
        ("gemma-3-27b-it", "h100-sxm", 1, 131_072),
    ],
)
def test_a_request_between_one_and_two_pools_is_never_resident(model, gpu, tp, context):
    """floor and ceil of a share above 1: none resident, and 'never' fills (not ceil(1 / share) = 1)."""
    from quotacalc.core.kv import request_kv

    replica = price(resolve(Deployment(model=model, gpu=gpu, tp=tp, context=1_700, max_model_len=context)))
    request = request_kv(replica, context)
    assert 1 < request.pool_share < 2, request.pool_share
    assert (request.requests_resident, request.requests_to_fill_pool) == (0, 0)


@pytest.mark.parametrize(
    ("model", "gpu", "tp"), [("gemma-3-27b-it", "h100-sxm", 2), ("AI21-Jamba-1.5-Mini", "h200", 1)]
)
def test_the_full_load_batch_is_counted_in_the_same_blocks_as_the_resident_sequences(model, gpu, tp):
    """Full load runs requests of 1,700 + 128 tokens: longer than --context's 1,700, so no more of them fit than
    the pool's resident sequences of 1,700 (it used bytes, 129 against 116 for Gemma 3), and exactly as many as
    price counts at that length."""
    replica = price(resolve(Deployment(model=model, gpu=gpu, tp=tp, context=1_700)))
    assert replica.max_load_batch <= replica.max_resident_sequences
    at_load_length = price(resolve(Deployment(model=model, gpu=gpu, tp=tp, context=1_700 + 128)))
    assert replica.max_load_batch == min(at_load_length.max_resident_sequences, 1_024)


@pytest.mark.parametrize("context", [0, -5, 1.5, True])
def test_request_kv_refuses_a_context_that_is_not_a_whole_positive_number(context):
    """The core is called without the CLI's parsing too: a negative context gave negative bytes."""
    from quotacalc.core.kv import request_kv
    from quotacalc.errors import QuotacalcError

    replica = price(resolve(Deployment(model="Llama-3.1-8B-Instruct", gpu="h100-sxm")))
    with pytest.raises(QuotacalcError) as refused:
        request_kv(replica, context)
    assert refused.value.field == "context" and "at least 1" in refused.value.problem
