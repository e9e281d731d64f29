"""simulate's outputs for reading why: --seeds with intervals, --trace and --timeseries files, --max-seconds,
and their bad values refused before anything runs."""

from __future__ import annotations

import csv
import json
import math
import sys
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "simulate-named-plan.yaml"


def test_seeds_give_each_headline_figure_a_mean_and_a_95_percent_interval(run_cli):
    code, out, err = run_cli("simulate", str(EXAMPLE), "--requests", "300", "--seeds", "3", "--json")
    assert code == 0, err
    document = json.loads(out)
    assert document["seeds"]["seeds"] == [11, 12, 13]
    summary = document["seeds"]["summary"]
    assert len(summary) == len(document["policies"])
    for row in summary:
        assert row["seeds"] == 3
        share = row["figures"]["admission_reject_share"]
        assert share["n"] == 3 and share["ci95_low"] <= share["mean"] <= share["ci95_high"]


def test_the_interval_is_students_t():
    from quotacalc.sim.metrics import interval, t_975

    # Three values 1, 2, 3: mean 2, s = 1, t(2) = 4.303: 2 ± 4.303 / sqrt(3), clipped at 0 below.
    figure = interval([1.0, 2.0, 3.0])
    assert figure.mean == 2.0
    assert figure.ci95_high == pytest.approx(2.0 + 4.303 / math.sqrt(3))
    assert figure.ci95_low == 0.0
    assert interval([5.0]).ci95_low is None and interval([]).mean is None
    assert t_975(1) == 12.706 and t_975(22) == 2.086 and t_975(1000) == 1.96


@pytest.mark.parametrize("suffix", [".jsonl", ".csv", ".parquet"])
def test_trace_has_one_row_per_request_attempt_and_timeseries_samples_each_tenant(run_cli, tmp_path, suffix):
    if suffix == ".parquet":
        pytest.importorskip("pyarrow")
    trace, series = tmp_path / f"trace{suffix}", tmp_path / f"series{suffix}"
    code, out, err = run_cli(
        "simulate", str(EXAMPLE), "--requests", "200", "--json", "--trace", str(trace), "--timeseries", str(series)
    )
    assert code == 0, err
    runs = json.loads(out)["policies"]
    rows = _read(trace)
    series_rows = _read(series)
    for run in runs:
        mine = [r for r in rows if r["policy"] == run["policy"] and r["queueing"] == run["queueing"]]
        # Every request ends in one row: admitted ones by how they ended, refused ones by why.
        assert len(mine) == run["requests"] + run["retries"]
        ended = [r for r in mine if r["request"] not in (None, "")]
        assert len(ended) == run["admitted"]
        assert sum(float(r["billed_units"]) for r in ended) == pytest.approx(run["debited_units"], rel=1e-9)
        times = [float(r["time_s"]) for r in series_rows if r["policy"] == run["policy"]]
        assert times and min(times) >= 1.0
    assert {"bucket_level_units", "gateway_queue", "served_units", "live_kv_tokens"} <= set(series_rows[0])


def _read(path: Path) -> list[dict]:
    if path.suffix == ".jsonl":
        return [json.loads(line) for line in path.read_text().splitlines()]
    if path.suffix == ".csv":
        return list(csv.DictReader(path.open()))
    import pyarrow.parquet as pq

    return pq.read_table(path).to_pylist()


def test_max_seconds_ends_the_run_cleanly_with_what_it_has(run_cli, monkeypatch):
    from quotacalc.sim import events

    original = events.Simulation.run

    def stop_at_once(self, progress=None, should_stop=None):
        return original(self, progress, should_stop=(lambda: True) if should_stop else None)

    monkeypatch.setattr(events.Simulation, "run", stop_at_once)
    code, out, err = run_cli("simulate", str(EXAMPLE), "--requests", "100000", "--max-seconds", "30", "--json")
    assert code == 0, err
    document = json.loads(out)
    assert document["partial"] is True and document["stopped_by"] == "max_seconds"
    assert all(run["stopped_by"] == "max_seconds" and run["requests"] < 100000 for run in document["policies"])
    assert "--max-seconds reached" in err


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("--trace", "trace.txt"), "--trace"),
        (("--timeseries", "no/such/folder/t.csv"), "no folder"),
        (("--seeds", "0"), "--seeds"),
        (("--max-seconds", "-1"), "--max-seconds"),
    ],
)
def test_bad_output_flags_are_refused_before_simulating(run_cli, tmp_path, monkeypatch, args, needle):
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli("simulate", str(EXAMPLE), *args)
    assert code in (1, 2) and out == ""
    assert needle in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_parquet_without_pyarrow_says_how_to_get_it(run_cli, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    code, _, err = run_cli("simulate", str(EXAMPLE), "--trace", str(tmp_path / "t.parquet"))
    assert code == 2 and "quotacalc[trace]" in err


def test_timeseries_engine_queue_counts_each_tenants_requests_waiting_in_the_engines(run_cli, tmp_path, monkeypatch):
    """At every sample, each tenant's engine_queue is what a scan of every replica's queue finds: the requests
    sent there and not yet scheduled (or preempted and queued again), counted once each. The example preempts
    and fails engines, so every path into and out of an engine's queue runs."""
    from quotacalc.sim import events
    from quotacalc.sim.request import WAITING

    scanned: list[tuple[float, str, int]] = []
    sample = events.Simulation._sample

    def scanning(self, now):
        for index, tenant in enumerate(self.tenants):
            if self.counters[index].requests:
                waiting = {
                    entry[2].id
                    for pool in self.pools
                    for replica in pool.replicas
                    for entry in replica.waiting
                    if entry[2].state == WAITING and entry[2].replica is replica and entry[2].tenant == index
                }
                scanned.append((now, tenant.name, len(waiting)))
        sample(self, now)

    monkeypatch.setattr(events.Simulation, "_sample", scanning)
    series = tmp_path / "series.jsonl"
    platform = EXAMPLE.parent / "simulate-platform.yaml"
    code, _, err = run_cli("simulate", str(platform), "--requests", "600", "--timeseries", str(series), "--json")
    assert code == 0, err
    rows = _read(series)
    assert len(rows) == len(scanned)
    assert [(r["time_s"], r["tenant"], r["engine_queue"]) for r in rows] == scanned
    assert all(0 <= r["engine_queue"] <= r["in_flight"] for r in rows)
    assert max(r["engine_queue"] for r in rows) > 0  # queues form, so the comparison compares something


def test_a_long_run_shows_its_time_left_on_a_terminal_and_ctrl_c_stops_it_with_exit_130(tmp_path):
    """The run of ten million requests, as a person starts it: stderr a terminal (a pseudo-terminal here). After a
    second the bar shows on stderr with the time left; SIGINT then stops it at once (here: within 10 s, the
    bound of a loaded machine), exit 130, with the partial results on stdout."""
    import os
    import pty
    import select
    import signal
    import subprocess
    import time

    leader, follower = pty.openpty()
    env = {**os.environ, "PYTHONPATH": str(EXAMPLE.parent.parent), "COLUMNS": "120"}
    command = [sys.executable, "-c", "from quotacalc.cli.app import main; main()", "simulate", str(EXAMPLE)]
    child = subprocess.Popen(
        [*command, "--requests", "10000000", "--json"],
        stdout=subprocess.PIPE,
        stderr=follower,
        env=env,
    )
    os.close(follower)
    shown = b""
    try:
        deadline = time.monotonic() + 60
        while b"left" not in shown and time.monotonic() < deadline:
            if select.select([leader], [], [], 0.5)[0]:
                shown += os.read(leader, 65536)
        assert b"simulating" in shown and b"left" in shown  # the bar, and its estimate of the time left
        child.send_signal(signal.SIGINT)
        out, _ = child.communicate(timeout=10)
    finally:
        child.kill()
        os.close(leader)
    assert child.returncode == 130
    document = json.loads(out)
    assert document["partial"] is True and document["policies"][0]["stopped_by"] == "interrupted"
