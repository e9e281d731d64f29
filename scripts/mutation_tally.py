"""Tally a mutmut run per module, optionally carrying verdicts over from an earlier run.

mutmut keeps each source file's verdicts in ``mutants/<file>.meta`` (``exit_code_by_key``) with a hash
of every function (``hash_by_function_name``). A full run takes hours on a small machine, while the
tests written after it only ever add kills. So a later tree can be scored without re-running every
mutant: a mutant of a function whose source is unchanged (same hash) that the earlier run killed stays
killed (tests were only added); every other mutant (an earlier survivor, or any mutant of a new or
changed function) must be run again on the later tree.

Usage (from the repository root, after ``mutmut run`` has generated ``mutants/``):

    python scripts/mutation_tally.py [--previous OLD/mutants] --to-run      # names to pass to mutmut run
    python scripts/mutation_tally.py [--previous OLD/mutants] [--markdown]  # the per-module table
    python scripts/mutation_tally.py [--previous OLD/mutants] --survivors    # surviving names
    python scripts/mutation_tally.py --keep-verdicts-for-new-tests          # see below

mutmut resets every verdict when ``pytest_add_cli_args_test_selection`` changes, even when the change
only adds test files. Adding tests can only turn survivors into kills, so after adding files to the
selection ``--keep-verdicts-for-new-tests`` records the new selection's fingerprint as the one the
verdicts were made under; the next ``mutmut run`` then collects the new tests' coverage and keeps
the verdicts (re-run the survivors by name to give the new tests their chance).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import Counter
from pathlib import Path

#: mutmut's exit-code meanings (mutmut/stats.py): 1 and 3 kill, 0 survives, 5 and 33 mean no test covers it;
#: the timeouts (a mutant that loops forever, stopped by its CPU-time limit) are caught, as kills are.
KILLED, SURVIVED, NO_TESTS, TIMEOUT = {1, 3}, {0}, {5, 33}, {24, -24, 36, 152, 255}
MUTANT_SUFFIX = re.compile(r"__mutmut_\d+$")


def read_meta(mutants_dir: Path) -> tuple[dict[str, int | None], dict[str, str]]:
    """Every mutant's exit code (None: not run) and every function's hash, keyed by mutmut's names."""
    exit_codes: dict[str, int | None] = {}
    hashes: dict[str, str] = {}
    for meta_path in sorted(mutants_dir.rglob("*.meta")):
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
        module = ".".join(meta_path.relative_to(mutants_dir).with_suffix("").with_suffix("").parts)
        exit_codes.update(meta.get("exit_code_by_key", {}))
        for function, digest in meta.get("hash_by_function_name", {}).items():
            hashes[f"{module}.{function}"] = digest
    return exit_codes, hashes


def function_of(mutant: str) -> str:
    return MUTANT_SUFFIX.sub("", mutant)


def module_of(mutant: str) -> str:
    function = function_of(mutant)
    return function.rsplit(".", 1)[0]


def verdicts(
    current: dict[str, int | None], current_hashes: dict[str, str], previous_dir: Path | None
) -> dict[str, tuple[str, bool]]:
    """mutant -> (status, carried): this run's verdict, or a kill carried over from the earlier run."""
    previous, previous_hashes = read_meta(previous_dir) if previous_dir else ({}, {})
    result = {}
    for mutant, code in current.items():
        function = function_of(mutant)
        unchanged = function in previous_hashes and previous_hashes[function] == current_hashes.get(function)
        if code is None and unchanged and previous.get(mutant) in KILLED | TIMEOUT:
            result[mutant] = ("killed", True)
        elif code is None:
            result[mutant] = ("not run", False)
        elif code in KILLED:
            result[mutant] = ("killed", False)
        elif code in SURVIVED:
            result[mutant] = ("survived", False)
        elif code in NO_TESTS:
            result[mutant] = ("no tests", False)
        elif code in TIMEOUT:
            result[mutant] = ("timeout", False)
        else:
            result[mutant] = (f"exit {code}", False)
    return result


def table(results: dict[str, tuple[str, bool]], *, markdown: bool) -> str:
    by_module: dict[str, Counter] = {}
    for mutant, (status, carried) in results.items():
        counts = by_module.setdefault(module_of(mutant).removeprefix("quotacalc."), Counter())
        counts["mutants"] += 1
        counts[status] += 1
        counts["carried"] += carried
    total = sum(by_module.values(), Counter())
    columns = ("mutants", "killed", "timeout", "survived", "no tests", "not run", "carried")
    rows = [(module, by_module[module]) for module in sorted(by_module)] + [("all", total)]
    lines = []
    if markdown:
        lines += ["| module | " + " | ".join(columns) + " | caught % |", "|---" + "|---:" * (len(columns) + 1) + "|"]
    for module, counts in rows:
        run = counts["mutants"] - counts["not run"]
        share = f"{100 * (counts['killed'] + counts['timeout']) / run:.1f}%" if run else "-"
        cells = [str(counts[column]) for column in columns]
        if markdown:
            name = f"**{module}**" if module == "all" else module
            lines.append(f"| {name} | " + " | ".join(cells) + f" | {share} |")
        else:
            lines.append(f"{module:28} " + " ".join(f"{cell:>8}" for cell in cells) + f" {share:>7}")
    return "\n".join(lines)


def keep_verdicts(stats_path: Path) -> int:
    """Write the current selection's fingerprint into mutmut's stats, so its verdicts are not reset."""
    from mutmut.configuration import config

    stats = json.loads(stats_path.read_text(encoding="utf-8"))
    fingerprint = config().config_fingerprint()
    old = stats.get("config_fingerprint", {})
    changed = sorted(group for group in fingerprint if old.get(group) != fingerprint[group])
    if set(changed) - {"test_selection"}:
        print(f"more than the test selection changed ({', '.join(changed)}): verdicts must be redone", file=sys.stderr)
        return 1
    stats["config_fingerprint"] = fingerprint
    stats_path.write_text(json.dumps(stats), encoding="utf-8")
    print("test selection recorded" if changed else "nothing to record: the selection is unchanged")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mutants", type=Path, default=Path("mutants"), help="this run's mutants/ directory")
    parser.add_argument("--previous", type=Path, help="an earlier run's mutants/ directory to carry kills from")
    parser.add_argument("--to-run", action="store_true", help="print the mutants this run must still run")
    parser.add_argument("--survivors", action="store_true", help="print the surviving mutants")
    parser.add_argument("--markdown", action="store_true")
    parser.add_argument(
        "--keep-verdicts-for-new-tests",
        action="store_true",
        help="record the current test selection as the verdicts' own (after only adding test files)",
    )
    args = parser.parse_args()
    if args.keep_verdicts_for_new_tests:
        return keep_verdicts(args.mutants / "mutmut-stats.json")
    current, current_hashes = read_meta(args.mutants)
    if not current:
        print(f"no mutmut results under {args.mutants}", file=sys.stderr)
        return 1
    results = verdicts(current, current_hashes, args.previous)
    if args.to_run:
        print("\n".join(mutant for mutant, (status, _) in sorted(results.items()) if status == "not run"))
    elif args.survivors:
        print("\n".join(mutant for mutant, (status, _) in sorted(results.items()) if status == "survived"))
    else:
        print(table(results, markdown=args.markdown))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
