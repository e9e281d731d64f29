"""``quotacalc fleet`` on DuckDB: golden figures derived on paper, bad rows by reason, formats, --write and check.

The golden log (tests/fleet_logs.golden_requests), every request of 1,000 prompt and 100 output tokens, so each
carries the same units U = UnitWeights.request_units(1000, 0, 100) of the plan's pool (taken from the policy, the
one source of the weights):

    a: r1 over [0, 10) s, r2 over [20, 21) s;   b: r3 over [5, 15) s.

Spread over their durations, in 1 s windows: a holds U/10 per s in windows 0-9 and U in window 20 (peak U); b holds
U/10 in windows 5-14 (peak U/10); the fleet holds U/5 in windows 5-9 and U in window 20 (peak U). Sum of the
tenants' peaks 1.1 U, ratio 1.1.
In 10 s windows: a holds U/10 in windows 0 and 2 (peak U/10); b half its units in each of windows 0 and 1, U/20
(peak U/20); the fleet 3U/20, U/20, U/10 (peak 3U/20). Sum 3U/20: ratio 1.
In 60 s windows: a 2U/60, b U/60, the fleet 3U/60: ratio 1.
Counted at their starts (--attribution start), in 1 s windows: a U in windows 0 and 20, b U in window 5, the fleet
U in each: peaks U, U and U, ratio 2.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

pytest.importorskip("duckdb")
pytest.importorskip("sqlglot")

from tests.fleet_logs import (
    PLAN,
    Request,
    envoy_record,
    golden_requests,
    quotacalc_record,
    rfc3339,
    write_litellm_csv,
    write_quotacalc,
)


@pytest.fixture(scope="module")
def plan_path(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("plan") / "plan.yaml"
    path.write_text(PLAN, encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def policy(plan_path):
    from quotacalc.cli.plan_cmds import load_policy

    return load_policy(str(plan_path))[1]


def units(policy, prompt: int = 1000, cached: int = 0, output: int = 100) -> float:
    """One request's units on the pool, by the policy's own arithmetic."""
    weights = next(t for t in policy.tenants if t.name == "a").weights
    return weights.request_units(prompt, cached, output)


def fleet_json(run_cli, *args) -> dict:
    code, out, err = run_cli("fleet", *args, "--json")
    assert code == 0, err
    return json.loads(out)


def assert_alike(got: object, expected: object, where: str = "") -> None:
    """Equal, floats to 1e-12 relative: DuckDB sums a window's requests on several threads, in no fixed order, so
    two runs of one query may differ in the last bit."""
    if isinstance(expected, dict):
        assert isinstance(got, dict) and got.keys() == expected.keys(), where
        for key, value in expected.items():
            assert_alike(got[key], value, f"{where}.{key}")
    elif isinstance(expected, list):
        assert isinstance(got, list) and len(got) == len(expected), where
        for index, (item, value) in enumerate(zip(got, expected, strict=True)):
            assert_alike(item, value, f"{where}[{index}]")
    elif isinstance(expected, float):
        assert got == pytest.approx(expected, rel=1e-12, abs=1e-12), where
    else:
        assert got == expected, where


def window(document: dict, seconds: float) -> dict:
    return next(w for w in document["windows"] if w["window_s"] == seconds)


def tenant(figures: dict, name: str) -> dict:
    return next(t for t in figures["tenants"] if t["tenant"] == name)


def assert_golden_spread(document: dict, u: float) -> None:
    one, ten, sixty = window(document, 1), window(document, 10), window(document, 60)
    assert tenant(one, "a")["peak_units_per_s"] == pytest.approx(u)
    assert tenant(one, "b")["peak_units_per_s"] == pytest.approx(u / 10)
    assert one["fleet_peak_units_per_s"] == pytest.approx(u)
    assert one["sum_tenant_peaks_units_per_s"] == pytest.approx(1.1 * u)
    assert one["oversubscription_ratio"] == pytest.approx(1.1)
    assert tenant(ten, "a")["peak_units_per_s"] == pytest.approx(u / 10)
    assert tenant(ten, "b")["peak_units_per_s"] == pytest.approx(u / 20)
    assert ten["fleet_peak_units_per_s"] == pytest.approx(3 * u / 20)
    assert ten["oversubscription_ratio"] == pytest.approx(1.0)
    assert sixty["fleet_peak_units_per_s"] == pytest.approx(3 * u / 60)
    assert sixty["sum_tenant_peaks_units_per_s"] == pytest.approx(3 * u / 60)
    assert document["oversubscription_ratio"] == pytest.approx({"1": 1.1, "10": 1.0, "60": 1.0})


def test_golden_ratio_peaks_and_contracts(run_cli, tmp_path, plan_path, policy) -> None:
    log = write_quotacalc(tmp_path / "usage.jsonl", golden_requests())
    document = fleet_json(run_cli, log, "--plan", plan_path, "--window", "1,10,60", "--reversal-replicas", "0.05")
    u = units(policy)
    assert_golden_spread(document, u)
    assert document["rows_read"] == 3 and document["rows_used"] == 3
    assert document["rows_rejected"] == dict.fromkeys(document["rows_rejected"], 0)
    one = window(document, 1)
    # Contracts are the plan's bucket rates: a sold 100 units/s, b 5,000; d is sold and silent.
    assert tenant(one, "a")["contract_units_per_s"] == 100
    assert tenant(one, "a")["over_contract_units_per_s"] == pytest.approx(u - 100)
    assert tenant(one, "d") == {
        **tenant(one, "d"),
        "peak_units_per_s": 0.0,
        "p99_units_per_s": 0.0,
        "contract_units_per_s": 10,
    }
    assert one["tenants_over_contract"] == ["a"]
    replica = next(p for p in policy.pools if p.name == "shared").replica_units_per_s
    assert document["replica_units_per_s"] == pytest.approx(replica)
    assert one["fleet_peak_replicas"] == pytest.approx(u / replica)
    assert one["replicas_at_ceiling"] == math.ceil(u / replica)
    # Reversal: a's peak alone, U / replica (about 0.07 replicas), is above 0.05 replicas; b's tenth of it is not.
    assert u / replica > 0.05 > u / 10 / replica
    assert one["reversal_tenants"] == ["a"]
    # Output reserved against served, where the log has max_tokens: a's r2 asked 400 and got 100, b's r3 1,000.
    usage = {t["tenant"]: t for t in document["tenants"]}
    assert usage["a"]["output_reserved_tokens"] == 400 and usage["a"]["output_served_tokens"] == 100
    assert usage["b"]["output_reserved_over_served"] == pytest.approx(10.0)
    assert usage["a"]["units"] == pytest.approx(2 * u)
    # The weights each request was priced with are the policy's, passed through.
    weights = next(t for t in policy.tenants if t.name == "a").weights
    assert document["weights"]["tenants"]["a"]["output"] == weights.output
    assert document["weights"]["tenants"]["a"]["prompt_per_prompt_token"] == weights.prompt_per_prompt_token
    assert document["period_start"] == rfc3339(0) and document["period_end"] == rfc3339(21)


def test_start_attribution_counts_each_request_in_its_first_window(run_cli, tmp_path, plan_path, policy) -> None:
    log = write_quotacalc(tmp_path / "usage.jsonl", golden_requests())
    document = fleet_json(run_cli, log, "--plan", plan_path, "--window", "1", "--attribution", "start")
    one = window(document, 1)
    u = units(policy)
    assert [tenant(one, name)["peak_units_per_s"] for name in ("a", "b")] == pytest.approx([u, u])
    assert one["fleet_peak_units_per_s"] == pytest.approx(u)
    assert one["oversubscription_ratio"] == pytest.approx(2.0)


def test_p99_is_the_nearest_rank_over_every_window_of_the_period(run_cli, tmp_path, plan_path, policy) -> None:
    """200 one-second windows: x sends one request a second, plus three more at 0 s and one more at 1 s. Its windows
    hold 4U, 2U and 198 × U: the 198th of 200 (ceil(0.99 × 200)) in order is U; the peak 4U."""
    requests = [Request(f"x{i}", "x", float(i), float(i)) for i in range(200)]
    requests += [Request(f"y{i}", "x", 0.0, 0.0) for i in range(3)] + [Request("z", "x", 1.0, 1.0)]
    log = write_quotacalc(tmp_path / "usage.jsonl", requests)
    document = fleet_json(run_cli, log, "--plan", plan_path, "--window", "1")
    one = window(document, 1)
    u = units(policy)
    assert one["windows"] == 200
    assert tenant(one, "x")["peak_units_per_s"] == pytest.approx(4 * u)
    assert tenant(one, "x")["p99_units_per_s"] == pytest.approx(u)
    # x is not in the plan: priced with the pool's weights (same tier weights here), no contract.
    assert tenant(one, "x")["contract_units_per_s"] is None


def test_cached_tokens_are_charged_the_cached_weight(run_cli, tmp_path, plan_path, policy) -> None:
    log = write_quotacalc(tmp_path / "usage.jsonl", [Request("c1", "a", 0.0, 1.0, prompt=1000, cached=400)])
    document = fleet_json(run_cli, log, "--plan", plan_path, "--window", "1")
    assert tenant(window(document, 1), "a")["peak_units_per_s"] == pytest.approx(units(policy, 1000, 400, 100))


def bad_lines() -> list[str]:
    good = quotacalc_record(Request("bad", "a", 30.0, 31.0))

    def variant(**changes) -> str:
        return json.dumps(
            {**good, "request_id": changes.pop("request_id", f"bad-{len(changes)}-{sorted(changes)}"), **changes}
        )

    return [
        "{not json",
        variant(tenant=None),
        variant(start="yesterday"),
        variant(end=rfc3339(29.0)),
        variant(first_token=rfc3339(40.0)),
        variant(prompt_tokens=-5),
        variant(output_tokens=1.5),
        variant(cached_tokens=2000),
        json.dumps(quotacalc_record(golden_requests()[0])),  # r1 again
    ]


REASONS = {
    "malformed_record": 1,
    "missing_tenant": 1,
    "unparsable_time": 1,
    "end_before_start": 1,
    "time_out_of_order": 1,
    "negative_tokens": 1,
    "non_integer_tokens": 1,
    "cached_above_prompt": 1,
    "duplicate_request_id": 1,
}


def test_bad_rows_are_counted_by_reason_and_leave_the_figures_alone(run_cli, tmp_path, plan_path, policy) -> None:
    log = write_quotacalc(tmp_path / "usage.jsonl", golden_requests(), bad_lines())
    document = fleet_json(run_cli, log, "--plan", plan_path, "--max-bad-rows", "0.9")
    assert document["rows_rejected"] == REASONS
    assert document["rows_read"] == 12 and document["rows_used"] == 3
    assert document["rows_rejected_fraction"] == pytest.approx(9 / 12)
    assert_golden_spread(document, units(policy))


def test_too_many_bad_rows_fail_with_the_counts(run_cli, tmp_path, plan_path) -> None:
    log = write_quotacalc(tmp_path / "usage.jsonl", golden_requests(), bad_lines())
    code, _, err = run_cli("fleet", log, "--plan", plan_path)
    assert code == 1
    assert f"{log}: 9 of 12 rows rejected (75.00%, above --max-bad-rows 1%)" in err
    for reason in REASONS:
        assert f"{reason} 1" in err
    assert "Traceback" not in err


def test_litellm_csv_export_gives_the_same_figures(run_cli, tmp_path, plan_path, policy) -> None:
    requests = [*golden_requests(), Request("c1", "b", 100.0, 100.0, prompt=1000, cached=400, max_tokens=None)]
    export = write_litellm_csv(tmp_path / "spendlogs.csv", requests)
    document = fleet_json(run_cli, export, "--format", "litellm", "--plan", plan_path, "--window", "1,10,60")
    u = units(policy)
    # c1 (cached 400 of 1,000, read from metadata.usage_object) is alone in its windows, at 100 s.
    assert document["tenants"][1]["units"] == pytest.approx(u + units(policy, 1000, 400, 100))
    one = window(document, 1)
    assert tenant(one, "b")["peak_units_per_s"] == pytest.approx(units(policy, 1000, 400, 100))
    # The golden figures otherwise: r1-r3 as before (b's peak is now c1's, at 1 s windows only).
    assert tenant(one, "a")["peak_units_per_s"] == pytest.approx(u)
    assert window(document, 10)["fleet_peak_units_per_s"] == pytest.approx(3 * u / 20)
    usage = {t["tenant"]: t for t in document["tenants"]}
    assert usage["a"]["output_reserved_tokens"] == 400  # proxy_server_request.max_tokens


def test_litellm_tenant_column_is_mappable(run_cli, tmp_path, plan_path) -> None:
    export = write_litellm_csv(tmp_path / "spendlogs.csv", golden_requests())
    document = fleet_json(run_cli, export, "--format", "litellm", "--map", "tenant=api_key", "--plan", plan_path)
    assert [t["tenant"] for t in document["tenants"]] == [
        "88dc28d0f030c55ed4ab77ed8faf098196cb1c05df778539800c9f1243fe6b4b",
        "a",
        "b",
        "d",
    ]


def test_envoy_access_log_with_the_plans_tenant_header(run_cli, tmp_path, plan_path, policy) -> None:
    log = tmp_path / "access.log"
    log.write_text("".join(json.dumps(envoy_record(r)) + "\n" for r in golden_requests()), encoding="utf-8")
    document = fleet_json(run_cli, log, "--format", "envoy", "--plan", plan_path, "--window", "1,10,60")
    assert_golden_spread(document, units(policy))


def test_generic_csv_with_a_map(run_cli, tmp_path, plan_path, policy) -> None:
    log = tmp_path / "log.csv"
    lines = ["team,ts,done,in,out"] + [
        f"{r.tenant},{rfc3339(r.start_s)},{rfc3339(r.end_s)},{r.prompt},{r.output}" for r in golden_requests()
    ]
    log.write_text("\n".join(lines) + "\n", encoding="utf-8")
    mapping = "tenant=team,start=ts,end=done,prompt_tokens=in,output_tokens=out"
    document = fleet_json(run_cli, log, "--format", "csv", "--map", mapping, "--plan", plan_path, "--window", "1,10,60")
    assert_golden_spread(document, units(policy))


# --- files that are not the format named ------------------------------------------------------------------------


def test_a_litellm_export_read_as_quotacalc_records_is_one_line(run_cli, tmp_path, plan_path) -> None:
    export = write_litellm_csv(tmp_path / "spendlogs.csv", golden_requests())
    code, _, err = run_cli("fleet", export, "--plan", plan_path)
    assert code == 1
    assert err == f"quotacalc: error: {export}: line 1 is not JSON: not a JSON-lines log\n"


def test_a_csv_without_the_tenant_column_names_it(run_cli, tmp_path, plan_path) -> None:
    log = tmp_path / "spendlogs.csv"
    log.write_text('request_id,startTime,endTime,prompt_tokens,completion_tokens\n"r1",2026-10-01,2026-10-01,1,1\n')
    code, _, err = run_cli("fleet", log, "--format", "litellm", "--plan", plan_path)
    assert code == 1
    assert err.startswith(f"quotacalc: error: {log}: not a LiteLLM_SpendLogs export: no column 'team_id' (tenant)")
    assert err.count("\n") == 1


def test_records_without_a_key_name_the_key(run_cli, tmp_path, plan_path) -> None:
    log = tmp_path / "usage.jsonl"
    record = quotacalc_record(golden_requests()[0])
    del record["end"]
    log.write_text(json.dumps(record) + "\n")
    code, _, err = run_cli("fleet", log, "--plan", plan_path)
    assert code == 1
    assert f"{log}: not quotacalc usage records: the first record has no key 'end' (end)" in err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--window", "0.5"], "--window: 0.5 s is outside 1 to 3600 s"),
        (["--window", "x"], "--window: 'x' is not a number of seconds"),
        (["--format", "splunk"], "--format: unknown format 'splunk'"),
        (["--map", "tenant"], "--map: 'tenant' is not FIELD=COLUMN"),
        (["--map", "tenantt=x"], "--map: unknown field 'tenantt'"),
        (["--attribution", "end"], "--attribution: 'end' is not spread or start"),
        (["--pool", "nope"], "--pool: no pool 'nope' in the plan"),
        (["--max-bad-rows", "2"], "--max-bad-rows: 2 is not a share from 0 to 1"),
    ],
)
def test_bad_flags_are_one_line(run_cli, tmp_path, plan_path, args, message) -> None:
    log = write_quotacalc(tmp_path / "usage.jsonl", golden_requests())
    code, _, err = run_cli("fleet", log, "--plan", plan_path, *args)
    assert code == 2, err
    assert message in err and err.count("\n") == 1


def test_no_usable_rows_is_an_error(run_cli, tmp_path, plan_path) -> None:
    log = tmp_path / "empty.jsonl"
    log.write_text("\n")
    code, _, err = run_cli("fleet", log, "--plan", plan_path)
    assert code == 1 and "no usable rows in pool shared (0 read)" in err


# --- --write and check -------------------------------------------------------------------------------------------


def test_write_records_the_ratio_with_its_provenance_and_check_uses_it(run_cli, tmp_path, plan_path) -> None:
    plan = tmp_path / "plan.yaml"
    plan.write_text(PLAN, encoding="utf-8")
    log = write_quotacalc(tmp_path / "usage.jsonl", golden_requests())
    code, out, err = run_cli("check", plan, "--json")
    assert "oversubscription" in {f["code"] for f in json.loads(out)["findings"]}
    for _ in range(2):  # writing again replaces the block
        document = fleet_json(run_cli, log, "--plan", plan, "--write", plan, "--write-window", "1")
    text = plan.read_text(encoding="utf-8")
    assert text.startswith(PLAN.rstrip("\n"))  # comments and every other key as they were
    assert text.count("oversubscription:") == 1
    import yaml

    block = yaml.safe_load(text)["oversubscription"]
    assert block["ratio"] == pytest.approx(1.1)
    assert block["measured"] == {
        "sources": [str(log)],
        "format": "quotacalc",
        "pool": "shared",
        "rows_used": 3,
        "rows_read": 3,
        "period_start": rfc3339(0),
        "period_end": rfc3339(21),
        "window_s": 1.0,
        "attribution": "spread",
        "measured_on": block["measured"]["measured_on"],
    }
    assert "1 s windows" in block["source"] and str(log) in block["source"]
    assert document["written"]["ratio"] == block["ratio"]
    code, out, err = run_cli("check", plan, "--json")
    assert code == 0, err
    findings = json.loads(out)["findings"]
    capacity = next(f for f in findings if f["code"] == "capacity")
    assert capacity["figures"]["ratio"] == pytest.approx(1.1)
    assert "measured oversubscription 1.1" in capacity["message"]
    (measured,) = [f for f in findings if f["code"] == "oversubscription"]
    assert measured["message"] == f"measured oversubscription 1.1 (raises pool shared only): {block['source']}"
    assert block["pool"] == "shared"  # the pool measured: the only one the ratio raises
    assert "no oversubscription assumed" not in out
    # size counts the shared tenants' replicas at the fleet's measured peak: every tenant here is shared.
    code, out, err = run_cli("size", plan, "--json")
    assert code == 0, err
    totals = json.loads(out)["totals"]
    assert totals["oversubscription_ratio"] == pytest.approx(1.1)
    assert totals["replicas_at_measured_peak"] == pytest.approx(totals["replicas"] / 1.1)
    code, out, err = run_cli("size", plan)
    assert code == 0, err
    assert f"at the measured oversubscription 1.1: {totals['replicas'] / 1.1:,.2f} replicas of load" in out


def test_write_keeps_a_crlf_plans_line_ends(run_cli, tmp_path) -> None:
    plan = tmp_path / "plan.yaml"
    original = PLAN.replace("\n", "\r\n").encode("utf-8")
    plan.write_bytes(original)
    log = write_quotacalc(tmp_path / "usage.jsonl", golden_requests())
    fleet_json(run_cli, log, "--plan", plan, "--write", plan)
    written = plan.read_bytes()
    assert written.startswith(original)  # every line as it was, its CRLF included
    assert b"oversubscription:" in written and b"\n" not in written.replace(b"\r\n", b"")


def test_write_defaults_to_the_smallest_ratio(run_cli, tmp_path) -> None:
    plan = tmp_path / "plan.yaml"
    plan.write_text(PLAN, encoding="utf-8")
    log = write_quotacalc(tmp_path / "usage.jsonl", golden_requests())
    fleet_json(run_cli, log, "--plan", plan, "--write", plan)
    import yaml

    block = yaml.safe_load(plan.read_text(encoding="utf-8"))["oversubscription"]
    assert block["ratio"] == pytest.approx(1.0) and block["measured"]["window_s"] == 10.0


def test_write_refuses_a_flat_plan(run_cli, tmp_path) -> None:
    flat = Path(__file__).resolve().parent.parent / "examples" / "llama-3.3-70b-h100.yaml"
    target = tmp_path / "flat.yaml"
    target.write_bytes(flat.read_bytes())
    log = write_quotacalc(tmp_path / "usage.jsonl", [Request("r", "tenant", 0.0, 1.0)])
    code, _, err = run_cli("fleet", log, "--plan", target, "--write", target)
    assert code == 1
    assert "is a flat plan: oversubscription is a platform plan's key" in err
    assert target.read_bytes() == flat.read_bytes()


def test_too_many_bad_rows_write_nothing(run_cli, tmp_path) -> None:
    plan = tmp_path / "plan.yaml"
    plan.write_text(PLAN, encoding="utf-8")
    log = write_quotacalc(tmp_path / "usage.jsonl", golden_requests(), bad_lines())
    code, _, _ = run_cli("fleet", log, "--plan", plan, "--write", plan)
    assert code == 1
    assert plan.read_text(encoding="utf-8") == PLAN


def test_a_measurement_block_with_an_unknown_key_is_refused(run_cli, tmp_path) -> None:
    plan = tmp_path / "plan.yaml"
    plan.write_text(PLAN + "oversubscription: {ratio: 1.2, source: x, measured: {sauces: [a]}}\n", encoding="utf-8")
    code, _, err = run_cli("check", plan)
    assert code == 1
    assert "oversubscription.measured.sauces: unknown key 'sauces' (did you mean 'sources'?)" in err


# --- the query itself --------------------------------------------------------------------------------------------


def test_print_sql_gives_each_engines_query(run_cli, tmp_path, plan_path) -> None:
    import sqlglot

    code, out, err = run_cli("fleet", "--format", "litellm", "--plan", plan_path, "--print-sql", "postgres")
    assert code == 0, err
    assert 'FROM "LiteLLM_SpendLogs"' in out and 'EXTRACT(EPOCH FROM "startTime")' in out
    sqlglot.parse_one(out, read="postgres")
    code, out, err = run_cli("fleet", "--format", "litellm", "--plan", plan_path, "--print-sql", "spark")
    assert code == 0, err
    assert "FROM `LiteLLM_SpendLogs`" in out
    assert "CACHE TABLE `ranked` AS" in out
    sqlglot.parse(out, read="spark")
    log = write_quotacalc(tmp_path / "usage.jsonl", golden_requests())
    code, out, err = run_cli("fleet", log, "--plan", plan_path, "--print-sql", "duckdb")
    assert code == 0, err
    assert str(log) in out


def test_plot_draws_the_fleet_and_each_tenant(run_cli, tmp_path, plan_path) -> None:
    pytest.importorskip("matplotlib")
    log = write_quotacalc(tmp_path / "usage.jsonl", golden_requests())
    for name in ("a.svg", "b.svg"):
        code, _, err = run_cli("fleet", log, "--plan", plan_path, "--plot", tmp_path / name)
        assert code == 0, err
    svg = (tmp_path / "a.svg").read_text(encoding="utf-8")
    assert "sum of tenant peaks" in svg and "fleet load" in svg
    assert (tmp_path / "a.svg").read_bytes() == (tmp_path / "b.svg").read_bytes()


def test_the_table_names_the_ratio_and_tenants_over_contract(run_cli, tmp_path, plan_path) -> None:
    log = write_quotacalc(tmp_path / "usage.jsonl", golden_requests())
    code, out, err = run_cli("fleet", log, "--plan", plan_path, "--window", "1")
    assert code == 0, err
    assert "1.100" in out and "over" in out


# --- OpenAI organization usage export ------------------------------------------------------------------------------


def openai_page(buckets: list[tuple[float, float, list[dict]]]) -> dict:
    """A /v1/organization/usage/completions response page (group_by=project_id), as the API returns it."""
    from tests.fleet_logs import T0

    start = T0.timestamp()
    return {
        "object": "page",
        "data": [
            {
                "object": "bucket",
                "start_time": int(start + begin),
                "end_time": int(start + end),
                "results": [
                    {
                        "object": "organization.usage.completions.result",
                        "input_tokens": 0,
                        "output_tokens": 0,
                        "input_cached_tokens": 0,
                        "input_audio_tokens": 0,
                        "output_audio_tokens": 0,
                        "num_model_requests": 0,
                        "project_id": None,
                        "user_id": None,
                        "api_key_id": None,
                        "model": None,
                        "batch": None,
                        **result,
                    }
                    for result in results
                ],
            }
            for begin, end, results in buckets
        ],
        "has_more": False,
        "next_page": None,
    }


def test_openai_usage_buckets_are_spread_over_the_bucket(run_cli, tmp_path, plan_path, policy) -> None:
    """1-minute buckets: project a sends 5 requests (5,000 prompt tokens, 1,000 cached, 500 output) in the first,
    b 10 (10,000 prompt, 1,000 output) in the second. A bucket's units are its requests' at their mean prompt:
    a 5 × R(1000, 200, 100), b 10 × R(1000, 0, 100); each over its 60 s; the peaks fall in different minutes."""
    page = openai_page(
        [
            (
                0,
                60,
                [
                    {
                        "project_id": "a",
                        "input_tokens": 5000,
                        "input_cached_tokens": 1000,
                        "output_tokens": 500,
                        "num_model_requests": 5,
                    }
                ],
            ),
            (60, 120, [{"project_id": "b", "input_tokens": 10000, "output_tokens": 1000, "num_model_requests": 10}]),
        ]
    )
    export = tmp_path / "usage.json"
    export.write_text(json.dumps(page, indent=2), encoding="utf-8")
    document = fleet_json(run_cli, export, "--format", "openai", "--plan", plan_path, "--window", "60")
    a, b = 5 * units(policy, 1000, 200, 100) / 60, 10 * units(policy, 1000, 0, 100) / 60
    sixty = window(document, 60)
    assert tenant(sixty, "a")["peak_units_per_s"] == pytest.approx(a)
    assert tenant(sixty, "b")["peak_units_per_s"] == pytest.approx(b)
    assert sixty["oversubscription_ratio"] == pytest.approx((a + b) / max(a, b))
    assert {t["tenant"]: t["requests"] for t in document["tenants"]} == {"a": 5, "b": 10, "d": 0}
    code, _, err = run_cli("fleet", export, "--format", "openai", "--plan", plan_path, "--window", "1,60")
    assert code == 2
    assert "--window: 1 s is shorter than the export's buckets (60 s)" in err


def test_an_openai_export_without_project_ids_names_the_key(run_cli, tmp_path, plan_path) -> None:
    page = openai_page([(0, 60, [{"input_tokens": 10, "output_tokens": 1, "num_model_requests": 1}])])
    del page["data"][0]["results"][0]["project_id"]
    export = tmp_path / "usage.json"
    export.write_text(json.dumps(page), encoding="utf-8")
    code, _, err = run_cli("fleet", export, "--format", "openai", "--plan", plan_path, "--window", "60")
    assert code == 1
    assert "the first result has no key 'project_id'" in err and err.count("\n") == 1


def test_long_prompts_load_the_long_context_pool(run_cli, tmp_path) -> None:
    """examples/platform.yaml routes prompts above 32,768 tokens from pool shared to pool long: measuring shared
    leaves such a request out (not a bad row), measuring long counts it at the long pool's weights."""
    from quotacalc.cli.plan_cmds import load_policy

    plan = Path(__file__).resolve().parent.parent / "examples" / "platform.yaml"
    policy = load_policy(str(plan))[1]
    globex = next(t for t in policy.tenants if t.name == "globex")
    requests = [Request("short", "globex", 0.0, 1.0, prompt=2000), Request("long", "globex", 0.0, 1.0, prompt=40000)]
    log = write_quotacalc(tmp_path / "usage.jsonl", requests)
    shared = fleet_json(run_cli, log, "--plan", plan, "--pool", "shared", "--window", "1")
    assert shared["rows_other_pool"] == 1 and shared["rows_used"] == 1
    assert tenant(window(shared, 1), "globex")["peak_units_per_s"] == pytest.approx(
        globex.weights.request_units(2000, 0, 100)
    )
    long = fleet_json(run_cli, log, "--plan", plan, "--pool", "long", "--window", "1")
    assert long["rows_other_pool"] == 1 and long["rows_used"] == 1
    assert tenant(window(long, 1), "globex")["peak_units_per_s"] == pytest.approx(
        globex.long_context_weights.request_units(40000, 0, 100)
    )


def test_without_a_plan_or_deployment_flags_there_are_no_weights(run_cli, tmp_path) -> None:
    log = write_quotacalc(tmp_path / "usage.jsonl", golden_requests())
    code, _, err = run_cli("fleet", log)
    assert code == 2
    assert err == (
        "quotacalc: error: --plan: is needed: the pool's weights price each request "
        "(name a platform plan or a deployment file, or give the deployment as price's flags (--model ...))\n"
    )


#: The plan's pool as price's deployment flags: the keys of PLAN's deployment and of its pool's.
POOL_FLAGS = (
    *("--model", "meta-llama/Llama-3.3-70B-Instruct", "--gpu", "h100-sxm", "--tp", "4"),
    *("--weight-dtype", "fp8", "--kv-dtype", "bf16", "--batch", "128", "--context", "1700"),
)


def test_deployment_flags_in_place_of_a_plan_price_as_a_deployment_file(run_cli, tmp_path) -> None:
    """price's flags are the deployment a flat file of the same keys is: one pool, default, and no tenant, so every
    tenant of the log is priced at the pool's weights (the deployment's cached weight) and has no contract."""
    from quotacalc.cli.plan_cmds import load_policy

    flat = tmp_path / "flat.yaml"
    flat.write_text(
        "".join(f"{k[2:].replace('-', '_')}: {v}\n" for k, v in zip(POOL_FLAGS[::2], POOL_FLAGS[1::2], strict=True))
    )
    output_weight = next(p for p in load_policy(str(flat))[1].pools).output_weight
    log = write_quotacalc(tmp_path / "usage.jsonl", golden_requests())
    by_flags = fleet_json(run_cli, log, *POOL_FLAGS)
    assert by_flags["pool"] == "default"
    assert by_flags["weights"] == {"default": by_flags["weights"]["default"], "tenants": {}}
    assert by_flags["weights"]["default"]["output"] == pytest.approx(output_weight)
    assert all(t["contract_units_per_s"] is None for t in window(by_flags, 1)["tenants"])
    by_file = fleet_json(run_cli, log, "--plan", flat)
    assert_alike(by_flags["windows"], by_file["windows"])
    assert by_flags["oversubscription_ratio"]["1"] == pytest.approx(1.1)


def test_deployment_flags_override_the_plans_deployment(run_cli, tmp_path, plan_path, policy) -> None:
    from quotacalc.cli.plan_cmds import load_policy

    smaller_batch = load_policy(str(plan_path), {"batch": 16})[1]
    assert units(smaller_batch) != pytest.approx(units(policy))  # the flag changes W, so the figures show it
    log = write_quotacalc(tmp_path / "usage.jsonl", golden_requests())
    document = fleet_json(run_cli, log, "--plan", plan_path, "--batch", "16", "--window", "1")
    assert window(document, 1)["fleet_peak_units_per_s"] == pytest.approx(units(smaller_batch))
    assert tenant(window(document, 1), "a")["contract_units_per_s"] == pytest.approx(100)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (("--write", "plan.yaml"), "--write: needs --plan: the ratio is recorded in the plan whose pool is measured"),
        (("--pool", "shared"), "--pool: needs a plan file"),
        (("--tp", "3"), "quotacalc: error: --tp: 3 does not divide the 64 attention heads"),
    ],
)
def test_deployment_flags_alone_refuse_what_needs_a_plan(run_cli, tmp_path, extra, message) -> None:
    log = write_quotacalc(tmp_path / "usage.jsonl", golden_requests())
    args = POOL_FLAGS if extra[0] != "--tp" else POOL_FLAGS[:4] + POOL_FLAGS[6:]
    code, _, err = run_cli("fleet", log, *args, *extra)
    assert code in (1, 2) and message in err and "Traceback" not in err
    assert err.count("\n") == 1


@pytest.mark.parametrize(
    ("given", "shown"),
    [
        ("postgresql://fleet:p%40ss/w0rd@db:5432/litellm", "postgresql://fleet:***@db:5432/litellm"),
        ("postgresql://fleet@db/litellm?password=hunter2", "postgresql://fleet@db/litellm?password=***"),
        ("host=db user=fleet password=hunter2 dbname=litellm", "host=db user=fleet password=*** dbname=litellm"),
        ("host=db password = 'two words' user=fleet", "host=db password = *** user=fleet"),
    ],
)
def test_a_connection_string_is_shown_without_its_password(given, shown) -> None:
    from quotacalc.fleet.engines import redact_url

    assert redact_url(given) == shown


def test_size_divides_only_the_shared_tenants_load_by_the_ratio(run_cli, tmp_path) -> None:
    """A dedicated tenant's pool serves it alone: its replicas multiplex nothing, whatever the fleet's ratio."""
    example = Path(__file__).resolve().parent.parent / "examples" / "platform.yaml"
    plan = tmp_path / "platform.yaml"
    plan.write_text(example.read_text(encoding="utf-8") + "oversubscription: {ratio: 2, source: test}\n")
    code, out, err = run_cli("size", plan, "--json")
    assert code == 0, err
    document = json.loads(out)
    shared = math.fsum(t["replicas"] for t in document["tenants"] if t["placement"] == "shared")
    dedicated = math.fsum(t["replicas"] for t in document["tenants"] if t["placement"] == "dedicated")
    assert dedicated > 0 and shared > 0
    assert document["totals"]["replicas_at_measured_peak"] == pytest.approx(shared / 2 + dedicated)


#: A query of a minute or so, whose progress callback says once that it runs (DuckDB reports progress only then).
INTERRUPTED_QUERY = """
import sys
from quotacalc.fleet.engines import EngineSettings, run_duckdb
said = []
def running(percent):
    if not said:
        said.append(print("running", flush=True))
try:
    run_duckdb(
        "SELECT SUM(HASH(a.i + b.i)) FROM range(100000) AS a(i), range(100000) AS b(i)",
        EngineSettings(memory_limit="256MB"),
        progress=running,
    )
except KeyboardInterrupt:
    sys.exit(130)
sys.exit(0)
"""


def test_ctrl_c_during_the_query_is_an_interrupt_not_an_internal_error() -> None:
    """DuckDB's Python client stops a query on SIGINT and raises RuntimeError('Query interrupted'), which the CLI
    reported as an internal error: run_duckdb raises it as the KeyboardInterrupt it was (the CLI: 'interrupted',
    exit 130). In a process of its own, as the CLI runs; the query (a cross join, which DuckDB interrupts between
    its tasks, within a second here) runs for a minute uninterrupted, so the signal lands inside it."""
    import os
    import signal
    import subprocess
    import sys

    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    child = subprocess.Popen(
        [sys.executable, "-c", INTERRUPTED_QUERY], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )
    try:
        assert child.stdout.readline() == "running\n"
        child.send_signal(signal.SIGINT)
        _, err = child.communicate(timeout=30)
    finally:
        child.kill()
    assert child.returncode == 130, err


def test_the_plugins_refusal_records_are_no_load(run_cli, tmp_path, plan_path, policy) -> None:
    """A request the enforcement plugin refused (401/403 without a tenant, 429, 413) never reached an engine: its
    record, as the plugin writes it, adds nothing to a tenant's load and is not a bad row (no tenant is no fault of
    the log's)."""
    from quotacalc.enforce.gate import Refusal, refusal_record

    refusals = [
        refusal_record(Refusal(401, "no_tenant", "no tenant"), None, "x1", 1_700_000_001.0, 0),
        refusal_record(Refusal(429, "bucket", "over quota", retry_after_s=3), "a", "x2", 1_700_000_002.0, 50_000),
        refusal_record(Refusal(413, "never_admissible", "too big"), "b", "x3", 1_700_000_003.0, 90_000),
    ]
    log = write_quotacalc(tmp_path / "usage.jsonl", golden_requests(), [json.dumps(r) for r in refusals])
    document = fleet_json(run_cli, log, "--plan", plan_path, "--window", "1,10,60", "--reversal-replicas", "0.05")
    assert_golden_spread(document, units(policy))
    assert document["rows_read"] == 3 and document["rows_used"] == 3
    assert document["rows_rejected"] == dict.fromkeys(document["rows_rejected"], 0)


def test_records_the_plugin_billed_nothing_are_no_load(run_cli, tmp_path, plan_path, policy) -> None:
    """The plugin bills a request's prompt once a token came back or once the client ended a request the engine had.
    A record of no output and nothing billed never reached an engine (a client gone while queued; a 429 after
    waiting in the queue, with or without its status): no load, not a bad row. A client gone after the engine had it (no output,
    its prompt billed) is load: its prompt's units, at its start."""
    queued = Request("q1", "a", 3.0, 4.0, output=0)
    gone = Request("q2", "b", 40.0, 40.0, output=0)
    extra = [
        {**quotacalc_record(queued), "outcome": "queue_timeout", "retry_after_s": 1},
        {**quotacalc_record(Request("q3", "b", 5.0, 6.5, output=0)), "outcome": "disconnect"},
        {**quotacalc_record(gone, units(policy, output=0)), "outcome": "disconnect"},
    ]
    log = write_quotacalc(tmp_path / "usage.jsonl", golden_requests(), [json.dumps(r) for r in extra])
    document = fleet_json(run_cli, log, "--plan", plan_path, "--window", "1,10,60")
    assert document["rows_read"] == 4 and document["rows_used"] == 4
    assert document["rows_rejected_total"] == 0
    usage = {t["tenant"]: t for t in document["tenants"]}
    assert usage["a"]["requests"] == 2 and usage["a"]["units"] == pytest.approx(2 * units(policy))
    assert usage["b"]["requests"] == 2
    assert usage["b"]["units"] == pytest.approx(units(policy) + units(policy, output=0))


def test_spark_runs_each_common_table_expression_once() -> None:
    """Spark plans every reference to a common table expression anew (the aggregation as one statement held 159
    scans of the log): each one read more than once is cached, unless it only filters one that is; each other one is
    a view read once; the final SELECT comes last."""
    from sqlglot import exp, parse_one

    from quotacalc.fleet import aggregate, engines, sources

    params = aggregate.AggregationParams((1.0, 10.0, 60.0), True, (), aggregate.TenantWeights(None, 1.0, 0.0, 0.1, 2.0))
    spec = sources.FORMATS["litellm"]
    sql = engines.spark_sql(spec, sources.field_map(spec, {}, None), {"metadata"}, aggregate.aggregation_sql(params))
    statements = engines.spark_statements(sql)
    tree = parse_one(sql, read="spark")
    names = [cte.alias_or_name for cte in tree.args["with_"].expressions]
    assert [name for name, _ in statements] == [*names, None]
    cached = {name for name, statement in statements if statement.startswith("CACHE TABLE")}
    assert {"ranked", "tenant_ids", "spread_cells", "tenant_levels", "fleet_levels"} <= cached
    assert not {"priced", "loaded", "classified", "events"} & cached  # filters of a cached one, or read once
    reads = [t.name for t in tree.find_all(exp.Table)]
    assert all(reads.count(name) <= 1 for name in set(names) - cached - {"priced", "loaded"})
    assert statements[-1][1].lstrip().upper().startswith("SELECT")


def test_rows_without_request_ids_are_never_duplicates(run_cli, tmp_path, plan_path, policy) -> None:
    """A log without request ids: two rows alike in every field are two requests (nothing says they are one), and
    each is priced; beside them, rows with ids are still checked for duplicates."""
    rows = [*golden_requests(), golden_requests()[0], golden_requests()[0]]
    lines = ["id,team,ts,done,in,out"] + [
        f"{'' if r is rows[-1] or r is rows[-2] else r.request_id},{r.tenant},{rfc3339(r.start_s)},"
        f"{rfc3339(r.end_s)},{r.prompt},{r.output}"
        for r in rows
    ]
    lines.append(f"r2,a,{rfc3339(20.0)},{rfc3339(21.0)},1000,100")  # r2 again, by its id
    path = tmp_path / "log.csv"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    mapping = "request_id=id,tenant=team,start=ts,end=done,prompt_tokens=in,output_tokens=out"
    document = fleet_json(
        run_cli, path, "--format", "csv", "--map", mapping, "--plan", plan_path, "--max-bad-rows", "0.5"
    )
    assert document["rows_read"] == 6 and document["rows_used"] == 5
    assert document["rows_rejected"]["duplicate_request_id"] == 1 and document["rows_rejected_total"] == 1
    a = next(t for t in document["tenants"] if t["tenant"] == "a")
    assert a["requests"] == 4 and a["units"] == pytest.approx(4 * units(policy))


def test_the_progress_bar_shows_on_a_terminal_once_a_run_takes_a_second(monkeypatch) -> None:
    """Runs under a second, and any run whose stderr is not a terminal (a pipe, CI), show no bar."""
    import io

    from quotacalc.cli import fleet as fleet_cli

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    now = [100.0]
    monkeypatch.setattr(fleet_cli.time, "monotonic", lambda: now[0])
    for is_terminal, seconds, shown in ((True, 0.5, False), (True, 1.5, True), (False, 5.0, False)):
        stderr = Terminal() if is_terminal else io.StringIO()
        monkeypatch.setattr(fleet_cli.sys, "stderr", stderr)
        bar = fleet_cli._Progress(enabled=True)
        now[0] += seconds
        bar(40.0)
        bar(100.0)
        bar.close()
        assert ("aggregating" in stderr.getvalue()) is shown, (is_terminal, seconds)


def test_litellm_response_cache_hits_are_no_load(run_cli, tmp_path, plan_path, policy) -> None:
    """A spend-log row with cache_hit "True" was answered from LiteLLM's own cache: its tokens are the cached
    response's, and no engine served it. Left out (not a bad row): the golden figures stand."""
    hit = Request("h1", "a", 20.2, 20.4, cache_hit=True)
    export = write_litellm_csv(tmp_path / "spendlogs.csv", [*golden_requests(), hit])
    document = fleet_json(run_cli, export, "--format", "litellm", "--plan", plan_path, "--reversal-replicas", "0.05")
    assert_golden_spread(document, units(policy))
    assert document["rows_read"] == 3 and document["rows_rejected_total"] == 0


def _platform_with_ratio(tmp_path, pool_line: str) -> Path:
    """The shipped platform plan (pools shared, long and acme-dedicated) with a measured ratio of 1.5."""
    example = Path(__file__).resolve().parent.parent / "examples" / "platform.yaml"
    plan = tmp_path / "platform.yaml"
    text = example.read_text(encoding="utf-8").replace("model: models/", f"model: {example.parent}/models/")
    plan.write_text(
        text + f"oversubscription:\n  ratio: 1.5\n  source: measured by hand for the test\n{pool_line}",
        encoding="utf-8",
    )
    return plan


def test_a_ratio_raises_only_the_pool_it_was_measured_on_and_never_a_dedicated_one(run_cli, tmp_path) -> None:
    """Tenants that do not peak together on one pool say nothing of another's, and a pool of one dedicated tenant
    shares its peak with no one: check raises only the measured pool's capacity, and size divides only the
    replicas of the shared tenants loading it."""
    for pool_line, raised in (("  pool: shared\n", {"shared"}), ("", {"shared", "long", "acme-dedicated"})):
        plan = _platform_with_ratio(tmp_path, pool_line)
        code, out, err = run_cli("size", plan, "--json")
        assert code == 0, err
        document = json.loads(out)
        rows = document["tenants"]
        divided = math.fsum(r["replicas"] for r in rows if r["placement"] == "shared" and r["load_pool"] in raised)
        rest = math.fsum(r["replicas"] for r in rows) - divided
        assert rest > 0  # acme's dedicated replicas, at least, count one for one
        assert document["totals"]["replicas_at_measured_peak"] == pytest.approx(divided / 1.5 + rest)
        code, out, err = run_cli("check", plan, "--json")
        assert code in (0, 1), err
        findings = json.loads(out)["findings"]
        ratios = {
            f["subject"].removeprefix("pools."): f["figures"]["ratio"]
            for f in findings
            if f["code"] in ("capacity", "oversold")
        }
        assert ratios["acme-dedicated"] == 1.0
        # a pool is raised where every tenant loading it is shared and the ratio is of that pool (or of none)
        loaded = {r["load_pool"] for r in rows if r["placement"] == "shared"}
        assert {name for name, ratio in ratios.items() if ratio == 1.5} == raised & loaded


def test_a_ratio_naming_a_pool_the_plan_lacks_is_one_line(run_cli, tmp_path) -> None:
    plan = _platform_with_ratio(tmp_path, "  pool: nowhere\n")
    code, _out, err = run_cli("check", plan)
    assert code != 0
    (line,) = err.strip().splitlines()
    assert "oversubscription.pool" in line and "nowhere" in line and "shared" in line


def test_units_are_spread_from_the_dispatch_to_the_engine_not_the_arrival(run_cli, tmp_path, plan_path, policy) -> None:
    """The plugin's records say when a request arrived (``start``) and when it went to the engine after its wait in
    the fair queue (``dispatched``): the wait loads no engine. The golden requests, each arrived 3 s before its
    dispatch at the golden start, give the golden figures; spread from their arrivals a's r2 would hold U/4 a
    second over [17, 21) and a's 1 s peak would be U/4 + ..., not U."""
    lines = []
    for request in golden_requests():
        record = quotacalc_record(request)
        lines.append(json.dumps({**record, "start": rfc3339(request.start_s - 3.0), "dispatched": record["start"]}))
    log = tmp_path / "usage.jsonl"
    log.write_text("\n".join(lines) + "\n", encoding="utf-8")
    document = fleet_json(run_cli, log, "--plan", plan_path, "--window", "1,10,60", "--reversal-replicas", "0.05")
    assert_golden_spread(document, units(policy))
    assert document["rows_used"] == 3 and document["rows_rejected_total"] == 0
    # A record whose dispatch is null (or absent, as before the key) is spread from its arrival.
    record = {**quotacalc_record(Request("n1", "a", 20.0, 21.0)), "dispatched": None}
    log.write_text(json.dumps(record) + "\n", encoding="utf-8")
    one = window(fleet_json(run_cli, log, "--plan", plan_path, "--window", "1"), 1)
    assert tenant(one, "a")["peak_units_per_s"] == pytest.approx(units(policy))
