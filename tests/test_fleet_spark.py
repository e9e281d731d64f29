"""``quotacalc fleet --engine spark``: the same aggregation, transpiled to Spark SQL, on PySpark in local mode
(Java 17), gives the figures DuckDB gives on the same LiteLLM_SpendLogs export. One session for the module:
starting Spark takes seconds."""

from __future__ import annotations

import json
import shutil

import pytest

pytest.importorskip("duckdb")
pytest.importorskip("sqlglot")
pytest.importorskip("pyspark")
if shutil.which("java") is None:
    pytest.skip("PySpark needs Java (17)", allow_module_level=True)

from tests.fleet_logs import PLAN, Request, assert_same, figures, golden_requests, write_litellm_csv

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


def test_spark_refuses_a_format_it_does_not_read(run_cli, tmp_path) -> None:
    plan = tmp_path / "plan.yaml"
    plan.write_text(PLAN, encoding="utf-8")
    log = tmp_path / "usage.jsonl"
    log.write_text("{}\n")
    code, _, err = run_cli("fleet", log, "--plan", plan, "--engine", "spark")
    assert code == 1
    assert "--engine spark reads the litellm format (CSV or Parquet), not quotacalc" in err
