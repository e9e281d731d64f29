"""A plan is read once and priced once: every plan command takes one ``PricedPlan``.

Reads are counted where every plan file is opened (``fileio.open_regular``, through ``read_text_file``), for the
plan's own path only (a model's config, a secret or a scenario are other files)."""

from __future__ import annotations

from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
PLATFORM = EXAMPLES / "platform.yaml"
FLAT = EXAMPLES / "llama-3.3-70b-h100.yaml"
SECRET = EXAMPLES / "platform.secret"


@pytest.fixture
def plan_reads(monkeypatch: pytest.MonkeyPatch):
    """path (resolved) -> how many times it was opened for reading."""
    import quotacalc.fileio as fileio

    counts: dict[Path, int] = {}
    real = fileio.open_regular

    def counting(path, *, what):
        resolved = Path(path).resolve()
        counts[resolved] = counts.get(resolved, 0) + 1
        return real(path, what=what)

    monkeypatch.setattr(fileio, "open_regular", counting)
    return counts


def _secret(tmp_path: Path) -> str:
    secret = tmp_path / "secret"
    secret.write_text(SECRET.read_text())
    secret.chmod(0o600)
    return str(secret)


@pytest.mark.parametrize("plan", [PLATFORM, FLAT], ids=["platform", "flat"])
def test_check_reads_the_plan_once(run_cli, plan_reads, plan, tmp_path):
    code, out, _ = run_cli("check", str(plan), "--json", "--salt-secret-file", _secret(tmp_path))
    assert '"command": "check"' in out and code in (0, 1)
    assert plan_reads[plan.resolve()] == 1


@pytest.mark.parametrize("plan", [PLATFORM, FLAT], ids=["platform", "flat"])
def test_size_reads_the_plan_once(run_cli, plan_reads, plan):
    code, out, err = run_cli("size", str(plan), "--json")
    assert code == 0, err
    assert '"command": "size"' in out
    assert plan_reads[plan.resolve()] == 1


def test_size_with_a_flag_reads_the_plan_once_and_names_each_key_where_it_was_set(run_cli, plan_reads):
    import json

    # A batch of 4,096 sequences of 1,700 tokens is more than examples/platform.yaml's shared pool holds (380).
    code, out, err = run_cli("size", str(PLATFORM), "--json", "--batch", "4096")
    assert code == 0, err
    assert plan_reads[PLATFORM.resolve()] == 1
    (shared,) = [line for line in json.loads(out)["warnings"] if line.startswith("pool 'shared': a decode batch")]
    # batch came from the flag; tp and kv_dtype from the plan, whose pool key changes that pool alone.
    assert shared.endswith(
        "priced at batch 380 (lower --batch, raise pools.shared.deployment.tp, or use "
        "pools.shared.deployment.kv_dtype: fp8)"
    )


@pytest.mark.parametrize("plan", [PLATFORM, FLAT], ids=["platform", "flat"])
def test_generate_reads_the_plan_once(run_cli, plan_reads, plan, tmp_path):
    out_dir = tmp_path / "out"
    code, _, err = run_cli("generate", str(plan), "--out", str(out_dir), "--salt-secret-file", _secret(tmp_path))
    assert code == 0, err
    assert any(out_dir.rglob("*"))
    assert plan_reads[plan.resolve()] == 1


def test_simulate_reads_its_named_plan_once_and_prices_it_once(plan_reads, monkeypatch):
    import quotacalc.core.price as core_price
    from quotacalc.inputs.scenario import load_scenario
    from quotacalc.sim.events import build_setup

    priced: list[str] = []
    real = core_price.price

    def counting(inputs, *args, **kwargs):
        priced.append(inputs.deployment.model)
        return real(inputs, *args, **kwargs)

    monkeypatch.setattr(core_price, "price", counting)
    setup = build_setup(load_scenario(str(EXAMPLES / "simulate-named-plan.yaml")))
    assert [pool.name for pool in setup.pools] == ["shared", "long", "acme-dedicated"]
    assert plan_reads[PLATFORM.resolve()] == 1
    # shared and acme-dedicated are the same deployment: priced once between them.
    assert len(priced) == 2


@pytest.mark.parametrize("plan", [PLATFORM, FLAT], ids=["platform", "flat"])
def test_emulate_reads_the_plan_once(plan_reads, plan):
    from quotacalc.cli.emulate import _servings

    servings = _servings(str(plan), None, None, None, None)
    assert len(servings) == (3 if plan == PLATFORM else 1)
    assert plan_reads[plan.resolve()] == 1


def test_origins_say_where_each_value_came_from():
    from quotacalc.priced import price_plan

    priced = price_plan(str(PLATFORM), {"mfu": 0.4})
    shared = priced.origins["shared"]
    # examples/platform.yaml: batch is the pool's own key, tp the plan's top-level deployment's, mfu a flag's.
    assert (shared["batch"].kind, shared["batch"].written) == ("pool", "pools.shared.deployment.batch")
    assert (shared["tp"].kind, shared["tp"].written) == ("inherited", "deployment.tp")
    assert (shared["mfu"].kind, shared["mfu"].written) == ("flag", "--mfu")
    assert (shared["ceiling"].kind, shared["ceiling"].written) == ("default", "pools.shared.deployment.ceiling")
    assert "tp" in priced.inherited_keys()["long"] and "context" not in priced.inherited_keys()["long"]
    assert priced.prices["shared"].inputs.deployment.mfu == 0.4


def test_a_flat_plans_origins_are_its_top_level_keys():
    from quotacalc.priced import price_plan

    priced = price_plan(str(FLAT))
    (origins,) = priced.origins.values()
    assert (origins["batch"].kind, origins["batch"].written) == ("pool", "batch")
    assert priced.inherited_keys() is None and priced.flat


SYNTHETIC_CSV = EXAMPLES / "calibration" / "synthetic-llama-3.3-70b-h100-tp4.csv"


@pytest.mark.parametrize(("plan", "pool"), [(PLATFORM, ["--pool", "shared"]), (FLAT, [])], ids=["platform", "flat"])
def test_calibrate_write_parses_the_plan_once(run_cli, monkeypatch, plan, pool, tmp_path):
    """calibrate --write into the plan it calibrates parses it once; the file's text is read once more, as written,
    to edit it with its comments and line ends kept; the edit is read back from a probe file, not the plan."""
    import builtins

    import quotacalc.fileio as fileio

    copy = tmp_path / plan.name
    copy.write_bytes(plan.read_bytes())
    opened: list[str] = []
    real_regular, real_open = fileio.open_regular, builtins.open

    def regular(path, *, what):
        opened.append(f"parse {Path(path).name}")
        return real_regular(path, what=what)

    def any_open(path, *args, **kwargs):
        if isinstance(path, (str, Path)) and Path(path) == copy:
            opened.append(f"open {Path(path).name}")
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(fileio, "open_regular", regular)
    monkeypatch.setattr(builtins, "open", any_open)
    code, _, err = run_cli("calibrate", str(copy), *pool, "--bench", str(SYNTHETIC_CSV), "--write", str(copy))
    monkeypatch.setattr(builtins, "open", real_open)
    assert code == 0, err
    assert "calibration:" in copy.read_text()
    assert opened.count(f"parse {plan.name}") == 1
    assert opened.count(f"open {plan.name}") == 1


def test_emulate_names_a_pools_keys_where_the_plan_sets_them(tmp_path):
    from quotacalc.cli.emulate import _servings

    plan = tmp_path / "platform.yaml"
    text = PLATFORM.read_text()
    assert "deployment: {batch: 128, context: 1700}" in text
    plan.write_text(
        text.replace("deployment: {batch: 128, context: 1700}", "deployment: {batch: 4096, context: 1700}", 1)
    )
    (_, warnings), *_ = _servings(str(plan), "shared", None, None, None)
    # emulate takes no deployment flags: batch is the pool's key, tp and kv_dtype the plan's, set on the pool.
    assert warnings == (
        "pool 'shared': a decode batch of 4096 at 1,700 tokens does not fit the KV pool, which holds 380 such "
        "sequences: priced at batch 380 (lower pools.shared.deployment.batch, raise pools.shared.deployment.tp, or "
        "use pools.shared.deployment.kv_dtype: fp8)",
    )


_TIGHT = """\
deployment: {model: meta-llama/Llama-3.3-70B-Instruct, gpu: h100-sxm, tp: 2, weight_dtype: fp8}
pools:
  - {name: shared, replicas: 1, deployment: {batch: 8, context: 4096}}
  - {name: long, replicas: 1, deployment: {batch: 1, context: 120000, tp: 1}}
tiers:
  - {name: t, max_context_tokens: 4096, kv_cap_tokens_per_replica: 8192, max_concurrent_sequences: 8,
     max_output_tokens: 1024, priority: 0, burst_s: 10, cached_prompt_weight: 0.1}
tenants:
  - {name: a, tier: t, pool: shared, units_per_s: 100}
"""


def test_a_pool_the_plan_cannot_price_names_its_keys_where_the_plan_sets_them(run_cli, tmp_path):
    # Llama 3.3 70B in FP8 on one H100 leaves no room for a 120,000-token sequence: the long pool's own tp and
    # context, and an FP8 cache, are the fixes; price of the same deployment names them as flags.
    plan = tmp_path / "plan.yaml"
    plan.write_text(_TIGHT)
    code, _, err = run_cli("check", str(plan))
    assert code == 1
    assert err == (
        f"quotacalc: error: {plan}: pools[1].deployment.context: one sequence of 120,000 tokens does not fit the KV "
        "pool (lower pools.long.deployment.context, raise pools.long.deployment.tp, or use "
        "pools.long.deployment.kv_dtype: fp8)\n"
    )
    code, _, err = run_cli(
        "price",
        "--model",
        "meta-llama/Llama-3.3-70B-Instruct",
        "--gpu",
        "h100-sxm",
        "--weight-dtype",
        "fp8",
        "--context",
        "120000",
        "--batch",
        "1",
    )
    assert code == 1
    assert err.endswith("(lower --context, raise --tp, or use --kv-dtype fp8)\n")


def test_a_value_a_flag_gave_is_the_flags_error_and_the_plans_keys_stay_the_plans(run_cli, tmp_path):
    plan = tmp_path / "plan.yaml"
    plan.write_text(_TIGHT)
    code, _, err = run_cli("size", str(plan), "--context", "120000")
    assert code == 1
    assert err == (
        "quotacalc: error: --context: one sequence of 120,000 tokens does not fit the KV pool (lower --context, "
        "raise pools.long.deployment.tp, or use pools.long.deployment.kv_dtype: fp8)\n"
    )
    code, _, err = run_cli("size", str(plan), "--tp", "1")
    assert code == 1
    assert err == (
        f"quotacalc: error: {plan}: pools[0].deployment.context: one sequence of 4,096 tokens does not fit the KV pool "
        "(lower pools.shared.deployment.context, raise --tp, or use pools.shared.deployment.kv_dtype: fp8)\n"
    )


def test_a_scenarios_embedded_plan_it_cannot_price_names_the_scenarios_keys():
    import yaml

    from quotacalc.errors import QuotacalcError
    from quotacalc.inputs.scenario import scenario_from_dict
    from quotacalc.sim.events import build_setup

    plan = yaml.safe_load(_TIGHT)
    for pool in plan["pools"]:  # an embedded plan has no top-level deployment
        pool["deployment"] = {**plan["deployment"], **pool["deployment"]}
    del plan["deployment"]
    scenario = {
        "plan": plan,
        "duration_s": 10,
        "workload": {
            "tenants": [
                {
                    "tenant": "a",
                    "arrival": {"kind": "poisson", "rate_rps": 1},
                    "prompt_tokens": {"kind": "fixed", "tokens": 500},
                    "output_tokens": {"kind": "fixed", "tokens": 100},
                }
            ]
        },
    }
    with pytest.raises(QuotacalcError) as raised:
        build_setup(scenario_from_dict(scenario, source="scenario.yaml"))
    error = raised.value
    assert (error.source, error.field) == ("scenario.yaml", "plan.pools[1].deployment.context")
    assert error.fix == (
        "lower plan.pools.long.deployment.context, raise plan.pools.long.deployment.tp, or use "
        "plan.pools.long.deployment.kv_dtype: fp8"
    )


def test_an_exporters_policy_path_is_named_where_the_plan_writes_it():
    """A refusal of the policy's ``tenants[0].lora_adapters`` is the plan's own key: a platform plan's (under
    ``plan.`` in a scenario), or a flat plan's one ``tenant``."""
    from dataclasses import replace

    from quotacalc.priced import price_plan

    platform = price_plan(str(PLATFORM))
    assert platform.plan_field("tenants[2].lora_adapters") == "tenants[2].lora_adapters"
    assert replace(platform, at="plan.").plan_field("tenants[0].tier") == "plan.tenants[0].tier"
    flat = price_plan(str(FLAT))
    assert flat.plan_field("tenants[0].lora_adapters") == "tenant.lora_adapters"
    assert flat.plan_field("tenants[0]") == "tenant"
    assert flat.plan_field("pools[0].deployment.batch") == "pools[0].deployment.batch"
    assert flat.plan_field(None) is None
