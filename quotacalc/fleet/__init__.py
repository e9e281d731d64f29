"""``quotacalc fleet``: peaks, tenants over contract and the oversubscription ratio, measured from usage logs.

One reader per source format turns a log into the canonical request rows (``formats``, ``sources``); one
aggregation, written once in SQL and transpiled with SQLGlot (``aggregate``), runs on DuckDB, Postgres or
Spark (``engines``) and returns a few hundred rows that ``report`` turns into the figures.
"""
