"""``quotacalc fleet --engine spark``: the same aggregation, transpiled to Spark SQL, on PySpark in local mode
(Java 17), gives the figures DuckDB gives on the same LiteLLM_SpendLogs export. One session for the module:
starting Spark takes seconds."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

pytest.importorskip("duckdb")
pytest.importorskip("sqlglot")
pytest.importorskip("pyspark")
if shutil.which("java") is None:
    pytest.skip("PySpark needs Java (17)", allow_module_level=True)

from tests.fleet_logs import (
    PLAN,
    T0,
    Request,
    assert_same,
    envoy_record,
    figures,
    golden_requests,
    quotacalc_record,
    rfc3339,
    write_litellm_csv,
)

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module", autouse=True)
def spark_session():
    from quotacalc.fleet.engines import spark_session as start

    session = start("local[2]")
    yield session
    session.stop()


def test_spark_gives_duckdbs_figures_on_the_same_export(run_cli, tmp_path) -> None:
    plan = tmp_path / "plan.yaml"
    plan.write_text(PLAN, encoding="utf-8")
    requests = [*golden_requests(), Request("c1", "b", 100.0, 100.0, cached=400), Request("r1", "a", 0.0, 10.0)]
    requests.append(Request("h1", "a", 20.2, 20.4, cache_hit=True))  # LiteLLM's response cache: no load
    export = write_litellm_csv(tmp_path / "spendlogs.csv", requests)
    common = ("--format", "litellm", "--plan", plan, "--window", "1,10,60", "--json", "--max-bad-rows", "0.5")
    code, out, err = run_cli("fleet", export, *common, "--engine", "spark")
    assert code == 0, err
    on_spark = json.loads(out)
    code, out, err = run_cli("fleet", export, *common)
    assert code == 0, err
    on_duckdb = json.loads(out)
    assert_same(figures(on_spark), figures(on_duckdb))
    assert on_spark["engine"] == "spark"
    assert on_spark["rows_rejected"]["duplicate_request_id"] == 1
    assert on_spark["oversubscription_ratio"]["60"] == pytest.approx(1.0)


def _quotacalc_log(tmp_path: Path) -> tuple[Path, tuple[str, ...]]:
    requests = [*golden_requests(), Request("c1", "b", 100.0, 100.0, cached=400), Request("r1", "a", 0.0, 10.0)]
    bad = ["{not json", json.dumps({**quotacalc_record(Request("n1", None, 3.0, 4.0))}), "", "[1, 2]"]
    lines = [json.dumps(quotacalc_record(r)) for r in requests] + bad
    lines.append(json.dumps({**quotacalc_record(Request("x1", "b", 30.0, 31.0)), "output_tokens": 1.5}))
    lines.append(json.dumps({**quotacalc_record(Request("x2", "b", 30.0, 31.0)), "start": "yesterday"}))
    lines.append(
        json.dumps({k: v for k, v in quotacalc_record(Request("x3", "a", 40.0, 52.5)).items() if k != "cached_tokens"})
    )
    # A request the enforcement plugin refused (its record carries the status): no load, on either engine.
    lines.append(json.dumps({**quotacalc_record(Request("z1", "a", 5.0, 6.0)), "status": 429}))
    # One that waited in the queue past its bound (no status, no output, nothing billed): no load either; one whose
    # client left once the engine had it (no output, its prompt billed): load.
    lines.append(json.dumps({**quotacalc_record(Request("z2", "b", 7.0, 8.0, output=0)), "outcome": "queue_timeout"}))
    lines.append(
        json.dumps({**quotacalc_record(Request("z3", "b", 9.0, 9.5, output=0), 120.0), "outcome": "disconnect"})
    )
    # Dispatched to the engine 3 s after it arrived: spread from the dispatch, on either engine; a null dispatch is
    # spread from the arrival.
    waited = quotacalc_record(Request("w1", "a", 60.0, 64.0))
    lines.append(json.dumps({**waited, "start": rfc3339(57.0), "dispatched": waited["start"]}))
    lines.append(json.dumps({**quotacalc_record(Request("w2", "b", 61.0, 62.0)), "dispatched": None}))
    path = tmp_path / "usage.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path, ("--format", "quotacalc", "--max-bad-rows", "0.9")


def _envoy_log(tmp_path: Path) -> tuple[Path, tuple[str, ...]]:
    requests = [*golden_requests(), Request("e4", "b", 12.25, 14.0, output=7)]
    path = tmp_path / "access.log"
    path.write_text("".join(json.dumps(envoy_record(r)) + "\n" for r in requests), encoding="utf-8")
    return path, ("--format", "envoy")


def _openai_pages(tmp_path: Path, one_a_line: bool) -> tuple[Path, tuple[str, ...]]:
    start = int(T0.timestamp())

    def page(begin: int, results: list[dict]) -> dict:
        bucket = {"object": "bucket", "start_time": start + begin, "end_time": start + begin + 60, "results": results}
        return {"object": "page", "data": [bucket], "has_more": False, "next_page": None}

    a = {"project_id": "a", "input_tokens": 5000, "input_cached_tokens": 1000, "output_tokens": 500}
    b = {"project_id": "b", "input_tokens": 10000, "output_tokens": 1000, "num_model_requests": 10, "model": None}
    pages = [page(0, [{**a, "num_model_requests": 5}]), page(60, [b, {**a, "num_model_requests": 2}])]
    path = tmp_path / "usage.json"
    if one_a_line:
        path.write_text("".join(json.dumps(p) + "\n" for p in pages), encoding="utf-8")
    else:
        path.write_text(
            json.dumps({**pages[0], "data": pages[0]["data"] + pages[1]["data"]}, indent=2), encoding="utf-8"
        )
    return path, ("--format", "openai")


def _generic_csv(tmp_path: Path) -> tuple[Path, tuple[str, ...]]:
    rows = [*golden_requests(), Request("g4", "b", 2.5, 7.75, prompt=3000, cached=1000)]
    lines = ["team,ts,done,in,hit,out"] + [
        f"{r.tenant},{rfc3339(r.start_s)},{rfc3339(r.end_s)},{r.prompt},{r.cached},{r.output}" for r in rows
    ]
    lines.append("c,not a time,,12,0,3")
    path = tmp_path / "log.csv"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    mapping = "tenant=team,start=ts,end=done,prompt_tokens=in,cached_tokens=hit,output_tokens=out"
    return path, ("--format", "csv", "--map", mapping, "--max-bad-rows", "0.5")


LOGS = {
    "quotacalc": _quotacalc_log,
    "envoy": _envoy_log,
    "openai-pretty": lambda tmp_path: _openai_pages(tmp_path, one_a_line=False),
    "openai-lines": lambda tmp_path: _openai_pages(tmp_path, one_a_line=True),
    "csv": _generic_csv,
}


@pytest.mark.parametrize("name", list(LOGS))
def test_spark_reads_every_format_as_duckdb_does(run_cli, tmp_path, name) -> None:
    plan = tmp_path / "plan.yaml"
    plan.write_text(PLAN, encoding="utf-8")
    log, options = LOGS[name](tmp_path)
    windows = "60,120" if name.startswith("openai") else "1,10,60"
    common = (*options, "--plan", plan, "--window", windows, "--json")
    code, out, err = run_cli("fleet", log, *common)
    assert code == 0, err
    on_duckdb = json.loads(out)
    code, out, err = run_cli("fleet", log, *common, "--engine", "spark")
    assert code == 0, err
    on_spark = json.loads(out)
    assert on_spark["engine"] == "spark"
    assert on_duckdb["rows_used"] >= 3
    assert any(w["fleet_peak_units_per_s"] > 0 for w in on_duckdb["windows"])
    assert_same(figures(on_spark), figures(on_duckdb))
