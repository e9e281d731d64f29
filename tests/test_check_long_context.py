"""``check`` on the example platform plan with long-context traffic: load routed as size routes it, buckets checked
against the long-context pool's requests, and pricing hints named as the plan's keys (docs/method.md §1-§5).

Expected figures are worked out by hand from the method: the long pool (Llama 3.3 70B FP8, TP 4 on H100 SXM, decode
batch 8 at 65,536 tokens) has W = decode step / batch / prompt token, both from the roofline of §1.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from conftest import llama70b_prompt_token_units

PLATFORM = Path(__file__).resolve().parent.parent / "examples" / "platform.yaml"

PARAMS = 70_553_706_496
#: One prompt token: 2 × params / (TP 4 × 1,979 TFLOP/s fp8 × MFU 0.5) = 35.65 µs.
PROMPT_TOKEN_S = 2 * PARAMS / (4 * 1_979e12 * 0.5)
#: One decode step of the long pool: (FP8 weights per GPU + 8 sequences × 65,536 tokens × 81,920 B of KV per GPU)
#: / (3.35 TB/s × MBU 0.75) = 24.1 ms, memory-bound; over 8 sequences and one prompt token: W = 84.55.
W_LONG = (PARAMS / 4 + 8 * 65_536 * 81_920) / (3.35e12 * 0.75) / 8 / PROMPT_TOKEN_S


def _document() -> dict:
    return yaml.safe_load(PLATFORM.read_text(encoding="utf-8"))


def _longco(rps: float) -> dict:
    """A tenant of the shared pool sized on 40,000-token prompts, above its 32,768-token threshold: routed long."""
    return {
        "name": "longco",
        "tier": "enterprise",
        "pool": "shared",
        "traffic": {"rps": rps, "prompt_tokens": 40_000, "output_tokens": 500},
    }


def _check(run_cli, tmp_path: Path, document: dict) -> dict:
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")
    code, out, err = run_cli("check", str(path), "--json")
    assert code == 0, err
    return json.loads(out)


def _capacity(result: dict, pool: str) -> dict:
    (finding,) = [
        f for f in result["findings"] if f["subject"] == f"pools.{pool}" and f["code"] in ("capacity", "oversold")
    ]
    return finding


def test_a_tenant_whose_mean_prompt_routes_long_loads_the_long_pool_not_the_shared_one(run_cli, tmp_path) -> None:
    base = _check(run_cli, tmp_path, _document())
    document = _document()
    # Prompts of 40,000 tokens, above the shared pool's route_above_prompt_tokens of 32,768.
    document["tenants"].append(_longco(0.1))
    result = _check(run_cli, tmp_path, document)
    # Sized in the long pool's units (as size sizes it): 0.1 × (40,000 × 1.3716 + 84.55 × 500) = 9,714 units/s.
    longco = 0.1 * (40_000 * llama70b_prompt_token_units(40_000) + W_LONG * 500)
    assert longco == pytest.approx(9_714, abs=1)
    long = _capacity(result, "long")
    assert long["code"] == "capacity" and long["severity"] == "info"
    assert long["figures"]["units_sold_per_s"] == pytest.approx(longco, rel=1e-3)
    # 2 replicas × 0.65 / 35.65 µs = 36,464 units/s: 27% of it.
    assert long["figures"]["capacity_units_per_s"] == pytest.approx(2 * 0.65 / PROMPT_TOKEN_S, rel=1e-6)
    assert long["message"].startswith("9,714 of 36,464 units/s sold (27%, 2 replicas at the ceiling): counted")
    # The shared pool carries what it carried without longco: none of its units.
    shared, before = _capacity(result, "shared"), _capacity(base, "shared")
    assert shared["figures"]["units_sold_per_s"] == before["figures"]["units_sold_per_s"]
    # The example alone sells nothing on the long pool: every tenant's long prompts are uncounted, said so.
    assert _capacity(base, "long")["figures"]["units_sold_per_s"] == 0.0
    # (hooli and wayne are starter tenants: a 32,768-token context sends nothing above the 32,768 threshold.)
    assert "not counted, the long prompts of globex, stark, initech and 2 more" in _capacity(base, "long")["message"]


def test_a_long_pool_sold_beyond_its_replicas_is_an_error(run_cli, tmp_path) -> None:
    document = _document()
    # 0.4 req/s of the same: 4 × 9,714 = 38,855 units/s, above the long pool's 36,464.
    document["tenants"].append(_longco(0.4))
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")
    code, out, _ = run_cli("check", str(path), "--json")
    assert code == 1
    long = _capacity(json.loads(out), "long")
    assert long["code"] == "oversold" and long["severity"] == "error"
    # 38,855 / 18,232 = 2.13: 3 replicas.
    assert long["fix"] == "raise replicas to 3, move tenants, or measure an oversubscription ratio"


def test_a_bucket_below_every_long_reservation_is_found_on_the_long_pool(run_cli, tmp_path) -> None:
    document = _document()
    document["tiers"].append(
        {
            "name": "gold",
            "max_context_tokens": 131_072,
            "kv_cap_tokens_per_replica": 262_144,
            "max_concurrent_sequences": 64,
            "max_output_tokens": 4_096,
            "priority": 0,
            "burst_s": 60,
        }
    )
    # 3,183 units/s × 60 s = 190,980 units deep: far above the shared pool's reservation (3.09 × 4,096 = 12,669).
    document["tenants"].append({"name": "goldco", "tier": "gold", "pool": "shared", "units_per_s": 3_183})
    result = _check(run_cli, tmp_path, document)
    (note,) = [f for f in result["findings"] if f["subject"] == "tenants.goldco" and f["code"].startswith("bucket")]
    # The longest request gold allows, routed to 'long': 131,072 − 4,096 = 126,976 prompt tokens and 4,096 output
    # tokens reserved at W 84.55: 126,976 + 84.55 × 4,096 = 473,300 units.
    assert note["code"] == "bucket-below-max-output" and note["severity"] == "info"
    assert note["figures"]["bucket_depth_units"] == pytest.approx(190_980)
    assert note["figures"]["reservation_units"] == pytest.approx(126_976 + W_LONG * 4_096, rel=1e-3)
    assert (
        "routed to pool 'long' (a prompt of 126,976 tokens and 4,096 output tokens reserved at W 84.55"
        in (note["message"])
    )


def test_check_names_the_plan_keys_where_price_names_flags(run_cli, tmp_path) -> None:
    document = _document()
    # 646,503 tokens hold 9 sequences of 65,536 (646,503 // 65,536): a batch of 16 is priced at 9, with a warning.
    document["pools"][1]["deployment"]["batch"] = 16
    result = _check(run_cli, tmp_path, document)
    (warning,) = [f for f in result["findings"] if f["code"] == "pool-price"]
    assert warning["subject"] == "pools.long"
    assert warning["message"].endswith("which holds 9 such sequences: priced at batch 9")
    assert warning["fix"] == (
        "lower pools.long.deployment.batch, raise pools.long.deployment.tp, or use pools.long.deployment.kv_dtype: fp8"
    )
    # No finding of a plan suggests a deployment flag (check's own --salt-secret-file is a flag of check, and a
    # target's declared options, --litellm-enforce say, are flags of generate: neither changes the deployment).
    from quotacalc.exporters.registry import options

    texts = " ".join(f["message"] + " " + (f["fix"] or "") for f in result["findings"])
    for _target, option in options().values():
        texts = texts.replace(option.flag, "")
    assert "--" not in texts.replace("--salt-secret-file", "")
    # price of the same pool names the same keys; a flag it was given, the flag.
    path = tmp_path / "plan.yaml"
    code, _, err = run_cli("price", str(path), "--pool", "long")
    assert code == 0 and (
        "(lower pools.long.deployment.batch, raise pools.long.deployment.tp, or use pools.long.deployment.kv_dtype: "
        "fp8)" in err
    )
    code, _, err = run_cli("price", str(path), "--pool", "long", "--batch", "16", "--tp", "4")
    assert code == 0 and "(lower --batch, raise --tp, or use pools.long.deployment.kv_dtype: fp8)" in err
    # A pool whose KV cache is FP8 already is not told to use one.
    document["pools"][1]["deployment"]["kv_dtype"] = "fp8"
    document["pools"][1]["deployment"]["batch"] = 32
    document["pools"][1]["deployment"].update(kv_pool_tokens=None, kv_pool_measured_with=None)  # estimated
    result = _check(run_cli, tmp_path, document)
    (warning,) = [f for f in result["findings"] if f["code"] == "pool-price"]
    assert warning["fix"] == "lower pools.long.deployment.batch or raise pools.long.deployment.tp"


def test_size_of_the_long_pool_lists_the_tenants_whose_load_it_carries(run_cli, tmp_path) -> None:
    document = _document()
    document["tenants"].append(_longco(0.1))
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")
    code, out, err = run_cli("size", str(path), "--pool", "long", "--json")
    assert code == 0, err
    result = json.loads(out)
    (row,) = result["tenants"]
    assert (row["name"], row["pool"], row["load_pool"]) == ("longco", "shared", "long")
    # Its replicas are the long pool's: 9,714 units/s of a replica's 18,232 (0.65 / 35.65 µs).
    assert row["replicas"] == pytest.approx(row["units_per_s"] / (0.65 / PROMPT_TOKEN_S), rel=1e-6)
    assert result["totals"]["tenants"] == 1
    # Its standard pool lists it too, saying where the load goes; a contract stays on its pool.
    code, out, err = run_cli("size", str(path), "--pool", "shared", "--json")
    rows = {row["name"]: row["load_pool"] for row in json.loads(out)["tenants"]}
    assert rows["longco"] == "long" and rows["globex"] == "shared"
    code, out, err = run_cli("size", str(path), "--pool", "long")
    assert code == 0 and "shared → long" in out
    code, out, err = run_cli("size", str(path), "--pool", "long", "--format", "markdown")
    assert "| longco | enterprise | shared | long | shared |" in out
    # The long pool's cost alone: 2 replicas × 4 GPUs × $2.5 × 720 h (the shared pool is not this view's).
    code, out, err = run_cli("size", str(path), "--pool", "long", "--json")
    assert json.loads(out)["totals"]["pools_usd_per_month"] == pytest.approx(2 * 4 * 2.5 * 720)


def test_size_of_one_pool_lists_the_pools_its_cost_counts_only(run_cli, tmp_path) -> None:
    """size --pool shared counts the shared pool and the long pool its tenants route to; the pool lines under the
    table are those, not every pool of the plan (acme-dedicated's line was listed under a total that leaves it out)."""
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(_document(), sort_keys=False), encoding="utf-8")
    code, out, err = run_cli("size", str(path), "--pool", "long")
    assert code == 0, err
    lines = [line for line in out.splitlines() if line.startswith("pool ")]
    assert [line.split()[1] for line in lines] == ["long"]
    code, out, err = run_cli("size", str(path))
    assert len([line for line in out.splitlines() if line.startswith("pool ")]) == len(_document()["pools"])


def test_sizing_a_long_prompt_on_a_pool_that_routes_it_away_says_so(run_cli, tmp_path) -> None:
    """size --pool shared --prompt-tokens 40000 priced the tenant at the shared pool's W while the plan serves such
    prompts on pool long (2.4x the units): a warning says where they go, and --strict fails on it."""
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(_document(), sort_keys=False), encoding="utf-8")
    args = ("size", str(path), "--pool", "shared", "--rps", "0.2", "--output-tokens", "1000")
    code, out, err = run_cli(*args, "--prompt-tokens", "40000", "--json")
    assert code == 0, err
    (warning,) = [w for w in json.loads(out)["warnings"] if "route_above_prompt_tokens" in w]
    assert warning.startswith("prompts of 40,000 tokens are above pool shared's route_above_prompt_tokens (32,768)")
    assert "size --pool long" in warning
    code, out, err = run_cli(*args, "--prompt-tokens", "40000", "--strict")
    assert code == 1 and out == ""
    code, out, err = run_cli(*args, "--prompt-tokens", "32768", "--json")  # at the threshold it stays
    assert code == 0 and not any("route_above" in w for w in json.loads(out)["warnings"])
