"""The one aggregation: canonical request rows in, per-window peaks and p99s of every tenant and of the fleet out.

Written once, in DuckDB's SQL, and transpiled with SQLGlot to Postgres and Spark SQL, so the three engines run
the same query and give the same figures on the same rows. It reads a relation named ``fleet_requests`` with
the canonical columns (``CANONICAL_COLUMNS``), which each source format provides (``sources``).

How a request loads a window, without one row per request and window: a request spread over its duration
carries ``rate = units / (end − start)`` units/s. In the windows it covers whole it adds ``rate``; in its first
and last windows it adds the part of its units that falls inside them. So each request gives at most three
rows per window size: its first window's part; its last window's part with ``−rate``; ``+rate`` at the window after
its first (the rate rows only where a window lies whole between its first and last). A running sum of the rate changes over each tenant's windows (and the fleet's) gives the rate every window holds
whole; the windows between two that carry rows hold that rate unchanged. The work grows with the requests, not
with their durations or the number of windows.

A window that is a whole number ``m`` of the finest window (windows align at time 0, so each of its windows is
``m`` whole finest windows) is not spread again: its cells come from those of the longest window it is a
multiple of (10 s from 1 s, 60 s from 10 s), each mapped to the coarser window that holds it. A cell's units
stay in that window; a rate that starts inside it adds, in that window, the part of the window after its start,
and holds from the next window on. The sums are those of spreading every request over the coarser windows (the
same units in each window); only the sparse rows that carry them differ. A window that is not a multiple of the
finest (7 s beside 10 s) is spread from the requests.

A request counted at its start (``--attribution start``, or a
log without end times) puts all its units in the window of its start.

A duplicate request id is found by numbering the rows of each id. Rows that cannot be duplicates (no id, or already
bad) are numbered in partitions of their start time, not all in one: on Spark one partition is one task, which
would sort a whole log without ids alone.

The weights (W, the cached-prompt weight, the prompt-length charge) are not derived here: the caller passes each
tenant's ``UnitWeights`` from the canonical policy, and they enter the query as literals. The arithmetic is
``UnitWeights.request_units``, in SQL; a row that stands for several requests (a usage bucket) is charged as
that many requests of its mean prompt.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

#: The columns every source gives the aggregation, with their SQL types (DuckDB's spelling).
CANONICAL_COLUMNS: tuple[tuple[str, str], ...] = (
    ("request_id", "VARCHAR"),  # NULL where the log has no request id: such rows are never duplicates
    ("tenant", "VARCHAR"),
    ("start_s", "DOUBLE"),  # seconds since the Unix epoch, UTC; NULL where the time does not parse
    ("first_token_s", "DOUBLE"),  # NULL where the log has none
    ("end_s", "DOUBLE"),  # the start where the log has no end or duration
    ("prompt_tokens", "DOUBLE"),  # NULL where the count does not parse as a number
    ("cached_tokens", "DOUBLE"),
    ("output_tokens", "DOUBLE"),
    ("max_tokens", "DOUBLE"),  # the output the request asked for; NULL where the log does not say
    ("malformed", "BOOLEAN"),  # a line that is not a JSON object (line formats only)
    ("requests", "DOUBLE"),  # requests the row stands for: 1, or a usage bucket's count (token counts are its sums)
)

#: Why a row is not used, in the order the checks run (a row is counted under the first that applies).
REJECT_REASONS: tuple[str, ...] = (
    "malformed_record",
    "missing_tenant",
    "unparsable_time",
    "end_before_start",
    "time_out_of_order",
    "negative_tokens",
    "non_integer_tokens",
    "cached_above_prompt",
    "duplicate_request_id",
)

#: The nearest-rank percentile reported beside each peak.
PERCENTILE = 0.99


@dataclass(frozen=True)
class TenantWeights:
    """A tenant's unit weights on the pool measured, and which of its prompts that pool serves.

    ``prompt_above``/``prompt_at_most``: the pool serves prompts of more than ``prompt_above`` and at most
    ``prompt_at_most`` tokens (None: no bound); the tenant's other requests load another pool."""

    tenant: str | None
    prompt: float
    prompt_per_prompt_token: float
    cached_prompt: float
    output: float
    prompt_above: float | None = None
    prompt_at_most: float | None = None


@dataclass(frozen=True)
class AggregationParams:
    """What the query needs besides the rows."""

    windows_s: tuple[float, ...]
    spread: bool
    #: Tenants of the plan; a tenant in the log but not here is charged ``default``.
    tenants: tuple[TenantWeights, ...]
    default: TenantWeights
    #: The window whose load over time is returned too (for --plot); None: no series.
    series_window_s: float | None = None


def _number(value: float | None) -> str:
    if value is None:
        return "CAST(NULL AS DOUBLE)"
    if not math.isfinite(value):
        raise ValueError(f"not a finite number: {value}")
    return f"CAST({float(value)!r} AS DOUBLE)"


def _text(value: str | None) -> str:
    if value is None:
        return "CAST(NULL AS VARCHAR)"
    return "'" + value.replace("'", "''") + "'"


def _multiple(window_s: float, finest_s: float) -> float | None:
    """How many of the finest windows make ``window_s``, where it is a whole number of them (at least two)."""
    count = round(window_s / finest_s)
    return float(count) if count >= 2 and count * finest_s == window_s else None


def _nested_cells(windows_s: tuple[float, ...], finest_index: int) -> tuple[str, dict[int, str]]:
    """The common table expressions that sum each window that is a whole multiple of the finest from the cells of
    the longest window it is a multiple of (10 s from 1 s, 60 s from 10 s), and for each such window the SELECT of
    its cells within the period (a rate that ends in the period's last window changes after it: no such row).

    A cell's units stay in the coarser window that holds it; a rate change inside a coarser window adds, there, the
    rate over the part of the window after it, and changes the rate from the next window on."""
    finest = windows_s[finest_index]
    nested = sorted(
        (index for index, w in enumerate(windows_s) if _multiple(w, finest) is not None), key=lambda i: windows_s[i]
    )
    ctes: list[str] = []
    cells: dict[int, str] = {}
    for position, index in enumerate(nested):
        window_s = windows_s[index]
        bases = [b for b in nested[:position] if _multiple(window_s, windows_s[b]) is not None]
        base = bases[-1] if bases else finest_index
        source = f"nested_{base}" if bases else f"(SELECT * FROM spread_cells WHERE w = {finest_index})"
        m = _number(_multiple(window_s, windows_s[base]))
        ctes.append(f"""
nested_{index} AS MATERIALIZED (
  SELECT {index} AS w, tenant_id, k, {_number(window_s)} AS window_s, SUM(point_units) AS point_units,
    SUM(rate_change) AS rate_change
  FROM (
    SELECT s.tenant_id, s.kn + p.part AS k,
      CASE
        WHEN p.part = 1 THEN CAST(0 AS DOUBLE)
        WHEN s.k = s.kn * {m} THEN s.point_units
        ELSE s.point_units + s.rate_change * (((s.kn + 1) * {m} - s.k) * {_number(windows_s[base])})
      END AS point_units,
      CASE WHEN p.part = 1 OR s.k = s.kn * {m} THEN s.rate_change ELSE CAST(0 AS DOUBLE) END AS rate_change
    FROM (
      SELECT c.tenant_id, c.k, c.point_units, c.rate_change, CAST(FLOOR(CAST(c.k AS DOUBLE) / {m}) AS BIGINT) AS kn
      FROM {source} AS c
    ) AS s CROSS JOIN fleet_parts AS p
    WHERE p.part = 0 OR (p.part = 1 AND s.k <> s.kn * {m} AND s.rate_change <> 0)
  ) AS x
  GROUP BY tenant_id, k
),""")
        last = f"CAST(FLOOR(CAST(f.last_k AS DOUBLE) / {_number(_multiple(window_s, finest))}) AS BIGINT)"
        cells[index] = (
            f"SELECT n.w, n.tenant_id, n.k, n.window_s, n.point_units, n.rate_change FROM nested_{index} AS n "
            f"CROSS JOIN finest_last AS f WHERE n.k <= {last}"
        )
    return "".join(ctes), cells


def _weights_row(weights: TenantWeights) -> str:
    values = (
        _text(weights.tenant),
        _number(weights.prompt),
        _number(weights.prompt_per_prompt_token),
        _number(weights.cached_prompt),
        _number(weights.output),
        _number(weights.prompt_above),
        _number(weights.prompt_at_most),
    )
    return "(" + ", ".join(values) + ")"


def aggregation_sql(params: AggregationParams) -> str:
    """The query, in DuckDB's dialect, over a relation ``fleet_requests``."""
    if not params.windows_s:
        raise ValueError("at least one window")
    # The default row (tenant NULL) never matches the join: it gives the columns their types when the plan has none.
    weights = ",\n    ".join(_weights_row(w) for w in (*params.tenants, TenantWeights(None, 0, 0, 0, 0)))
    windows = ", ".join(f"({index}, {_number(w)})" for index, w in enumerate(params.windows_s))
    finest = min(params.windows_s)
    finest_index = params.windows_s.index(finest)
    nested_ctes, nested_cells = _nested_cells(params.windows_s, finest_index)
    # Spread over its own windows: the finest, and any not a whole multiple of it. The NULL row types the columns.
    spread_windows = ", ".join(
        [f"({index}, {_number(w)})" for index, w in enumerate(params.windows_s) if index not in nested_cells]
        + [f"(CAST(NULL AS INTEGER), {_number(None)})"]
    )
    nested_union = "".join(f"\n  UNION ALL\n  {cells}" for cells in nested_cells.values())
    d = params.default

    def weight(column: str, value: float | None) -> str:
        return f"COALESCE(w.{column}, {_number(value)})"

    # A tenant of the plan has its own routing bounds (NULL: none); one not in it, the default's.
    above = f"CASE WHEN w.tenant IS NULL THEN {_number(d.prompt_above)} ELSE w.prompt_above END"
    at_most = f"CASE WHEN w.tenant IS NULL THEN {_number(d.prompt_at_most)} ELSE w.prompt_at_most END"
    end = "c.end_s" if params.spread else "c.start_s"
    series = ""
    if params.series_window_s is not None:
        sw = _number(params.series_window_s)
        series = f"""
UNION ALL
SELECT 'series', l.window_s, i.tenant, CAST(NULL AS VARCHAR), CAST(l.k AS DOUBLE),
       l.rate_after + l.point_units / l.window_s, l.rate_after, CAST(l.next_k AS DOUBLE), CAST(NULL AS DOUBLE)
FROM tenant_levels AS l JOIN tenant_ids AS i ON i.tenant_id = l.tenant_id WHERE l.window_s = {sw}
UNION ALL
SELECT 'series', window_s, CAST(NULL AS VARCHAR), CAST(NULL AS VARCHAR), CAST(k AS DOUBLE),
       rate_after + point_units / window_s, rate_after, CAST(next_k AS DOUBLE), CAST(NULL AS DOUBLE)
FROM fleet_levels WHERE window_s = {sw}"""
    return f"""WITH
fleet_weights AS (
  SELECT * FROM (VALUES
    {weights}
  ) AS t(tenant, w_prompt, w_prompt_per_prompt_token, w_cached, w_output, prompt_above, prompt_at_most)
),
fleet_windows AS (SELECT * FROM (VALUES {windows}) AS t(w, window_s)),
spread_windows AS (SELECT * FROM (VALUES {spread_windows}) AS t(w, window_s) WHERE w IS NOT NULL),
fleet_parts AS (SELECT * FROM (VALUES (0), (1), (2)) AS t(part)),
classified AS (
  SELECT r.*, CASE
    WHEN r.malformed THEN 'malformed_record'
    WHEN r.tenant IS NULL OR TRIM(r.tenant) = '' THEN 'missing_tenant'
    WHEN r.start_s IS NULL OR r.end_s IS NULL THEN 'unparsable_time'
    WHEN r.end_s < r.start_s THEN 'end_before_start'
    WHEN r.first_token_s IS NOT NULL AND (r.first_token_s < r.start_s OR r.first_token_s > r.end_s)
      THEN 'time_out_of_order'
    WHEN r.prompt_tokens < 0 OR r.cached_tokens < 0 OR r.output_tokens < 0 OR r.max_tokens < 0 THEN 'negative_tokens'
    WHEN r.prompt_tokens IS NULL OR r.cached_tokens IS NULL OR r.output_tokens IS NULL
      OR r.prompt_tokens <> FLOOR(r.prompt_tokens) OR r.cached_tokens <> FLOOR(r.cached_tokens)
      OR r.output_tokens <> FLOOR(r.output_tokens) OR r.requests IS NULL OR r.requests < 1
      OR r.requests <> FLOOR(r.requests) THEN 'non_integer_tokens'
    WHEN r.cached_tokens > r.prompt_tokens THEN 'cached_above_prompt'
    ELSE CAST(NULL AS VARCHAR)
  END AS problem
  FROM fleet_requests AS r
),
weighed AS (
  SELECT
    c.request_id,
    c.problem,
    c.tenant,
    c.start_s,
    c.end_s AS logged_end_s,
    {end} AS end_s,
    c.prompt_tokens,
    c.cached_tokens,
    c.output_tokens,
    c.max_tokens,
    c.requests,
    GREATEST(c.prompt_tokens - c.cached_tokens, 0)
      * ({weight("w_prompt", d.prompt)} + {weight("w_prompt_per_prompt_token", d.prompt_per_prompt_token)} * c.prompt_tokens / c.requests)
      + c.cached_tokens * {weight("w_cached", d.cached_prompt)}
      + c.output_tokens * {weight("w_output", d.output)} AS units,
    CASE WHEN ({above}) IS NOT NULL AND c.prompt_tokens <= ({above}) THEN FALSE
         WHEN ({at_most}) IS NOT NULL AND c.prompt_tokens > ({at_most}) THEN FALSE
         ELSE TRUE END AS in_pool
  FROM classified AS c
  LEFT JOIN fleet_weights AS w ON w.tenant = c.tenant
),
ranked AS MATERIALIZED (
  SELECT c.tenant, c.start_s, c.end_s, c.output_tokens, c.max_tokens, c.requests, c.units, c.in_pool,
    COALESCE(c.problem, CASE WHEN c.request_id IS NOT NULL AND ROW_NUMBER() OVER (
      PARTITION BY CASE WHEN c.problem IS NULL THEN c.request_id END,
        CASE WHEN c.problem IS NOT NULL OR c.request_id IS NULL THEN c.start_s END
      ORDER BY c.start_s, c.logged_end_s, c.tenant, c.prompt_tokens, c.cached_tokens, c.output_tokens
    ) > 1 THEN 'duplicate_request_id' END) AS reason
  FROM weighed AS c
),
priced AS (SELECT * FROM ranked WHERE reason IS NULL),
loaded AS (SELECT * FROM priced WHERE in_pool),
tenant_ids AS MATERIALIZED (
  SELECT tenant, ROW_NUMBER() OVER (ORDER BY tenant) AS tenant_id FROM (SELECT DISTINCT tenant FROM loaded) AS t
),
events AS (
  SELECT i.tenant_id, win.w, win.window_s, l.start_s, l.end_s, l.units,
    CAST(FLOOR(l.start_s / win.window_s) AS BIGINT) AS ks,
    CAST(FLOOR(l.end_s / win.window_s) AS BIGINT) AS ke
  FROM loaded AS l JOIN tenant_ids AS i ON i.tenant = l.tenant CROSS JOIN spread_windows AS win
),
pieces AS (
  SELECT e.tenant_id, e.w, e.window_s,
    CASE p.part WHEN 0 THEN e.ks WHEN 1 THEN e.ke ELSE e.ks + 1 END AS k,
    CASE
      WHEN p.part = 0 AND e.ks = e.ke THEN e.units
      WHEN p.part = 0 THEN e.units / NULLIF(e.end_s - e.start_s, 0) * ((e.ks + 1) * e.window_s - e.start_s)
      WHEN p.part = 1 THEN e.units / NULLIF(e.end_s - e.start_s, 0) * (e.end_s - e.ke * e.window_s)
      ELSE CAST(0 AS DOUBLE)
    END AS point_units,
    CASE
      WHEN p.part = 1 AND e.ke > e.ks + 1 THEN -(e.units / NULLIF(e.end_s - e.start_s, 0))
      WHEN p.part = 2 THEN e.units / NULLIF(e.end_s - e.start_s, 0)
      ELSE CAST(0 AS DOUBLE)
    END AS rate_change
  FROM events AS e CROSS JOIN fleet_parts AS p
  WHERE p.part = 0 OR (p.part = 1 AND e.ks < e.ke) OR (p.part = 2 AND e.ks + 1 < e.ke)
),
spread_cells AS MATERIALIZED (
  SELECT w, tenant_id, k, MAX(window_s) AS window_s, SUM(point_units) AS point_units,
    SUM(rate_change) AS rate_change
  FROM pieces GROUP BY w, tenant_id, k
),
finest_last AS (SELECT MAX(k) AS last_k FROM spread_cells WHERE w = {finest_index}),{nested_ctes}
tenant_cells AS MATERIALIZED (
  SELECT * FROM spread_cells{nested_union}
),
period AS MATERIALIZED (
  SELECT w, MIN(k) AS first_k, MAX(k) AS last_k, MAX(k) - MIN(k) + 1 AS windows_total
  FROM tenant_cells GROUP BY w
),
tenant_levels AS MATERIALIZED (
  SELECT w, tenant_id, k, window_s, point_units,
    SUM(rate_change) OVER (
      PARTITION BY w, tenant_id ORDER BY k ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW
    ) AS rate_after,
    LEAD(k) OVER (PARTITION BY w, tenant_id ORDER BY k) AS next_k
  FROM tenant_cells
),
tenant_all AS (
  SELECT w, tenant_id, rate_after + point_units / window_s AS units_per_s, CAST(1 AS BIGINT) AS windows
  FROM tenant_levels
  UNION ALL
  SELECT w, tenant_id, rate_after, next_k - k - 1 FROM tenant_levels WHERE next_k > k + 1
  UNION ALL
  SELECT l.w, l.tenant_id, CAST(0 AS DOUBLE),
    MAX(p.windows_total) - COUNT(*) - SUM(CASE WHEN l.next_k > l.k + 1 THEN l.next_k - l.k - 1 ELSE 0 END)
  FROM tenant_levels AS l JOIN period AS p ON p.w = l.w
  GROUP BY l.w, l.tenant_id
  HAVING MAX(p.windows_total) - COUNT(*) - SUM(CASE WHEN l.next_k > l.k + 1 THEN l.next_k - l.k - 1 ELSE 0 END) > 0
),
tenant_top AS (
  SELECT a.w, a.tenant_id, a.units_per_s, a.windows,
    ROW_NUMBER() OVER (PARTITION BY a.w, a.tenant_id ORDER BY a.units_per_s DESC) AS from_top
  FROM tenant_all AS a
),
tenant_ranked AS (
  SELECT t.w, t.tenant_id, t.units_per_s, p.windows_total,
    SUM(t.windows) OVER (
      PARTITION BY t.w, t.tenant_id ORDER BY t.units_per_s DESC ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW
    ) AS from_top_windows
  FROM tenant_top AS t JOIN period AS p ON p.w = t.w
  WHERE t.from_top <= p.windows_total - CEIL({PERCENTILE!r} * p.windows_total) + 1
),
tenant_stats AS (
  SELECT r.w, r.tenant_id, MAX(r.units_per_s) AS peak,
    MAX(CASE WHEN r.from_top_windows >= r.windows_total - CEIL({PERCENTILE!r} * r.windows_total) + 1
      THEN r.units_per_s END) AS p99
  FROM tenant_ranked AS r GROUP BY r.w, r.tenant_id
),
fleet_cells AS (
  SELECT w, k, MAX(window_s) AS window_s, SUM(point_units) AS point_units, SUM(rate_change) AS rate_change
  FROM tenant_cells GROUP BY w, k
),
fleet_levels AS MATERIALIZED (
  SELECT w, k, window_s, point_units,
    SUM(rate_change) OVER (PARTITION BY w ORDER BY k ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)
      AS rate_after,
    LEAD(k) OVER (PARTITION BY w ORDER BY k) AS next_k
  FROM fleet_cells
),
fleet_values AS (
  SELECT w, rate_after + point_units / window_s AS units_per_s, CAST(1 AS BIGINT) AS windows
  FROM fleet_levels
  UNION ALL
  SELECT w, rate_after, next_k - k - 1 FROM fleet_levels WHERE next_k > k + 1
),
fleet_all AS (
  SELECT w, units_per_s, windows FROM fleet_values
  UNION ALL
  SELECT v.w, CAST(0 AS DOUBLE), MAX(p.windows_total) - SUM(v.windows)
  FROM fleet_values AS v JOIN period AS p ON p.w = v.w
  GROUP BY v.w
  HAVING MAX(p.windows_total) - SUM(v.windows) > 0
),
fleet_ranked AS (
  SELECT a.w, a.units_per_s, p.windows_total, p.first_k,
    SUM(a.windows) OVER (
      PARTITION BY a.w ORDER BY a.units_per_s DESC ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW
    ) AS from_top_windows
  FROM fleet_all AS a JOIN period AS p ON p.w = a.w
),
fleet_stats AS (
  SELECT w, MAX(units_per_s) AS peak,
    MAX(CASE WHEN from_top_windows >= windows_total - CEIL({PERCENTILE!r} * windows_total) + 1
      THEN units_per_s END) AS p99,
    MAX(windows_total) AS windows_total, MAX(first_k) AS first_k
  FROM fleet_ranked GROUP BY w
)
SELECT 'rows' AS kind, CAST(NULL AS DOUBLE) AS window_s, CAST(NULL AS VARCHAR) AS tenant,
       reason AS label, CAST(COUNT(*) AS DOUBLE) AS a, CAST(NULL AS DOUBLE) AS b,
       CAST(NULL AS DOUBLE) AS c, CAST(NULL AS DOUBLE) AS d, CAST(NULL AS DOUBLE) AS e
FROM ranked GROUP BY reason
UNION ALL
SELECT 'other_pool', CAST(NULL AS DOUBLE), CAST(NULL AS VARCHAR), CAST(NULL AS VARCHAR), CAST(COUNT(*) AS DOUBLE),
       CAST(NULL AS DOUBLE), CAST(NULL AS DOUBLE), CAST(NULL AS DOUBLE), CAST(NULL AS DOUBLE)
FROM priced WHERE NOT in_pool
UNION ALL
SELECT 'usage', CAST(NULL AS DOUBLE), tenant, CAST(NULL AS VARCHAR), SUM(units), SUM(requests),
       SUM(CASE WHEN max_tokens IS NOT NULL THEN max_tokens END),
       SUM(CASE WHEN max_tokens IS NOT NULL THEN output_tokens END),
       CAST(SUM(CASE WHEN max_tokens IS NOT NULL THEN 1 ELSE 0 END) AS DOUBLE)
FROM loaded GROUP BY tenant
UNION ALL
SELECT 'period', CAST(NULL AS DOUBLE), CAST(NULL AS VARCHAR), CAST(NULL AS VARCHAR), MIN(start_s), MAX(end_s),
       CAST(NULL AS DOUBLE), CAST(NULL AS DOUBLE), CAST(NULL AS DOUBLE)
FROM loaded
UNION ALL
SELECT 'tenant', win.window_s, i.tenant, CAST(NULL AS VARCHAR), s.peak, s.p99, CAST(NULL AS DOUBLE),
       CAST(NULL AS DOUBLE), CAST(NULL AS DOUBLE)
FROM tenant_stats AS s JOIN tenant_ids AS i ON i.tenant_id = s.tenant_id JOIN fleet_windows AS win ON win.w = s.w
UNION ALL
SELECT 'fleet', win.window_s, CAST(NULL AS VARCHAR), CAST(NULL AS VARCHAR), s.peak, s.p99,
       CAST(s.windows_total AS DOUBLE), CAST(s.first_k AS DOUBLE), CAST(NULL AS DOUBLE)
FROM fleet_stats AS s JOIN fleet_windows AS win ON win.w = s.w{series}
"""


#: Engines the query is written for, by SQLGlot's dialect name.
DIALECTS = ("duckdb", "postgres", "spark")


def transpile(sql: str, dialect: str) -> str:
    """``sql`` (DuckDB's dialect) in ``dialect``'s."""
    if dialect == "duckdb":
        return sql
    import sqlglot
    from sqlglot import exp

    tree = sqlglot.parse_one(sql, read="duckdb")
    if dialect == "spark":  # Spark SQL has no MATERIALIZED hint (it plans each reference; caching is the session's)
        for cte in tree.find_all(exp.CTE):
            cte.set("materialized", None)
    return tree.sql(dialect=dialect, pretty=True)


def with_source(source_sql: str, aggregation: str) -> str:
    """The aggregation over ``source_sql`` (a SELECT of the canonical columns, in the same dialect): the source
    becomes the first common table expression, ``fleet_requests``, so the whole runs as one statement."""
    body = aggregation.lstrip()
    if not body.upper().startswith("WITH"):
        raise ValueError("the aggregation starts with WITH")
    return f"WITH fleet_requests AS (\n{source_sql}\n),\n{body[4:].lstrip()}"
