"""The worked example of docs/method.md §7 (Llama 3.3 70B FP8, 4x H100 SXM), every row, through the library.

Expected figures are the method's table; each assertion rounds our figure the way the table
quotes it, so a change that moves any row fails.
"""

from __future__ import annotations

import math

import pytest

from quotacalc import Deployment, Traffic, price, request_kv, resolve, size_traffic

GIB = 2**30

#: The method's inputs; everything else is a default.
EXAMPLE = dict(model="Llama-3.3-70B-Instruct", gpu="h100-sxm", tp=4, weight_dtype="fp8", kv_dtype="bf16")
MEASURED_POOL_TOKENS = 646_503


@pytest.fixture(scope="module")
def replica():
    return price(resolve(Deployment(**EXAMPLE, kv_pool_tokens=MEASURED_POOL_TOKENS)))


def test_defaults_are_the_methods_assumptions():
    deployment = Deployment(model="m", gpu="g")
    assert (deployment.batch, deployment.context) == (128, 1700)
    assert (deployment.mfu, deployment.mbu, deployment.ceiling) == (0.5, 0.75, 0.65)
    assert deployment.gpu_hour_usd == 2.5
    assert deployment.burst_s == 60


def test_parameters_exact(replica):
    assert replica.total_params == 70_553_706_496
    assert replica.active_params == replica.total_params


def test_prompt_token(replica):
    # 2 x 70.55e9 / (4 x 1979e12 x 0.5) = 35.65 us
    assert round(replica.prompt_token_s * 1e6, 1) == 35.7


def test_weights_per_gpu(replica):
    # 70.55e9 params x 1 B (fp8) / 4 GPUs
    assert round(replica.weight_bytes_per_gpu / 1e9, 1) == 17.6


def test_kv_per_token(replica):
    # 2 x 80 layers x 8 KV heads x 128 head_dim x 2 B
    assert replica.kv_bytes_per_token == 2 * 80 * 8 * 128 * 2 == 327_680


def test_decode_step_and_output_token(replica):
    # (17.64e9 + 128 x 1700 x 327680 / 4) / (3.35e12 x 0.75) = 14.1 ms; / 128 = 110 us
    assert replica.decode_bound == "memory"
    assert round(replica.decode_step_s * 1e3, 1) == 14.1
    assert round(replica.output_token_s * 1e6) == 110


def test_output_weight(replica):
    assert round(replica.output_weight, 2) == 3.09


def test_replica_budget(replica):
    assert round(replica.replica_units_per_s) == 18_232


def test_units_per_gpu_hour(replica):
    # §1: replica_units_s = ceiling / prompt_token_s, prompt_token_s = 2 x active / (TP x FP8 peak x MFU);
    # an hour of each of the TP GPUs sells a TP-th of 3600 s of it: 0.65 / 35.65 us x 3600 / 4 = 16.41 M units
    prompt_token_s = 2 * 70_553_706_496 / (4 * 1979e12 * 0.5)
    assert replica.units_per_gpu_hour == pytest.approx(0.65 / prompt_token_s * 3600 / 4, rel=1e-12)
    assert round(replica.units_per_gpu_hour / 1e6, 2) == 16.41
    # what a GPU-hour costs over what it sells is one unit's price
    assert 2.5 / replica.units_per_gpu_hour == pytest.approx(replica.usd_per_unit, rel=1e-12)


def test_tenant(replica):
    tenant = size_traffic(replica, Traffic(rps=5, prompt_tokens=2000, output_tokens=500))
    # The method charges a prompt token 1 unit: 5 x (2000 + 3.09 x 500) = 17,725. quotacalc charges it
    # at its cost inside the 2,000-token prompt: 80 layers x 2 x 64 heads x 256 x 2,001/2
    # attended = 2.62 GFLOP beside 2 x 70.55e9, so 1.0186 units; 5 x (2000 x 1.0186 + W x 500) = 17,919,
    # within the 2% the method's table allows (shared/checks/method-example).
    token_units = 1 + 80 * 2 * 64 * 256 * (2001 / 2) / (2 * 70_553_706_496)
    assert tenant.units_per_s == pytest.approx(5 * (2000 * token_units + replica.output_weight * 500))
    assert tenant.units_per_s == pytest.approx(17_725, rel=0.02)
    assert tenant.replicas == pytest.approx(0.97, rel=0.02)
    assert tenant.bucket_rate_units_per_s == tenant.units_per_s
    assert tenant.bucket_depth_units == pytest.approx(60 * tenant.units_per_s)


def test_kv_pool_measured(replica):
    assert replica.kv_pool_tokens == MEASURED_POOL_TOKENS
    assert replica.kv_pool_source == "measured"


def test_kv_pool_estimate_by_hand():
    """The estimate, computed by hand: 0.9 x HBM - weights per GPU - runtime reserve, in per-GPU KV tokens.

    H100 SXM reports 85,029,158,912 B; weights 70,553,706,496 B / 4 = 17,638,426,624 B per GPU;
    reserve 5.5 GiB = 5,905,580,032 B: 52,982,236,364.8 B / 81,920 B = 646,755 tokens (the
    deployment's measured pool is 646,503).
    """
    estimated = price(resolve(Deployment(**EXAMPLE, runtime_reserve_gib=5.5)))
    usable = 0.9 * 85_029_158_912 - 70_553_706_496 / 4 - 5.5 * 2**30
    assert estimated.kv_pool_source == "estimated"
    assert estimated.kv_pool_bytes_per_gpu == pytest.approx(usable) == 52_982_236_364.8
    assert estimated.kv_pool_tokens == int(usable // 81_920) == 646_755


def test_one_128k_context(replica):
    kv = request_kv(replica, 131_072)
    assert kv.request_kv_bytes == 131_072 * 327_680
    assert round(kv.request_kv_bytes / GIB, 1) == 40.0
    assert round(kv.request_kv_bytes_per_gpu / 1e9, 1) == 10.7
    assert round(kv.pool_share, 2) == 0.20
    # "five such requests fill the replica"
    assert kv.requests_to_fill_pool == 5
    assert kv.requests_resident == 4


def test_dedicated_replica(replica):
    assert replica.dedicated_usd_per_month == 4 * 2.5 * 720 == 7200


def test_prices_per_million_tokens(replica):
    usd_per_s = 4 * 2.5 / 3600
    assert replica.usd_per_million_prompt_tokens == pytest.approx(1e6 * usd_per_s / replica.replica_units_per_s)
    assert replica.usd_per_million_output_tokens == pytest.approx(
        replica.usd_per_million_prompt_tokens * replica.output_weight
    )


def test_every_figure_is_explained(replica):
    names = {step.name for step in replica.steps}
    for figure in (
        "prompt_token_s",
        "weight_bytes_per_gpu",
        "kv_bytes_per_token",
        "decode_step_s",
        "output_token_s",
        "output_weight",
        "replica_units_per_s",
        "kv_pool_tokens",
        "dedicated_usd_per_month",
    ):
        assert figure in names
    prompt = next(step for step in replica.steps if step.name == "prompt_token_s")
    assert "70,553,706,496" in prompt.substituted and "0.5" in prompt.substituted
    assert math.isclose(prompt.value, replica.prompt_token_s)


def test_decode_turns_compute_bound_at_large_batch():
    """At a large enough batch the step is limited by FLOPs, and the worked example's figures do not move."""
    small_context = Deployment(**EXAMPLE, batch=4096, context=16, kv_pool_tokens=MEASURED_POOL_TOKENS)
    result = price(resolve(small_context))
    assert result.decode_bound == "compute"
    assert result.decode_step_s == result.decode_compute_s > result.decode_memory_s
    # batch x 2 x active / (TP x peak x MFU), plus attention over 16 tokens
    flops = 4096 * (2 * 70_553_706_496 + 80 * 2 * 64 * 256 * 16)
    assert result.decode_compute_s == pytest.approx(flops / (4 * 1979e12 * 0.5))
    assert any(step.name == "decode_step_s" and "compute-bound" in (step.note or "") for step in result.steps)


def test_long_prompt_token_costs_more_units(replica):
    # At 131,072 tokens a prompt token attends (131,072 + 1) / 2 tokens on average:
    # 80 layers x 2 x 64 heads x (128 + 128) x 65,536.5 = 171.8 GFLOPs beside 2 x 70.55e9 for the
    # parameters, so it costs 2.22 units; the whole prompt 131,072 x that.
    kv = request_kv(replica, 131_072)
    attention = 80 * 2 * 64 * 256 * 131_073 / 2
    expected = (2 * 70_553_706_496 + attention) / (2 * 70_553_706_496)
    assert kv.prompt_token_units_at_context == pytest.approx(expected)
    assert round(kv.prompt_token_units_at_context, 2) == 2.22
    assert kv.prefill_units == pytest.approx(131_072 * expected)


def test_resident_sequences(replica):
    # 646,503 tokens of pool / 1,700 tokens per sequence = 380 sequences at the mean context.
    assert replica.max_resident_sequences == 646_503 * 81_920 // (1700 * 81_920) == 380
