"""Windows that are whole multiples of the finest are summed from its cells; the figures are those of spreading
every request over each window on its own (the general path, which a query of one window always takes)."""

from __future__ import annotations

import math

import pytest

from quotacalc.fleet.aggregate import AggregationParams, TenantWeights, aggregation_sql

duckdb = pytest.importorskip("duckdb")

#: Requests of three tenants over ten minutes, of 0 to 90 s (some of zero duration, some spanning many windows),
#: with a few repeated request ids; drawn from a fixed seed so a failure reproduces.
ROWS_SQL = """
CREATE TABLE fleet_requests AS
SELECT
  CASE WHEN i % 37 = 0 THEN 'dup-' || (i % 5) ELSE 'r-' || i END AS request_id,
  't' || (i % 3) AS tenant,
  1790812800 + 600 * r1 AS start_s,
  CAST(NULL AS DOUBLE) AS first_token_s,
  1790812800 + 600 * r1 + CASE WHEN i % 10 = 0 THEN 0 ELSE 90 * r2 * r2 END AS end_s,
  CAST(FLOOR(3000 * r3) AS DOUBLE) AS prompt_tokens,
  CAST(0 AS DOUBLE) AS cached_tokens,
  CAST(FLOOR(500 * r2) AS DOUBLE) AS output_tokens,
  CAST(NULL AS DOUBLE) AS max_tokens,
  FALSE AS malformed,
  CAST(1 AS DOUBLE) AS requests
FROM (SELECT i, hash(i, 1) / 18446744073709551616.0 AS r1, hash(i, 2) / 18446744073709551616.0 AS r2,
        hash(i, 3) / 18446744073709551616.0 AS r3 FROM range(3000) t(i))
"""

WEIGHTS = (TenantWeights("t1", 1.0, 0.001, 0.1, 4.0),)
DEFAULT = TenantWeights(None, 1.0, 0.0, 0.1, 3.0)


@pytest.fixture(scope="module")
def connection():
    con = duckdb.connect()
    con.execute(ROWS_SQL)
    yield con
    con.close()


def figures(connection, windows: tuple[float, ...], spread: bool, series: float | None = None) -> dict:
    """Each window's fleet and tenant rows, and the load of every window of the series, by key."""
    params = AggregationParams(windows, spread, WEIGHTS, DEFAULT, series_window_s=series)
    out: dict = {}
    for kind, window_s, tenant, _label, a, b, c, d, _e in connection.execute(aggregation_sql(params)).fetchall():
        if kind in ("tenant", "fleet"):
            out[(kind, window_s, tenant)] = (a, b, c, d)
        elif kind == "series":
            out[("series", tenant, int(a))] = b
            for k in range(int(a) + 1, int(d) if d is not None else int(a) + 1):
                out[("series", tenant, k)] = c
    return out


def assert_same(together: dict, alone: dict) -> None:
    assert together.keys() >= alone.keys()
    for key, value in alone.items():
        if key[0] == "series":
            continue
        assert _comparable(together[key]) == pytest.approx(_comparable(value), rel=1e-9, abs=1e-9, nan_ok=True), key


def _comparable(value):
    """A row with its NULLs (a window no request reached) as NaN, which approx (nan_ok) matches only to NaN
    (pytest 9.2 refuses None under a relative tolerance)."""
    if isinstance(value, (tuple, list)):
        return [float("nan") if item is None else item for item in value]
    return float("nan") if value is None else value


@pytest.mark.parametrize("spread", [True, False])
@pytest.mark.parametrize(
    "windows", [(1.0, 10.0, 60.0), (10.0, 1.0, 60.0), (0.5, 1.0, 2.5), (7.0, 10.0, 14.0), (1.0, 2.0, 6.0, 60.0, 4.0)]
)
def test_each_window_has_the_figures_it_has_alone(connection, windows, spread) -> None:
    together = figures(connection, windows, spread)
    for window_s in windows:
        alone = figures(connection, (window_s,), spread)
        assert any(key[1] == window_s for key in alone)
        assert_same(together, alone)


def test_a_nested_windows_series_is_its_load_alone(connection) -> None:
    """The load of every 60 s window (idle ones 0) is the same summed from 1 s cells as spread directly."""
    together = figures(connection, (1.0, 60.0), True, series=60.0)
    alone = figures(connection, (60.0,), True, series=60.0)
    keys = {key for key in (*together, *alone) if key[0] == "series"}
    assert len(keys) > 10
    for key in keys:
        assert math.isclose(together.get(key, 0.0), alone.get(key, 0.0), rel_tol=1e-9, abs_tol=1e-9), key
