"""Plan files: the platform plan read into pools, tiers and tenants; every bad plan one line naming its YAML path;
the flat plan unchanged; --pool; size over a plan's tenants; the JSON Schemas."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import yaml
from conftest import METHOD_TENANT_UNITS_PER_S, llama70b_prompt_token_units

from quotacalc.cli.json_out import JSON_SCHEMA_VERSION
from quotacalc.errors import EXIT_INVALID_INPUT, EXIT_USAGE

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
PLATFORM = EXAMPLES / "platform.yaml"
FLAT = EXAMPLES / "llama-3.3-70b-h100.yaml"

# The worked example (docs/method.md §7): W 3.09, replica budget about 18,232 units/s, $7,200 per replica-month.
REPLICA_UNITS = 18_232
REPLICA_USD = 7_200.0


def one_line_error(code: int, out: str, err: str, expected_code: int) -> str:
    """The error contract: the exit code, nothing on stdout, one line on stderr, no traceback."""
    assert code == expected_code, f"exit {code}, want {expected_code}: {err!r}"
    assert out == ""
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith("quotacalc: error: ")
    return lines[0].removeprefix("quotacalc: error: ")


def platform_document() -> dict:
    return yaml.safe_load(PLATFORM.read_text(encoding="utf-8"))


def write_plan(tmp_path: Path, document: dict) -> Path:
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")
    return path


# --- good plans ------------------------------------------------------------------------------------


def test_example_platform_plan_reads_into_pools_tiers_tenants() -> None:
    from quotacalc.inputs.plan import load_plan

    plan, platform = load_plan(str(PLATFORM))
    assert platform
    assert [pool.name for pool in plan.pools] == ["shared", "long", "acme-dedicated"]
    assert [tier.name for tier in plan.tiers] == ["enterprise", "pro", "starter"]
    assert len(plan.tenants) == 8
    shared, long = plan.pools[0], plan.pools[1]
    # The top-level deployment is merged under each pool's own keys.
    assert shared.deployment.tp == 4 and shared.deployment.weight_dtype == "fp8"
    assert long.deployment.batch == 8 and long.deployment.context == 65536
    assert shared.deployment.kv_pool_tokens == 646503
    assert shared.long_context_pool == "long" and shared.route_above_prompt_tokens == 32768
    assert [t.name for t in plan.tenants if t.placement == "dedicated"] == ["acme"]
    assert plan.tenants[3].lora_adapters == ("initech-support-v2",)


def test_pool_keys_win_over_the_defaults(tmp_path: Path) -> None:
    from quotacalc.inputs.plan import load_plan

    document = platform_document()
    # A key the measured pool does not depend on (tp would move the pool: see the feasibility tests).
    document["pools"][0]["deployment"]["gpu_hour_usd"] = 3.0
    plan, _ = load_plan(str(write_plan(tmp_path, document)))
    assert plan.pool("shared").deployment.gpu_hour_usd == 3.0
    assert plan.pool("long").deployment.gpu_hour_usd == 2.5


def test_flat_plan_reads_as_a_one_pool_plan() -> None:
    from quotacalc.inputs.plan import load_plan

    plan, platform = load_plan(str(FLAT))
    assert not platform
    assert [pool.name for pool in plan.pools] == ["default"]
    assert plan.pools[0].replicas == 1
    (tenant,) = plan.tenants
    assert tenant.traffic is not None and tenant.traffic.rps == 5
    assert tenant.cache_isolation == "shared"  # no secret needed for a flat plan
    # The synthesised tier: the model's max context (Llama 3.3: max_position_embeddings 131072).
    assert plan.tier(tenant.tier).max_context_tokens == 131072


def test_flat_plan_price_unchanged_and_accepts_pool_default(run_cli) -> None:
    code, plain, _ = run_cli("price", FLAT, "--json")
    assert code == 0
    code, named, _ = run_cli("price", FLAT, "--pool", "default", "--json")
    assert code == 0
    assert json.loads(plain)["results"] == json.loads(named)["results"]
    # W about 3.1, budget about 18,232 units/s (docs/method.md §7).
    results = json.loads(plain)["results"]
    assert results["output_weight"] == pytest.approx(3.09, rel=0.01)
    assert results["replica_units_per_s"] == pytest.approx(REPLICA_UNITS, rel=0.001)


def test_pool_option_prices_the_named_pool(run_cli) -> None:
    code, out, _ = run_cli("price", PLATFORM, "--pool", "long", "--json")
    assert code == 0
    deployment = json.loads(out)["inputs"]["deployment"]
    assert (deployment["batch"], deployment["context"], deployment["tp"]) == (8, 65536, 4)
    code, out, _ = run_cli("kv", PLATFORM, "--pool", "shared", "--context", "131072", "--json")
    assert code == 0
    # 131,072 tokens × 327,680 B = 40.0 GiB of KV (docs/method.md §7).
    assert json.loads(out)["results"]["request_kv_bytes"] == 131072 * 327680


def test_pool_option_required_when_several_pools(run_cli) -> None:
    line = one_line_error(*run_cli("price", PLATFORM), EXIT_USAGE)
    assert line == f"{PLATFORM}: --pool: the plan has 3 pools (name one of: shared, long, acme-dedicated)"
    line = one_line_error(*run_cli("kv", PLATFORM, "--pool", "lng", "--context", "10"), EXIT_USAGE)
    assert line == f"{PLATFORM}: --pool: no pool 'lng' in the plan (did you mean 'long'?)"
    line = one_line_error(*run_cli("price", FLAT, "--pool", "shared"), EXIT_USAGE)
    assert line == f"{FLAT}: --pool: a flat plan has one pool, 'default' (drop --pool)"


def test_one_pool_platform_plan_needs_no_pool_flag(tmp_path: Path, run_cli) -> None:
    document = platform_document()
    document["pools"] = [document["pools"][2]]
    document["tenants"] = [document["tenants"][2]]
    code, out, err = run_cli("price", write_plan(tmp_path, document), "--json")
    assert code == 0, err
    assert json.loads(out)["results"]["dedicated_usd_per_month"] == REPLICA_USD


# --- size over a platform plan -----------------------------------------------------------------------


def test_size_rows_per_tenant_and_totals(run_cli) -> None:
    code, out, err = run_cli("size", PLATFORM, "--json")
    assert code == 0, err
    document = json.loads(out)
    assert document["command"] == "size" and document["schema_version"] == JSON_SCHEMA_VERSION
    rows = {row["name"]: row for row in document["tenants"]}
    assert list(rows) == ["globex", "stark", "acme", "initech", "umbrella", "cyberdyne", "hooli", "wayne"]
    globex = rows["globex"]
    # A 17,725 units/s contract (the method's tenant): 17,725 / 18,232 = 0.97 replicas; 60 s burst.
    assert globex["units_per_s"] == 17725
    assert globex["replicas"] == pytest.approx(17725 / 18232.2, rel=1e-4)
    assert globex["bucket_depth_units"] == pytest.approx(60 * 17725)
    assert globex["shared_usd_per_month"] == pytest.approx(0.9722 * 7200, rel=1e-3)
    assert globex["dedicated_usd_per_month"] == REPLICA_USD
    # hooli is sized from traffic: 1 req/s × (800 × 0.5 × u(800) + 800 × 0.5 × 0.1 + W × 300) with
    # W = 3.0931 and u(800) a prompt token's units inside an 800-token prompt.
    assert rows["hooli"]["rate_source"] == "traffic"
    expected = 400 * llama70b_prompt_token_units(800) + 40 + 3.0931 * 300
    assert rows["hooli"]["units_per_s"] == pytest.approx(expected, rel=1e-4)
    # acme is dedicated: 45,000 / 18,232 = 2.47 replicas -> 3 whole replicas, $21,600/month.
    assert rows["acme"]["dedicated_replicas"] == 3
    assert rows["acme"]["dedicated_usd_per_month"] == 3 * REPLICA_USD
    # The key size and the comparison rows use for a tenant's whole replicas carries the same figure.
    assert all(row["dedicated_total_usd_per_month"] == row["dedicated_usd_per_month"] for row in rows.values())
    assert rows["acme"]["dedicated_total_usd_per_month"] == 3 * REPLICA_USD
    totals = document["totals"]
    assert totals["tenants"] == 8
    assert totals["units_sold_per_s"] == pytest.approx(sum(row["units_per_s"] for row in rows.values()))
    shared = sum(row["shared_usd_per_month"] for row in rows.values() if row["placement"] == "shared")
    assert totals["shared_usd_per_month"] == pytest.approx(shared)
    assert totals["dedicated_usd_per_month"] == 3 * REPLICA_USD
    # Pools: 6 + 2 + 3 replicas at $7,200.
    assert totals["pools_usd_per_month"] == 11 * REPLICA_USD
    # Compact: no deployment or model graph per tenant.
    assert "inputs" not in document and all("replica" not in row for row in document["tenants"])


def test_size_table_and_pool_filter(run_cli) -> None:
    code, out, _ = run_cli("size", PLATFORM, "--pool", "acme-dedicated", "--json")
    assert code == 0
    assert [row["name"] for row in json.loads(out)["tenants"]] == ["acme"]
    code, out, _ = run_cli("size", PLATFORM)
    assert code == 0
    assert "globex" in out and "units sold" in out


def test_size_with_tenant_flags_on_a_pool_sizes_one_tenant(run_cli) -> None:
    args = ("--rps", "5", "--prompt-tokens", "2000", "--output-tokens", "500", "--json")
    code, out, _ = run_cli("size", PLATFORM, "--pool", "shared", *args)
    assert code == 0
    # 5 × (2,000 + 3.09 × 500) = 17,725 units/s in the method; prompt tokens charged inside their prompt.
    assert json.loads(out)["results"]["units_per_s"] == pytest.approx(METHOD_TENANT_UNITS_PER_S, rel=1e-4)


# --- bad plans: one line naming the file and the YAML path -------------------------------------------

BAD_PLANS = [
    (
        "tier context out of range",
        lambda d: d["tiers"][0].update(max_context_tokens=10**20),
        "tiers[0].max_context_tokens: must be less than or equal to 100000000, got 100000000000000000000",
    ),
    (
        "unknown tier",
        lambda d: d["tenants"][3].update(tier="gold"),
        "tenants[3].tier: unknown tier 'gold' (tiers: enterprise, pro, starter)",
    ),
    (
        "tier typo",
        lambda d: d["tenants"][3].update(tier="pr"),
        "tenants[3].tier: unknown tier 'pr' (did you mean 'pro'?)",
    ),
    (
        "missing pool",
        lambda d: d["tenants"][2].update(pool="nope"),
        "tenants[2].pool: unknown pool 'nope' (pools: shared, long, acme-dedicated)",
    ),
    (
        "tenant on a long-context pool",
        lambda d: d["tenants"][2].update(pool="long"),
        "tenants[2].pool: pool 'long' is a long-context pool: tenants name their standard pool",
    ),
    (
        "duplicate tenant",
        lambda d: d["tenants"][4].update(name="globex"),
        "tenants[4].name: duplicate name 'globex' (also tenants[0]) (give each a unique name)",
    ),
    (
        "duplicate pool",
        lambda d: d["pools"][2].update(name="shared"),
        "pools[2].name: duplicate name 'shared' (also pools[0])",
    ),
    (
        "duplicate tier",
        lambda d: d["tiers"][2].update(name="pro"),
        "tiers[2].name: duplicate name 'pro' (also tiers[1])",
    ),
    (
        "negative rate",
        lambda d: d["tenants"][0].update(units_per_s=-5),
        "tenants[0].units_per_s: must be a positive finite number, got -5",
    ),
    (
        "NaN rate",
        lambda d: d["tenants"][0].update(units_per_s=float("nan")),
        "tenants[0].units_per_s: must be a finite number, got nan",
    ),
    (
        "infinite rps",
        lambda d: d["tenants"][3]["traffic"].update(rps=float("inf")),
        "tenants[3].traffic.rps: must be a finite number, got inf",
    ),
    (
        "negative rps",
        lambda d: d["tenants"][3]["traffic"].update(rps=-1),
        "tenants[3].traffic.rps: must not be negative, got -1",
    ),
    (
        "threshold above the model's context",
        lambda d: d["pools"][0].update(route_above_prompt_tokens=200000),
        "pools[0].route_above_prompt_tokens: 200000 is not below the longest context pool 'shared' serves (131072 tokens)",
    ),
    (
        "threshold above a measured KV pool",
        lambda d: d["pools"][1]["deployment"].update(kv_pool_tokens=30000),
        "pools[0].route_above_prompt_tokens: 32768 is not below the longest context pool 'long' serves (30000 tokens)",
    ),
    (
        "long_context_pool naming a standard pool",
        lambda d: d["pools"][0].update(long_context_pool="acme-dedicated"),
        "pools[0].long_context_pool: pool 'acme-dedicated' is not a long-context pool (role: standard)",
    ),
    (
        "long_context_pool missing",
        lambda d: d["pools"][0].update(long_context_pool="lng"),
        "pools[0].long_context_pool: unknown pool 'lng' (did you mean 'long'?)",
    ),
    (
        "unknown key",
        lambda d: d["tenants"][1].update(tierr="x"),
        "tenants[1].tierr: unknown key 'tierr' (did you mean 'tier'?)",
    ),
    (
        "vLLM spelling",
        lambda d: d["pools"][1]["deployment"].update(tensor_parallel_size=4),
        "pools[1].deployment.tensor_parallel_size: unknown key 'tensor_parallel_size' (did you mean 'tp'?)",
    ),
    (
        "bad pool value",
        lambda d: d["pools"][1]["deployment"].update(tp=0),
        "pools[1].deployment.tp: must be a positive integer, got 0",
    ),
    (
        "bad default",
        lambda d: d["deployment"].update(ceiling=2),
        "pools[0].deployment.ceiling (inherited from deployment.ceiling): must be in (0, 1], got 2",
    ),
    (
        "unknown engine",
        lambda d: d["pools"][0]["deployment"].update(engine="sglng"),
        "pools[0].deployment.engine: unknown engine 'sglng'; did you mean sglang? choose from generic, sglang, tensorrt-llm-pytorch",
    ),
    ("no model anywhere", lambda d: d["deployment"].pop("model"), "pools[0].deployment.model: is required"),
    (
        "tier key on a deployment",
        lambda d: d["deployment"].update(burst_s=5),
        "deployment.burst_s: is a tier setting in a platform plan",
    ),
    (
        "contract and traffic",
        lambda d: d["tenants"][0].update(traffic={"rps": 1, "prompt_tokens": 1, "output_tokens": 1}),
        "tenants[0]: give exactly one of units_per_s (a contract) and traffic (a profile to size)",
    ),
    (
        "bad name",
        lambda d: d["tenants"][0].update(name="Globex Corp"),
        "tenants[0].name: 'Globex Corp' is not a valid name",
    ),
    (
        "no replicas",
        lambda d: d["pools"][0].update(replicas=0),
        "pools[0].replicas: must be greater than or equal to 1, got 0",
    ),
    ("tiers not a list", lambda d: d.update(tiers={"a": 1}), "tiers: must be a list"),
    (
        "routing half given",
        lambda d: d["pools"][0].pop("long_context_pool"),
        "pools[0]: long_context_pool and route_above_prompt_tokens go together",
    ),
    (
        "several standard pools, none named",
        lambda d: d["tenants"][0].pop("pool"),
        "tenants[0].pool: the plan has 2 standard pools (name one of: shared, acme-dedicated)",
    ),
    (
        "output cap above the context",
        lambda d: d["tiers"][2].update(max_output_tokens=40000),
        "tiers[2]: max_output_tokens 40000 exceeds max_context_tokens 32768",
    ),
    (
        "concurrency beyond any fleet",
        lambda d: d["tiers"][0].update(max_concurrent_sequences=10**400),
        "tiers[0].max_concurrent_sequences: must be less than or equal to 1000000000",
    ),
    (
        "adapter twice",
        lambda d: d["tenants"][0].update(lora_adapters=["x-v1", "x-v1"]),
        "tenants[0].lora_adapters: names x-v1 more than once: give each adapter once",
    ),
    (
        "public prefix twice",
        lambda d: d.update(public_prefixes=["system-v1", "tools-v1", "system-v1"]),
        "public_prefixes: names system-v1 more than once: give each prefix id once",
    ),
    (
        "long-context chain",
        lambda d: d["pools"][1].update(long_context_pool="shared", route_above_prompt_tokens=60000),
        "pools[1]: a long_context pool takes the longest prompts itself: long-context pools do not chain",
    ),
    (
        "units above a billion",
        lambda d: d["tenants"][0].update(units_per_s=1e300),
        "tenants[0].units_per_s: must be at most 1,000,000,000 units/s, got 1e+300",
    ),
    (
        "oversubscription above 1000",
        lambda d: d.update(oversubscription={"ratio": 1e305, "source": "x"}),
        "oversubscription.ratio: must be a ratio from 1 to 1000, got 1e+305",
    ),
    (
        "replica URLs not one a replica",
        lambda d: d["pools"][0].update(replica_urls=["http://10.0.0.7:8000/v1", "http://10.0.0.8:8000/v1"]),
        "pools[0].replica_urls: lists 2 URLs for the pool's 6 replicas (give one base URL a replica, 6 in order",
    ),
    (
        "replica URL twice",
        lambda d: d["pools"][1].update(replica_urls=["http://10.0.0.7:8000/v1"] * 2),
        "pools[1].replica_urls: names http://10.0.0.7:8000/v1 more than once: give each replica's own address once",
    ),
    (
        "replica URL not http",
        lambda d: d["pools"][1].update(replica_urls=["10.0.0.7:8000", "http://10.0.0.8:8000/v1"]),
        "pools[1].replica_urls: '10.0.0.7:8000' is not an http(s) URL with a host: give each replica's base URL",
    ),
    (
        "replica URL template without {replica}",
        lambda d: d["pools"][0].update(replica_url="http://{pool}.svc:8000/v1"),
        "pools[0].replica_url: 'http://{pool}.svc:8000/v1' has no {replica}, so every replica would get the same "
        "address: put {replica} where the replica's index (0, 1, ...) goes",
    ),
    (
        "replica URL template with another placeholder",
        lambda d: d["pools"][0].update(replica_url="http://{pool}-{replica}.{namespace}:8000/v1"),
        "pools[0].replica_url: 'http://{pool}-{replica}.{namespace}:8000/v1' has the placeholder {namespace}: only "
        "{pool} and {replica} are filled in",
    ),
    (
        "replica URL template not a template",
        lambda d: d["pools"][0].update(replica_url="http://{pool-{replica}:8000/v1"),
        "pools[0].replica_url: 'http://{pool-{replica}:8000/v1' is not a template",
    ),
    (
        "replica URL template and list",
        lambda d: d["pools"][2].update(replica_url="http://{pool}-{replica}:8000/v1", replica_urls=["http://a/v1"]),
        "pools[2]: replica_url (a template) and replica_urls (a list) say the same thing: give one or neither",
    ),
    (
        "replica URL template that rounds the index",
        lambda d: d["pools"][0].update(replicas=12, replica_url="http://{pool}-{replica:.0e}:8000/v1"),
        "pools[0].replica_url: gives two of pool 'shared''s 12 replicas the same address (write {replica} without a "
        "format that rounds it",
    ),
    (
        "oversubscription below 1",
        lambda d: d.update(oversubscription={"ratio": 0.5, "source": "x"}),
        "oversubscription.ratio: must be a ratio from 1 to 1000, got 0.5",
    ),
]


@pytest.mark.parametrize(("mutate", "expected"), [case[1:] for case in BAD_PLANS], ids=[case[0] for case in BAD_PLANS])
@pytest.mark.parametrize("command", ["check", "generate"])
def test_bad_plan_one_line_with_yaml_path(tmp_path: Path, run_cli, command: str, mutate, expected: str) -> None:
    document = platform_document()
    mutate(document)
    path = write_plan(tmp_path, document)
    out_dir = tmp_path / "out"
    args = ("check", path) if command == "check" else ("generate", path, "--out", out_dir, "--target", "canonical")
    line = one_line_error(*run_cli(*args), EXIT_INVALID_INPUT)
    assert line.startswith(f"{path}: {expected}"), line
    assert not out_dir.exists()  # nothing written


@pytest.mark.parametrize(
    ("deployment", "code", "expected"),
    [
        ({"model": "nope-model"}, EXIT_USAGE, "pools[1].deployment.model: unknown model 'nope-model'"),
        ({"gpu": "h200x"}, EXIT_USAGE, "pools[1].deployment.gpu: unknown GPU 'h200x' (did you mean h200"),
        (
            {"tp": 3, "kv_pool_tokens": None},
            EXIT_INVALID_INPUT,
            "pools[1].deployment.tp: 3 does not divide the 64 attention heads",
        ),
        (
            {"tp": 1, "weight_dtype": "bf16", "kv_pool_tokens": None},
            EXIT_INVALID_INPUT,
            "pools[1].deployment.tp: Llama-3.3-70B-Instruct does not fit",
        ),
    ],
)
def test_pool_that_cannot_be_priced_names_its_pool(tmp_path: Path, run_cli, deployment, code, expected) -> None:
    document = platform_document()
    document["pools"][1]["deployment"].update(deployment)
    path = write_plan(tmp_path, document)
    for command in (("check", path), ("size", path), ("generate", path, "--out", tmp_path / "out")):
        assert one_line_error(*run_cli(*command), code).startswith(f"{path}: {expected}")
    assert not (tmp_path / "out").exists()


def test_structure_errors(tmp_path: Path, run_cli) -> None:
    path = tmp_path / "plan.yaml"
    cases = {
        "pools: 5\n": "pools: must be a list",
        "pools: [5]\n": "pools[0]: must be a mapping",
        "pools: [{name: a, replicas: 1, deployment: 5}]\n": "pools[0].deployment: must be a mapping",
        "deployment: [1]\npools: [{name: a, replicas: 1}]\n": "deployment: must be a mapping",
        "pools: [{name: a, replicas: 1.5}]\n": "pools[0].replicas: must be a valid integer, got 1.5",
        "pools: [{name: a, replicas: true}]\n": "pools[0].replicas: must be a valid integer, got True",
        "tenant_header: ''\npools: [{name: a, replicas: 1}]\n": "tenant_header: '' is not a valid name",
        # Envoy AI Gateway routes on x-ai-eg-model: the tenant's match would name it twice in one route.
        "tenant_header: x-ai-eg-model\npools: [{name: a, replicas: 1}]\n": (
            "tenant_header: 'x-ai-eg-model' is a header the gateway itself uses: choose another, e.g. x-tenant-id"
        ),
        "tenant_header: authorization\npools: [{name: a, replicas: 1}]\n": "tenant_header: 'authorization' is a",
        # GIE picks the InferenceObjective (tier-pool) from it: tenant ids there would pick none.
        "tenant_header: x-gateway-inference-objective\npools: [{name: a, replicas: 1}]\n": (
            "tenant_header: 'x-gateway-inference-objective' is a header the gateway itself uses"
        ),
        # A pool names a Kubernetes Service (RFC 1035: a letter first); a tenant or tier may start with a digit.
        "pools: [{name: 9lives, replicas: 1}]\n": "pools[0].name: '9lives' is not a valid name (a letter first, ",
        "public_prefixes: ['']\npools: [{name: a, replicas: 1}]\n": "public_prefixes[0]: String should have at least 1",
    }
    for text, expected in cases.items():
        path.write_text(text, encoding="utf-8")
        line = one_line_error(*run_cli("check", path), EXIT_INVALID_INPUT)
        assert line.startswith(f"{path}: {expected}"), (text, line)


def test_malformed_and_duplicate_yaml(tmp_path: Path, run_cli) -> None:
    path = tmp_path / "plan.yaml"
    path.write_text("pools: []\npools: []\n", encoding="utf-8")
    line = one_line_error(*run_cli("check", path), EXIT_INVALID_INPUT)
    assert line == f"{path}: duplicate key 'pools' (line 2); keep one"
    path.write_text("pools: [\n", encoding="utf-8")
    assert one_line_error(*run_cli("check", path), EXIT_INVALID_INPUT).startswith(f"{path}: malformed YAML")
    path.write_text("pools: []\n", encoding="utf-8")
    line = one_line_error(*run_cli("check", path), EXIT_INVALID_INPUT)
    assert line == f"{path}: pools: must list at least 1"
    line = one_line_error(*run_cli("check", tmp_path / "missing.yaml"), EXIT_USAGE)
    assert line == f"{tmp_path / 'missing.yaml'}: no such file (check the path to the plan)"


# --- schemas ---------------------------------------------------------------------------------------


def test_plan_schema_validates_the_example_and_rejects_a_bad_plan(run_cli) -> None:
    import jsonschema

    code, out, _ = run_cli("schema")
    assert code == 0
    schema = json.loads(out)
    jsonschema.Draft202012Validator.check_schema(schema)
    validator = jsonschema.Draft202012Validator(schema)
    validator.validate(platform_document())
    bad = copy.deepcopy(platform_document())
    bad["tenants"][0]["tierr"] = "x"
    assert list(validator.iter_errors(bad))
    bad = copy.deepcopy(platform_document())
    bad["pools"][0]["replicas"] = 0
    assert list(validator.iter_errors(bad))


def test_policy_schema_validates_the_generated_policy(run_cli) -> None:
    import jsonschema

    code, out, _ = run_cli("schema", "policy")
    assert code == 0
    schema = json.loads(out)
    policy = json.loads((EXAMPLES / "platform" / "canonical" / "policy.json").read_text(encoding="utf-8"))
    jsonschema.Draft202012Validator(schema).validate(policy)
    code, out, err = run_cli("schema", "plans")
    assert one_line_error(code, out, err, EXIT_USAGE) == "WHAT: unknown schema 'plans' (plan or policy)"


# --- size over a platform plan: what cannot be served, warnings, formats ------------------------------


def test_size_refuses_a_tenant_whose_mean_request_its_tier_refuses(run_cli, tmp_path) -> None:
    document = platform_document()
    tenant = next(entry for entry in document["tenants"] if "traffic" in entry)
    tier = next(entry for entry in document["tiers"] if entry["name"] == tenant["tier"])
    tenant["traffic"]["prompt_tokens"] = tier["max_context_tokens"]
    path = write_plan(tmp_path, document)
    code, out, err = run_cli("size", str(path))
    line = one_line_error(code, out, err, EXIT_INVALID_INPUT)
    assert line.startswith(f"{path}: tenants.{tenant['name']}.traffic: its mean request of ")
    assert f"above the max context of tier '{tenant['tier']}'" in line
    code, out, _ = run_cli("check", str(path), "--json")
    assert code == 1 and "traffic-over-context" in [f["code"] for f in json.loads(out)["findings"]]


def test_size_of_a_plan_carries_pool_warnings_and_fails_strict(run_cli) -> None:
    # A decode batch of 1,000 is more than the example's pool holds: priced at the batch that fits, saying so.
    code, out, err = run_cli("size", str(PLATFORM), "--batch", "1000", "--json")
    assert code == 0
    warnings = json.loads(out)["warnings"]
    assert warnings and all("does not fit the KV pool" in warning for warning in warnings)
    assert err.count("quotacalc: warning: ") == len(warnings)
    code, _, err = run_cli("size", str(PLATFORM), "--batch", "1000", "--strict")
    assert code == 1 and "under --strict" in err
    code, out, _ = run_cli("size", str(PLATFORM), "--json")
    assert code == 0 and json.loads(out)["warnings"] == []


def test_size_of_a_plan_in_csv_and_markdown(run_cli) -> None:
    import csv
    import io

    _, out, _ = run_cli("size", str(PLATFORM), "--json")
    tenants = json.loads(out)["tenants"]
    code, out, _ = run_cli("size", str(PLATFORM), "--format", "csv")
    rows = list(csv.DictReader(io.StringIO(out)))
    assert code == 0 and [row["name"] for row in rows] == [tenant["name"] for tenant in tenants]
    assert [float(row["units_per_s"]) for row in rows] == [tenant["units_per_s"] for tenant in tenants]
    code, out, _ = run_cli("size", str(PLATFORM), "--format", "markdown")
    lines = out.splitlines()
    assert code == 0 and lines[0].startswith("| tenant | tier | pool |")
    assert len({line.count("|") for line in lines[: 2 + len(tenants)]}) == 1
    code, out, err = run_cli("size", str(PLATFORM), "--format", "xml")
    assert "unknown format 'xml'" in one_line_error(code, out, err, EXIT_USAGE)


def test_a_tenant_sized_on_no_traffic_is_refused(run_cli, tmp_path) -> None:
    document = platform_document()
    index, tenant = next((i, entry) for i, entry in enumerate(document["tenants"]) if "traffic" in entry)
    tenant["traffic"]["rps"] = 0
    path = write_plan(tmp_path, document)
    for command in ("check", "generate"):
        args = (command, str(path)) + (("--out", str(tmp_path / "out")) if command == "generate" else ())
        code, out, err = run_cli(*args)
        line = one_line_error(code, out, err, EXIT_INVALID_INPUT)
        assert line.startswith(f"{path}: tenants[{index}].traffic: sizes to 0 units/s")
    assert not (tmp_path / "out").exists()


def test_a_flat_plan_states_its_replicas(run_cli, tmp_path) -> None:
    """The shipped DeepSeek-V3 example's tenant needs 1.03 replicas: its file says replicas: 2, and check passes;
    without it the one replica is oversold, and the fix (raise replicas) is a key the flat file takes."""
    example = EXAMPLES / "deepseek-v3-h200.yaml"
    code, out, _ = run_cli("check", str(example), "--json")
    assert code == 0 and json.loads(out)["ok"]
    one = tmp_path / "one.yaml"
    one.write_text(example.read_text(encoding="utf-8").replace("replicas: 2\n", ""), encoding="utf-8")
    code, out, _ = run_cli("check", str(one), "--json")
    (oversold,) = [f for f in json.loads(out)["findings"] if f["code"] == "oversold"]
    assert code == 1 and oversold["fix"].startswith("raise replicas to 2")
    for bad in ("0", "1.5", "true", "'2'"):
        one.write_text(f"model: Llama-3.1-8B-Instruct\ngpu: h100-sxm\nreplicas: {bad}\n", encoding="utf-8")
        code, out, err = run_cli("check", str(one))
        assert f"{one}: replicas: must be a whole number of replicas from 1 to 100,000" in one_line_error(
            code, out, err, EXIT_INVALID_INPUT
        )


def test_a_plan_with_an_alias_inside_itself_is_one_line(run_cli, tmp_path) -> None:
    document = platform_document()
    path = write_plan(tmp_path, document)
    path.write_text(path.read_text(encoding="utf-8") + "x-anchors: &loop [*loop]\n", encoding="utf-8")
    for command in ("check", "size"):
        code, out, err = run_cli(command, str(path))
        line = one_line_error(code, out, err, EXIT_INVALID_INPUT)
        assert line == f"{path}: an alias refers to its own anchor (a structure inside itself)"


def test_generate_into_a_file_is_refused_before_anything_is_written(run_cli, tmp_path) -> None:
    blocker = tmp_path / "out"
    blocker.write_text("not a directory", encoding="utf-8")
    code, out, err = run_cli(
        "generate",
        str(PLATFORM),
        "--out",
        str(blocker / "sub"),
        "--salt-secret-file",
        str(EXAMPLES / "platform.secret"),
    )
    line = one_line_error(code, out, err, EXIT_INVALID_INPUT)
    assert line.startswith(f"{blocker}: --out: is a file where a directory of the generated files goes")
    folder = tmp_path / "folder"
    folder.mkdir()
    (folder / "vllm").write_text("in the way", encoding="utf-8")
    code, out, err = run_cli(
        "generate", str(PLATFORM), "--out", str(folder), "--salt-secret-file", str(EXAMPLES / "platform.secret")
    )
    assert one_line_error(code, out, err, EXIT_INVALID_INPUT).startswith(f"{folder / 'vllm'}: --out: is a file")
    assert sorted(entry.name for entry in folder.iterdir()) == ["vllm"]


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        # Numbers as strings: refused as tp: "4" is (docs/commands.md, Errors), not read as numbers.
        (lambda d: d["tenants"][0].update(units_per_s="100"), "tenants[0].units_per_s: must be a valid number"),
        (lambda d: d["tiers"][0].update(burst_s="60"), "tiers[0].burst_s: must be a valid number"),
        # A burst beyond a year: the Retry-After of a full bucket would run to hundreds of digits.
        (lambda d: d["tiers"][0].update(burst_s=1e300), "tiers[0].burst_s: must be at most 31,622,400 s (a year)"),
        # Names that travel in headers and generated files.
        (
            lambda d: d["tenants"][0].update(lora_adapters=["a\nb"]),
            "tenants[0].lora_adapters[0]: 'a b' is not a valid adapter name",
        ),
        (lambda d: d.update(public_prefixes=["a\tb"]), "public_prefixes[0]: must not contain control characters"),
        (
            lambda d: d.update(public_prefixes=[" ab"]),
            "public_prefixes[0]: must not contain control characters or start",
        ),
    ],
)
def test_values_a_gateway_cannot_carry_are_refused(run_cli, tmp_path, edit, expected) -> None:
    document = platform_document()
    edit(document)
    path = write_plan(tmp_path, document)
    line = one_line_error(*run_cli("check", str(path)), EXIT_INVALID_INPUT)
    assert line.startswith(f"{path}: {expected}"), line


def test_a_whitespace_salt_secret_is_refused(run_cli, tmp_path, monkeypatch) -> None:
    secret = tmp_path / "secret"
    secret.write_text("  \n", encoding="utf-8")
    line = one_line_error(*run_cli("check", str(PLATFORM), "--salt-secret-file", str(secret)), EXIT_INVALID_INPUT)
    assert (
        line == f"{secret}: --salt-secret-file: holds only whitespace: anyone could derive the salts (put a "
        "random secret in it (e.g. openssl rand -hex 32))"
    )
    monkeypatch.setenv("QUOTACALC_SALT_SECRET", " ")
    line = one_line_error(*run_cli("check", str(PLATFORM)), EXIT_INVALID_INPUT)
    assert line.startswith("QUOTACALC_SALT_SECRET: holds only whitespace")


def test_gateways_that_pin_the_base_model_say_the_lora_adapters_are_not_served(run_cli, tmp_path) -> None:
    out = tmp_path / "out"
    code, out_json, err = run_cli(
        "generate",
        str(PLATFORM),
        "--target",
        "kong,litellm",
        "--out",
        str(out),
        "--json",
        "--salt-secret-file",
        str(EXAMPLES / "platform.secret"),
    )
    assert code == 0, err
    limits = json.loads(out_json)["limits"]
    for target in ("kong", "litellm"):
        lines = limits[target]
        (line,) = [limit for limit in lines if limit.startswith("LoRA adapters")]
        assert line.startswith("LoRA adapters (initech: initech-support-v2): not served")
        # under the lora part, which says why and what to add
        part = lines[lines.index(line) - 1]
        assert part.startswith("**lora**: lost.") and "Fix: add a" in part


def test_a_misspelt_required_key_is_named_as_unknown_with_its_spelling(run_cli, tmp_path) -> None:
    document = platform_document()
    document["tiers"][0]["max_ouput_tokens"] = document["tiers"][0].pop("max_output_tokens")
    path = write_plan(tmp_path, document)
    line = one_line_error(*run_cli("check", str(path)), EXIT_INVALID_INPUT)
    assert (
        line == f"{path}: tiers[0].max_ouput_tokens: unknown key 'max_ouput_tokens' (did you mean 'max_output_tokens'?)"
    )


def test_numbers_in_scientific_notation_are_numbers(run_cli, tmp_path) -> None:
    """YAML 1.2 reads 1e4 as a number where PyYAML (YAML 1.1) reads a string; quoted, it stays a string."""
    document = platform_document()
    path = write_plan(tmp_path, document)
    text = path.read_text(encoding="utf-8")
    contract = next(t for t in document["tenants"] if "units_per_s" in t)
    changed = text.replace(f"units_per_s: {contract['units_per_s']}", "units_per_s: 1.2e4", 1)
    assert changed != text
    path.write_text(changed, encoding="utf-8")
    code, out, _ = run_cli("size", str(path), "--json")
    assert (
        code == 0
        and next(t for t in json.loads(out)["tenants"] if t["name"] == contract["name"])["units_per_s"] == 12_000
    )
    path.write_text(
        text.replace(f"units_per_s: {contract['units_per_s']}", "units_per_s: '1.2e4'", 1), encoding="utf-8"
    )
    assert "must be a valid number" in one_line_error(*run_cli("check", str(path)), EXIT_INVALID_INPUT)


def test_a_whole_number_in_exponent_form_is_a_count(run_cli, tmp_path) -> None:
    plan = tmp_path / "flat.yaml"
    plan.write_text(
        "model: Llama-3.3-70B-Instruct\ngpu: h100-sxm\ntp: 4\nweight_dtype: fp8\ncontext: 2e3\n", encoding="utf-8"
    )
    code, out, _ = run_cli("price", str(plan), "--json")
    assert code == 0 and json.loads(out)["inputs"]["deployment"]["context"] == 2_000
    plan.write_text("model: Llama-3.3-70B-Instruct\ngpu: h100-sxm\ncontext: 2.5e3\n", encoding="utf-8")
    code, _, err = run_cli("price", str(plan))
    assert code == 1 and "context: must be an integer, got 2500.0" in err


@pytest.mark.parametrize("kind", ["flat", "platform"])
def test_a_relative_model_path_means_beside_the_plan_wherever_the_command_runs(run_cli, tmp_path, monkeypatch, kind):
    """Both plan kinds read `model: ./folder` beside the plan file; a shipped name stays a name."""
    plans = tmp_path / "plans"
    (plans / "my-llama").mkdir(parents=True)
    config = EXAMPLES.parent / "models" / "Llama-3.1-8B-Instruct" / "config.json"
    (plans / "my-llama" / "config.json").write_bytes(config.read_bytes())
    if kind == "flat":
        document = yaml.safe_load(FLAT.read_text(encoding="utf-8"))
        document["model"] = "my-llama"
    else:
        document = platform_document()
        document["deployment"]["model"] = "./my-llama"
        for pool in document["pools"]:
            (pool.get("deployment") or {}).pop("model", None)
    # The examples' measured pools hold for the 70B they were measured on, not for this model.
    for deployment in (
        document,
        document.get("deployment") or {},
        *((p.get("deployment") or {}) for p in document.get("pools", [])),
    ):
        for key in ("kv_pool_tokens", "kv_pool_measured_with", "calibration"):
            deployment.pop(key, None)
    plan = plans / "plan.yaml"
    plan.write_text(yaml.safe_dump(document), encoding="utf-8")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    code, out, err = run_cli("check", plan, "--json")
    assert code == 0, err
    # The model read is the copy beside the plan: Llama 3.1 8B's 32 layers, not the example's 70B.
    code, out, err = run_cli("size", plan, "--json")
    assert code == 0, err
    assert "my-llama" in out and "Llama-3.3-70B" not in out


def test_an_empty_model_in_a_plan_is_named_as_its_key_not_read_as_the_plans_folder(run_cli, tmp_path):
    """`model: ""` was read as the plan's own folder ('.: no config.json in this directory')."""
    flat = tmp_path / "flat.yaml"
    flat.write_text('model: ""\ngpu: h100-sxm\n', encoding="utf-8")
    code, out, err = run_cli("price", flat)
    assert code != 0 and out == ""
    assert err.strip() == f"quotacalc: error: {flat}: model: must not be empty"
    document = platform_document()
    document["deployment"]["model"] = "  "
    code, out, err = run_cli("check", write_plan(tmp_path, document))
    assert code == 1 and "config.json" not in err
    assert "pools[0].deployment.model (inherited from deployment.model): must not be empty" in err


def test_a_tenant_cannot_take_the_name_the_gateway_reserves_for_its_route_rule(tmp_path, run_cli):
    """A tenant names its AIGatewayRoute rule, and the CRD refuses 'route-not-found' (the controller's catch-all):
    check said sound and generate wrote a route the API server rejects."""
    document = platform_document()
    document["tenants"][0]["name"] = "route-not-found"
    path = write_plan(tmp_path, document)
    for command in (("check", path), ("generate", path, "--out", tmp_path / "out")):
        line = one_line_error(*run_cli(*command), EXIT_INVALID_INPUT)
        assert (
            line
            == f"{path}: tenants[0].name: 'route-not-found' is a name the gateway reserves for its own route rule: choose another"
        )
    assert not (tmp_path / "out").exists()
