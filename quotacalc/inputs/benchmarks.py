"""Benchmark and log readers for ``quotacalc calibrate``: files -> validated points; errors name file, row, field.

Formats (detected from the content; a ``.json`` or ``.jsonl`` name must hold JSON):

- ``vllm bench serve --save-result`` JSON (vllm/benchmarks/serve.py): one object per run, a list of
  them, or one object per line (``--append-result``). Keys used: ``max_concurrency``, ``request_rate``,
  ``completed``, ``total_input_tokens``, ``total_output_tokens``, ``mean_ttft_ms``, ``mean_itl_ms``. SGLang's
  ``python -m sglang.bench_serving --output-file`` appends lines with the same keys (its rate as ``Infinity``).
- GuideLLM's JSON report (``guidellm benchmark --output-path report.json``): ``benchmarks[i]`` with
  ``config.strategy`` (or ``args.strategy`` before 0.4) and ``metrics.<name>.successful.mean`` for
  ``time_to_first_token_ms``, ``inter_token_latency_ms``, ``prompt_token_count``, ``output_token_count``.
  Only closed-loop benchmarks (synchronous, concurrent) are fitted; rate-driven ones are skipped.
- CSV with a header: ``concurrency, prompt_tokens, output_tokens, ttft_s, itl_s`` (``ttft_ms``/``itl_ms``
  instead are accepted; a blank cell is 'not measured'; optional ``label`` and ``model`` columns (the model is
  compared with the deployment's); ``#`` lines are comments).
- A vLLM start-up log: ``GPU KV cache size: 646,503 tokens`` and ``Available KV cache memory: 40.55 GiB``; or
  SGLang's: ``KV Cache is allocated. #tokens: 442750, K size: 27.02 GB, V size: 27.02 GB`` and its server_args.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any, cast

from pydantic import ValidationError

from quotacalc.core.calibrate import BenchmarkPoint, KvPoolReading
from quotacalc.core.deployment import GENERIC_ENGINE, VLLM_MEMORY_UTILIZATION
from quotacalc.errors import QuotacalcError, close_names
from quotacalc.fileio import open_regular
from quotacalc.inputs.json_strict import DuplicateKey, loads_unique

CSV_COLUMNS = ("concurrency", "prompt_tokens", "output_tokens", "ttft_s", "itl_s")
_MS_COLUMNS = {"ttft_ms": "ttft_s", "itl_ms": "itl_s"}
#: Text columns: a run's label (ignored), and the model it ran (compared with the deployment's, as a vLLM result's
#: model_id is).
_OPTIONAL_COLUMNS = ("label", "model")


#: BenchmarkPoint's largest concurrency.
MAX_CONCURRENCY = 100_000
#: How to get each format's file again, for an error's fix.
_VLLM_RESAVE = "re-save it with vllm bench serve --save-result"
_GUIDELLM_RESAVE = "re-save it with guidellm benchmark --output-path report.json"
#: A benchmark file with every request's text (vllm bench serve --save-detailed) runs to tens of MB.
MAX_BENCHMARK_BYTES = 256 * 2**20


def _read_text(path: str, what: str) -> str:
    with open_regular(path, what=what) as handle:
        try:
            data = handle.read(MAX_BENCHMARK_BYTES + 1)
        except OSError as error:
            raise QuotacalcError(f"cannot read: {error.strerror or error}", source=path) from None
    if len(data) > MAX_BENCHMARK_BYTES:
        raise QuotacalcError(
            f"is larger than {MAX_BENCHMARK_BYTES // 2**20} MiB", source=path, fix="one result per run, not per request"
        )
    if data.startswith(b"\x1f\x8b"):
        raise QuotacalcError("is gzip-compressed", source=path, fix="decompress it (gunzip) and give the file inside")
    if b"\x00" in data[:4096] or data.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise QuotacalcError(
            "is not UTF-8 text (a binary file, or UTF-16)", source=path, fix=f"give the {what} as UTF-8 text"
        )
    # utf-8-sig: a spreadsheet's CSV often starts with a byte-order mark, which is not part of the header.
    return data.decode("utf-8-sig", errors="replace")


def _point(
    source: str, row: str, keys: dict[str, str] | None = None, *, unmeasured: str, **values: Any
) -> BenchmarkPoint:
    """A validated point; an error names the file's own key for the field (``keys``: field -> key).

    ``unmeasured``: the fix for a time of zero or less, which differs by format (a CSV's blank cell, a file
    re-saved from its benchmark)."""
    try:
        point = BenchmarkPoint(source=source, row=row, file_keys=dict(keys or {}), **values)
    except ValidationError as error:
        first = error.errors()[0]
        field = ".".join(str(part) for part in first["loc"])
        key = (keys or {}).get(field, field)
        message, fix = _figure_problem(field, key, first, unmeasured)
        raise QuotacalcError(message, source=source, field=f"{row}: {key}" if row else key, fix=fix) from None
    if not point.measured():
        raise QuotacalcError("has neither a time to first token nor an inter-token latency", source=source, field=row)
    return point


#: The longest times BenchmarkPoint takes, in words: past them a figure is a unit slip, not a measurement.
_SPANS: dict[float, str] = {86_400: "a day", 3_600: "an hour"}


def _limits(field: str) -> tuple[float, float]:
    """BenchmarkPoint's bounds on a figure (its Field's ge or gt, and le), so messages state the model's own."""
    low, high = -math.inf, math.inf
    for rule in BenchmarkPoint.model_fields[field].metadata:
        low = getattr(rule, "ge", getattr(rule, "gt", low))
        high = getattr(rule, "le", high)
    return low, high


def _shown(value: Any) -> str:
    """A figure as the user wrote it: whole numbers with thousands separators, others to 6 significant digits."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        text = repr(value) if isinstance(value, str) else json.dumps(value, default=str)
        return text if len(text) <= 60 else text[:57] + "..."
    if isinstance(value, int) or (math.isfinite(value) and value.is_integer() and abs(value) < 1e15):
        return f"{int(value):,}"
    return f"{value:.6g}"


def _figure_problem(field: str, key: str, error: Any, unmeasured: str) -> tuple[str, str | None]:
    """A BenchmarkPoint's validation error in the file's own terms: its unit, the allowed range, and a fix."""
    value = error.get("input")
    number = isinstance(value, int | float) and not isinstance(value, bool)
    if field in ("ttft_s", "itl_s") and number:
        low, high = _limits(field)
        # The point holds seconds; the file may hold milliseconds, and its user reads its own figures.
        scale, unit = (1000, "milliseconds") if key.endswith("_ms") else (1, "seconds")
        unit_fix = f"check the figure's unit: {key} is in {unit}"
        if key == field:  # a CSV column in seconds
            unit_fix += f"; name a column of milliseconds {field.removesuffix('_s')}_ms"
        if value <= 0:
            return f"must be a positive number of {unit}, got {_shown(value * scale)}", unmeasured
        if value < low:
            least = f"{low * scale:.6f}".rstrip("0")
            return f"must be at least {least} {unit} (no engine is faster), got {_shown(value * scale)}", unit_fix
        span = f" ({_SPANS[high]})" if high in _SPANS else ""
        return f"must be at most {_shown(high * scale)} {unit}{span}, got {_shown(value * scale)}", unit_fix
    if field == "concurrency":
        low, high = _limits(field)
        return (
            f"must be a whole number of requests in flight from {_shown(low)} to {_shown(high)}, got {_shown(value)}",
            "the number of requests the run kept in flight, as vllm bench serve --max-concurrency sets it",
        )
    if field in ("prompt_tokens", "output_tokens"):
        low, high = _limits(field)
        strict = any(hasattr(rule, "gt") for rule in BenchmarkPoint.model_fields[field].metadata)
        least = f"more than {_shown(low)}" if strict else f"at least {_shown(low)}"
        what = "prompt" if field == "prompt_tokens" else "output"
        return (
            f"must be {least} and at most {_shown(high)} tokens per request, got a mean of {_shown(value)}",
            f"the mean {what} length of the run's requests",
        )
    if field == "model" and error.get("type") == "string_too_long":
        longest = error.get("ctx", {}).get("max_length", 1000)
        return f"is longer than {longest:,} characters", "the model's name, as the engine served it"
    # Not reached by the readers (they pass only the fields above); in plain words all the same.
    message = str(error.get("msg", "is not valid")).removeprefix("Value error, ")
    if message.startswith("Input should be"):
        message = "must be" + message.removeprefix("Input should be")
    return message, None


def _number(value: Any, source: str, field: str, *, integer: bool = False) -> float:
    """A finite number from JSON or a CSV cell; bool, NaN and infinity are errors."""
    if isinstance(value, str):
        text = value.strip()
        try:
            value = int(text) if integer else float(text)
        except ValueError:
            kind = "a whole number" if integer else "a number"
            raise QuotacalcError(f"expected {kind}, got '{text}'", source=source, field=field) from None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise QuotacalcError(f"expected a number, got {json.dumps(value)}", source=source, field=field)
    if not math.isfinite(value):
        raise QuotacalcError(f"expected a finite number, got {value}", source=source, field=field)
    if integer and value != int(value):
        raise QuotacalcError(f"expected a whole number, got {value}", source=source, field=field)
    return value


# --------------------------------------------------------------------------- CSV


def read_csv(path: str, text: str) -> list[BenchmarkPoint]:
    import csv
    import io

    lines = [line for line in text.splitlines() if not line.lstrip().startswith("#")]
    reader = csv.reader(io.StringIO("\n".join(lines)))
    try:
        header = [name.strip().lower() for name in next(reader)]
    except StopIteration:
        raise QuotacalcError("empty CSV: no header", source=path, fix=f"columns: {', '.join(CSV_COLUMNS)}") from None
    columns = [_MS_COLUMNS.get(name, name) for name in header]
    known = set(CSV_COLUMNS) | set(_MS_COLUMNS) | set(_OPTIONAL_COLUMNS)
    if not known.intersection(header):
        # Not a benchmark CSV at all (a .env, a key file): its first line is not shown, it may be a secret.
        raise QuotacalcError(
            "the first line names none of a benchmark CSV's columns: is it a benchmark file?",
            source=path,
            field="header",
            fix=f"columns: {', '.join(CSV_COLUMNS)}",
        )
    for name in header:
        if name not in known:
            close = close_names(name, sorted(known), n=1)
            fix = f"did you mean '{close[0]}'?" if close else f"columns: {', '.join(CSV_COLUMNS)}"
            raise QuotacalcError(f"unknown column '{name}'", source=path, field="header", fix=fix)
    duplicated = {name for name in columns if columns.count(name) > 1}
    if duplicated:
        raise QuotacalcError(f"column {sorted(duplicated)[0]} appears twice", source=path, field="header")
    for name in ("concurrency", "prompt_tokens", "output_tokens"):
        if name not in columns:
            raise QuotacalcError(
                f"no '{name}' column", source=path, field="header", fix=f"columns: {', '.join(CSV_COLUMNS)}"
            )
    if "ttft_s" not in columns and "itl_s" not in columns:
        raise QuotacalcError("no 'ttft_s' or 'itl_s' column", source=path, field="header", fix="give at least one")
    points = []
    for number, cells in enumerate(reader, start=1):
        if not any(cell.strip() for cell in cells):
            continue
        row = f"row {number}"
        if len(cells) != len(header):
            # csv reads an unclosed quote to the end of the file as one cell: say so, it is the likely cause.
            unclosed = any("\n" in cell for cell in cells)
            raise QuotacalcError(
                f"{len(cells)} cells for {len(header)} columns",
                source=path,
                field=row,
                fix="a quote opened in this row is never closed"
                if unclosed
                else "one cell per column, comma-separated",
            )
        values: dict[str, Any] = {}
        for raw_name, name, cell in zip(header, columns, cells, strict=True):
            if name == "label" or not cell.strip():
                continue
            if name == "model":
                values["model"] = cell.strip()
                continue
            field = f"{row}: {raw_name}"
            value = _number(cell, path, field, integer=name == "concurrency")
            values[name] = value / 1000 if raw_name in _MS_COLUMNS else value
        for name in ("concurrency", "prompt_tokens", "output_tokens"):
            if name not in values:
                raise QuotacalcError("is empty", source=path, field=f"{row}: {name}")
        values["concurrency"] = int(values["concurrency"])
        keys = {name: raw for raw, name in zip(header, columns, strict=True)}
        points.append(_point(path, row, keys, unmeasured="leave the cell blank where it was not measured", **values))
    if not points:
        raise QuotacalcError("no data rows", source=path, fix="one row per benchmark run under the header")
    return points


# --------------------------------------------------------------------------- vllm bench serve


def _vllm_point(path: str, row: str, result: dict[str, Any]) -> BenchmarkPoint:
    def field(name: str) -> str:
        return f"{row}.{name}" if row else name

    def need(name: str) -> Any:
        if result.get(name) is None:
            raise QuotacalcError(
                "missing", source=path, field=field(name), fix="a result of 'vllm bench serve --save-result'"
            )
        return result[name]

    if result.get("ramp_up_strategy") is not None:
        raise QuotacalcError(
            f"is {result['ramp_up_strategy']}: a ramp-up run's arrivals follow a rate, not a concurrency",
            source=path,
            field=field("ramp_up_strategy"),
            fix="run with --max-concurrency N --request-rate inf and no ramp-up",
        )
    concurrency = result.get("max_concurrency")
    if concurrency is None:
        raise QuotacalcError(
            "is null: the run's concurrency is unknown (requests were not capped)",
            source=path,
            field=field("max_concurrency"),
            fix="run the benchmark with --max-concurrency N --request-rate inf (vllm bench serve, sglang.bench_serving)",
        )
    rate = result.get("request_rate", "inf")
    if rate not in ("inf", None) and not (isinstance(rate, float) and math.isinf(rate)):
        raise QuotacalcError(
            f"is {rate}: a rate-limited run may never reach its concurrency",
            source=path,
            field=field("request_rate"),
            fix="run with --request-rate inf and --max-concurrency N",
        )
    completed = _number(need("completed"), path, field("completed"), integer=True)
    if completed <= 0:
        raise QuotacalcError("no request completed", source=path, field=field("completed"))
    clients = int(_number(concurrency, path, field("max_concurrency"), integer=True))
    values: dict[str, Any] = {
        # Fewer requests than clients never reach the concurrency: at most as many are in flight as were sent (an
        # impossible figure is left for the point's validation to name).
        "concurrency": min(clients, int(completed)) if clients <= MAX_CONCURRENCY else clients,
        "prompt_tokens": _number(need("total_input_tokens"), path, field("total_input_tokens")) / completed,
        "output_tokens": _number(need("total_output_tokens"), path, field("total_output_tokens")) / completed,
    }
    if "mean_ttft_ms" not in result and "mean_itl_ms" not in result:
        raise QuotacalcError(
            "has neither mean_ttft_ms nor mean_itl_ms",
            source=path,
            field=row or None,
            fix="keep the default --percentile-metrics",
        )
    for key, name in (("mean_ttft_ms", "ttft_s"), ("mean_itl_ms", "itl_s")):
        # vllm bench serve writes 0 for what it did not measure (np.mean(itls or 0): one output token, or a
        # backend that does not stream): not a time of zero.
        if result.get(key) is not None and _number(result[key], path, field(key)) != 0:
            values[name] = _number(result[key], path, field(key)) / 1000
    if "ttft_s" not in values and "itl_s" not in values:
        raise QuotacalcError(
            "measured neither a first token nor an inter-token latency (both are 0)",
            source=path,
            field=row or None,
            fix="run with streaming and more than one output token",
        )
    if isinstance(result.get("model_id"), str):
        values["model"] = result["model_id"]
    varied = _varied_lengths(result)
    if varied:
        values["varied_lengths"] = varied
    keys = {
        "concurrency": "max_concurrency",
        "prompt_tokens": "total_input_tokens",
        "output_tokens": "total_output_tokens",
        "ttft_s": "mean_ttft_ms",
        "itl_s": "mean_itl_ms",
        "model": "model_id",
    }
    return _point(path, row, keys, unmeasured=f"a measured time is positive: {_VLLM_RESAVE}", **values)


def _varied_lengths(result: dict[str, Any]) -> str | None:
    """The key that says a run's prompt lengths varied, as ``key value``, or None.

    SGLang's bench_serving records its dataset and, for ``random``, its range ratio (lengths drawn from
    [ratio × len, len], its default 0; so only 1 fixes them); a dataset of real conversations (sharegpt) varies by
    nature. (vLLM's results record neither: its random dataset's lengths are fixed by default.)
    """
    dataset = result.get("dataset_name")
    if isinstance(dataset, str) and dataset not in ("random", "random-ids", "generated-shared-prefix"):
        return f"dataset_name {dataset}"[:200]
    ratio = result.get("random_range_ratio")
    is_sglang = "sharegpt_output_len" in result
    drawn = dataset in ("random", "random-ids") and isinstance(ratio, (int, float)) and not isinstance(ratio, bool)
    if is_sglang and drawn and cast(float, ratio) < 1:
        return f"random_range_ratio {ratio:g}"
    return None


def _open_loop(result: dict[str, Any]) -> str | None:
    """Why a vllm bench serve result is not a closed-loop run (its concurrency never known), or None."""
    if result.get("ramp_up_strategy") is not None:
        return f"a ramp-up run ({result['ramp_up_strategy']}): its arrivals follow a rate"
    if result.get("max_concurrency") is None:
        return "max_concurrency is null: requests were not capped"
    rate = result.get("request_rate", "inf")
    if rate not in ("inf", None) and not (isinstance(rate, float) and math.isinf(rate)):
        return f"request_rate is {rate}: a rate-limited run"
    return None


def read_vllm_results(path: str, documents: list[tuple[str, Any]]) -> tuple[list[BenchmarkPoint], list[str]]:
    """Closed-loop results as points; in a file of several (--append-result), a rate-driven one is skipped with a
    note, as GuideLLM's are; alone, it is the error."""
    if not documents:
        raise QuotacalcError(
            "no benchmark results", source=path, fix="a vllm bench serve --save-result JSON, a GuideLLM report or a CSV"
        )
    points, skipped = [], []
    for row, document in documents:
        if not isinstance(document, dict):
            raise QuotacalcError("expected a JSON object (one benchmark result)", source=path, field=row or None)
        reason = _open_loop(document) if len(documents) > 1 else None
        if reason is not None:
            skipped.append(f"{path}: {row}: skipped {reason} (only runs at a fixed concurrency are fitted)")
            continue
        points.append(_vllm_point(path, row, document))
        failed = document.get("failed")
        if isinstance(failed, int) and not isinstance(failed, bool) and failed > 0:
            skipped.append(
                f"{path}: {row or 'result'}: {failed:,} requests failed: the run is fitted on the "
                f"{document.get('completed')} that completed, at a concurrency of at most as many (rerun it where "
                "none fail)"
            )
    if not points:
        raise QuotacalcError(
            f"no run at a fixed concurrency ({len(skipped)} skipped)",
            source=path,
            fix="run with --max-concurrency N --request-rate inf",
        )
    return points, skipped


# --------------------------------------------------------------------------- GuideLLM


def _guidellm_mean(path: str, row: str, metrics: dict[str, Any], name: str) -> float | None:
    metric = metrics.get(name)
    if metric is None:
        return None
    successful = metric.get("successful") if isinstance(metric, dict) else None
    mean = successful.get("mean") if isinstance(successful, dict) else None
    if mean is None:
        raise QuotacalcError("has no successful.mean", source=path, field=f"{row}.metrics.{name}")
    # An empty distribution (no sample: one output token has no inter-token latency) is mean 0, count 0.
    if cast(dict, successful).get("count") == 0:
        return None
    return _number(mean, path, f"{row}.metrics.{name}.successful.mean")


def _guidellm_strategy(path: str, row: str, benchmark: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """Where a benchmark's strategy is (``benchmarks[i].config.strategy``; ``args.strategy`` before 0.4) and the
    strategy, an object with a string ``type_``; anything else is an error naming the key."""
    found: tuple[str, Any] | None = None
    for key in ("config", "args"):
        section = benchmark.get(key)
        if section is None:
            continue
        # GuideLLM writes both as objects (BenchmarkConfig, BenchmarkArgs): another value is a damaged report.
        if not isinstance(section, dict):
            raise QuotacalcError(
                f"expected an object (a GuideLLM report's run settings), got {_shown(section)}",
                source=path,
                field=f"{row}.{key}",
                fix=_GUIDELLM_RESAVE,
            )
        if found is None and section.get("strategy") is not None:
            found = (f"{row}.{key}.strategy", section["strategy"])
    if found is None:
        raise QuotacalcError(
            "missing: the run's strategy (synchronous, concurrent, ...) is unknown",
            source=path,
            field=f"{row}.config.strategy",
            fix=_GUIDELLM_RESAVE,
        )
    where, strategy = found
    # GuideLLM serialises a strategy as its model ({"type_": "concurrent", "streams": 8}); the bare name is only
    # its console and CSV output, which carry no metrics to fit.
    if not isinstance(strategy, dict):
        raise QuotacalcError(
            f"expected an object with type_, got {_shown(strategy)}",
            source=path,
            field=where,
            fix='GuideLLM writes {"type_": "concurrent", "streams": 8}: ' + _GUIDELLM_RESAVE,
        )
    kind = strategy.get("type_")
    if not isinstance(kind, str):
        raise QuotacalcError(
            "missing" if kind is None else f"expected a strategy's name, got {_shown(kind)}",
            source=path,
            field=f"{where}.type_",
            fix="synchronous, concurrent, throughput, constant or poisson, as GuideLLM writes it",
        )
    return where, strategy


def read_guidellm(path: str, document: dict[str, Any]) -> tuple[list[BenchmarkPoint], list[str]]:
    """Closed-loop benchmarks of a GuideLLM report as points, and a note for each one skipped."""
    benchmarks = document.get("benchmarks")
    if not isinstance(benchmarks, list) or not benchmarks:
        raise QuotacalcError("no benchmarks", source=path, field="benchmarks", fix="a GuideLLM JSON report")
    points, skipped = [], []
    for number, benchmark in enumerate(benchmarks):
        row = f"benchmarks[{number}]"
        if not isinstance(benchmark, dict):
            raise QuotacalcError(
                f"expected an object (one GuideLLM benchmark), got {_shown(benchmark)}",
                source=path,
                field=row,
                fix=_GUIDELLM_RESAVE,
            )
        if not isinstance(benchmark.get("metrics"), dict):
            raise QuotacalcError("has no metrics", source=path, field=row)
        where, strategy = _guidellm_strategy(path, row, benchmark)
        kind = strategy["type_"]
        if kind == "synchronous":
            concurrency: Any = 1
        elif kind == "concurrent":
            concurrency = _number(strategy.get("streams"), path, f"{where}.streams", integer=True)
        else:
            skipped.append(
                f"{path}: {row}: skipped a '{kind}' benchmark (only synchronous and concurrent runs have a known concurrency)"
            )
            continue
        metrics = benchmark["metrics"]
        values: dict[str, Any] = {"concurrency": int(concurrency)}
        for name, key in (("prompt_tokens", "prompt_token_count"), ("output_tokens", "output_token_count")):
            value = _guidellm_mean(path, row, metrics, key)
            if value is None:
                raise QuotacalcError("missing", source=path, field=f"{row}.metrics.{key}")
            values[name] = value
        for name, key in (("ttft_s", "time_to_first_token_ms"), ("itl_s", "inter_token_latency_ms")):
            value = _guidellm_mean(path, row, metrics, key)
            if value is not None:
                values[name] = value / 1000
        keys = {
            "concurrency": f"{where.removeprefix(row + '.')}.streams",
            "prompt_tokens": "metrics.prompt_token_count",
            "output_tokens": "metrics.output_token_count",
            "ttft_s": "metrics.time_to_first_token_ms",
            "itl_s": "metrics.inter_token_latency_ms",
        }
        points.append(_point(path, row, keys, unmeasured=f"a measured time is positive: {_GUIDELLM_RESAVE}", **values))
    if not points:
        raise QuotacalcError(
            "no synchronous or concurrent benchmark",
            source=path,
            fix="run guidellm with --profile concurrent (or sweep)",
        )
    return points, skipped


# --------------------------------------------------------------------------- dispatch


#: json's complaints, as the middle of a sentence that ends with where (its own end mid-phrase: '... starting at').
_JSON_PROBLEMS = {
    "Unterminated string starting at": "a string that never ends, starting at",
    "Expecting value": "expected a value at",
    "Expecting ',' delimiter": "expected ',' at",
    "Expecting ':' delimiter": "expected ':' at",
    "Expecting property name enclosed in double quotes": "expected a key in double quotes at",
    "Extra data": "more text after the end of the JSON value, at",
    "Invalid control character at": "a control character inside a string at",
    "Invalid \\escape": "a backslash escape JSON does not know at",
    "Invalid \\uXXXX escape": "a backslash escape JSON does not know at",
}


def _json_problem(error: json.JSONDecodeError, *, line: bool = True) -> str:
    """A decoding error as a whole phrase with its place: 'expected ',' at line 3, column 5'."""
    phrase = _JSON_PROBLEMS.get(error.msg, error.msg[:1].lower() + error.msg[1:].removesuffix(" at") + " at")
    where = f"line {error.lineno}, column {error.colno}" if line else f"column {error.colno}"
    return f"malformed JSON: {phrase} {where}"


def _json_fix(text: str) -> str:
    """How to get a readable file again: from GuideLLM where the text names its 'benchmarks', else from vLLM."""
    return "the file is cut short or is not JSON: " + (_GUIDELLM_RESAVE if '"benchmarks"' in text else _VLLM_RESAVE)


def _json_documents(path: str, text: str) -> list[tuple[str, Any]]:
    """One JSON value, or one per line (vllm bench serve --append-result writes JSON lines)."""
    # json's own limits: a nesting too deep (RecursionError), an integer of more than 4,300 digits (ValueError).
    too_deep = "malformed JSON: nested too deeply"
    too_long = "malformed JSON: a number of more than 4,300 digits"

    def duplicate(error: DuplicateKey) -> str:
        return f"duplicate key '{error.args[0]}': JSON keeps the last, so one of its figures would be dropped"

    try:
        document = loads_unique(text)
    except DuplicateKey as error:
        raise QuotacalcError(duplicate(error), source=path, fix="keep one") from None
    except RecursionError:
        raise QuotacalcError(too_deep, source=path, fix=_json_fix(text)) from None
    except json.JSONDecodeError as whole_error:
        lines = [(number, line) for number, line in enumerate(text.splitlines(), 1) if line.strip()]
        if len(lines) < 2:
            raise QuotacalcError(_json_problem(whole_error), source=path, fix=_json_fix(text)) from None
        documents = []
        for number, line in lines:
            field = f"line {number}"
            try:
                documents.append((field, loads_unique(line)))
            except DuplicateKey as error:
                raise QuotacalcError(duplicate(error), source=path, field=field, fix="keep one") from None
            except json.JSONDecodeError as error:
                problem = _json_problem(error, line=False)
                raise QuotacalcError(problem, source=path, field=field, fix=_json_fix(text)) from None
            except RecursionError:
                raise QuotacalcError(too_deep, source=path, field=field, fix=_json_fix(text)) from None
            except ValueError:
                raise QuotacalcError(too_long, source=path, field=field, fix=_json_fix(text)) from None
        return documents
    except ValueError:
        raise QuotacalcError(too_long, source=path, fix=_json_fix(text)) from None
    if isinstance(document, list):
        return [(f"[{number}]", item) for number, item in enumerate(document)]
    return [("", document)]


def read_benchmark(path: str) -> tuple[list[BenchmarkPoint], list[str]]:
    """Points from a vllm bench serve result, a GuideLLM report or a CSV; and notes on what was skipped."""
    text = _read_text(path, "benchmark file")
    if not text.strip():
        raise QuotacalcError("empty file", source=path, fix="a vllm bench serve JSON, a GuideLLM report or a CSV")
    stripped = text.strip()
    if stripped in ("null", "true", "false") or stripped[:1] == '"' or _is_number(stripped):
        # A string is not shown: a file holding one quoted line may hold a secret.
        shown = "a string" if stripped[:1] == '"' else stripped[:20]
        raise QuotacalcError(
            f"is a single JSON value ({shown}), not a benchmark result",
            source=path,
            fix="a vllm bench serve JSON object, a GuideLLM report or a CSV",
        )
    # A .json name is taken at its word: text that is not JSON is a damaged or misnamed file, not a CSV whose
    # header is one unknown column.
    if path.lower().endswith((".json", ".jsonl", ".ndjson")) and text.lstrip()[:1] not in ("{", "["):
        raise QuotacalcError(
            "malformed JSON: it does not start with '{' or '['",
            source=path,
            fix="a .json file holds a vllm bench serve --save-result result or a GuideLLM JSON report; a CSV needs a "
            ".csv name",
        )
    if text.lstrip()[:1] in ("{", "["):
        documents = _json_documents(path, text)
        if len(documents) == 1 and isinstance(documents[0][1], dict) and "benchmarks" in documents[0][1]:
            return read_guidellm(path, documents[0][1])
        return read_vllm_results(path, documents)
    # GuideLLM's YAML report (yaml.dump sorts its keys: args/config/metadata come before benchmarks).
    if re.search(r"^benchmarks:", text, re.MULTILINE) and not text.lstrip().startswith("concurrency"):
        return read_guidellm(path, _guidellm_yaml(path, text))
    return read_csv(path, text), []


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _guidellm_yaml(path: str, text: str) -> dict[str, Any]:
    """A GuideLLM report saved as YAML (--output-path report.yaml): the JSON report's document."""
    from quotacalc.inputs.yaml_strict import load_yaml_text

    document = load_yaml_text(text, source=path)
    if not isinstance(document, dict) or "benchmarks" not in document:
        raise QuotacalcError("a YAML file without 'benchmarks'", source=path, fix="a GuideLLM YAML or JSON report")
    return document


_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
# Bounded digits: a figure longer than any GPU's memory is not a figure (and not a 4,000-digit int to convert).
_POOL_TOKENS = re.compile(r"GPU KV cache size:\s*(\d[\d,]{0,20})\s*tokens")
_AVAILABLE_GIB = re.compile(r"Available KV cache memory:\s*(-?\d{1,9}(?:\.\d{1,9})?)\s*GiB")
# vLLM's config line ('... with config: model=..., tensor_parallel_size=2, ...') and `vllm serve`'s
# 'non-default args: {..., 'gpu_memory_utilization': 0.95, ...}' (a share left at its default is not listed).
_VLLM_TP = re.compile(r"\btensor_parallel_size=(\d{1,4})\b")
_VLLM_PP = re.compile(r"\bpipeline_parallel_size=(\d{1,4})\b")
# vLLM up to 0.8 prints its arguments as 'args: Namespace(..., gpu_memory_utilization=0.95, ...)' instead.
_VLLM_SHARE = re.compile(r"(?:'gpu_memory_utilization':\s*|\bgpu_memory_utilization=)(\d(?:\.\d{1,9})?)\b")
# The engine's config line ('... with config: model=..., max_seq_len=32768, ...') and its concurrency line
# ('Maximum concurrency for 32,768 tokens per request: 2.09x') both state max_model_len.
_MAX_MODEL_LEN = (
    re.compile(r"\bmax_seq_len=(\d{1,12})\b"),
    re.compile(r"Maximum concurrency for\s*(\d[\d,]{0,15})\s*tokens per request"),
)


# SGLang's start-up lines (0.3-0.5): 'KV Cache is allocated. #tokens: 442750, K size: 27.02 GB, V size: 27.02 GB'
# (MLA: 'KV size: X GB'; before 0.4.4 no '#tokens'), 'max_total_num_tokens=444500, chunked_prefill_size=...' and its
# 'server_args=ServerArgs(..., mem_fraction_static=0.88, ..., tp_size=1, ...)'. Its 'GB' are GiB (free bytes / 2^30).
_SGLANG_TOKENS = (
    re.compile(r"KV Cache is allocated\.\s*#tokens:\s*(\d{1,12})"),
    re.compile(r"\bmax_total_num_tokens=(\d{1,12})"),
)
_SGLANG_CACHE_GIB = re.compile(r"\b(?:K|V|KV) size:\s*(\d{1,9}(?:\.\d{1,9})?)\s*GB")
_SGLANG_ARGS = {
    "memory_utilization": re.compile(r"\bmem_fraction_static=(\d(?:\.\d{1,9})?)[,)]"),
    "tp": re.compile(r"\btp_size=(\d{1,4})[,)]"),
}


class _LogFigures:
    """What one pass over a start-up log collects, by engine."""

    def __init__(self) -> None:
        self.vllm_pools: set[int] = set()
        self.vllm_available: list[float] = []
        self.lengths: set[int] = set()
        self.vllm_tps: set[int] = set()
        self.vllm_pps: set[int] = set()
        self.vllm_shares: set[float] = set()
        self.vllm_non_default_args = False
        self.sglang_pools: set[int] = set()
        self.sglang_available: list[float] = []
        self.sglang_args: dict[str, set[float]] = {name: set() for name in _SGLANG_ARGS}
        #: (line number, the figure's words) of the first pool line whose figure is no count of tokens or GiB.
        self.malformed: tuple[int, str] | None = None

    def _check_figure(self, number: int, line: str, marker: str, rule: re.Pattern[str]) -> None:
        """A line that names a pool figure must give one a pattern reads: else it is a corrupt or edited log (a
        negative, NaN or fractional token count), never a line to skip."""
        if self.malformed is None and marker in line and not rule.search(line):
            start = line.index(marker)
            self.malformed = (number, line[start : start + len(marker) + 40].strip())

    def read(self, raw: bytes, number: int = 0) -> None:
        if b"max_seq_len=" in raw or b"Maximum concurrency for" in raw:
            text = _ANSI.sub("", raw.decode("utf-8", errors="replace"))
            self.lengths.update(int(match.replace(",", "")) for rule in _MAX_MODEL_LEN for match in rule.findall(text))
            self.vllm_tps.update(int(match) for match in _VLLM_TP.findall(text))
            self.vllm_pps.update(int(match) for match in _VLLM_PP.findall(text))
        if b"non-default args:" in raw or b"args: Namespace(" in raw:
            text = _ANSI.sub("", raw.decode("utf-8", errors="replace"))
            self.vllm_non_default_args = True
            self.vllm_shares.update(float(match) for match in _VLLM_SHARE.findall(text))
        if b"KV cache" in raw:
            line = _ANSI.sub("", raw.decode("utf-8", errors="replace"))
            self.vllm_pools.update(int(match.replace(",", "")) for match in _POOL_TOKENS.findall(line))
            # Each tensor-parallel worker logs its own figure; the engine sizes the pool by the smallest.
            self.vllm_available += [float(match) for match in _AVAILABLE_GIB.findall(line)]
            self._check_figure(number, line, "GPU KV cache size:", _POOL_TOKENS)
            self._check_figure(number, line, "Available KV cache memory:", _AVAILABLE_GIB)
        if b"KV Cache is allocated" in raw or b"max_total_num_tokens=" in raw:
            line = _ANSI.sub("", raw.decode("utf-8", errors="replace"))
            self.sglang_pools.update(int(match) for rule in _SGLANG_TOKENS for match in rule.findall(line))
            self._check_figure(number, line, "#tokens:", _SGLANG_TOKENS[0])
            self._check_figure(number, line, "max_total_num_tokens=", _SGLANG_TOKENS[1])
            if "KV Cache is allocated" in line and (sizes := _SGLANG_CACHE_GIB.findall(line)):
                # K + V (or MLA's one latent cache) on this rank; the smallest rank bounds the pool.
                self.sglang_available.append(sum(float(size) for size in sizes))
        if b"server_args=" in raw:
            line = _ANSI.sub("", raw.decode("utf-8", errors="replace"))
            for name, rule in _SGLANG_ARGS.items():
                self.sglang_args[name].update(float(match) for match in rule.findall(line))


def read_start_up_log(path: str) -> KvPoolReading:
    """The KV pool an engine's start-up log reports: vLLM's ('GPU KV cache size', 'Available KV cache memory') or
    SGLang's ('KV Cache is allocated', 'max_total_num_tokens', and the fraction and TP its server_args state)."""
    # A server's log may run to gigabytes: read it line by line, keep only the figures.
    figures = _LogFigures()
    with open_regular(path, what="start-up log") as handle:
        for number, raw in enumerate(handle):
            if number == 0 and raw.startswith(b"\x1f\x8b"):
                raise QuotacalcError("is gzip-compressed", source=path, fix="decompress it (gunzip) and give the log")
            figures.read(raw, number + 1)
    if figures.malformed is not None:
        line, words = figures.malformed
        raise QuotacalcError(
            f"line {line}: '{words}' is no pool figure (a whole number of tokens, or GiB at least 0)",
            source=path,
            fix="give the log as the engine printed it",
        )
    if any(stages > 1 for stages in figures.vllm_pps):
        # Each stage holds its own layers and its own pool: quotacalc prices tensor parallelism only.
        raise QuotacalcError(
            f"the engine ran {max(figures.vllm_pps)} pipeline-parallel stages (pipeline_parallel_size), which "
            "quotacalc does not price",
            source=path,
            fix="give the log of a start-up with pipeline_parallel_size=1",
        )
    sglang = bool(figures.sglang_pools or figures.sglang_available)
    if sglang and (figures.vllm_pools or figures.vllm_available):
        raise QuotacalcError(
            "both vLLM's and SGLang's KV cache lines", source=path, fix="give the log of one engine's start-up"
        )
    pools = sorted(figures.sglang_pools if sglang else figures.vllm_pools)
    if len(pools) > 1:
        raise QuotacalcError(
            f"{len(pools)} different KV pools ({', '.join(f'{pool:,}' for pool in pools)} tokens)",
            source=path,
            fix="give the log of one start-up",
        )
    lengths = figures.lengths
    if len(lengths) > 1:
        raise QuotacalcError(
            f"{len(lengths)} different max_model_len values ({', '.join(f'{length:,}' for length in sorted(lengths))})",
            source=path,
            fix="give the log of one start-up",
        )
    available = figures.sglang_available if sglang else figures.vllm_available
    if not pools and not available:
        raise QuotacalcError(
            "no 'GPU KV cache size: N tokens' or 'Available KV cache memory: X GiB' line (vLLM), nor 'KV Cache is "
            "allocated' (SGLang)",
            source=path,
            fix="give the log the engine prints while it starts (INFO level)",
        )
    if not sglang and available and min(available) <= 0:
        raise QuotacalcError(
            f"the engine found no memory for the KV cache (Available KV cache memory: {min(available):g} GiB): the "
            "start-up failed",
            source=path,
            fix="give the log of a start-up that served (raise gpu_memory_utilization or TP, or lower max_model_len)",
        )
    args: dict[str, float] = {}
    if not sglang:
        for name, values in (("tp", figures.vllm_tps), ("memory_utilization", figures.vllm_shares)):
            if len(values) > 1:
                raise QuotacalcError(
                    f"{len(values)} different {name} values", source=path, fix="give the log of one start-up"
                )
            if values:
                args[name] = values.pop()
        if figures.vllm_non_default_args and "memory_utilization" not in args:
            args["memory_utilization"] = VLLM_MEMORY_UTILIZATION  # left at vLLM's default: not listed
    if sglang:
        for name, values in figures.sglang_args.items():
            if len(values) > 1:
                raise QuotacalcError(
                    f"{len(values)} different {name} values in server_args",
                    source=path,
                    fix="give the log of one start-up",
                )
            if values:
                args[name] = values.pop()
    try:
        return KvPoolReading(
            source=path,
            engine="sglang" if sglang else GENERIC_ENGINE,
            kv_pool_tokens=pools[0] if pools else None,
            available_kv_gib=min(available) if available else None,
            max_model_len=None if sglang else (lengths.pop() if lengths else None),
            memory_utilization=args.get("memory_utilization"),
            tp=int(args["tp"]) if "tp" in args else None,
        )
    except ValidationError as error:
        first = error.errors()[0]
        field = str(first["loc"][0])
        what = KvPoolReading.model_fields[field].description or field
        raise QuotacalcError(
            f"{what}: {first['msg'].lower()}, got {first['input']}",
            source=path,
            fix="give the log of a start-up that sized a KV pool",
        ) from None
