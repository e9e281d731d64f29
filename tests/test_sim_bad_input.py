"""Bad scenario files: one line naming the file and the YAML path, exit 1 or 2, no traceback."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import yaml

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "simulate-platform.yaml"
BASE = yaml.safe_load(EXAMPLE.read_text())


def _set(path: str, value: object):
    def change(document: dict) -> None:
        *parents, last = path.split(".")
        node = document
        for part in parents:
            node = node[int(part)] if isinstance(node, list) else node[part]
        if isinstance(node, list):
            node[int(last)] = value
        else:
            node[last] = value

    return change


def _drop(path: str):
    def change(document: dict) -> None:
        *parents, last = path.split(".")
        node = document
        for part in parents:
            node = node[int(part)] if isinstance(node, list) else node[part]
        del node[last]

    return change


def _rename(path: str, new_key: str):
    """A misspelt key: the one at ``path`` renamed to ``new_key``."""

    def change(document: dict) -> None:
        *parents, last = path.split(".")
        node = document
        for part in parents:
            node = node[int(part)] if isinstance(node, list) else node[part]
        node[new_key] = node.pop(last)

    return change


CASES = [
    (
        "misspelt required key",
        _rename("workload.tenants.1.arrival.rate_rps", "rate_rsp"),
        1,
        "workload.tenants[1].arrival.rate_rsp",
        "unknown key 'rate_rsp' (did you mean 'rate_rps'?)",
    ),
    (
        "negative rate",
        _set("workload.tenants.2.arrival.rate_rps", -1),
        1,
        "workload.tenants[2].arrival.rate_rps",
        "positive",
    ),
    ("unknown key", _set("workload.tenants.1.arrival.rate", 3), 1, "workload.tenants[1].arrival.rate", "unknown key"),
    ("unknown kind", _set("workload.tenants.0.arrival.kind", "weibull"), 1, "workload.tenants[0].arrival", "weibull"),
    ("unknown tenant", _set("workload.tenants.3.tenant", "nobody"), 1, "workload.tenants[3].tenant", "nobody"),
    ("unknown tier", _set("plan.tenants.2.tier", "platinum"), 1, "plan.tenants[2].tier", "platinum"),
    ("embedded plan field", _set("plan.pools.0.replicas", 0), 1, "plan.pools[0].replicas", "greater than"),
    ("no stop", _drop("duration_s"), 1, "duration_s or requests", ""),
    ("unknown policy", _set("policies", ["reserve_everything"]), 1, "policies[0]", "reserve_max_tokens"),
    ("sigma not a number", _set("workload.tenants.0.prompt_tokens.sigma", "wide"), 1, "prompt_tokens.sigma", "number"),
    ("missing lengths", _drop("workload.tenants.0.output_tokens"), 1, "workload.tenants[0]", "output_tokens"),
    ("nan duration", _set("duration_s", float("nan")), 1, "duration_s", "finite"),
    ("probability above 1", _set("workload.tenants.0.cancel_probability", 1.5), 1, "cancel_probability", "1"),
    ("duplicate workload", _set("workload.tenants.1.tenant", "acme"), 1, "workload.tenants[1].tenant", "two workloads"),
    ("runaway rate", _set("workload.tenants.0.arrival.rate_rps", 1e12), 1, "duration_s", "requests would arrive"),
    ("missing plan file", _set("plan", "nope.yaml"), 2, "nope.yaml", "no such file"),
    (
        "missing replay file",
        _set("workload.tenants.0.arrival", {"kind": "replay", "file": "nope.csv"}),
        2,
        "nope.csv",
        "no such file",
    ),
]


@pytest.mark.parametrize(("name", "change", "exit_code", "where", "problem"), CASES, ids=[c[0] for c in CASES])
def test_bad_scenario(run_cli, tmp_path, name, change, exit_code, where, problem):
    document = copy.deepcopy(BASE)
    change(document)
    scenario = tmp_path / "scenario.yaml"
    scenario.write_text(yaml.safe_dump(document))
    code, out, err = run_cli("simulate", str(scenario), "--json")
    assert code == exit_code, err
    assert out == "" and "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("quotacalc: error: ")
    assert where in lines[0] and problem in lines[0]


@pytest.mark.parametrize(
    ("text", "needle"),
    [("- [1,2\n", "malformed YAML"), ("42\n", "expected a mapping"), ("plan: x\nplan: y\n", "duplicate key")],
)
def test_malformed_scenario_file(run_cli, tmp_path, text, needle):
    scenario = tmp_path / "scenario.yaml"
    scenario.write_text(text)
    code, out, err = run_cli("simulate", str(scenario))
    assert code == 1 and out == "" and needle in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize(
    ("rows", "needle"),
    [
        ("timestamp,tenant,prompt_tokens\n1,acme,5\n", "missing output_tokens"),
        ("timestamp,tenant,prompt_tokens,output_tokens\nyesterday,acme,5,5\n", "ISO 8601"),
        ("timestamp,tenant,prompt_tokens,output_tokens\n1,acme,-5,5\n", "line 2.prompt_tokens"),
        ("timestamp,tenant,prompt_tokens,output_tokens\n1,other,5,5\n", "no rows for tenant 'acme'"),
    ],
)
def test_bad_usage_file(run_cli, tmp_path, rows, needle):
    (tmp_path / "usage.csv").write_text(rows)
    document = copy.deepcopy(BASE)
    document["workload"]["tenants"][0]["arrival"] = {"kind": "replay", "file": "usage.csv"}
    scenario = tmp_path / "scenario.yaml"
    scenario.write_text(yaml.safe_dump(document))
    code, out, err = run_cli("simulate", str(scenario))
    assert code == 1 and out == "" and needle in err and len(err.strip().splitlines()) == 1, err


def test_missing_scenario_and_bad_flags(run_cli, tmp_path):
    code, _, err = run_cli("simulate", str(tmp_path / "none.yaml"))
    assert code == 2 and "no such file" in err
    code, _, err = run_cli("simulate", str(EXAMPLE), "--plot", str(tmp_path / "x.pdf"))
    assert code == 2 and "--plot" in err and ".png or .svg" in err


@pytest.mark.parametrize(
    ("flag", "value", "needle"),
    [
        ("--seed", "4.0", "whole number"),
        ("--requests", "1e3", "whole number"),
        ("--requests", "9" * 400, "--requests"),  # refused at once, not simulated for hours
    ],
)
def test_count_flags_are_whole_and_bounded(run_cli, flag, value, needle):
    code, out, err = run_cli("simulate", str(EXAMPLE), flag, value, "--json")
    assert code in (1, 2) and out == ""
    assert len(err.strip().splitlines()) == 1 and needle in err


@pytest.mark.parametrize(
    ("flag", "value", "message"),
    [
        ("--requests", "0", "--requests: must be from 1 to 20,000,000, got 0"),
        ("--requests", "-5", "--requests: must be from 1 to 20,000,000, got -5"),
        ("--requests", "20000001", "--requests: must be from 1 to 20,000,000, got 20,000,001"),
        ("--seed", "-1", "--seed: must be from 0 to 9,223,372,036,854,775,807, got -1"),
        ("--seed", str(2**63), "--seed: must be from 0 to 9,223,372,036,854,775,807, got 9,223,372,036,854,775,808"),
    ],
)
def test_out_of_range_counts_are_bad_values_naming_the_flag_and_range(run_cli, flag, value, message):
    """A well-formed number out of range is a bad value (exit 1), said in the flag's terms, not pydantic's."""
    code, out, err = run_cli("simulate", str(EXAMPLE), flag, value, "--json")
    assert (code, out) == (1, "")
    assert err == f"quotacalc: error: {message}\n"


def test_the_bounds_themselves_are_accepted(run_cli):
    code, out, err = run_cli("simulate", str(EXAMPLE), "--requests", "1", "--seed", str(2**63 - 1), "--json")
    assert code == 0, err
    assert json.loads(out)["scenario"]["seed"] == 2**63 - 1


def test_a_plan_file_is_named_as_a_plan_with_how_to_reference_it(run_cli):
    for name in ("platform.yaml", "llama-3.3-70b-h100.yaml"):  # a platform plan and a flat one
        path = EXAMPLE.parent / name
        code, out, err = run_cli("simulate", str(path))
        assert (code, out) == (1, "")
        assert err == (
            f"quotacalc: error: {path}: is a plan file, not a scenario (name it in a scenario's plan key, "
            f"'plan: {name}' from a scenario in the same folder, and give its tenants' workload; "
            "see quotacalc examples simulate-named-plan)\n"
        )


@pytest.mark.parametrize(
    ("where", "distribution", "fix"),
    [
        ("prompt_tokens", {"kind": "fixed", "value": 30000}, "kind fixed takes: kind, tokens"),
        (
            "output_tokens",
            {"kind": "lognormal", "median": 300, "spread": 1},
            "kind lognormal takes: kind, median, sigma, max",
        ),
        ("max_tokens", {"kind": "exponential", "average": 900}, "kind exponential takes: kind, mean"),
        ("prompt_tokens", {"kind": "empirical", "observed": [1, 2]}, "kind empirical takes: kind, values"),
        ("arrival", {"kind": "on_off", "rate_rps": 1, "on_s": 1, "off": 2}, "did you mean 'off_s'?"),  # close: named
        ("prompt_tokens", {"kind": "fixed", "token": 30000}, "did you mean 'tokens'?"),
    ],
)
def test_unknown_key_in_a_distribution_lists_its_kinds_keys(run_cli, tmp_path, where, distribution, fix):
    document = copy.deepcopy(BASE)
    document["workload"]["tenants"][3][where] = distribution
    scenario = tmp_path / "scenario.yaml"
    scenario.write_text(yaml.safe_dump(document))
    code, out, err = run_cli("simulate", str(scenario))
    assert (code, out) == (1, "")
    extra = next(key for key in distribution if key not in ("kind", "rate_rps", "on_s", "median"))
    assert err == f"quotacalc: error: {scenario}: workload.tenants[3].{where}.{extra}: unknown key '{extra}' ({fix})\n"
