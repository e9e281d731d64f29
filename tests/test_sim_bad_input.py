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


def _replay_from(file: str):
    """acme's arrivals replayed from ``file``: the file gives the lengths, so the distributions go."""

    def change(document: dict) -> None:
        tenant = document["workload"]["tenants"][0]
        tenant["arrival"] = {"kind": "replay", "file": file}
        del tenant["prompt_tokens"], tenant["output_tokens"]

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
    (
        "replay file with a NUL",
        _replay_from("u\x00.csv"),
        1,
        "workload.tenants[0].arrival.file",
        "is not a file name",
    ),
    ("embedded plan field", _set("plan.pools.0.replicas", 0), 1, "plan.pools[0].replicas", "greater than"),
    ("no stop", _drop("duration_s"), 1, "duration_s or requests", ""),
    ("unknown policy", _set("policies", ["reserve_everything"]), 1, "policies[0]", "reserve_max_tokens"),
    ("sigma not a number", _set("workload.tenants.0.prompt_tokens.sigma", "wide"), 1, "prompt_tokens.sigma", "number"),
    (
        "lognormal max below its median",
        _set("workload.tenants.0.prompt_tokens.max", 10),
        1,
        "workload.tenants[0].prompt_tokens",
        "max 10 is below the median 1,800: more than half the lengths would be clamped",
    ),
    ("missing lengths", _drop("workload.tenants.0.output_tokens"), 1, "workload.tenants[0]", "output_tokens"),
    ("nan duration", _set("duration_s", float("nan")), 1, "duration_s", "finite"),
    ("probability above 1", _set("workload.tenants.0.cancel_probability", 1.5), 1, "cancel_probability", "1"),
    ("duplicate workload", _set("workload.tenants.1.tenant", "acme"), 1, "workload.tenants[1].tenant", "two workloads"),
    ("runaway rate", _set("workload.tenants.0.arrival.rate_rps", 1e12), 1, "duration_s", "requests would arrive"),
    (
        "replay beside lengths",
        _set("workload.tenants.0.arrival", {"kind": "replay", "file": "usage.csv"}),
        1,
        "workload.tenants[0]",
        "prompt_tokens and output_tokens cannot go with a replay",
    ),
    ("missing plan file", _set("plan", "nope.yaml"), 2, "nope.yaml", "no such file"),
    (
        "missing replay file",
        _replay_from("nope.csv"),
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


HEADER = "timestamp,tenant,prompt_tokens,output_tokens\n"
COLUMNS = "timestamp, tenant, prompt_tokens, output_tokens"
SECONDS = "expected a finite number of seconds >= 0"
TOKENS = "expected a whole number of tokens from 1 to 100,000,000"


def _replay(run_cli, tmp_path, name: str, text: str) -> tuple[int, str, str, Path]:
    """Simulate the example with acme's arrivals replayed from ``name`` (holding ``text``)."""
    (tmp_path / name).write_text(text, encoding="utf-8")
    document = copy.deepcopy(BASE)
    _replay_from(name)(document)
    scenario = tmp_path / "scenario.yaml"
    scenario.write_text(yaml.safe_dump(document))
    code, out, err = run_cli("simulate", str(scenario))
    return code, out, err, scenario


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        # A NaN or inf row among others is refused at its line: not a crash (int(NaN)), a TTFT of nan s, or a row dropped.
        (HEADER + "nan,acme,5,5\n0,acme,5,5\n", f"line 2: timestamp: {SECONDS}, got 'nan'"),
        (HEADER + "nan,acme,5,5\n", f"line 2: timestamp: {SECONDS}, got 'nan'"),
        (HEADER + "0,acme,5,5\ninf,acme,5,5\n", f"line 3: timestamp: {SECONDS}, got 'inf'"),
        (HEADER + "-5,acme,5,5\n0,acme,5,5\n", f"line 2: timestamp: {SECONDS}, got '-5'"),
        (HEADER + "yesterday,acme,5,5\n", f"line 2: timestamp: {SECONDS} or an ISO 8601 time, got 'yesterday'"),
        (
            HEADER + "1767225600000,acme,5,5\n",
            "line 2: timestamp: 1.76723e+12 s is past the year 5138 as a Unix time (give seconds, not milliseconds, "
            "or an ISO 8601 time)",
        ),
        # At least one token, as every length distribution gives (fixed and empirical refuse 0).
        (HEADER + "0,acme,0,5\n", f"line 2: prompt_tokens: {TOKENS}, got '0'"),
        (HEADER + "0,acme,5,0\n", f"line 2: output_tokens: {TOKENS}, got '0'"),
        (HEADER + "1,acme,-5,5\n", f"line 2: prompt_tokens: {TOKENS}, got '-5'"),
        (HEADER + "1,acme,5,2.5\n", f"line 2: output_tokens: {TOKENS}, got '2.5'"),
        (HEADER + "1,acme,5,1e400\n", f"line 2: output_tokens: {TOKENS}, got '1e400'"),
        (HEADER + "1,acme,100000001,5\n", f"line 2: prompt_tokens: {TOKENS}, got '100000001'"),
        # A row's line is its line in the file: the blank line counts.
        (HEADER + "0,acme,5,5\n\n1,acme,,5\n", f"line 4: prompt_tokens: is empty (every row gives {COLUMNS})"),
        (
            "timestamp,tenant,prompt_tokens\n1,acme,5\n",
            "line 1: no output_tokens column in the header "
            "(the header names timestamp,tenant,prompt_tokens,output_tokens; it has timestamp,tenant,prompt_tokens)",
        ),
        ("", "line 1: no header (the first line names the columns: timestamp,tenant,prompt_tokens,output_tokens)"),
        (
            HEADER + "0," + "a" * 200_000 + ",5,5\n",
            "line 2: not CSV: field larger than field limit (131072) "
            "(columns timestamp,tenant,prompt_tokens,output_tokens)",
        ),
    ],
)
def test_bad_usage_row_is_one_line_naming_its_line_and_column(run_cli, tmp_path, rows, message):
    code, out, err, _ = _replay(run_cli, tmp_path, "usage.csv", rows)
    assert (code, out) == (1, ""), err
    assert err == f"quotacalc: error: {(tmp_path / 'usage.csv').resolve()}: {message}\n"


def test_a_usage_file_without_a_timestamp_column_is_a_header_problem(run_cli, tmp_path):
    """Not 'line 2: missing timestamp' (a row's fault): the header lacks the column; say which, and the header."""
    rows = "time,tenant,prompt_tokens,output_tokens\n0,acme,5,5\n"
    code, out, err, _ = _replay(run_cli, tmp_path, "r.csv", rows)
    assert (code, out) == (1, "")
    assert err == (
        f"quotacalc: error: {(tmp_path / 'r.csv').resolve()}: line 1: no timestamp column in the header (the header "
        "names timestamp,tenant,prompt_tokens,output_tokens; it has time,tenant,prompt_tokens,output_tokens)\n"
    )


@pytest.mark.parametrize(
    ("line", "message"),
    [
        (
            '{"timestamp": NaN, "tenant": "acme", "prompt_tokens": 5, "output_tokens": 5}',
            f"timestamp: {SECONDS}, got nan",
        ),
        (
            '{"timestamp": true, "tenant": "acme", "prompt_tokens": 5, "output_tokens": 5}',
            f"timestamp: {SECONDS} or an ISO 8601 time, got True",
        ),
        (
            '{"timestamp": 0, "tenant": "acme", "prompt_tokens": 0, "output_tokens": 5}',
            f"prompt_tokens: {TOKENS}, got 0",
        ),
        (
            '{"timestamp": 0, "tenant": "acme", "prompt_tokens": 5}',
            f"output_tokens: is missing (every row gives {COLUMNS})",
        ),
        (
            '{"timestamp": 0, "tenant": "acme", "prompt_tokens": %s, "output_tokens": 5}' % ("9" * 400),
            f"prompt_tokens: {TOKENS}, got a 400-digit number",
        ),
        (
            '{"timestamp": 0, "tenant": "acme", "prompt_tokens": %s, "output_tokens": 5}' % ("9" * 5000),
            "not JSON: Exceeds the limit (4300 digits) for integer string conversion (one JSON object a line)",
        ),
        ("[" * 100_000 + "]" * 100_000, "not JSON: nested too deeply (one JSON object a line)"),  # was RecursionError
        (
            '{"timestamp": "2024-01-01T00:00:00Z", "tenant": "acme", "prompt_tokens": 5, "output_tokens": 5}',
            "timestamp: an ISO 8601 time among seconds (line 1 gives seconds): seconds from an origin of the file's own "
            "and ISO times are no one clock, and the rows would land decades apart (give every timestamp one way)",
        ),
        (
            '{"timestamp": 1, "tenant": "acme", "prompt_tokens": 1000, "output_tokens": 5, "prompt_tokens": 99999}',
            "duplicate key 'prompt_tokens': JSON keeps the last, so one of its values would be dropped (keep one)",
        ),
    ],
)
def test_bad_jsonl_usage_row(run_cli, tmp_path, line, message):
    code, out, err, _ = _replay(
        run_cli,
        tmp_path,
        "usage.jsonl",
        '{"timestamp": 0, "tenant": "acme", "prompt_tokens": 5, "output_tokens": 5}\n' + line + "\n",
    )
    assert (code, out) == (1, ""), err
    assert err == f"quotacalc: error: {(tmp_path / 'usage.jsonl').resolve()}: line 2: {message}\n"


def test_usage_file_for_another_tenant(run_cli, tmp_path):
    code, out, err, scenario = _replay(run_cli, tmp_path, "usage.csv", HEADER + "1,other,5,5\n")
    assert (code, out) == (1, "")
    assert (
        err
        == f"quotacalc: error: {scenario}: workload.tenants[0].arrival.tenant: no rows for tenant 'acme' in usage.csv\n"
    )


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


def _simulate(run_cli, tmp_path, *changes) -> tuple[int, str, str, Path]:
    document = copy.deepcopy(BASE)
    for change in changes:
        change(document)
    scenario = tmp_path / "scenario.yaml"
    scenario.write_text(yaml.safe_dump(document))
    code, out, err = run_cli("simulate", str(scenario), "--json")
    return code, out, err, scenario


@pytest.mark.parametrize(
    ("change", "message"),
    [
        # vLLM refuses max_tokens < 1; 0 was run as 1 token, every request ending as 'length'.
        (_set("workload.tenants.0.max_tokens", 0), "workload.tenants[0].max_tokens: must be at least 1"),
        (_set("workload.tenants.0.max_tokens", -3), "workload.tenants[0].max_tokens: must be at least 1"),
        (
            _set("workload.tenants.0.max_tokens", {"kind": "fixed", "tokens": 0}),
            "workload.tenants[0].max_tokens.tokens: must be at least 1",
        ),
        (
            _set("workload.tenants.0.max_tokens", {"kind": "empirical", "values": [512, 0]}),
            "workload.tenants[0].max_tokens.values[1]: must be at least 1",
        ),
        # W x max_tokens past a float: OverflowError before.
        (
            _set("workload.tenants.0.max_tokens", 10**400),
            "workload.tenants[0].max_tokens: must be at most 100,000,000, got a 401-digit number",
        ),
    ],
)
def test_max_tokens_below_one_or_past_any_context_is_refused(run_cli, tmp_path, change, message):
    code, out, err, scenario = _simulate(run_cli, tmp_path, change)
    assert (code, out) == (1, "")
    assert err == f"quotacalc: error: {scenario}: {message}\n"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        # Each of these ran into an OverflowError, a ValueError on int(NaN), NaN figures or a run that never ended.
        (
            _set("workload.tenants.0.output_tokens", {"kind": "exponential", "mean": 1e308}),
            "workload.tenants[0].output_tokens.mean: must be at most 100,000,000, got 1e+308",
        ),
        (
            _set("workload.tenants.0.prompt_tokens", {"kind": "lognormal", "median": 1e300, "sigma": 5}),
            "workload.tenants[0].prompt_tokens.median: must be at most 100,000,000, got 1e+300",
        ),
        (
            _set("workload.tenants.0.output_tokens", {"kind": "fixed", "tokens": 10**400}),
            "workload.tenants[0].output_tokens.tokens: must be at most 100,000,000, got a 401-digit number",
        ),
        (
            _set("workload.tenants.0.output_tokens", {"kind": "empirical", "values": [10**30]}),
            "workload.tenants[0].output_tokens.values[0]: must be at most 100,000,000, got a 31-digit number",
        ),
        (
            _set("workload.tenants.0.prompt_tokens.sigma", float("nan")),
            "workload.tenants[0].prompt_tokens.sigma: must be a finite number, got nan",
        ),
        (
            _set("workload.tenants.0.cached_fraction", float("nan")),
            "workload.tenants[0].cached_fraction: must be a finite number, got nan",
        ),
        (
            _set("workload.tenants.0.arrival.rate_rps", 1e-300),
            "workload.tenants[0].arrival.rate_rps: must be at least 3.16e-08 (one request a year), got 1e-300",
        ),
        (
            _set("workload.tenants.1.arrival.off_s", 1e308),
            "workload.tenants[1].arrival.off_s: must be at most 31,622,400 s (a year), got 1e+308",
        ),
        (
            _set("workload.tenants.0.cancel_after_s_mean", 1e308),
            "workload.tenants[0].cancel_after_s_mean: must be at most 31,622,400 s (a year), got 1e+308",
        ),
        (_set("window_s", 1e-300), "window_s: must be at least 0.001 s, got 1e-300"),
        (_set("duration_s", 1e308), "duration_s: must be at most 31,622,400 s (a year), got 1e+308"),
        (_set("engine.restart_s", float("inf")), "engine.restart_s: must be a finite number, got inf"),
        (_set("engine.restart_s", -1), "engine.restart_s: must be a finite number >= 0, got -1.0"),
        (
            _set("engine.failure_rate_per_hour", 1e12),
            "engine.failure_rate_per_hour: must be at most 3,600 (one failure a second), got 1e+12",
        ),
        (
            _set("engine.max_num_seqs", 10**400),
            "engine.max_num_seqs: must be at most 1,000,000, got a 401-digit number",
        ),
        (
            _set("workload.tenants", []),
            "workload.tenants: is empty (give at least one tenant's workload: tenant, arrival, prompt_tokens, "
            "output_tokens)",
        ),
        (
            _set("workload.tenants.0.prompt_tokens", {"kind": "empirical", "values": []}),
            "workload.tenants[0].prompt_tokens.values: is empty (give at least one observed length)",
        ),
        (_set("queueing", []), "queueing: is empty (one or more of fair, deep_priority)"),
    ],
)
def test_values_that_crashed_or_hung_the_simulator_are_refused(run_cli, tmp_path, change, message):
    code, out, err, scenario = _simulate(run_cli, tmp_path, change)
    assert (code, out) == (1, "")
    assert err == f"quotacalc: error: {scenario}: {message}\n"


VLLM_REFUSES = "vLLM refuses to start with max_num_batched_tokens below max_num_seqs"


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        # The standard pool runs 128 sequences a step: 1 token a step ran at a TTFT p50 of 202,461 s.
        (
            [_set("engine.max_num_batched_tokens", 1)],
            "engine.max_num_batched_tokens: 1 is below the 128 sequences pool 'standard' runs a step (max_num_seqs): "
            f"{VLLM_REFUSES} (raise it to at least 128)",
        ),
        (
            [_set("engine.max_num_batched_tokens", 64), _set("engine.max_num_seqs", 100)],
            "engine.max_num_batched_tokens: 64 is below the 100 sequences pool 'standard' runs a step (max_num_seqs): "
            f"{VLLM_REFUSES} (raise it to at least 100, or lower engine.max_num_seqs)",
        ),
        (
            [_drop("engine.max_num_batched_tokens"), _set("engine.max_num_seqs", 10_000)],
            "engine.max_num_seqs: 10,000 is above the 8,192 tokens pool 'standard' steps (max_num_batched_tokens): "
            f"{VLLM_REFUSES} (lower it to at most 8,192, or raise engine.max_num_batched_tokens)",
        ),
        (
            [_drop("engine.max_num_batched_tokens"), _set("plan.pools.0.deployment.max_num_batched_tokens", 100)],
            "plan.pools[0].deployment: pool 'standard': its token budget a step (max_num_batched_tokens), 100, is "
            f"below the 128 sequences it runs a step (max_num_seqs): {VLLM_REFUSES} (raise the deployment's "
            "max_num_batched_tokens to at least 128, or lower its max_num_seqs or batch; or set "
            "engine.max_num_batched_tokens in the scenario)",
        ),
    ],
)
def test_an_engine_stepping_fewer_tokens_than_sequences_is_refused_as_vllm_does(run_cli, tmp_path, changes, message):
    code, out, err, scenario = _simulate(run_cli, tmp_path, *changes)
    assert (code, out) == (1, "")
    assert err == f"quotacalc: error: {scenario}: {message}\n"


def test_the_token_budget_equal_to_the_sequences_is_accepted(run_cli, tmp_path):
    code, out, err, _ = _simulate(
        run_cli,
        tmp_path,
        _set("engine.max_num_batched_tokens", 128),
        _set("duration_s", 5),
        _set("policies", ["reserve_capped"]),
    )
    assert code == 0, err
    assert [pool["max_num_batched_tokens"] for pool in json.loads(out)["pools"]] == [128, 128]


def test_bounds_are_worded_as_the_house_words_them_not_as_pydantic(run_cli, tmp_path):
    """'must be less than or equal to 1, got 1.5', as a plan words it; pydantic's 'Input should be' stays inside."""
    document = yaml.safe_load(EXAMPLE.read_text(encoding="utf-8"))
    document["workload"]["tenants"][0]["cancel_probability"] = 1.5
    scenario = tmp_path / "scenario.yaml"
    scenario.write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")
    code, out, err = run_cli("simulate", scenario)
    assert (code, out) == (1, "")
    assert err.endswith("workload.tenants[0].cancel_probability: must be less than or equal to 1, got 1.5\n")
    assert "Input should" not in err


@pytest.mark.parametrize("command", ["price", "size", "check", "generate", "emulate"])
def test_a_scenario_given_where_a_plan_goes_is_named_as_a_scenario(run_cli, tmp_path, command):
    """The mirror of a plan given to simulate: 'seed: unknown key' named the scenario's first key instead."""
    if command == "emulate":
        pytest.importorskip("aiohttp")  # emulate refuses without it before it reads the plan
    extra = ("--out", str(tmp_path / "out")) if command == "generate" else ()
    code, out, err = run_cli(command, EXAMPLE, *extra)
    assert (code, out) == (1, "")
    assert err.strip() == (
        f"quotacalc: error: {EXAMPLE}: is a simulate scenario, not a plan (run quotacalc simulate {EXAMPLE}; give "
        "price, size, check, generate and emulate the plan its plan key names or holds)"
    )
    assert not (tmp_path / "out").exists()
