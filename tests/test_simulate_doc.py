"""docs/simulate.md's table is what `quotacalc simulate examples/simulate-platform.yaml` prints (same seed, same
bytes): a change to the simulator or the prices that moves a figure fails here until the page shows it."""

from __future__ import annotations

import json
import re
from pathlib import Path

import yaml

from quotacalc.admission.policies import POLICY_NAMES

ROOT = Path(__file__).resolve().parent.parent
ROW = re.compile(rf"^\s*({'|'.join(POLICY_NAMES)})\s+(fair|deep_priority)\s")
EXAMPLE = ROOT / "examples" / "simulate-platform.yaml"


def _rows(text: str) -> list[str]:
    return [" ".join(line.split()) for line in text.splitlines() if ROW.match(line)]


def test_the_simulate_pages_table_is_what_simulate_prints(run_cli, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    code, out, err = run_cli("simulate", str(EXAMPLE))
    assert code == 0, err
    page = (ROOT / "docs" / "simulate.md").read_text(encoding="utf-8")
    shown = _rows(page[page.index("quotacalc simulate examples/simulate-platform.yaml            # the table below") :])
    example = yaml.safe_load(EXAMPLE.read_text(encoding="utf-8"))
    runs = len(example["policies"]) * len(example["queueing"])
    assert len(shown) == runs
    assert _rows(out)[:runs] == shown  # the headline table comes first
    # The sentence under the table: initech's TTFT p99 under debit_on_completion_forgiving, fair against deep_priority.
    code, out, err = run_cli("simulate", str(EXAMPLE), "--json")
    assert code == 0, err
    ttft = {
        run["queueing"]: next(t["ttft_p99_s"] for t in run["tenants"] if t["tenant"] == "initech")
        for run in json.loads(out)["policies"]
        if run["policy"] == "debit_on_completion_forgiving"
    }
    stated = f"{ttft['fair']:.2f} s with fair queueing against {ttft['deep_priority']:.1f} s under `deep_priority`"
    assert stated in " ".join(page.split())
