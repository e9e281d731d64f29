"""LiteLLM exporter: config and payloads validated by LiteLLM's own models; a real proxy shows the 429.

The proxy test (marker ``litellm_proxy``, outside the quick run, run by CI) starts ``litellm --config`` on
127.0.0.1 in front of a stdlib OpenAI-compatible fake backend, with no database and no network.
"""

from __future__ import annotations

import json
import math
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar

import pytest
import yaml
from policy_samples import platform_policy, sample_salts, tenant_policy

from quotacalc.core.policy import QuotaPolicy
from quotacalc.exporters import litellm as litellm_exporter
from quotacalc.exporters.base import ExportOptions


@pytest.fixture(scope="module")
def litellm_types():
    """litellm.proxy._types, imported only by the marked tests (the import alone takes about 10 s)."""
    # LiteLLM fetches its price map from the internet at import unless told to use its bundled copy.
    os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
    return pytest.importorskip("litellm.proxy._types", reason="litellm[proxy] not installed (extra litellm-proxy)")


def _export(policy: QuotaPolicy | None = None, enforce: str = "builtin"):
    """The builtin limiters' export by default (most tests here are about them); enforce="plugin": quotacalc's plugin
    (tests/test_enforce_litellm.py)."""
    policy = policy or platform_policy()
    return policy, litellm_exporter.export(policy, sample_salts(policy), ExportOptions(litellm_enforce=enforce))


def _file(result, name: str) -> str:
    return next(f.text for f in result.files if f.path == f"litellm/{name}")


@pytest.mark.litellm_proxy
def test_config_and_payloads_pass_litellms_own_models(litellm_types):
    from litellm.types.proxy.management_endpoints.key_requests import GenerateKeyRequest
    from litellm.types.router import LiteLLM_Params

    _policy, result = _export()
    config = yaml.safe_load(_file(result, "config.yaml"))
    litellm_types.ConfigYAML.model_validate(config)
    for deployment in config["model_list"]:  # ConfigYAML keeps litellm_params a plain dict
        LiteLLM_Params.model_validate(deployment["litellm_params"])
    # LiteLLM's request models accept and drop unknown fields: every field written must be one it reads.
    for team in json.loads(_file(result, "teams.json")):
        litellm_types.NewTeamRequest.model_validate(team)
        assert set(team) <= set(litellm_types.NewTeamRequest.model_fields), team
    for key in json.loads(_file(result, "keys.json")):
        GenerateKeyRequest.model_validate(key)
        assert set(key) <= set(GenerateKeyRequest.model_fields), key
        assert key["max_parallel_requests"] >= 1  # the concurrency cap lives on the key


@pytest.mark.litellm_proxy
def test_litellms_models_catch_bad_values(litellm_types):
    """The checks above can fail: a misspelt pre-call check and a non-integer tpm are refused."""
    from litellm.types.router import LiteLLM_Params

    _policy, result = _export()
    config = yaml.safe_load(_file(result, "config.yaml"))
    config["router_settings"]["optional_pre_call_checks"] = ["enforce_model_rate_limit"]
    with pytest.raises(ValueError, match="optional_pre_call_checks"):
        litellm_types.ConfigYAML.model_validate(config)
    with pytest.raises(ValueError, match="tpm"):
        LiteLLM_Params.model_validate({**config["model_list"][0]["litellm_params"], "tpm": "lots"})


def test_per_token_costs_express_units_in_usd():
    """Standard pool: 6 replicas x $7,200 = $43,200/month for 6 x 18,232 = 109,392 units/s x 2,592,000 s
    = 2.83544e11 units/month -> $1.52357e-7 per unit. Output: x 3.09 = $4.70784e-7; cached (highest tier
    weight on the pool, 0.25) = $3.80893e-8. acme's budget: 17,725 units/s x 3,600 s x $1.52357e-7 = $9.7219."""
    _policy, result = _export()
    config = yaml.safe_load(_file(result, "config.yaml"))
    standard = [d["litellm_params"] for d in config["model_list"] if d["model_name"] == "standard"]
    # A deployment a replica, each priced per token alike; their tpm adds up to the pool's 109,392 x 60.
    assert len(standard) == 6
    for params in standard:
        assert params["input_cost_per_token"] == pytest.approx(1.52357e-7, rel=1e-5)
        assert params["output_cost_per_token"] == pytest.approx(4.70784e-7, rel=1e-5)
        assert params["cache_read_input_token_cost"] == pytest.approx(3.80893e-8, rel=1e-5)
    assert sum(params["tpm"] for params in standard) == 109392 * 60
    teams = {team["team_id"]: team for team in json.loads(_file(result, "teams.json"))}
    assert teams["acme"]["max_budget"] == pytest.approx(9.7219, abs=1e-4)
    assert teams["acme"]["tpm_limit"] == 17725 * 60
    # The tier's concurrency cap is on the tenant's key: a team has no such field in LiteLLM.
    keys = {key["key_alias"]: key for key in json.loads(_file(result, "keys.json"))}
    assert keys["acme"]["max_parallel_requests"] == 64 and "max_parallel_requests" not in teams["acme"]
    assert teams["acme"]["metadata"]["priority"] == "premium"
    assert teams["wonka"]["models"] == ["standard"]


def test_the_policys_price_per_unit_wins_over_a_720_hour_month():
    """build_policy sets each pool's $/unit from its deployment (hours per month included); the exporter uses
    that figure rather than re-deriving it from $/month with a 720-hour month."""
    policy = platform_policy()
    pool = policy.pools[0].model_copy(update={"usd_per_unit": 2.5e-7})
    _policy, result = _export(policy.model_copy(update={"pools": (pool, *policy.pools[1:])}))
    params = yaml.safe_load(_file(result, "config.yaml"))["model_list"][0]["litellm_params"]
    assert params["input_cost_per_token"] == pytest.approx(2.5e-7)
    assert params["output_cost_per_token"] == pytest.approx(2.5e-7 * pool.output_weight)


def test_priority_reservation_shares_the_units_sold_by_tier():
    """premium 17,725 + 9,000 = 26,725; standard 4,000 + 3,500 + 2,500 + 1,800 = 11,800; batch 6,750.5;
    sold 45,275.5: shares 0.5903, 0.2606, 0.1491."""
    _policy, result = _export()
    config = yaml.safe_load(_file(result, "config.yaml"))
    assert config["litellm_settings"]["priority_reservation"] == {
        "premium": 0.5903,
        "standard": 0.2606,
        "batch": 0.1491,
    }
    assert config["litellm_settings"]["callbacks"] == ["dynamic_rate_limiter_v3"]
    assert config["router_settings"]["optional_pre_call_checks"] == ["enforce_model_rate_limits"]
    # max_input_tokens binds only with pre-call checks on (Router.async_get_healthy_deployments, LiteLLM 1.108).
    assert config["router_settings"]["enable_pre_call_checks"] is True
    assert config["general_settings"]["master_key"] == "os.environ/LITELLM_MASTER_KEY"
    # Every tenant of the sample is on one pool: its shares are the global ones, and LIMITS.md says nothing more.
    assert not any("priority_reservation is one setting" in line for line in result.limits)


def test_a_pool_whose_tiers_hold_other_shares_is_named_in_the_limits():
    """LiteLLM applies the one priority_reservation to each model's tpm. Moving the premium tenant acme (17,725
    units/s) to the long pool leaves the standard pool premium 9,000 of 27,550.5 (0.3267) against the global 0.5903,
    and the long pool premium 1: both are named, each with its own shares."""
    policy = platform_policy()
    tenants = tuple(
        tenant.model_copy(update={"pool": "long", "long_context_pool": None, "route_above_prompt_tokens": None})
        if tenant.name == "acme"
        else tenant
        for tenant in policy.tenants
    )
    _policy, result = _export(policy.model_copy(update={"tenants": tenants}))
    lines = [line for line in result.limits if "priority_reservation is one setting" in line]
    assert len(lines) == 2
    assert "pool 'standard' sells its tiers otherwise (premium 0.3267, standard 0.4283, batch 0.245)" in lines[0]
    assert "pool 'long' sells its tiers otherwise (premium 1)" in lines[1]


def test_no_salt_is_written_and_the_limits_say_so():
    policy, result = _export()
    assert not any(f.secret for f in result.files)
    for salt in sample_salts(policy).values():
        assert all(salt not in f.text for f in result.files)
    from quotacalc.exporters.limits import limits_markdown

    text = limits_markdown(result, ExportOptions(litellm_enforce="builtin"))
    for phrase in (
        "**salt**: lost. LiteLLM has no per-tenant cache_salt",
        "raw tokens, not units",
        "database",
        "**kv_cap**: lost.",
    ):
        assert phrase in text


def test_round_trips_and_is_deterministic():
    policy, result = _export()
    assert yaml.safe_load(_file(result, "config.yaml")) == litellm_exporter.config(policy, "builtin")
    assert json.loads(_file(result, "teams.json")) == litellm_exporter.team_payloads(policy)
    assert result == litellm_exporter.export(policy, sample_salts(policy), ExportOptions(litellm_enforce="builtin"))


# --- a real LiteLLM proxy ---------------------------------------------------------------------------------

USAGE_TOKENS = (40, 10)  # prompt, completion tokens the fake backend reports per request


class _FakeOpenAI(BaseHTTPRequestHandler):
    """An OpenAI-compatible chat completions endpoint that reports fixed usage (and keeps what it was sent)."""

    received: ClassVar[list[dict]] = []

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length", "0"))
        request = json.loads(self.rfile.read(length) or b"{}")
        self.received.append(request)
        prompt, completion = USAGE_TOKENS
        body = json.dumps(
            {
                "id": "chatcmpl-quotacalc",
                "object": "chat.completion",
                "created": 0,
                "model": request.get("model", "fake"),
                "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
                "usage": {
                    "prompt_tokens": prompt,
                    "completion_tokens": completion,
                    "total_tokens": prompt + completion,
                },
            }
        ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        body = json.dumps({"object": "list", "data": [{"id": "llama-3.3-70b", "object": "model"}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture
def fake_backend() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _FakeOpenAI)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()


def _post(url: str, key: str, payload: dict, timeout: float = 30) -> tuple[int, str]:
    request = urllib.request.Request(
        url,
        data=json.dumps(payload).encode(),
        headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


#: The tiny pool's engine context: the deployment's max_input_tokens.
TINY_MAX_MODEL_LEN = 256


def _tiny_policy() -> QuotaPolicy:
    """One standard pool of 2 units/s: the generated tpm is 2 x 60 = 120 tokens per minute; its engine admits
    TINY_MAX_MODEL_LEN tokens."""
    base = platform_policy()
    standard = base.pools[0].model_copy(
        update={
            "engine": base.pools[0].engine.model_copy(update={"max_model_len": TINY_MAX_MODEL_LEN}),
            "replicas": 1,
            "replica_units_per_s": 2.0,
            "capacity_units_per_s": 2.0,
            "long_context_pool": None,
            "route_above_prompt_tokens": None,
        }
    )
    tenant = tenant_policy("acme", base.tiers[1], 1.0, long_context=False)
    return base.model_copy(update={"pools": (standard,), "tenants": (tenant,)})


@pytest.mark.litellm_proxy
def test_a_real_proxy_loads_the_config_and_answers_429_over_the_deployments_tpm(tmp_path: Path, fake_backend: str):
    executable = shutil.which("litellm", path=str(Path(sys.executable).parent)) or shutil.which("litellm")
    if executable is None:
        pytest.skip("the litellm CLI is not installed (test extra litellm-proxy)")
    policy = _tiny_policy()
    config = litellm_exporter.config(policy, "builtin")
    assert config["model_list"][0]["litellm_params"]["tpm"] == 120
    # Only the deployment's address changes: the fake backend stands where the pool's vLLM would.
    config["model_list"][0]["litellm_params"]["api_base"] = fake_backend
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    port = _free_port()
    master_key = f"sk-quotacalc-{secrets.token_hex(12)}"
    env = {
        **os.environ,
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "LITELLM_MASTER_KEY": master_key,
        "VLLM_API_KEY": "unused-by-the-fake-backend",
        "DISABLE_SCHEMA_UPDATE": "True",
        "LITELLM_TELEMETRY": "False",
        "NO_PROXY": "127.0.0.1,localhost",
    }
    env.pop("DATABASE_URL", None)
    log = (tmp_path / "proxy.log").open("w")
    proxy = subprocess.Popen(
        [executable, "--config", str(path), "--host", "127.0.0.1", "--port", str(port)],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            assert proxy.poll() is None, (tmp_path / "proxy.log").read_text()[-3000:]
            try:
                with urllib.request.urlopen(f"{base}/health/liveliness", timeout=2) as response:
                    if response.status == 200:
                        break
            except OSError:
                pass
            assert time.monotonic() < deadline, (
                "proxy not healthy in 120 s:\n" + (tmp_path / "proxy.log").read_text()[-3000:]
            )
            time.sleep(0.5)
        # A prompt over the deployment's max_input_tokens is refused before it reaches the engine: LiteLLM checks it
        # only with router_settings.enable_pre_call_checks (Router._pre_call_checks), which the config sets.
        assert config["router_settings"]["enable_pre_call_checks"] is True
        assert config["model_list"][0]["model_info"]["max_input_tokens"] == TINY_MAX_MODEL_LEN
        _FakeOpenAI.received.clear()
        long_prompt = {"model": "standard", "messages": [{"role": "user", "content": "hello " * 1000}]}
        status, body = _post(f"{base}/v1/chat/completions", master_key, long_prompt)
        assert status == 400 and "context window" in body.lower(), (status, body[:500])
        assert _FakeOpenAI.received == []
        payload = {"model": "standard", "messages": [{"role": "user", "content": "hi"}]}
        statuses: list[int] = []
        body = ""
        # 50 tokens a request against 120 tokens a minute: the third or fourth request must be refused.
        for _ in range(12):
            status, body = _post(f"{base}/v1/chat/completions", master_key, payload)
            statuses.append(status)
            if status == 429:
                break
            assert status == 200, body
            time.sleep(0.3)  # let the success callback record the usage
        assert statuses[0] == 200
        assert statuses[-1] == 429, statuses
        assert "rate limit" in body.lower(), body
    finally:
        # The proxy leads its own process group (start_new_session): end it and any worker it started.
        os.killpg(proxy.pid, signal.SIGTERM)
        try:
            proxy.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(proxy.pid, signal.SIGKILL)
            proxy.wait(timeout=15)
        log.close()


def test_a_tenant_sized_on_the_long_context_pool_counts_there():
    """acme (premium, 17,725 units/s) stays on pool standard but is sized on traffic whose mean prompt (50,000
    tokens) routes to pool long: its units are long's. Standard's shares leave it out (premium 9,000 of 27,550.5:
    0.3267), long's are premium 1, and its budget is at long's USD per unit: 17,725 x 3,600 x $2.5e-7 = $15.9525."""
    contract = platform_policy()
    long = contract.pools[1].model_copy(update={"usd_per_unit": 2.5e-7})
    contract = contract.model_copy(update={"pools": (contract.pools[0], long)})
    # acme's load on pool long, as build_policy sizes a tenant whose mean prompt routes there.
    tenants = tuple(
        tenant.model_copy(update={"load_pool": "long"}) if tenant.name == "acme" else tenant
        for tenant in contract.tenants
    )
    policy = contract.model_copy(update={"tenants": tenants})
    result = litellm_exporter.export(policy, {}, ExportOptions(litellm_enforce="builtin"))
    assert litellm_exporter.priority_reservation(policy, "standard") == {
        "premium": 0.3267,
        "standard": 0.4283,
        "batch": 0.245,
    }
    assert litellm_exporter.priority_reservation(policy, "long") == {"premium": 1.0}
    # As a contract, acme counts on its standard pool (a contract says nothing of its long prompts).
    assert litellm_exporter.priority_reservation(contract, "long") == {}
    lines = [line for line in result.limits if "priority_reservation is one setting" in line]
    assert lines == [
        "priority_reservation is one setting, applied to each model's tpm: it holds every pool's shares together, "
        "and pool 'standard' sells its tiers otherwise (premium 0.3267, standard 0.4283, batch 0.245), so a saturated "
        "'standard' reserves capacity by the shares of the others.",
        "priority_reservation is one setting, applied to each model's tpm: it holds every pool's shares together, "
        "and pool 'long' sells its tiers otherwise (premium 1), so a saturated 'long' reserves capacity by the "
        "shares of the others.",
    ]
    assert (
        "acme: sized on traffic whose mean prompt routes to pool long, so the rate, the budget (at long's USD per "
        "unit) and the tier shares are counted on long; a request to another pool spends that budget at that pool's "
        "price."
    ) in result.limits
    teams = {team["team_id"]: team for team in json.loads(_file(result, "teams.json"))}
    assert teams["acme"]["max_budget"] == pytest.approx(15.9525, abs=2e-6)  # floored to the micro-dollar
    assert teams["acme"]["models"] == ["standard", "long"]
    keys = {key["key_alias"]: key for key in json.loads(_file(result, "keys.json"))}
    assert keys["acme"]["max_budget"] == teams["acme"]["max_budget"]
    assert teams["globex"]["max_budget"] == pytest.approx(9000 * 3600 * 43200 / (6 * 18232 * 2592000), abs=1e-6)


def test_generate_counts_each_tenants_shares_on_the_pool_size_loads(tmp_path, run_cli):
    """QA's plan: delta sized on a 50,000-token mean prompt above std's 16,384 threshold loads pool long8b
    (``size``'s load_pool). std's shares are alpha's and beta's alone (gold 20,000 and silver 8,000 of 28,000:
    0.7143, 0.2857) and long8b's delta's (gold 1), as LIMITS.md says."""
    plan = tmp_path / "plan.yaml"
    plan.write_text(
        "deployment: {model: Llama-3.1-8B-Instruct, gpu: h100-sxm, tp: 1}\n"
        "pools:\n  - {name: std, replicas: 4, long_context_pool: long8b, route_above_prompt_tokens: 16384,"
        " deployment: {batch: 64, context: 2000}}\n"
        "  - {name: long8b, role: long_context, replicas: 3, deployment: {batch: 6, context: 65536}}\n"
        "tiers:\n  - {name: gold, max_context_tokens: 100000, kv_cap_tokens_per_replica: 200000,"
        " max_concurrent_sequences: 32, max_output_tokens: 8192, priority: 0}\n"
        "  - {name: silver, max_context_tokens: 32768, kv_cap_tokens_per_replica: 100000,"
        " max_concurrent_sequences: 16, max_output_tokens: 4096, priority: 1}\n"
        "tenants:\n  - {name: alpha, tier: gold, pool: std, units_per_s: 20000}\n"
        "  - {name: beta, tier: silver, pool: std, units_per_s: 8000}\n"
        "  - {name: delta, tier: gold, pool: std, traffic: {rps: 0.2, prompt_tokens: 50000, output_tokens: 1000}}\n",
        encoding="utf-8",
    )
    code, out, err = run_cli("size", plan, "--json")
    assert code == 0, err
    rows = {row["name"]: row for row in json.loads(out)["tenants"]}
    assert rows["delta"]["load_pool"] == "long8b" and rows["alpha"]["load_pool"] == "std"
    secret = tmp_path / "secret"
    secret.write_text("s" * 32, encoding="utf-8")
    secret.chmod(0o600)
    code, out, err = run_cli(
        "generate", plan, "--out", tmp_path / "out", "--target", "litellm", "--litellm-enforce", "builtin",
        "--salt-secret-file", secret, "--json",
    )  # fmt: skip
    assert code == 0, err
    limits = json.loads(out)["limits"]["litellm"]
    shares = [line for line in limits if "priority_reservation is one setting" in line]
    assert [line.split(" sells its tiers otherwise ")[1].split(", so")[0] for line in shares] == [
        "(gold 0.7143, silver 0.2857)",
        "(gold 1)",
    ]
    assert "pool 'std'" in shares[0] and "pool 'long8b'" in shares[1]
    teams = {team["team_id"]: team for team in json.loads((tmp_path / "out" / "litellm" / "teams.json").read_text())}
    config = yaml.safe_load((tmp_path / "out" / "litellm" / "config.yaml").read_text(encoding="utf-8"))
    unit = {m["model_name"]: m["litellm_params"]["input_cost_per_token"] for m in config["model_list"]}
    delta_units = rows["delta"]["units_per_s"]
    # delta's budget is its units at long8b's price per unit (the deployment's per-token cost, 7 digits).
    assert teams["delta"]["max_budget"] == pytest.approx(delta_units * 3600 * unit["long8b"], rel=2e-6)
    sold = 28000 + delta_units
    assert config["litellm_settings"]["priority_reservation"] == {
        "gold": round((20000 + delta_units) / sold, 4),
        "silver": round(8000 / sold, 4),
    }


def test_the_limits_say_a_prompt_token_costs_flat_usd_whatever_its_prompt():
    """LiteLLM prices a prompt token at one USD figure: the policy's prompt-length term is lost (policy_samples:
    2.22 units a token at 131,072 tokens on the long pool)."""
    policy = platform_policy()
    (line,) = [
        line
        for line in litellm_exporter.export(policy, {}, ExportOptions(litellm_enforce="builtin")).limits
        if "Prompt length" in line
    ]
    assert "pool long: 2.22 units a token at 131,072 tokens" in line
    assert "spends less budget than its cost" in line


def _with_tenants(policy: QuotaPolicy, *tenants) -> QuotaPolicy:
    return policy.model_copy(update={"tenants": tenants})


def test_a_tier_whose_share_rounds_to_zero_is_raised_and_the_limits_say_so():
    """A 50,000,000 units/s premium tenant beside a 1 unit/s standard one: standard sells 1 / 50,000,001 = 2.0e-8
    of the units, 0 at 4 decimals, and dynamic_rate_limiter_v3 reserves a tier int(model tpm x share) tokens a
    minute (_create_priority_based_descriptors): int(x 0) = 0 refuses its every request once a model saturates.
    It gets 0.0001, the least share written (every deployment reserves it a token: long's tpm is
    floor(2 x 18,232 x 60) = 2,187,840, x 0.0001 = 218), taken from premium (1 -> 0.9999), so they sum to 1."""
    base = platform_policy()
    tiers = {tier.name: tier for tier in base.tiers}
    policy = _with_tenants(
        base,
        tenant_policy("big", tiers["premium"], 50_000_000.0),
        tenant_policy("small", tiers["standard"], 1.0),
    )
    shares = litellm_exporter.priority_reservation(policy)
    assert shares == {"premium": 0.9999, "standard": 0.0001}
    assert sum(shares.values()) <= 1
    config = litellm_exporter.config(policy, "builtin")
    for deployment in config["model_list"]:
        assert int(deployment["litellm_params"]["tpm"] * shares["standard"]) >= 1
    (line,) = [
        line
        for line in litellm_exporter.export(policy, {}, ExportOptions(litellm_enforce="builtin")).limits
        if "raised" in line
    ]
    assert line.startswith("priority_reservation: tier standard sells 2e-08 of the units")
    assert "its share is raised to 0.0001, taken from the largest shares" in line
    # The sample's shares round to no zero: nothing is raised, nothing is said.
    assert not any("is raised to" in line for line in _export()[1].limits)


def test_the_least_share_reserves_a_token_a_minute_on_a_small_deployment():
    """_tiny_policy's one deployment has tpm 2 x 60 = 120, where 0.0001 reserves int(0.012) = 0 tokens: the least
    share is ceil(10,000 / 120) = 84 ten-thousandths, int(120 x 0.0084) = int(1.008) = 1. Beside a 1 unit/s
    standard tenant, a 0.001 units/s batch one sells 0.001 / 1.001 = 0.000999 (10 ten-thousandths): raised to 84,
    the 74 over 10,000 come off standard's 9,990 (0.9916)."""
    tiny = _tiny_policy()
    tiers = {tier.name: tier for tier in tiny.tiers}
    policy = _with_tenants(tiny, *tiny.tenants, tenant_policy("crumb", tiers["batch"], 0.001, long_context=False))
    shares = litellm_exporter.priority_reservation(policy)
    assert shares == {"standard": 0.9916, "batch": 0.0084}
    assert int(120 * shares["batch"]) == 1


def test_a_tpm_limit_that_would_refuse_every_request_is_left_out():
    """parallel_request_limiter_v3 reserves a request's estimated tokens (at least one prompt and one output
    token) and refuses it when the minute's count plus that passes tpm_limit: a limit under 2 refuses all.
    0.01 units/s x 60 = 0.6 -> 0 and 0.03 x 60 = 1.8 -> 1 are left out (max_budget limits them); 0.04 x 60 = 2.4
    -> 2 admits a two-token request, and is written."""
    base = platform_policy()
    tier = base.tiers[1]
    policy = _with_tenants(
        base,
        tenant_policy("a", tier, 0.01),
        tenant_policy("b", tier, 0.03),
        tenant_policy("c", tier, 0.04),
    )
    result = litellm_exporter.export(policy, {}, ExportOptions(litellm_enforce="builtin"))
    for name in ("teams.json", "keys.json"):
        rows = {row["team_id"]: row for row in json.loads(_file(result, name))}
        assert "tpm_limit" not in rows["a"] and "tpm_limit" not in rows["b"]
        assert rows["c"]["tpm_limit"] == 2
    (line,) = [line for line in result.limits if line.startswith("tpm_limit is left out")]
    assert line.startswith("tpm_limit is left out for a, b: their rate is under 2 tokens a minute")


def test_a_tiny_budget_keeps_six_significant_figures():
    """0.01 units/s x 3,600 s = 36 units at the standard pool's $43,200 / (109,392 units/s x 2,592,000 s) =
    36 x 43,200 / 283,544,064,000 = $5.4848618e-6: 5.48486e-06 rounded down to 6 significant figures (the
    micro-dollar gave 5e-06, 9% short). From $0.10 up the micro-dollar is the finer: acme's $9.7219175 ->
    9.721917. The JSON writes the shortest decimal of each, the same on every run."""
    base = platform_policy()
    policy = _with_tenants(base, tenant_policy("tiny", base.tiers[1], 0.01), base.tenants[0])
    result = litellm_exporter.export(policy, {}, ExportOptions(litellm_enforce="builtin"))
    text = _file(result, "teams.json")
    teams = {team["team_id"]: team for team in json.loads(text)}
    assert teams["tiny"]["max_budget"] == 5.48486e-06
    assert teams["acme"]["max_budget"] == 9.721917
    assert '"max_budget": 5.48486e-06' in text and '"max_budget": 9.721917' in text
    assert litellm_exporter.export(policy, {}, ExportOptions(litellm_enforce="builtin")) == result
    # Rounded down, never above the contract; float noise below the 12th figure costs no figure.
    assert litellm_exporter.budget_usd(36, 43_200 / 283_544_064_000) <= 36 * 43_200 / 283_544_064_000
    assert litellm_exporter.budget_usd(3, 0.3) == 0.9  # 3 x 0.3 = 0.8999999999999999 in floats: not 0.899999
    assert litellm_exporter.budget_usd(0, 1.0) == 0.0


def test_the_limits_say_what_priority_a_tenant_gets_without_one():
    """vLLM's request models default priority to 0 (lower runs first): on the sample's pools, whose engines
    schedule by priority, every tenant of this target runs as urgently as premium (priority 0)."""
    (line,) = [line for line in _export()[1].limits if line.startswith("Engine priority")]
    assert (
        "on pools long, standard, whose vLLM schedules by priority, a request without one takes vLLM's default "
        "priority 0 (lower runs first), the most urgent tier's (premium): every tenant of this target runs as "
        "urgently as premium there, whatever its tier."
    ) in line


@pytest.mark.litellm_proxy
def test_priority_reservation_is_enforced_without_a_licence(litellm_types, monkeypatch):
    """LiteLLM's v3 limiter gives a tier named in priority_reservation its share through the normalised weights
    (_PROXY_DynamicRateLimitHandlerV3._normalize_priority_weights, then _get_priority_allocation), which check no
    licence; only _get_priority_weight, passed as the fallback of that lookup, does, and it only logs. Run with no
    LITELLM_LICENSE, each tier gets the generated share and a counter of its own."""
    import litellm
    from litellm.caching.dual_cache import DualCache
    from litellm.proxy.hooks.dynamic_rate_limiter_v3 import _PROXY_DynamicRateLimitHandlerV3
    from litellm.types.router import ModelGroupInfo

    monkeypatch.delenv("LITELLM_LICENSE", raising=False)
    _policy, result = _export()
    shares = yaml.safe_load(_file(result, "config.yaml"))["litellm_settings"]["priority_reservation"]
    monkeypatch.setattr(litellm, "priority_reservation", shares)
    handler = _PROXY_DynamicRateLimitHandlerV3(internal_usage_cache=DualCache())
    model_info = ModelGroupInfo(model_group="standard", providers=["hosted_vllm"], tpm=1_000_000)
    weights = handler._normalize_priority_weights(model_info)
    for tier, share in shares.items():
        weight, key = handler._get_priority_allocation("standard", tier, weights, model_info)
        assert (weight, key) == (pytest.approx(share), f"standard:{tier}")


def test_the_limits_and_check_say_clients_set_their_own_priority_and_salt(run_cli):
    """LiteLLM forwards a client's priority and cache_salt to the engine and this config cannot strip them: LIMITS.md
    says so in those words, and check notes it (a structured finding), where the policy relies on either field; a
    plan with one priority everywhere and no salted tenant relies on neither."""
    policy, result = _export()
    (line,) = [line for line in result.limits if line.startswith("Clients set their own priority and cache_salt:")]
    assert "clients set their own priority and cache_salt through the litellm target" in line
    unsalted = policy.model_copy(
        update={
            "tenants": tuple(
                t.model_copy(update={"salt_ref": None, "cache_isolation": "shared"}) for t in policy.tenants
            )
        }
    )
    assert litellm_exporter.client_fields_problem(unsalted)[0].startswith("clients set their own priority through")
    fcfs = platform_policy(scheduling_policy="fcfs")
    assert litellm_exporter.client_fields_problem(fcfs)[0].startswith("clients set their own cache_salt through")
    fcfs_unsalted = fcfs.model_copy(update={"tenants": unsalted.tenants})
    assert litellm_exporter.client_fields_problem(fcfs_unsalted) is None
    code, out, _ = run_cli("check", Path(__file__).parent.parent / "examples" / "platform.yaml", "--json")
    assert code == 0
    (finding,) = [f for f in json.loads(out)["findings"] if f["code"] == "litellm-client-fields"]
    assert finding["subject"] == "targets.litellm" and finding["fix"].startswith("put a gateway that sets them")


def test_the_plugins_limits_name_the_pools_whose_kv_cap_holds_over_their_replicas_only():
    """With a deployment a pool (--litellm-deployments pool), a pool of several replicas reached through one api_base
    loses the cap per replica (its balancer places requests); a pool of one replica loses nothing; with a deployment a
    replica (the default) no pool does."""
    policy = platform_policy()
    result = litellm_exporter.export(
        policy, sample_salts(policy), ExportOptions(litellm_enforce="plugin", litellm_deployments="pool")
    )
    several = [pool.name for pool in policy.pools if pool.replicas > 1]
    assert several
    (line,) = [line for part, line in result.notes if part == "kv_cap"]
    for name in several:
        assert name in line.split(":", 1)[0]
    assert "one api_base" in line
    single = policy.model_copy(update={"pools": tuple(p.model_copy(update={"replicas": 1}) for p in policy.pools)})
    result = litellm_exporter.export(
        single, sample_salts(single), ExportOptions(litellm_enforce="plugin", litellm_deployments="pool")
    )
    assert not any(part == "kv_cap" for part, _line in result.notes)
    _policy, result = _export(enforce="plugin")
    assert not any(part == "kv_cap" for part, _line in result.notes)


# --- a deployment per replica (--litellm-deployments) -------------------------------------------------------------


def _plugin(policy: QuotaPolicy, deployments: str = "replica"):
    result = litellm_exporter.export(
        policy, sample_salts(policy), ExportOptions(litellm_enforce="plugin", litellm_deployments=deployments)
    )
    return yaml.safe_load(_file(result, "config.yaml")), json.loads(_file(result, "enforce.json")), result


def _with_pool(policy: QuotaPolicy, name: str, **update) -> QuotaPolicy:
    pools = tuple(pool.model_copy(update=update) if pool.name == name else pool for pool in policy.pools)
    return policy.model_copy(update={"pools": pools})


def test_each_replica_is_a_deployment_of_its_pool_named_in_enforce_json(tmp_path: Path):
    """The sample's standard pool has 6 replicas, long 2: a deployment each, model_name the pool (a plain request is
    balanced over them), id <pool>-<i>, at the StatefulSet's pod address; each priced per token as the pool, its
    engine's max_input_tokens; tpm 6 x 18,232 x 60 / 6 = 1,093,920 each; enforce.json names them in order, which
    the plugin's own start-up check accepts."""
    from quotacalc.enforce.settings import check_replicas, read_settings

    policy = platform_policy()
    config, settings, _result = _plugin(policy)
    for pool in policy.pools:
        entries = [d for d in config["model_list"] if d["model_name"] == pool.name]
        ids = [f"{pool.name}-{i}" for i in range(pool.replicas)]
        assert [d["model_info"]["id"] for d in entries] == ids
        assert [d["litellm_params"]["api_base"] for d in entries] == [
            f"http://{pool.name}-{i}.{pool.name}:8000/v1" for i in range(pool.replicas)
        ]
        assert sum(d["litellm_params"]["tpm"] for d in entries) == math.floor(pool.capacity_units_per_s * 60)
        assert len({json.dumps({**d, "model_info": None, "litellm_params": {**d["litellm_params"], "api_base": None}})
                    for d in entries}) == 1  # fmt: skip
        assert {d["model_info"]["max_input_tokens"] for d in entries} == {pool.engine.max_model_len}
        assert settings["replica_deployments"][pool.name] == ids
    standard = [d["litellm_params"]["tpm"] for d in config["model_list"] if d["model_name"] == "standard"]
    assert standard == [1_093_920] * 6
    path = tmp_path / "enforce.json"
    path.write_text(json.dumps(settings), encoding="utf-8")
    check_replicas(read_settings(path), policy, path)


def test_a_pools_tpm_split_over_its_replicas_keeps_the_pools_total():
    """7 replicas of 1,000 units/s: the pool's tpm is 60,000, 8,571 a replica and 3 tokens over, which go to the
    first three (8,572): the sum is 60,000, so LiteLLM's model group (it sums its deployments' tpm) still reserves
    each tier its share of the pool's capacity."""
    policy = _with_pool(platform_policy(), "long", replicas=7, capacity_units_per_s=1000.0)
    config, _settings, _result = _plugin(policy)
    long = [d["litellm_params"]["tpm"] for d in config["model_list"] if d["model_name"] == "long"]
    assert long == [8572, 8572, 8572, 8571, 8571, 8571, 8571]
    assert sum(long) == 60_000


def test_the_plans_replica_addresses_are_each_deployments_api_base():
    """A pool whose plan lists its replicas' URLs (or a template, filled in when the plan is read) is reached there,
    in the order given; LIMITS.md then names only the pools left at the StatefulSet default."""
    urls = ("http://10.1.0.5:8000/v1", "http://10.1.0.9:8001/v1")
    policy = _with_pool(platform_policy(), "long", replica_urls=urls)
    config, settings, result = _plugin(policy)
    long = [d for d in config["model_list"] if d["model_name"] == "long"]
    assert [(d["litellm_params"]["api_base"], d["model_info"]["id"]) for d in long] == [
        (urls[0], "long-0"),
        (urls[1], "long-1"),
    ]
    assert settings["replica_deployments"]["long"] == ["long-0", "long-1"]
    (note,) = [line for part, line in result.notes if part == "files"]
    assert note.startswith("Pool standard: each replica is addressed as a StatefulSet's pod")


def test_a_plans_template_reaches_the_policy_and_the_config(tmp_path: Path, run_cli):
    """replica_url in the plan, filled in per replica when it is read, is what config.yaml's api_base says."""
    document = yaml.safe_load((Path(__file__).parent.parent / "examples" / "platform.yaml").read_text())
    document["pools"][1]["replica_url"] = "https://{pool}-{replica}.engines.example:9443/v1"
    plan = tmp_path / "plan.yaml"
    plan.write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")
    code, _out, err = run_cli(
        "generate", plan, "--out", tmp_path / "out", "--target", "litellm",
        "--salt-secret-file", Path(__file__).parent.parent / "examples" / "platform.secret",
    )  # fmt: skip
    assert code == 0, err
    config = yaml.safe_load((tmp_path / "out" / "litellm" / "config.yaml").read_text())
    assert [d["litellm_params"]["api_base"] for d in config["model_list"] if d["model_name"] == "long"] == [
        "https://long-0.engines.example:9443/v1",
        "https://long-1.engines.example:9443/v1",
    ]
    policy = json.loads((tmp_path / "out" / "litellm" / "policy.json").read_text())
    assert [pool["replica_urls"] for pool in policy["pools"]] == [
        None,
        ["https://long-0.engines.example:9443/v1", "https://long-1.engines.example:9443/v1"],
        None,
    ]


def test_one_deployment_a_pool_is_kept_where_asked():
    """--litellm-deployments pool: each pool one deployment at its Service, with the pool's whole tpm, and no
    replica_deployments (the plugin then leaves the replica to the Service)."""
    policy = platform_policy()
    config, settings, _result = _plugin(policy, "pool")
    assert [
        (d["model_name"], d["model_info"]["id"], d["litellm_params"]["api_base"]) for d in config["model_list"]
    ] == [
        ("standard", "standard", "http://standard:8000/v1"),
        ("long", "long", "http://long:8000/v1"),
    ]
    assert [d["litellm_params"]["tpm"] for d in config["model_list"]] == [
        math.floor(pool.capacity_units_per_s * 60) for pool in policy.pools
    ]
    assert settings["replica_deployments"] == {}


def test_the_builtin_limiters_get_a_deployment_per_replica_too():
    """Without the plugin nothing pins a request, but LiteLLM's router balances a model group's deployments, and
    enforce_model_rate_limits checks each deployment's tpm: a replica's share, adding up to the pool's."""
    policy = platform_policy()
    config = litellm_exporter.config(policy, "builtin")
    assert [d["model_info"]["id"] for d in config["model_list"]] == [f"standard-{i}" for i in range(6)] + [
        "long-0",
        "long-1",
    ]
    for pool in policy.pools:
        tpm = [d["litellm_params"]["tpm"] for d in config["model_list"] if d["model_name"] == pool.name]
        assert sum(tpm) == math.floor(pool.capacity_units_per_s * 60)


def test_a_replica_id_that_is_another_pools_name_is_refused(tmp_path: Path, run_cli):
    """Pools std and std-0: std's first replica would be deployment std-0, which LiteLLM's router would take for pool
    std-0. generate refuses in one line naming the plan, the pool and the fix; --litellm-deployments pool is fine."""
    from quotacalc.errors import QuotacalcError

    policy = platform_policy()
    clashing = policy.model_copy(
        update={"pools": (policy.pools[0], policy.pools[1].model_copy(update={"name": "standard-1"}))}
    )
    with pytest.raises(QuotacalcError, match=r"pools\[1\].name: pool standard's replica 1 would be deployment"):
        litellm_exporter.export(clashing, {}, ExportOptions())
    document = yaml.safe_load((Path(__file__).parent.parent / "examples" / "platform.yaml").read_text())
    document["pools"][2]["name"] = "shared-2"
    for tenant in document["tenants"]:
        if tenant["pool"] == "acme-dedicated":
            tenant["pool"] = "shared-2"
    plan = tmp_path / "plan.yaml"
    plan.write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")
    secret = Path(__file__).parent.parent / "examples" / "platform.secret"
    args = ("generate", plan, "--out", tmp_path / "out", "--target", "litellm", "--salt-secret-file", secret)
    code, _out, err = run_cli(*args)
    lines = [line for line in err.splitlines() if line.startswith("quotacalc: error: ")]
    assert code != 0 and len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith(f"quotacalc: error: {plan}: pools[2].name: pool shared's replica 2 would be ")
    assert "--litellm-deployments pool" in lines[0]
    assert not (tmp_path / "out").exists()
    assert run_cli(*args, "--litellm-deployments", "pool")[0] == 0
    # check says so first, as a warning: the other targets, and this one one deployment a pool, still generate.
    code, out, _err = run_cli("check", plan, "--json")
    (finding,) = [f for f in json.loads(out)["findings"] if f["code"] == "litellm-replica-id"]
    assert finding["severity"] == "warning" and finding["subject"] == "pools.shared-2"
    assert (
        "generate refuses the litellm target" in finding["message"] and "--litellm-deployments pool" in finding["fix"]
    )
    assert not [f for f in litellm_exporter.prechecks(policy) if f.code == "litellm-replica-id"]


def test_a_policy_whose_replica_urls_are_not_one_a_replica_is_refused_where_it_is_read(tmp_path: Path):
    """policy.json edited by hand (a URL dropped): the plugin's start-up read names the file and the pool's field, as
    generate would never write it."""
    from quotacalc.enforce.settings import EnforceSettings, read_policy
    from quotacalc.errors import QuotacalcError

    policy = _with_pool(platform_policy(), "long", replica_urls=("http://10.1.0.5:8000/v1", "http://10.1.0.9:8000/v1"))
    document = json.loads(policy.model_dump_json())
    document["pools"][1]["replica_urls"] = document["pools"][1]["replica_urls"][:1]
    (tmp_path / "policy.json").write_text(json.dumps(document), encoding="utf-8")
    with pytest.raises(QuotacalcError, match=r"policy.json: pools.1: .*replica_urls lists 1 URLs for pool long's 2"):
        read_policy(EnforceSettings(policy="policy.json", salts=None), tmp_path)
    document["pools"][1]["replica_urls"] = None
    (tmp_path / "policy.json").write_text(json.dumps(document), encoding="utf-8")
    (tmp_path / "salts.json").write_text(json.dumps(sample_salts(policy)), encoding="utf-8")
    read, _salts = read_policy(EnforceSettings(policy="policy.json", salts="salts.json"), tmp_path)
    assert read.pools[1].replica_urls is None
