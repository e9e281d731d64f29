"""``quotacalc fleet --from postgresql://...``: the aggregation pushed down into a real PostgreSQL holding
LiteLLM_SpendLogs in LiteLLM's column layout, giving the figures DuckDB gives on the same rows; and its errors.

The server is a throwaway cluster (initdb into a temporary directory, pg_ctl on a free loopback port), started and
stopped by the fixture. initdb refuses to run as root, so as root the cluster belongs to the ``postgres`` user
(Debian's package creates it) or, failing that, ``nobody``.
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

import pytest

pytest.importorskip("duckdb")
pytest.importorskip("sqlglot")
psycopg = pytest.importorskip("psycopg")

from tests.fleet_logs import (  # noqa: E402
    LITELLM_COLUMNS,
    PLAN,
    Request,
    assert_same,
    figures,
    golden_requests,
    litellm_row,
    write_litellm_csv,
)

PASSWORD = "s3cret-Pa55-not-in-output"


def _postgres_bin() -> Path | None:
    found = shutil.which("pg_ctl")
    if found:
        return Path(os.path.realpath(found)).parent
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"))
    return Path(candidates[-1]).parent if candidates else None


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _as_owner(command: list[str], owner: str | None) -> list[str]:
    return ["runuser", "-u", owner, "--", *command] if owner else command


@pytest.fixture(scope="module")
def postgres_url():
    """A running PostgreSQL with LiteLLM_SpendLogs loaded with the golden rows; its URL (with the password)."""
    binaries = _postgres_bin()
    if binaries is None:
        pytest.skip("PostgreSQL is not installed (.ci/run installs Debian's postgresql)")
    owner = None
    if os.geteuid() == 0:
        import pwd

        for name in ("postgres", "nobody"):
            with contextlib.suppress(KeyError):
                pwd.getpwnam(name)
                owner = name
                break
    root = Path(tempfile.mkdtemp(prefix="quotacalc-pg-"))
    data, sockets, password_file = root / "data", root / "sockets", root / "password"
    sockets.mkdir()
    password_file.write_text(PASSWORD + "\n")
    if owner:
        import pwd

        entry = pwd.getpwnam(owner)
        for path in (root, sockets, password_file):
            os.chown(path, entry.pw_uid, entry.pw_gid)
    port = _free_port()
    run = {"check": True, "capture_output": True, "text": True, "timeout": 120}
    subprocess.run(
        _as_owner(
            [
                str(binaries / "initdb"),
                "-D",
                str(data),
                "-U",
                "fleet",
                f"--pwfile={password_file}",
                "--auth=scram-sha-256",
                "-E",
                "UTF8",
                "--locale=C",
            ],
            owner,
        ),
        **run,
    )
    options = f"-p {port} -k {sockets} -c listen_addresses=127.0.0.1 -c fsync=off"
    subprocess.run(
        _as_owner(
            [str(binaries / "pg_ctl"), "-D", str(data), "-o", options, "-l", str(root / "log"), "-w", "start"], owner
        ),
        **run,
    )
    url = f"postgresql://fleet:{PASSWORD}@127.0.0.1:{port}/postgres"
    try:
        with psycopg.connect(url, autocommit=True) as connection:
            columns = ", ".join(f'"{name}" {kind}' for name, kind in LITELLM_COLUMNS)
            connection.execute(f'CREATE TABLE "LiteLLM_SpendLogs" ({columns})')
            names = [name for name, _ in LITELLM_COLUMNS]
            placeholders = ", ".join(["%s"] * len(names))
            quoted = ", ".join(f'"{name}"' for name in names)
            for request in pg_requests():
                row = litellm_row(request)
                connection.execute(
                    f'INSERT INTO "LiteLLM_SpendLogs" ({quoted}) VALUES ({placeholders})', [row[n] for n in names]
                )
            connection.execute(f"CREATE ROLE reader LOGIN PASSWORD '{PASSWORD}'")
        yield url, port
    finally:
        subprocess.run(
            _as_owner([str(binaries / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop"], owner),
            check=False,
            capture_output=True,
            timeout=60,
        )
        shutil.rmtree(root, ignore_errors=True)


def pg_requests() -> list[Request]:
    # h1: answered from LiteLLM's response cache, no load (were it counted, a's 1 s peak and the 60 s ratio would move)
    return [
        *golden_requests(),
        Request("c1", "b", 100.0, 100.0, cached=400),
        Request("h1", "a", 20.2, 20.4, cache_hit=True),
    ]


@pytest.fixture()
def plan_path(tmp_path) -> Path:
    path = tmp_path / "plan.yaml"
    path.write_text(PLAN, encoding="utf-8")
    return path


def test_postgres_gives_duckdbs_figures_on_the_same_rows(run_cli, postgres_url, plan_path, tmp_path) -> None:
    url, _ = postgres_url
    code, out, err = run_cli(
        "fleet", "--from", url, "--format", "litellm", "--plan", plan_path, "--window", "1,10,60", "--json"
    )
    assert code == 0, err
    in_postgres = json.loads(out)
    assert PASSWORD not in out and PASSWORD not in err
    assert in_postgres["engine"] == "postgres"
    assert in_postgres["sources"] == [url.replace(PASSWORD, "***") + " table LiteLLM_SpendLogs"]
    export = write_litellm_csv(tmp_path / "spendlogs.csv", pg_requests())
    code, out, err = run_cli(
        "fleet", export, "--format", "litellm", "--plan", plan_path, "--window", "1,10,60", "--json"
    )
    assert code == 0, err
    assert_same(figures(in_postgres), figures(json.loads(out)))
    # In 60 s windows: r1-r3 in window 0 (a 2U/60, b U/60, the fleet 3U/60), c1 alone in window 1: ratio 1.
    assert in_postgres["oversubscription_ratio"]["60"] == pytest.approx(1.0)
    assert in_postgres["oversubscription_ratio"]["1"] > 1.1
    assert in_postgres["rows_read"] == 4


def test_write_from_postgres_records_the_table_not_the_password(run_cli, postgres_url, plan_path) -> None:
    url, _ = postgres_url
    code, _, err = run_cli("fleet", "--from", url, "--format", "litellm", "--plan", plan_path, "--write", plan_path)
    assert code == 0, err
    text = plan_path.read_text(encoding="utf-8")
    assert PASSWORD not in text and "table LiteLLM_SpendLogs" in text


def test_connection_refused_is_one_line_without_the_password(run_cli, plan_path) -> None:
    url = f"postgresql://fleet:{PASSWORD}@127.0.0.1:{_free_port()}/postgres"
    code, out, err = run_cli("fleet", "--from", url, "--format", "litellm", "--plan", plan_path)
    assert code == 1
    assert PASSWORD not in out + err and err.count("\n") == 1
    assert err.startswith("quotacalc: error: postgresql://fleet:***@127.0.0.1:")
    assert "refused" in err.lower() or "failed" in err.lower()


def test_a_wrong_password_is_one_line_without_it(run_cli, postgres_url, plan_path) -> None:
    _, port = postgres_url
    wrong = "wrong-" + PASSWORD
    code, out, err = run_cli(
        "fleet",
        "--from",
        f"postgresql://fleet:{wrong}@127.0.0.1:{port}/postgres",
        "--format",
        "litellm",
        "--plan",
        plan_path,
    )
    assert code == 1 and wrong not in out + err and err.count("\n") == 1
    assert "password authentication failed" in err


def test_a_missing_table_is_one_line(run_cli, postgres_url, plan_path) -> None:
    url, _ = postgres_url
    code, _, err = run_cli("fleet", "--from", url, "--table", "SpendLogs", "--format", "litellm", "--plan", plan_path)
    assert code == 1
    assert 'no table "SpendLogs"' in err and PASSWORD not in err


def test_no_read_permission_is_one_line(run_cli, postgres_url, plan_path) -> None:
    _, port = postgres_url
    url = f"postgresql://reader:{PASSWORD}@127.0.0.1:{port}/postgres"
    code, out, err = run_cli("fleet", "--from", url, "--format", "litellm", "--plan", plan_path)
    assert code == 1, out
    assert "permission denied" in err and PASSWORD not in out + err and err.count("\n") == 1
