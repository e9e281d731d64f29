"""Kong exporter: the decK file checked by the real `deck validate` (Debian's deck), units checked by hand."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from policy_samples import many_tenants_policy, platform_policy, sample_salts

from quotacalc.exporters import kong
from quotacalc.exporters.base import ExportOptions

DECK = shutil.which("deck") or ("/usr/bin/deck" if Path("/usr/bin/deck").exists() else None)
needs_deck = pytest.mark.skipif(
    DECK is None, reason="deck not installed (Debian package `deck`; .ci/run installs it with apt-get)"
)


def _deck_validate(path: Path) -> subprocess.CompletedProcess[str]:
    assert DECK is not None
    return subprocess.run([DECK, "validate", "-s", str(path)], capture_output=True, text=True, timeout=60, check=False)


def _export(policy=None):
    policy = policy or platform_policy()
    return policy, kong.export(policy, sample_salts(policy), ExportOptions())


@needs_deck
def test_deck_validates_the_generated_file(tmp_path: Path):
    _policy, result = _export()
    (generated,) = result.files
    path = tmp_path / "kong.yaml"
    path.write_text(generated.text, encoding="utf-8")
    checked = _deck_validate(path)
    assert checked.returncode == 0, checked.stderr


@needs_deck
def test_deck_validates_a_hundred_consumers(tmp_path: Path):
    _policy, result = _export(many_tenants_policy(100))
    path = tmp_path / "kong.yaml"
    path.write_text(result.files[0].text, encoding="utf-8")
    checked = _deck_validate(path)
    assert checked.returncode == 0, checked.stderr


@needs_deck
def test_deck_rejects_what_kong_would(tmp_path: Path):
    """The check can fail: an unknown field and a duplicate consumer are each refused."""
    policy, _result = _export()
    data = kong.document(policy, sample_salts(policy))
    data["consumers"][0]["tier"] = "premium"
    path = tmp_path / "unknown.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    assert "Additional property tier is not allowed" in _deck_validate(path).stderr
    data = kong.document(policy, sample_salts(policy))
    data["consumers"].append(data["consumers"][0])
    path = tmp_path / "duplicate.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    assert "already exists" in _deck_validate(path).stderr


def test_costs_express_units_per_million_tokens():
    """ai-proxy costs are per 1M tokens: prompt weight 1 -> 1,000,000; standard pool W 3.09 -> 3,090,000;
    long pool W 4.6 -> 4,600,000. So 2,000 prompt + 500 output tokens on the standard pool cost
    (2,000 x 1,000,000 + 500 x 3,090,000) / 1,000,000 = 3,545 units (cached tokens not discounted)."""
    _policy, result = _export()
    data = yaml.safe_load(result.files[0].text)
    options = {
        service["name"]: next(p for p in service["plugins"] if p["name"] == "ai-proxy")["config"]["model"]["options"]
        for service in data["services"]
    }
    assert (options["standard"]["input_cost"], options["standard"]["output_cost"]) == (1_000_000, 3_090_000)
    assert (options["long"]["input_cost"], options["long"]["output_cost"]) == (1_000_000, 4_600_000)
    cost = (2000 * options["standard"]["input_cost"] + 500 * options["standard"]["output_cost"]) / 1_000_000
    assert cost == pytest.approx(3545)


def test_each_tenant_gets_its_bucket_depth_over_a_sliding_window_of_its_burst():
    """acme: 17,725 units/s x 60 s = 1,063,500 units per 60 s; wayne (batch, 300 s burst): 6,000 x 300 =
    1,800,000 units per 300 s; wonka: 750.5 x 300 = 225,150."""
    _policy, result = _export()
    data = yaml.safe_load(result.files[0].text)
    limits = {}
    for consumer in data["consumers"]:
        plugin = next(p for p in consumer["plugins"] if p["name"] == "ai-rate-limiting-advanced")
        (rule,) = plugin["config"]["policies"]
        assert rule["match"] == [{"type": "consumer", "key": "username", "values": [consumer["username"]]}]
        assert rule["window_type"] == "sliding"
        (limit,) = rule["limits"]
        assert limit["tokens_count_strategy"] == "cost"
        limits[consumer["username"]] = (limit["limit"], limit["window_size"])
    assert limits["acme"] == (1_063_500, 60)
    assert limits["wayne"] == (1_800_000, 300)
    assert limits["wonka"] == (225_150, 300)


def test_salts_are_set_server_side_and_the_file_is_secret():
    policy, result = _export()
    salts = sample_salts(policy)
    (generated,) = result.files
    assert generated.secret
    consumers = {c["username"]: c for c in yaml.safe_load(generated.text)["consumers"]}
    transformer = next(p for p in consumers["acme"]["plugins"] if p["name"] == "request-transformer")
    assert transformer["config"] == {
        "remove": {"body": ["cache_salt", "priority"]},
        "add": {"body": [f"cache_salt:{salts['acme']}", "priority:0"]},
    }
    hooli = next(p for p in consumers["hooli"]["plugins"] if p["name"] == "request-transformer")
    assert hooli["config"]["add"] == {"body": ["priority:1"]}  # shared cache: no salt, a client's removed
    assert all(salt not in line for salt in salts.values() for line in result.limits)


def test_limits_name_what_kong_cannot_express_and_output_round_trips():
    from quotacalc.exporters.limits import limits_markdown

    policy, result = _export()
    text = limits_markdown(result, ExportOptions())
    for phrase in (
        "**weights**: approximated. Prompt and output costs; Kong's cost has no cached-token term",
        "**rate**: approximated. ai-rate-limiting-advanced counts a sliding window",
        "**kv_cap**: lost.",
        "**concurrency**: lost.",
        "  - Long-context routing: prompts above ",
        "are not routed to pool long by their size",
    ):
        assert phrase in text
    assert yaml.safe_load(result.files[0].text) == kong.document(policy, sample_salts(policy))
    assert result == kong.export(policy, sample_salts(policy), ExportOptions())


def test_the_limits_say_a_prompt_token_is_charged_flat_whatever_its_prompt():
    """Kong's cost is prompt tokens × one input cost: the policy's prompt-length term is lost, and the line names
    each pool's cost at its longest prompt (policy_samples: 1 + 2,621,440 × 65,536.5 / 141,107,412,992 = 2.22
    units a token at 131,072 tokens on the long pool; 1.30 at 32,768 on the standard pool)."""
    policy = platform_policy()
    (line,) = [
        line for line in kong.export(policy, sample_salts(policy), ExportOptions()).limits if "Prompt length" in line
    ]
    assert "pool standard: 1.3 units a token at 32,768 tokens" in line
    assert "pool long: 2.22 units a token at 131,072 tokens" in line


def _priority_lines(policy) -> list[str]:
    return [
        line
        for line in kong.export(policy, sample_salts(policy), ExportOptions()).limits
        if line.startswith("Priority")
    ]


def test_the_limits_say_which_tier_a_tenant_runs_as_where_its_priority_cannot_be_sent():
    """Where every pool schedules by priority each tenant's tier is sent, and nothing is said. Where a tenant's pool
    schedules fcfs (vLLM rejects a non-zero priority there) its priority is not sent, and vLLM's default 0, the
    most urgent (lower runs first), is what it gets on its pools that schedule by priority."""
    assert _priority_lines(platform_policy()) == []
    policy = platform_policy()
    standard = policy.pools[0].model_copy(
        update={"engine": policy.pools[0].engine.model_copy(update={"scheduling_policy": "fcfs"})}
    )
    mixed = policy.model_copy(update={"pools": (standard, policy.pools[1])})
    (line,) = _priority_lines(mixed)
    assert line.startswith(
        "Priority: not sent for acme, globex, hooli, initech, stark, umbrella, wayne, wonka, a pool of theirs "
        "schedules fcfs"
    )
    assert line.endswith(
        "on pools long, whose vLLM schedules by priority, a request without one takes vLLM's default priority 0 "
        "(lower runs first), the most urgent tier's (premium): each of them runs as urgently as premium there, "
        "whatever its tier."
    )
    assert _priority_lines(platform_policy(scheduling_policy="fcfs"))[0].endswith(
        "no pool's engine schedules by priority, so no tier's order is lost."
    )


def test_the_priority_line_speaks_only_of_the_pools_its_tenants_call():
    """A tenant only on an fcfs pool gets no priority and loses nothing: the other pools' priority scheduling is not
    its concern, and the line does not say that every tenant runs as the most urgent tier."""
    policy = platform_policy()
    fcfs_long = policy.pools[1].model_copy(
        update={"engine": policy.pools[1].engine.model_copy(update={"scheduling_policy": "fcfs"})}
    )
    tenants = tuple(
        t.model_copy(update={"pool": "long"} if t.name == "initech" else {"long_context_pool": None})
        for t in policy.tenants
    )
    alone = policy.model_copy(update={"pools": (policy.pools[0], fcfs_long), "tenants": tenants})
    (line,) = _priority_lines(alone)
    assert line == (
        "Priority: not sent for initech, a pool of theirs schedules fcfs (vLLM rejects a non-zero priority there; a "
        "client's is removed); none of their pools' engines schedules by priority, so no tier's order is lost."
    )


def _transformed(body: dict, config: dict) -> dict:
    """A JSON body after request-transformer, as transform_json_body does it (kong/plugins/request-transformer/
    access.lua, Kong/kong commit 22246ef): ``remove`` first, then ``add`` sets a field only where it is absent;
    each entry is ``name:value`` split at the first colon, the value a string. Lua's ``not parameters[name]`` is
    true only for an absent field or false (JSON null decodes to cjson.null, which is true)."""
    result = dict(body)
    for name in config.get("remove", {}).get("body", []):
        result.pop(name, None)
    for entry in config.get("add", {}).get("body", []):
        name, _, value = entry.partition(":")
        if name not in result or result[name] is False:
            result[name] = value
    return result


def test_a_clients_own_priority_and_cache_salt_are_replaced_by_the_tenants():
    """A starter tenant's client sends priority 0 and another tenant's salt: after its consumer's
    request-transformer the body carries its own tier's priority and salt (no salt where its cache is shared). The
    priority travels as the string "2", which vLLM's request model (a pydantic model, extra fields allowed, lax
    types: vllm/entrypoints/openai/protocol.py OpenAIBaseModel) reads as the integer 2, as pydantic does here."""
    from pydantic import BaseModel, ConfigDict

    class _Request(BaseModel):
        model_config = ConfigDict(extra="allow")
        priority: int = 0
        cache_salt: str | None = None

    policy, result = _export()
    salts = sample_salts(policy)
    consumers = {c["username"]: c for c in yaml.safe_load(result.files[0].text)["consumers"]}
    spoofed = {"model": "llama-3.3-70b", "messages": [], "priority": 0, "cache_salt": salts["acme"]}
    for tenant in policy.tenants:
        (transformer,) = [p for p in consumers[tenant.name]["plugins"] if p["name"] == "request-transformer"]
        sent = _transformed(spoofed, transformer["config"])
        engine = _Request.model_validate(sent)
        assert engine.priority == tenant.priority, tenant.name
        assert engine.cache_salt == (salts[tenant.salt_ref] if tenant.salt_ref else None), tenant.name
        assert sent["messages"] == []
    assert {t.name: t.priority for t in policy.tenants}["wayne"] == 2  # batch: the spoofed 0 did not survive


def _strings(node, path=""):
    """Every string of a decoded YAML document, with its path."""
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _strings(value, f"{path}.{key}")
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from _strings(value, f"{path}[{index}]")
    elif isinstance(node, str):
        yield path, node


def test_every_secret_reference_is_a_whole_field_that_kongs_env_vault_resolves():
    """Kong resolves a vault reference only where it is a field's whole value (``Bearer {vault://...}`` is sent as
    written, and vLLM started with --api-key answers 401). Each reference here is a whole field, and the env vault
    reads it from the variable the header names: the resource upper-cased, dashes to underscores
    (kong/vaults/env/init.lua, Kong/kong commit 22246ef)."""
    import re

    _policy, result = _export()
    data = yaml.safe_load(result.files[0].text)
    references = [(path, value) for path, value in _strings(data) if "vault://" in value]
    assert references, "the upstream key is read from a vault"
    for path, value in references:
        match = re.fullmatch(r"\{vault://env/([a-z0-9-]+)\}", value)
        assert match is not None, (path, value)
        assert match.group(1).upper().replace("-", "_") == kong.UPSTREAM_AUTH_ENV
        assert path.endswith(".auth.header_value")
    assert f'export {kong.UPSTREAM_AUTH_ENV}="Bearer ' in result.files[0].text
    assert any(kong.UPSTREAM_AUTH_ENV in line and '"Bearer ' in line for line in result.limits)


SCHEMAS = Path(__file__).parent / "data" / "kong-3.15"
#: Plugins of Kong Gateway Enterprise only (the docs' tier ai_gateway_enterprise; not in the Kong/kong repository).
ENTERPRISE_ONLY = {"ai-rate-limiting-advanced"}


def _closed(schema):
    """The schema with unknown fields refused: Kong's schemas are records whose every field is declared, but the
    JSON export leaves additionalProperties open."""
    if isinstance(schema, dict):
        closed = {key: _closed(value) for key, value in schema.items()}
        if "properties" in closed and "additionalProperties" not in closed:
            closed["additionalProperties"] = False
        return closed
    if isinstance(schema, list):
        return [_closed(value) for value in schema]
    return schema


def _schema_problems(plugin: dict) -> list[str]:
    """What Kong 3.15's schema of the plugin refuses in its config (an unknown plugin is refused outright)."""
    from jsonschema import Draft7Validator

    path = SCHEMAS / f"{plugin['name']}.json"
    if not path.exists():
        return [f"unknown plugin {plugin['name']}"]
    schema = _closed(json.loads(path.read_text(encoding="utf-8"))["config"])
    return [
        f"{'.'.join(map(str, e.absolute_path))}: {e.message}"
        for e in Draft7Validator(schema).iter_errors(plugin["config"])
    ]


def _plugins(data: dict):
    for service in data["services"]:
        yield from service["plugins"]
    for consumer in data["consumers"]:
        yield from consumer["plugins"]


def _leaf_paths(node, prefix=""):
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _leaf_paths(value, f"{prefix}{key}.")
    else:
        yield prefix[:-1]


@pytest.mark.parametrize("edition", ["enterprise", "oss"])
def test_every_plugin_config_passes_kongs_own_3_15_schema(edition):
    """Each plugin's config against Kong's JSON schema of it (tests/data/kong-3.15, from Kong's docs repository):
    deck validate accepts unknown plugins, unknown settings and bad enum values, this does not. The Enterprise
    plugin's Lua schema is not in the public Kong/kong repository: it is checked against the schema Kong's docs
    publish. The Enterprise file uses ai-rate-limiting-advanced's policies form (3.14+), not the deprecated
    llm_providers."""
    policy = platform_policy()
    data = kong.document(policy, sample_salts(policy), edition)
    names = set()
    for plugin in _plugins(data):
        names.add(plugin["name"])
        assert _schema_problems(plugin) == [], plugin["name"]
        assert "llm_providers" not in plugin["config"]
    expected = {"key-auth", "acl", "ai-proxy", "request-transformer"}
    assert names == expected | ({"ai-rate-limiting-advanced"} if edition == "enterprise" else {"rate-limiting"})


def test_the_schema_check_refuses_what_kong_would():
    """The check can fail: a bad enum, an unknown setting, a wrong type and an unknown plugin are each refused."""
    policy = platform_policy()
    data = kong.document(policy, sample_salts(policy))
    limiter = next(p for p in data["consumers"][0]["plugins"] if p["name"] == "ai-rate-limiting-advanced")
    limiter["config"]["policies"][0]["limits"][0]["tokens_count_strategy"] = "units"
    limiter["config"]["policies"][0]["window"] = 60
    assert any("'units' is not one of" in problem for problem in _schema_problems(limiter))
    assert any("'window' was unexpected" in problem for problem in _schema_problems(limiter))
    transformer = next(p for p in data["consumers"][0]["plugins"] if p["name"] == "request-transformer")
    transformer["config"]["add"]["body"] = "priority:0"
    assert any("is not of type 'array'" in problem for problem in _schema_problems(transformer))
    assert _schema_problems({"name": "ai-rate-limiter", "config": {}}) == ["unknown plugin ai-rate-limiter"]


def test_the_oss_file_holds_only_what_kong_oss_has():
    """Kong OSS (Kong/kong's Lua schemas, tests/data/kong-3.15/oss-fields.json) has no Enterprise plugin: the oss
    file uses only plugins and fields Kong OSS declares, with values its one_of lists allow, and its secret
    reference is a field OSS resolves. Each tenant's request count is its units per the OSS window nearest its
    burst: acme 17,725 units/s x 60 = 1,063,500 a minute; wayne (300 s burst: a minute is nearer than an hour on a
    log scale) 6,000 x 60 = 360,000."""
    oss = json.loads((SCHEMAS / "oss-fields.json").read_text(encoding="utf-8"))["plugins"]
    policy = platform_policy()
    data = kong.document(policy, sample_salts(policy), "oss")
    for plugin in _plugins(data):
        assert plugin["name"] not in ENTERPRISE_ONLY
        declared = oss[plugin["name"]]
        for path in _leaf_paths(plugin["config"]):
            assert path in declared["fields"], (plugin["name"], path)
        for path, allowed in declared.get("one_of", {}).items():
            value = plugin["config"]
            for part in path.split("."):
                value = value.get(part) if isinstance(value, dict) else None
            assert value is None or value in allowed, (plugin["name"], path, value)
    limits = {
        consumer["username"]: next(p for p in consumer["plugins"] if p["name"] == "rate-limiting")["config"]
        for consumer in data["consumers"]
    }
    assert limits["acme"] == {"minute": 1_063_500, "limit_by": "consumer", "policy": "local"}
    assert limits["wayne"] == {"minute": 360_000, "limit_by": "consumer", "policy": "local"}
    assert "auth.header_value" in oss["ai-proxy"]["referenceable"]


def test_each_edition_says_what_it_needs_and_what_it_loses(tmp_path: Path):
    """The Enterprise file says in its header and LIMITS.md that it needs Kong Gateway Enterprise; the OSS one lists
    what Kong OSS loses. Both pass deck validate where deck is installed."""
    policy = platform_policy()
    enterprise = kong.export(policy, sample_salts(policy), ExportOptions())
    oss = kong.export(policy, sample_salts(policy), ExportOptions(kong_edition="oss"))
    assert "Needs Kong Gateway Enterprise 3.14 or later" in enterprise.files[0].text.split("_format_version")[0]
    from quotacalc.exporters.limits import limit_lines

    enterprise_lines = limit_lines(enterprise, ExportOptions())
    oss_lines = limit_lines(oss, ExportOptions(kong_edition="oss"))
    assert "**files**: approximated. Kong Gateway Enterprise only: ai-rate-limiting-advanced" in "\n".join(
        enterprise_lines
    )
    assert "For Kong OSS" in oss.files[0].text.split("_format_version")[0]
    assert any(line.startswith("**rate**: lost. Kong OSS has no token or cost rate limiting") for line in oss_lines)
    assert any(line.startswith("**weights**: lost.") for line in oss_lines)
    assert any("acme 1,063,500 a minute" in line for line in oss.limits)
    assert not any("sliding window" in line for line in oss_lines)
    assert not any("Enterprise only" in line for line in oss_lines)
    if DECK is not None:
        for name, result in (("enterprise", enterprise), ("oss", oss)):
            path = tmp_path / f"{name}.yaml"
            path.write_text(result.files[0].text, encoding="utf-8")
            checked = _deck_validate(path)
            assert checked.returncode == 0, checked.stderr


def test_every_secret_reference_is_a_field_kongs_schema_resolves():
    """Kong resolves vault references only in fields its schema marks referenceable: the upstream header is one."""
    schema = json.loads((SCHEMAS / "ai-proxy.json").read_text(encoding="utf-8"))["config"]
    assert schema["properties"]["auth"]["properties"]["header_value"]["x-referenceable"] is True


def test_generate_takes_the_kong_edition_and_refuses_an_unknown_one(run_cli, tmp_path: Path):
    plan = Path(__file__).parent.parent / "examples" / "platform.yaml"
    secret = Path(__file__).parent.parent / "examples" / "platform.secret"
    common = ("--target", "kong", "--salt-secret-file", secret)
    code, _, err = run_cli("generate", plan, "--out", tmp_path / "oss", *common, "--kong-edition", "oss")
    assert code == 0, err
    text = (tmp_path / "oss" / "kong" / "kong.yaml").read_text(encoding="utf-8")
    assert "name: rate-limiting" in text and "ai-rate-limiting-advanced\n" not in text.split("_format_version")[1]
    assert "Kong OSS has no token or cost rate limiting" in (tmp_path / "oss" / "kong" / "LIMITS.md").read_text()
    code, out, err = run_cli("generate", plan, "--out", tmp_path / "bad", *common, "--kong-edition", "free")
    assert code != 0 and out == "" and not (tmp_path / "bad").exists()
    assert err.strip().splitlines() == [
        "quotacalc: error: --kong-edition: must be one of enterprise, oss, got 'free' (e.g. --kong-edition enterprise)"
    ]
