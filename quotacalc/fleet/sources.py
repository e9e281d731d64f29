"""Source formats: which column or key of each log holds each canonical field, and the SELECT that turns the log
into the canonical request rows (``aggregate.CANONICAL_COLUMNS``) on each engine.

Every field is read as text and parsed by the engine, never by Python: a value that does not parse becomes NULL,
and the aggregation counts its row under a reason instead of failing the run. Times are RFC 3339 / ISO 8601 text
(a zone-less time is UTC) or seconds since the Unix epoch.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from quotacalc.errors import QuotacalcError, UsageError

#: Canonical fields a --map may name (besides those the aggregation derives).
FIELDS = (
    "request_id",
    "tenant",
    "start",
    "dispatched",
    "first_token",
    "end",
    "duration_ms",
    "prompt_tokens",
    "cached_tokens",
    "output_tokens",
    "max_tokens",
    "requests",
)

#: The LiteLLM proxy's spend-log table (litellm/proxy/schema.prisma, model LiteLLM_SpendLogs).
LITELLM_TABLE = "LiteLLM_SpendLogs"
#: Where LiteLLM keeps a request's cached prompt tokens inside the row's ``metadata`` JSON, tried in order
#: (spend_tracking_utils: usage_object.prompt_tokens_details.cached_tokens, copied to additional_usage_values).
LITELLM_CACHED_PATHS = (
    ("usage_object", "prompt_tokens_details", "cached_tokens"),
    ("additional_usage_values", "cache_read_input_tokens"),
)
#: The column that says LiteLLM answered from its own response cache ("True"): the tokens logged are the cached
#: response's, and no engine served the request, so such a row is no load and is left out, not a bad row.
LITELLM_CACHE_HIT = "cache_hit"
#: Where the request's max_tokens is, in ``proxy_server_request`` (the request body, when the proxy stores it).
LITELLM_MAX_TOKENS_PATHS = (("max_tokens",), ("max_completion_tokens",))


@dataclass(frozen=True)
class SourceFormat:
    """A log format: lines of JSON objects or a table (CSV, Parquet, a database table), and its default fields."""

    name: str
    kind: str  # "lines" or "table"
    defaults: dict[str, str] = field(default_factory=dict)
    required: tuple[str, ...] = ("tenant", "start", "prompt_tokens", "output_tokens")
    what: str = ""


#: The key quotacalc's enforcement plugin writes only on the record of a request it refused (401, 403, 400, 413,
#: 429, 503 before its queue; 429 after waiting in it past its bound): such a request never reached an engine, so its
#: prompt is no load; the records are left out.
REFUSAL_KEY = "status"
#: The units the plugin billed a request. It bills the prompt once a token came back or once the client ended a
#: request the engine had, so a record of no output token and nothing billed (a 429 after waiting in the queue, a
#: client gone while queued) never loaded an engine: left out too, not counted as a bad row.
DEBITED_KEY = "units_debited"


def _duckdb_no_load(record: str, output_key: str) -> str:
    """A quotacalc record of a request that never reached an engine (DuckDB; ``record``: the line's JSON)."""
    debited = f"TRY_CAST(json_extract_string({record}, '$.{DEBITED_KEY}') AS DOUBLE)"
    output = f"TRY_CAST(json_extract_string({record}, '{_json_path((output_key,))}') AS DOUBLE)"
    refused = f"json_extract({record}, '$.{REFUSAL_KEY}') IS NOT NULL"
    return f"({refused} OR COALESCE({debited} = 0 AND {output} = 0, FALSE))"


def _spark_no_load(line: str, output_key: str) -> str:
    """``_duckdb_no_load`` on Spark (``line``: the line's text)."""
    debited = f"try_cast(get_json_object({line}, '$.{DEBITED_KEY}') AS DOUBLE)"
    output = f"try_cast(get_json_object({line}, '$.{output_key}') AS DOUBLE)"
    refused = f"get_json_object({line}, '$.{REFUSAL_KEY}') IS NOT NULL"
    return f"({refused} OR COALESCE({debited} = 0 AND {output} = 0, FALSE))"


FORMATS: dict[str, SourceFormat] = {
    # quotacalc's usage records, one JSON object per line (docs/fleet.md lists the keys).
    "quotacalc": SourceFormat(
        "quotacalc",
        "lines",
        {
            "request_id": "request_id",
            "tenant": "tenant",
            "start": "start",
            "dispatched": "dispatched",
            "first_token": "first_token",
            "end": "end",
            "prompt_tokens": "prompt_tokens",
            "cached_tokens": "cached_tokens",
            "output_tokens": "output_tokens",
            "max_tokens": "max_tokens",
        },
        ("request_id", "tenant", "start", "end", "prompt_tokens", "output_tokens"),
        "quotacalc usage records",
    ),
    "litellm": SourceFormat(
        "litellm",
        "table",
        {
            "request_id": "request_id",
            "tenant": "team_id",
            "start": "startTime",
            "first_token": "completionStartTime",
            "end": "endTime",
            "prompt_tokens": "prompt_tokens",
            "output_tokens": "completion_tokens",
        },
        ("request_id", "tenant", "start", "end", "prompt_tokens", "output_tokens"),
        f"a {LITELLM_TABLE} export",
    ),
    # Envoy AI Gateway JSON access logs: the keys are the access-log format's (EnvoyProxy telemetry.accessLog);
    # these defaults name %START_TIME%, %DURATION% and the io.envoy.ai_gateway token metadata as keys of the same
    # names, and the tenant header as the plan's tenant_header. --map says otherwise.
    "envoy": SourceFormat(
        "envoy",
        "lines",
        {
            "request_id": "x-request-id",
            "start": "start_time",
            "duration_ms": "duration",
            "prompt_tokens": "llm_input_token",
            "cached_tokens": "llm_cached_input_token",
            "output_tokens": "llm_output_token",
        },
        ("tenant", "start", "prompt_tokens", "output_tokens"),
        "an Envoy AI Gateway JSON access log",
    ),
    "csv": SourceFormat("csv", "table", {}, ("tenant", "start", "prompt_tokens", "output_tokens"), "a CSV log"),
    # OpenAI's organization usage export: pages of /v1/organization/usage/completions, grouped by project_id (or
    # api_key_id, model). Each result is the sums over a bucket, spread over the bucket: the smallest window is it.
    "openai": SourceFormat(
        "openai",
        "pages",
        {
            "tenant": "project_id",
            "start": "start_time",
            "end": "end_time",
            "prompt_tokens": "input_tokens",
            "cached_tokens": "input_cached_tokens",
            "output_tokens": "output_tokens",
            "requests": "num_model_requests",
        },
        ("tenant", "start", "end", "prompt_tokens", "output_tokens", "requests"),
        "an OpenAI usage export (/v1/organization/usage/completions pages)",
    ),
}

#: Fields an OpenAI usage bucket holds itself; the rest are its results'.
_BUCKET_FIELDS = ("start", "end")


def parse_map(text: str | None) -> dict[str, str]:
    """``tenant=team_alias,start=ts`` -> {field: column}; names the bad pair."""
    mapping: dict[str, str] = {}
    for pair in (text or "").split(","):
        if not pair.strip():
            continue
        name, sep, column = pair.partition("=")
        name, column = name.strip(), column.strip()
        if not sep or not column:
            raise UsageError(f"'{pair.strip()}' is not FIELD=COLUMN", field="--map", fix="e.g. --map tenant=team_alias")
        if name not in FIELDS:
            raise UsageError(f"unknown field '{name}'", field="--map", fix=f"fields: {', '.join(FIELDS)}")
        mapping[name] = column
    return mapping


def field_map(source_format: SourceFormat, overrides: dict[str, str], tenant_header: str | None) -> dict[str, str]:
    """The format's defaults with --map on top; an Envoy log's tenant key defaults to the plan's tenant header."""
    fields = dict(source_format.defaults)
    if source_format.name == "envoy" and tenant_header:
        fields["tenant"] = tenant_header.lower()
    fields.update(overrides)
    missing = [name for name in source_format.required if name not in fields]
    if missing:
        raise UsageError(
            f"the {source_format.name} format needs a column for {', '.join(missing)}",
            field="--map",
            fix=f"e.g. --map {missing[0]}=COLUMN",
        )
    return fields


# --- checking a file against its format ------------------------------------------------------------------------


def _first_object(path: Path) -> dict | None:
    """The first non-blank line of a JSON-lines file as an object (None for an empty file)."""
    try:
        with path.open("rb") as handle:
            for number, raw in enumerate(handle, start=1):
                line = raw.decode("utf-8", errors="replace").strip()
                if not line:
                    continue
                try:
                    value = json.loads(line)
                except ValueError:
                    raise QuotacalcError(f"line {number} is not JSON: not a JSON-lines log", source=str(path)) from None
                if not isinstance(value, dict):
                    raise QuotacalcError(f"line {number} is not a JSON object", source=str(path))
                return value
    except OSError as error:
        raise QuotacalcError(f"cannot read: {error.strerror or error}", source=str(path)) from None
    return None


def check_lines(path: Path, source_format: SourceFormat, fields: dict[str, str]) -> None:
    """The first record has every key the format needs; else one line naming the file and the first key missing."""
    first = _first_object(path)
    if first is None:
        return
    for name in source_format.required:
        key = fields[name]
        if name == "end" and key not in first and "duration_ms" in fields and fields["duration_ms"] in first:
            continue
        if key not in first:
            raise QuotacalcError(
                f"not {source_format.what or source_format.name}: the first record has no key '{key}' ({name})",
                source=str(path),
                fix="name the format with --format, or map the key with --map",
            )


def check_pages(path: Path, source_format: SourceFormat, fields: dict[str, str]) -> None:
    """The first page has ``data``, its first bucket its times and ``results``, its first result every key."""
    try:
        with path.open("rb") as handle:
            text = handle.read().decode("utf-8", errors="replace")
    except OSError as error:
        raise QuotacalcError(f"cannot read: {error.strerror or error}", source=str(path)) from None
    decoder = json.JSONDecoder()
    try:
        page, _ = decoder.raw_decode(text.lstrip())
    except ValueError:
        raise QuotacalcError(f"not {source_format.what}: not JSON", source=str(path)) from None

    def missing(key: str, where: str) -> QuotacalcError:
        return QuotacalcError(
            f"not {source_format.what}: {where} has no key '{key}'",
            source=str(path),
            fix="export /v1/organization/usage/completions with group_by=project_id, or map the key with --map",
        )

    if not isinstance(page, dict) or not isinstance(page.get("data"), list):
        raise missing("data", "the page")
    buckets = [bucket for bucket in page["data"] if isinstance(bucket, dict)]
    if not buckets:
        return
    for name in _BUCKET_FIELDS:
        if fields[name] not in buckets[0]:
            raise missing(fields[name], "the first bucket")
    if not isinstance(buckets[0].get("results"), list):
        raise missing("results", "the first bucket")
    result = next((r for b in buckets for r in b.get("results") or [] if isinstance(r, dict)), None)
    if result is None:
        return
    for name in source_format.required:
        if name not in _BUCKET_FIELDS and fields[name] not in result:
            raise missing(fields[name], "the first result")


def check_columns(path: str, columns: list[str], source_format: SourceFormat, fields: dict[str, str]) -> None:
    """A table has every column the format needs; else one line naming it and the first column missing."""
    present = set(columns)
    for name in source_format.required:
        column = fields[name]
        if column not in present:
            raise QuotacalcError(
                f"not {source_format.what or source_format.name}: no column '{column}' ({name})",
                source=path,
                fix="name the format with --format, or map the column with --map",
            )


# --- the canonical SELECT on each engine ------------------------------------------------------------------------

#: DuckDB's numeric types: a column of one of them is read as a number, not parsed from text.
_DUCKDB_NUMBERS = frozenset(
    (
        "TINYINT",
        "SMALLINT",
        "INTEGER",
        "BIGINT",
        "HUGEINT",
        "UTINYINT",
        "USMALLINT",
        "UINTEGER",
        "UBIGINT",
        "FLOAT",
        "DOUBLE",
        "DECIMAL",
        "REAL",
    )
)


def _quoted(name: str, quote: str = '"') -> str:
    return quote + name.replace(quote, quote * 2) + quote


def _json_path(keys: tuple[str, ...]) -> str:
    return "$" + "".join("." + _quoted(key) for key in keys)


class _DuckdbFields:
    """How each canonical field reads on DuckDB: from a JSON line's key, or from a table's column by its type."""

    def __init__(self, source_format: SourceFormat, fields: dict[str, str], types: dict[str, str]) -> None:
        self.source_format = source_format
        self.fields = fields
        self.types = types
        self.lines = source_format.kind == "lines"

    def kind(self, name: str) -> str:
        type_name = self.types.get(self.fields.get(name, ""), "VARCHAR").upper()
        if type_name.startswith(("TIMESTAMP", "DATE")):
            return "time"
        if type_name.split("(")[0] in _DUCKDB_NUMBERS:
            return "number"
        return "text"

    def raw(self, name: str) -> str:
        if name not in self.fields:
            return "CAST(NULL AS VARCHAR)"
        if self.lines:
            record = "(CASE WHEN json_valid(line) THEN line ELSE '{}' END)"
            return f"json_extract_string({record}, '{_json_path((self.fields[name],))}')"
        return f"CAST({_quoted(self.fields[name])} AS VARCHAR)"

    def typed(self, name: str) -> bool:
        """A table's column whose type is used as it is, not parsed from text."""
        return self.source_format.kind == "table" and name in self.fields and self.kind(name) != "text"

    def time(self, name: str) -> str:
        if self.typed(name):
            column = _quoted(self.fields[name])
            return f"epoch({column})" if self.kind(name) == "time" else f"CAST({column} AS DOUBLE)"
        text = self.raw(name)
        return f"COALESCE(epoch(TRY_CAST({text} AS TIMESTAMPTZ)), TRY_CAST({text} AS DOUBLE))"

    def number(self, name: str) -> str:
        if self.typed(name) and self.kind(name) == "number":
            return f"CAST({_quoted(self.fields[name])} AS DOUBLE)"
        return f"TRY_CAST({self.raw(name)} AS DOUBLE)"

    def start(self) -> str:
        """When the request's load begins: its dispatch to the engine where the log has it (the wait in a gateway's
        queue before it loads no engine), else its arrival."""
        if "dispatched" in self.fields:
            return f"COALESCE({self.time('dispatched')}, {self.time('start')})"
        return self.time("start")

    def end(self) -> str:
        if "end" in self.fields:
            return self.time("end")
        if "duration_ms" in self.fields:
            return f"{self.time('start')} + {self.number('duration_ms')} / 1000.0"
        return self.time("start")

    def cached_and_max_tokens(self) -> tuple[str, str]:
        if self.source_format.name == "litellm":
            return _duckdb_litellm_json(self.fields, set(self.types))
        if "cached_tokens" not in self.fields:
            return "CAST(0 AS DOUBLE)", self.number("max_tokens")
        cached = self.number("cached_tokens")
        if self.lines:
            # A record without the key has no cached prompt tokens; one with a value that does not parse is counted.
            cached = f"CASE WHEN {self.raw('cached_tokens')} IS NULL THEN CAST(0 AS DOUBLE) ELSE {cached} END"
        return cached, self.number("max_tokens")


def duckdb_source(
    relation: str, source_format: SourceFormat, fields: dict[str, str], columns: dict[str, str] | None = None
) -> str:
    """The canonical SELECT over ``relation`` (DuckDB): for a line format a relation of one VARCHAR column
    ``line``; for a table format its own ``columns`` (name -> DuckDB type: a timestamp or a number is used as it
    is, anything else is parsed from its text; a field whose column is absent reads as NULL)."""
    if columns is not None:
        fields = {name: column for name, column in fields.items() if column in columns}
    if source_format.kind == "pages":
        return _duckdb_pages(relation, fields)
    read = _DuckdbFields(source_format, fields, dict(columns or {}))
    if read.lines:
        malformed = "NOT json_valid(line)"
        where = "WHERE line IS NOT NULL AND TRIM(line) <> ''"
        if source_format.name == "quotacalc":
            record = "(CASE WHEN json_valid(line) THEN line ELSE '{}' END)"
            where += f" AND NOT {_duckdb_no_load(record, fields['output_tokens'])}"
    else:
        malformed = "FALSE"
        where = ""
        if source_format.name == "litellm" and LITELLM_CACHE_HIT in (columns or {}):
            where = f"WHERE LOWER(COALESCE(CAST({_quoted(LITELLM_CACHE_HIT)} AS VARCHAR), '')) <> 'true'"
    cached, max_tokens = read.cached_and_max_tokens()
    return f"""SELECT
  {read.raw("request_id")} AS request_id,
  {read.raw("tenant")} AS tenant,
  {read.start()} AS start_s,
  {read.time("first_token")} AS first_token_s,
  {read.end()} AS end_s,
  {read.number("prompt_tokens")} AS prompt_tokens,
  {cached} AS cached_tokens,
  {read.number("output_tokens")} AS output_tokens,
  {max_tokens} AS max_tokens,
  {malformed} AS malformed,
  CAST(1 AS DOUBLE) AS requests
FROM {relation} {where}"""


def _duckdb_pages(relation: str, fields: dict[str, str]) -> str:
    """Usage export pages: one canonical row per result of each bucket, spread over the bucket."""

    def raw(name: str) -> str:
        if name not in fields:
            return "CAST(NULL AS VARCHAR)"
        document = "r.bucket" if name in _BUCKET_FIELDS else "r.result"
        return f"json_extract_string({document}, '{_json_path((fields[name],))}')"

    def time(name: str) -> str:
        return f"COALESCE(TRY_CAST({raw(name)} AS DOUBLE), epoch(TRY_CAST({raw(name)} AS TIMESTAMPTZ)))"

    def number(name: str) -> str:
        return f"TRY_CAST({raw(name)} AS DOUBLE)"

    cached = (
        f"COALESCE({number('cached_tokens')}, CAST(0 AS DOUBLE))" if "cached_tokens" in fields else "CAST(0 AS DOUBLE)"
    )
    return f"""SELECT
  CAST(NULL AS VARCHAR) AS request_id,
  {raw("tenant")} AS tenant,
  {time("start")} AS start_s,
  CAST(NULL AS DOUBLE) AS first_token_s,
  {time("end")} AS end_s,
  {number("prompt_tokens")} AS prompt_tokens,
  {cached} AS cached_tokens,
  {number("output_tokens")} AS output_tokens,
  CAST(NULL AS DOUBLE) AS max_tokens,
  FALSE AS malformed,
  {number("requests")} AS requests
FROM (
  SELECT b.bucket, UNNEST(CAST(json_extract(b.bucket, '$.results') AS JSON[])) AS result
  FROM (SELECT UNNEST(CAST(json_extract(json, '$.data') AS JSON[])) AS bucket FROM {relation}) AS b
) AS r"""


def _duckdb_litellm_json(fields: dict[str, str], columns: set[str]) -> tuple[str, str]:
    def first_of(column: str, paths: tuple[tuple[str, ...], ...]) -> str:
        if column not in columns:
            return "CAST(NULL AS VARCHAR)"
        document = f"(CASE WHEN json_valid(CAST({_quoted(column)} AS VARCHAR)) THEN CAST({_quoted(column)} AS VARCHAR) ELSE '{{}}' END)"
        return "COALESCE(" + ", ".join(f"json_extract_string({document}, '{_json_path(p)}')" for p in paths) + ")"

    cached = f"COALESCE(TRY_CAST({first_of('metadata', LITELLM_CACHED_PATHS)} AS DOUBLE), CAST(0 AS DOUBLE))"
    if "cached_tokens" in fields:
        cached = f"TRY_CAST(CAST({_quoted(fields['cached_tokens'])} AS VARCHAR) AS DOUBLE)"
    max_tokens = f"TRY_CAST({first_of('proxy_server_request', LITELLM_MAX_TOKENS_PATHS)} AS DOUBLE)"
    if "max_tokens" in fields:
        max_tokens = f"TRY_CAST(CAST({_quoted(fields['max_tokens'])} AS VARCHAR) AS DOUBLE)"
    return cached, max_tokens


def postgres_litellm_source(fields: dict[str, str], table: str = LITELLM_TABLE) -> str:
    """The canonical SELECT over LiteLLM's own table in its Postgres (typed columns: timestamps, integers, jsonb)."""

    def column(name: str) -> str:
        return _quoted(fields[name])

    def epoch(name: str) -> str:
        if name not in fields:
            return "CAST(NULL AS DOUBLE PRECISION)"
        return f"CAST(EXTRACT(EPOCH FROM {column(name)}) AS DOUBLE PRECISION)"

    def first_of(json_column: str, paths: tuple[tuple[str, ...], ...]) -> str:
        texts = ", ".join(f"{_quoted(json_column)} #>> '{{{','.join(p)}}}'" for p in paths)
        value = f"COALESCE({texts})"
        return f"CASE WHEN {value} ~ '^-?[0-9]+(\\.[0-9]+)?$' THEN CAST({value} AS DOUBLE PRECISION) END"

    cached = f"COALESCE({first_of('metadata', LITELLM_CACHED_PATHS)}, 0)"
    if "cached_tokens" in fields:
        cached = f"CAST({column('cached_tokens')} AS DOUBLE PRECISION)"
    max_tokens = first_of("proxy_server_request", LITELLM_MAX_TOKENS_PATHS)
    return f"""SELECT
  CAST({column("request_id")} AS TEXT) AS request_id,
  CAST({column("tenant")} AS TEXT) AS tenant,
  {epoch("start")} AS start_s,
  {epoch("first_token")} AS first_token_s,
  {epoch("end")} AS end_s,
  CAST({column("prompt_tokens")} AS DOUBLE PRECISION) AS prompt_tokens,
  CAST({cached} AS DOUBLE PRECISION) AS cached_tokens,
  CAST({column("output_tokens")} AS DOUBLE PRECISION) AS output_tokens,
  CAST({max_tokens} AS DOUBLE PRECISION) AS max_tokens,
  FALSE AS malformed,
  CAST(1 AS DOUBLE PRECISION) AS requests
FROM {_quoted(table)}
WHERE LOWER(COALESCE(CAST({_quoted(LITELLM_CACHE_HIT)} AS TEXT), '')) <> 'true'"""


#: The view a log file other than a LiteLLM export is registered as on Spark.
SPARK_VIEW = "fleet_log"


def _spark_string(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _spark_time(value: str, number_first: bool = False) -> str:
    """RFC 3339 / ISO 8601 text (zone-less: the session's UTC) or epoch seconds, as epoch seconds; else NULL."""
    parsed = (f"CAST(unix_micros(try_to_timestamp({value})) AS DOUBLE) / 1000000.0", f"try_cast({value} AS DOUBLE)")
    return f"COALESCE({parsed[1]}, {parsed[0]})" if number_first else f"COALESCE({parsed[0]}, {parsed[1]})"


def spark_source(source_format: SourceFormat, fields: dict[str, str], columns: set[str]) -> str:
    """The canonical SELECT on Spark over the view ``run_spark`` registers: a table's own columns (``columns``;
    strings or typed), or for the line and page formats one string column ``value`` (a line, or a page). The same
    fields as ``duckdb_source`` reads, parsed the same way: a value that does not parse is NULL."""
    if source_format.kind == "pages":
        return _spark_pages(fields)
    if source_format.kind == "lines":
        return _spark_lines(source_format, fields)
    table = LITELLM_TABLE if source_format.name == "litellm" else SPARK_VIEW
    return spark_table_source(source_format, fields, columns, table)


def _spark_select(
    raw: Callable[[str], str],
    cached: str,
    max_tokens: str,
    malformed: str,
    requests: str,
    source: str,
    fields: dict[str, str],
    number_first: bool = False,
) -> str:
    def number(name: str) -> str:
        return f"try_cast({raw(name)} AS DOUBLE)"

    start = _spark_time(raw("start"), number_first)
    if "end" in fields:
        end = _spark_time(raw("end"), number_first)
    elif "duration_ms" in fields:
        end = f"{start} + {number('duration_ms')} / 1000.0"
    else:
        end = start
    # The load begins at the dispatch to the engine where the log has it (as _DuckdbFields.start).
    load_start = (
        f"COALESCE({_spark_time(raw('dispatched'), number_first)}, {start})" if "dispatched" in fields else start
    )
    return f"""SELECT
  {raw("request_id")} AS request_id,
  {raw("tenant")} AS tenant,
  {load_start} AS start_s,
  {_spark_time(raw("first_token"))} AS first_token_s,
  {end} AS end_s,
  {number("prompt_tokens")} AS prompt_tokens,
  {cached} AS cached_tokens,
  {number("output_tokens")} AS output_tokens,
  {max_tokens} AS max_tokens,
  {malformed} AS malformed,
  {requests} AS requests
FROM {source}"""


def _spark_lines(source_format: SourceFormat, fields: dict[str, str]) -> str:
    """JSON lines: each line parsed once into a map of its keys (a number's value as its JSON text)."""

    def raw(name: str) -> str:
        return f"r.record[{_spark_string(fields[name])}]" if name in fields else "CAST(NULL AS STRING)"

    cached = "CAST(0 AS DOUBLE)"
    if "cached_tokens" in fields:
        # A record without the key has no cached prompt tokens; one with a value that does not parse is counted.
        raw_cached = raw("cached_tokens")
        cached = f"CASE WHEN {raw_cached} IS NULL THEN CAST(0 AS DOUBLE) ELSE try_cast({raw_cached} AS DOUBLE) END"
    refused = ""
    if source_format.name == "quotacalc":
        refused = f" AND NOT {_spark_no_load('value', fields['output_tokens'])}"
    source = (
        f"(SELECT value AS line, from_json(value, 'MAP<STRING,STRING>') AS record FROM {_quoted(SPARK_VIEW, '`')}"
        f" WHERE value IS NOT NULL AND TRIM(value) <> ''{refused}) AS r"
    )
    # Not JSON at all (get_json_object of the whole document is NULL): a malformed record, as DuckDB's json_valid.
    malformed = "get_json_object(r.line, '$') IS NULL"
    return _spark_select(
        raw, cached, f"try_cast({raw('max_tokens')} AS DOUBLE)", malformed, "CAST(1 AS DOUBLE)", source, fields
    )


def _spark_pages(fields: dict[str, str]) -> str:
    """Usage export pages: one canonical row per result of each bucket, spread over the bucket."""

    def raw(name: str) -> str:
        if name not in fields or name in ("request_id", "first_token"):
            return "CAST(NULL AS STRING)"
        document = "r.bucket" if name in _BUCKET_FIELDS else "r.result"
        return f"{document}[{_spark_string(fields[name])}]"

    cached = "CAST(0 AS DOUBLE)"
    if "cached_tokens" in fields:
        cached = f"COALESCE(try_cast({raw('cached_tokens')} AS DOUBLE), CAST(0 AS DOUBLE))"
    maps = "'ARRAY<MAP<STRING,STRING>>'"
    source = f"""(
  SELECT b.bucket, explode(from_json(b.bucket['results'], {maps})) AS result
  FROM (
    SELECT explode(from_json(from_json(value, 'MAP<STRING,STRING>')['data'], {maps})) AS bucket
    FROM {_quoted(SPARK_VIEW, "`")}
    WHERE value IS NOT NULL AND TRIM(value) <> ''
  ) AS b
) AS r"""
    requests = f"try_cast({raw('requests')} AS DOUBLE)"
    return _spark_select(raw, cached, "CAST(NULL AS DOUBLE)", "FALSE", requests, source, fields, number_first=True)


def spark_table_source(
    source_format: SourceFormat, fields: dict[str, str], columns: set[str], table: str = LITELLM_TABLE
) -> str:
    """The canonical SELECT over a table registered in Spark as ``table`` (a LiteLLM spend-log export or a CSV log;
    strings or typed columns, each read through its text)."""

    def raw(name: str) -> str:
        if name not in fields or fields[name] not in columns:
            return "CAST(NULL AS STRING)"
        return f"CAST({_quoted(fields[name], '`')} AS STRING)"

    def first_of(json_column: str, paths: tuple[tuple[str, ...], ...]) -> str:
        if json_column not in columns:
            return "CAST(NULL AS STRING)"
        quoted = _quoted(json_column, "`")
        texts = ", ".join(f"get_json_object(CAST({quoted} AS STRING), '$.{'.'.join(p)}')" for p in paths)
        return f"COALESCE({texts})"

    cached = "CAST(0 AS DOUBLE)"
    max_tokens = "CAST(NULL AS DOUBLE)"
    if source_format.name == "litellm":
        cached = f"COALESCE(try_cast({first_of('metadata', LITELLM_CACHED_PATHS)} AS DOUBLE), CAST(0 AS DOUBLE))"
        max_tokens = f"try_cast({first_of('proxy_server_request', LITELLM_MAX_TOKENS_PATHS)} AS DOUBLE)"
    if "cached_tokens" in fields:
        cached = f"try_cast({raw('cached_tokens')} AS DOUBLE)"
    if "max_tokens" in fields:
        max_tokens = f"try_cast({raw('max_tokens')} AS DOUBLE)"
    present = {name: column for name, column in fields.items() if column in columns}
    source = _quoted(table, "`")
    if source_format.name == "litellm" and LITELLM_CACHE_HIT in columns:
        hit = f"lower(coalesce(CAST({_quoted(LITELLM_CACHE_HIT, '`')} AS STRING), ''))"
        source = f"(SELECT * FROM {source} WHERE {hit} <> 'true') AS t"
    return _spark_select(raw, cached, max_tokens, "FALSE", "CAST(1 AS DOUBLE)", source, present)
