"""Where the aggregation runs: DuckDB (embedded, the default), Postgres (pushed down into LiteLLM's database) and
Spark (local mode or a cluster). Each returns the aggregation's rows as tuples; nothing else crosses over.

Errors are one line, naming the file or the database, never its password.
"""

from __future__ import annotations

import contextlib
import json
import re
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from quotacalc.errors import QuotacalcError
from quotacalc.fleet.aggregate import transpile, with_source
from quotacalc.fleet.sources import (
    LITELLM_TABLE,
    SPARK_VIEW,
    SourceFormat,
    check_columns,
    check_lines,
    check_pages,
    duckdb_source,
    postgres_litellm_source,
    spark_source,
)

Rows = list[tuple[Any, ...]]


@dataclass(frozen=True)
class EngineSettings:
    """How the embedded engine may use the machine: the memory it holds before spilling to disk, and threads."""

    memory_limit: str = "2GB"
    threads: int | None = None


def _files_literal(paths: list[str]) -> str:
    return "[" + ", ".join("'" + path.replace("'", "''") + "'" for path in paths) + "]"


def _is_parquet(path: str) -> bool:
    return path.lower().endswith((".parquet", ".pq"))


def duckdb_relation(paths: list[str], source_format: SourceFormat) -> str:
    """The DuckDB table function reading ``paths`` out of core."""
    files = _files_literal(paths)
    if source_format.kind == "pages":  # one JSON value per page, pretty-printed or one a line
        return f"read_json_objects({files}, format='auto')"
    if source_format.kind == "lines":
        # One VARCHAR per line (a NUL delimiter and no quoting): each line is parsed as JSON by the query, so a
        # malformed line is counted, not fatal.
        return (
            f"read_csv({files}, columns={{'line': 'VARCHAR'}}, delim=chr(0), quote='', escape='', header=false, "
            "auto_detect=false, strict_mode=false)"
        )
    if all(_is_parquet(path) for path in paths):
        return f"read_parquet({files}, union_by_name=true)"
    if any(_is_parquet(path) for path in paths):
        raise QuotacalcError("mixes Parquet and CSV files", field="SOURCE", fix="read one kind per run")
    return f"read_csv({files}, header=true, all_varchar=true, union_by_name=true)"


def duckdb_sql(paths: list[str], source_format: SourceFormat, fields: dict[str, str], aggregation: str) -> str:
    """The whole query DuckDB runs over ``paths`` (checks each file's columns or first record first)."""
    import duckdb

    columns: dict[str, str] | None = None
    if source_format.kind == "pages":
        for path in paths:
            check_pages(Path(path), source_format, fields)
    elif source_format.kind == "lines":
        for path in paths:
            check_lines(Path(path), source_format, fields)
    else:
        connection = duckdb.connect()
        columns = {}
        try:
            for path in paths:
                relation = duckdb_relation([path], source_format)
                try:
                    described = connection.execute(f"DESCRIBE SELECT * FROM {relation}").fetchall()
                except duckdb.Error as error:
                    raise QuotacalcError(f"cannot read as {_kind(path)}: {_first_line(error)}", source=path) from None
                names = [row[0] for row in described]
                check_columns(path, names, source_format, fields)
                for name, type_name in ((row[0], str(row[1])) for row in described):
                    # Files that disagree on a column's type are read through its text.
                    columns[name] = type_name if columns.get(name, type_name) == type_name else "VARCHAR"
        finally:
            connection.close()
    source = duckdb_source(duckdb_relation(paths, source_format), source_format, fields, columns)
    return with_source(source, aggregation)


def duckdb_shortest_row_s(paths: list[str], source_format: SourceFormat, fields: dict[str, str]) -> float | None:
    """The shortest time a row of ``paths`` spans (a usage bucket's length), seconds; None when none does."""
    import duckdb

    source = duckdb_source(duckdb_relation(paths, source_format), source_format, fields)
    connection = duckdb.connect()
    try:
        value = connection.execute(f"SELECT MIN(end_s - start_s) FROM ({source}) AS s WHERE end_s > start_s").fetchone()
    except duckdb.Error as error:
        raise QuotacalcError(f"cannot read: {_first_line(error)}", source=", ".join(paths)) from None
    finally:
        connection.close()
    return None if value is None or value[0] is None else float(value[0])


def _kind(path: str) -> str:
    return "Parquet" if _is_parquet(path) else "CSV"


def _first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return text[0] if text else type(error).__name__


def run_duckdb(
    sql: str,
    settings: EngineSettings,
    progress: Callable[[float], None] | None = None,
    *,
    source: str = "SOURCE",
) -> Rows:
    """Run ``sql`` on an embedded DuckDB that spills to a temporary directory beyond ``settings.memory_limit``."""
    import threading

    import duckdb

    with tempfile.TemporaryDirectory(prefix="quotacalc-fleet-") as spill:
        connection = duckdb.connect(config={"memory_limit": settings.memory_limit, "temp_directory": spill})
        try:
            connection.execute("SET TimeZone = 'UTC'")
            connection.execute("SET preserve_insertion_order = false")
            if settings.threads:
                connection.execute(f"SET threads = {int(settings.threads)}")
            if progress is not None:
                # DuckDB tracks a query's progress only with its progress bar on; its own printing stays off.
                connection.execute("SET enable_progress_bar = true")
                connection.execute("SET enable_progress_bar_print = false")
            # The query runs on a thread of its own while this one waits in Python: Ctrl-C lands here as
            # KeyboardInterrupt whenever it comes, and stops the query, which DuckDB's client, left to itself,
            # turns into a RuntimeError or, in a short statement, loses.
            outcome: list[Any] = []
            finished = threading.Event()

            def run() -> None:
                try:
                    outcome.append(connection.execute(sql).fetchall())
                except BaseException as error:  # handed to the waiting thread, which raises it
                    outcome.append(error)
                finally:
                    finished.set()

            # Waited on by an Event, not Thread.join: a join that Ctrl-C interrupts can leave the thread marked as
            # ended while it runs (CPython 3.11), and the connection would be closed under the query.
            worker = threading.Thread(target=run, daemon=True)
            try:
                worker.start()
                while not finished.wait(0.2):
                    if progress is not None:
                        _report_progress(connection, progress)
            except KeyboardInterrupt:
                if worker.ident is not None:  # started: stop the query before the connection closes
                    connection.interrupt()
                    finished.wait()
                raise
            (result,) = outcome
            if isinstance(result, duckdb.Error):
                raise QuotacalcError(f"the query failed: {_first_line(result)}", source=source) from None
            if isinstance(result, BaseException):
                raise result
            return result
        finally:
            connection.close()


def _report_progress(connection: Any, progress: Callable[[float], None]) -> None:
    try:
        value = connection.query_progress()
    except Exception:  # the query ended between the check and the call
        return
    if value is not None and value >= 0:
        progress(float(value))


# --- Postgres ------------------------------------------------------------------------------------------------


def redact_url(url: str) -> str:
    """A connection URL or key=value string without its password (``postgresql://user:***@host/db``)."""
    # Up to the last '@': a password may hold '/' or '@' unescaped, a host never holds '@'.
    url = re.sub(r"(://[^/:@]*):.*@", r"\1:***@", url)
    return re.sub(r"(password\s*=\s*)('[^']*'|\S+)", r"\1***", url, flags=re.IGNORECASE)


def _without_secrets(text: str, url: str) -> str:
    from urllib.parse import unquote, urlsplit

    try:
        password = urlsplit(url).password
    except ValueError:
        password = None
    text = text.replace(url, redact_url(url))
    for secret in {password, unquote(password) if password else None}:
        if secret:
            text = text.replace(secret, "***")
    return re.sub(r"password=\S+", "password=***", text)


def postgres_sql(fields: dict[str, str], aggregation_duckdb: str, table: str = LITELLM_TABLE) -> str:
    """The whole query Postgres runs: LiteLLM's table read in place, the aggregation transpiled."""
    return with_source(postgres_litellm_source(fields, table), transpile(aggregation_duckdb, "postgres"))


def run_postgres(url: str, fields: dict[str, str], sql: str, table: str = LITELLM_TABLE) -> Rows:
    """Run ``sql`` inside the database at ``url``; only the aggregation's rows travel back."""
    try:
        import psycopg
    except ImportError:
        raise QuotacalcError(
            "reading from Postgres needs psycopg, which is not installed", fix="pip install 'quotacalc[postgres]'"
        ) from None
    shown = redact_url(url)
    try:
        with psycopg.connect(url, connect_timeout=10) as connection, connection.cursor() as cursor:
            connection.read_only = True
            # The catalog, not information_schema: a role without SELECT on the table still sees its columns, and
            # the query then fails saying so.
            quoted = '"' + table.replace('"', '""') + '"'
            cursor.execute(
                "SELECT attname FROM pg_attribute WHERE attrelid = to_regclass(%s) AND attnum > 0 AND NOT attisdropped",
                (quoted,),
            )
            columns = [row[0] for row in cursor.fetchall()]
            if not columns:
                raise QuotacalcError(
                    f'no table "{table}"',
                    source=shown,
                    fix="point --from at LiteLLM's database, or grant SELECT on the table",
                )
            missing = next(
                (fields[name] for name in ("request_id", "tenant", "start", "end") if fields.get(name) not in columns),
                None,
            )
            if missing:
                raise QuotacalcError(f"not LiteLLM's {table}: no column '{missing}'", source=shown)
            cursor.execute(sql)
            return [tuple(row) for row in cursor.fetchall()]
    except psycopg.Error as error:
        raise QuotacalcError(_without_secrets(_first_line(error), url), source=shown) from None


# --- Spark ---------------------------------------------------------------------------------------------------


def spark_session(master: str = "local[2]"):
    """A Spark session (local mode by default), on UTC; quiet."""
    try:
        from pyspark.sql import SparkSession
    except ImportError:
        raise QuotacalcError(
            "--engine spark needs pyspark, which is not installed", fix="pip install 'quotacalc[spark]'"
        ) from None
    session = (
        SparkSession.builder.master(master)
        .appName("quotacalc-fleet")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    return session


def spark_sql(source_format: SourceFormat, fields: dict[str, str], columns: set[str], aggregation_duckdb: str) -> str:
    """The whole query over the view ``run_spark`` registers (``columns``: a table's own), as one statement."""
    return with_source(spark_source(source_format, fields, columns), transpile(aggregation_duckdb, "spark"))


def spark_statements(sql: str) -> list[tuple[str | None, str]]:
    """``sql`` (one Spark statement) as the statements Spark runs: each common table expression read more than once
    becomes a cached table (``CACHE TABLE``: computed once), each other one a temporary view, then the final SELECT.
    Spark plans every reference to a common table expression (or a view) anew, so a chain of them read by several
    others is computed once per path through it: the aggregation's plan held 159 scans of the log. Returns
    (name or None for the final SELECT, statement) in order."""
    from collections import Counter

    import sqlglot
    from sqlglot import exp

    tree = sqlglot.parse_one(sql, read="spark")
    ctes = tree.args.get("with_")
    if ctes is None:
        return [(None, sql)]
    names = {cte.alias_or_name.lower() for cte in ctes.expressions}
    reads = Counter(
        table.name.lower() for table in tree.find_all(exp.Table) if not table.db and table.name.lower() in names
    )
    statements: list[tuple[str | None, str]] = []
    for cte in ctes.expressions:
        name = cte.alias_or_name
        body = cte.this.sql(dialect="spark", pretty=True)
        quoted = "`" + name.replace("`", "``") + "`"
        if reads[name.lower()] > 1 and not _is_filter(cte.this, names):
            statements.append((name, f"CACHE TABLE {quoted} AS\n{body}"))
        else:
            statements.append((name, f"CREATE OR REPLACE TEMPORARY VIEW {quoted} AS\n{body}"))
    tree.set("with_", None)
    statements.append((None, tree.sql(dialect="spark", pretty=True)))
    return statements


def _is_filter(select: Any, names: set[str]) -> bool:
    """A SELECT that only filters or projects one of the other expressions (no join, grouping or window): cheaper
    to run again from that one, cached, than to hold a second copy of its rows."""
    from sqlglot import exp

    if not isinstance(select, exp.Select) or select.args.get("joins") or select.args.get("group"):
        return False
    if select.find(exp.Window) is not None or select.find(exp.AggFunc) is not None:
        return False
    source = select.args.get("from_")
    table = source.this if source is not None else None
    return isinstance(table, exp.Table) and not table.db and table.name.lower() in names


def spark_script(sql: str) -> str:
    """``spark_statements`` as one script of statements ended by semicolons (``--print-sql spark``)."""
    return "".join(statement.rstrip() + ";\n" for _, statement in spark_statements(sql))


def _is_one_document(path: str) -> bool:
    """The file holds one JSON value (a page, pretty-printed or not), not one a line."""
    text = Path(path).read_text(encoding="utf-8", errors="replace").strip()
    try:
        _, end = json.JSONDecoder().raw_decode(text)
    except ValueError:
        return False
    return end == len(text)


def _spark_frame(session, paths: list[str], source_format: SourceFormat):
    """The log as a Spark DataFrame: a table's columns, or one string column ``value`` a line (a page for a file
    that holds one)."""
    if source_format.kind == "lines":
        return session.read.text(paths)
    if source_format.kind == "pages":
        frames = [session.read.text(path, wholetext=_is_one_document(path)) for path in paths]
        frame = frames[0]
        for other in frames[1:]:
            frame = frame.unionByName(other)
        return frame
    if all(_is_parquet(path) for path in paths):
        return session.read.parquet(*paths)
    if any(_is_parquet(path) for path in paths):
        raise QuotacalcError("mixes Parquet and CSV files", field="SOURCE", fix="read one kind per run")
    return session.read.option("header", "true").option("multiLine", "true").option("escape", '"').csv(paths)


def run_spark(
    paths: list[str], source_format: SourceFormat, fields: dict[str, str], aggregation: str, master: str
) -> Rows:
    """Read the log into Spark (a LiteLLM export as ``LiteLLM_SpendLogs``, any other as ``fleet_log``) and run the
    aggregation there. Each file is checked against its format first, as on DuckDB."""
    local = [path for path in paths if "://" not in path]
    if source_format.kind == "pages":
        for path in local:
            check_pages(Path(path), source_format, fields)
    elif source_format.kind == "lines":
        for path in local:
            check_lines(Path(path), source_format, fields)
    session = spark_session(master)
    try:
        frame = _spark_frame(session, paths, source_format)
    except QuotacalcError:
        raise
    except Exception as error:
        raise QuotacalcError(f"Spark cannot read it: {_first_line(error)}", source=", ".join(paths)) from None
    if source_format.kind == "table":
        check_columns(", ".join(paths), frame.columns, source_format, fields)
    view = LITELLM_TABLE if source_format.name == "litellm" else SPARK_VIEW
    frame.createOrReplaceTempView(view)
    statements = spark_statements(spark_sql(source_format, fields, set(frame.columns), aggregation))
    made: list[str] = []
    try:
        for name, statement in statements[:-1]:
            # The statement's SELECT as a view; a cached one checkpointed (computed once, its plan cut there, so
            # the plans after it stay small to analyze), as CACHE TABLE would but without matching every later
            # plan against the cached ones.
            kind, body = statement.split("\n", 1)
            view = session.sql(body)
            if kind.startswith("CACHE TABLE"):
                view = view.localCheckpoint(eager=True)
            view.createOrReplaceTempView(name)
            made.append(name or "")
        return [tuple(row) for row in session.sql(statements[-1][1]).collect()]
    except Exception as error:
        raise QuotacalcError(f"the Spark query failed: {_first_line(error)}", source=", ".join(paths)) from None
    finally:
        # The session may be a cluster's, shared: leave no view of this run in it.
        for name in reversed(made):
            with contextlib.suppress(Exception):
                session.catalog.dropTempView(name)
