"""scripts/mutation_tally.py: which verdicts carry over from an earlier mutmut run, and the tally."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "mutation_tally.py"
spec = importlib.util.spec_from_file_location("mutation_tally", SCRIPT)
tally = importlib.util.module_from_spec(spec)
spec.loader.exec_module(tally)


def _meta(root: Path, exit_codes: dict[str, int | None], hashes: dict[str, str]) -> Path:
    path = root / "quotacalc" / "core" / "toy.py.meta"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"exit_code_by_key": exit_codes, "hash_by_function_name": hashes}), encoding="utf-8")
    return root


def test_kills_of_unchanged_functions_carry_over_and_everything_else_reruns(tmp_path):
    m = "quotacalc.core.toy."
    old = _meta(
        tmp_path / "old",
        {m + "x_same__mutmut_1": 1, m + "x_same__mutmut_2": 0, m + "x_edited__mutmut_1": 1, m + "x_same__mutmut_3": 33},
        {"x_same": "aaa", "x_edited": "bbb"},
    )
    new = _meta(
        tmp_path / "new",
        {
            m + "x_same__mutmut_1": None,  # killed before, same source: carried
            m + "x_same__mutmut_2": None,  # survived before: must run again
            m + "x_same__mutmut_3": None,  # no tests before: must run again
            m + "x_edited__mutmut_1": None,  # its function changed: must run again
            m + "x_added__mutmut_1": 0,  # run now: this run's verdict
            m + "x_added__mutmut_2": 24,  # looped until its CPU-time limit: caught
        },
        {"x_same": "aaa", "x_edited": "ccc", "x_added": "ddd"},
    )
    codes, hashes = tally.read_meta(new)
    results = tally.verdicts(codes, hashes, old)
    assert results == {
        m + "x_same__mutmut_1": ("killed", True),
        m + "x_same__mutmut_2": ("not run", False),
        m + "x_same__mutmut_3": ("not run", False),
        m + "x_edited__mutmut_1": ("not run", False),
        m + "x_added__mutmut_1": ("survived", False),
        m + "x_added__mutmut_2": ("timeout", False),
    }
    # 1 killed and 1 timed out of the 3 with a verdict: 66.7% caught; 3 still to run.
    last = tally.table(results, markdown=True).splitlines()[-1]
    assert last == "| **all** | 6 | 1 | 1 | 1 | 0 | 3 | 1 | 66.7% |"
    assert tally.module_of(m + "xǁToyǁstep__mutmut_4") == "quotacalc.core.toy"


def test_keeping_verdicts_records_only_a_changed_test_selection(tmp_path, monkeypatch, capsys):
    import mutmut.configuration

    stats = tmp_path / "mutmut-stats.json"
    old = {"test_execution": "a", "test_selection": "b", "timeout": "c", "type_check": "d"}
    stats.write_text(json.dumps({"config_fingerprint": old, "duration_by_test": {"t": 1.0}}), encoding="utf-8")

    fingerprint = {**old, "test_selection": "new"}

    class Config:
        def config_fingerprint(self):
            return dict(fingerprint)

    monkeypatch.setattr(mutmut.configuration, "config", lambda: Config())
    assert tally.keep_verdicts(stats) == 0
    saved = json.loads(stats.read_text(encoding="utf-8"))
    assert saved == {"config_fingerprint": fingerprint, "duration_by_test": {"t": 1.0}}
    # Another change (how every test runs) can flip any verdict: refused, nothing written.
    fingerprint["test_execution"] = "other"
    assert tally.keep_verdicts(stats) == 1
    assert json.loads(stats.read_text(encoding="utf-8")) == saved
    assert "more than the test selection changed (test_execution)" in capsys.readouterr().err
