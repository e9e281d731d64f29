"""docs/simulate.md's table is what `quotacalc simulate examples/simulate-platform.yaml` prints (same seed, same
bytes): a change to the simulator or the prices that moves a figure fails here until the page shows it."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ROW = re.compile(
    r"^\s*(reserve_max_tokens|reserve_capped|incremental_lease|debit_on_completion)\s+(fair|deep_priority)\s"
)


def _rows(text: str) -> list[str]:
    return [" ".join(line.split()) for line in text.splitlines() if ROW.match(line)]


def test_the_simulate_pages_table_is_what_simulate_prints(run_cli, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    code, out, err = run_cli("simulate", str(ROOT / "examples" / "simulate-platform.yaml"))
    assert code == 0, err
    page = (ROOT / "docs" / "simulate.md").read_text(encoding="utf-8")
    shown = _rows(page[page.index("quotacalc simulate examples/simulate-platform.yaml            # the table below") :])
    assert len(shown) == 8
    assert _rows(out)[:8] == shown
    # The sentence under the table: initech's TTFT p99 under debit_on_completion, fair against deep_priority (the
    # per-tenant table's column before ITL p99; debit_on_completion is the fourth policy of each queueing mode).
    initech = [line.split() for line in out.splitlines() if re.match(r"^\s+initech\s", line)]
    assert len(initech) == 8

    def ttft_p99_s(tokens: list[str]) -> float:
        value, unit = float(tokens[-4]), tokens[-3]
        return value / 1000 if unit == "ms" else value

    fair, deep = ttft_p99_s(initech[3]), ttft_p99_s(initech[7])
    stated = f"{fair:.2f} s with fair queueing against {deep:.1f} s under `deep_priority`"
    assert stated in " ".join(page.split())
