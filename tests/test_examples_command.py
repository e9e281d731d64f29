"""`quotacalc examples`: the example plans reach a user who only installed the wheel."""

from __future__ import annotations

import json
from pathlib import Path

from quotacalc.catalog.examples import examples_dir, shipped_examples
from quotacalc.cli.json_out import JSON_SCHEMA_VERSION

ROOT = Path(__file__).resolve().parent.parent


def test_every_example_plan_is_listed(run_cli):
    code, out, err = run_cli("examples")
    assert code == 0 and err == ""
    # Every plan, and every folder of inputs with a README of its own (calibration/).
    names = sorted(
        [path.stem for path in (ROOT / "examples").glob("*.yaml")]
        + [path.parent.name for path in (ROOT / "examples").glob("*/README.md")]
    )
    assert "calibration" in names and [example.name for example in shipped_examples()] == names
    for name in names:
        assert any(line.startswith(name + " ") for line in out.splitlines()), name


def test_print_one_example_verbatim(run_cli):
    code, out, _ = run_cli("examples", "llama-3.3-70b-h100")
    assert code == 0
    assert out == (ROOT / "examples" / "llama-3.3-70b-h100.yaml").read_text(encoding="utf-8")
    # ".yaml" and case are forgiven.
    assert run_cli("examples", "Llama-3.3-70B-H100.yaml")[1] == out


def test_copy_writes_the_example_and_refuses_to_overwrite(run_cli, tmp_path):
    code, out, _ = run_cli("examples", "llama-3.3-70b-h100", "--copy", str(tmp_path))
    assert code == 0
    copied = tmp_path / "llama-3.3-70b-h100.yaml"
    assert out.strip() == str(copied)
    assert copied.read_text(encoding="utf-8") == (ROOT / "examples" / "llama-3.3-70b-h100.yaml").read_text(
        encoding="utf-8"
    )
    copied.write_text("# mine\n", encoding="utf-8")
    code, out, err = run_cli("examples", "llama-3.3-70b-h100", "--copy", str(tmp_path))
    assert code == 1 and out == ""
    assert err.strip().startswith("quotacalc: error: --copy: would overwrite") and err.count("\n") == 1
    assert copied.read_text(encoding="utf-8") == "# mine\n"


def test_a_companion_an_earlier_copy_wrote_is_kept_not_refused(run_cli, tmp_path):
    """docs/simulate.md: `examples platform --copy .` then `examples simulate-named-plan --copy .`: the scenario brings
    platform.yaml, which the first copy wrote with the same bytes, so the second copies only what is new. A
    platform.yaml of the user's own (other bytes) is still refused, and nothing is written then."""
    assert run_cli("examples", "platform", "--copy", str(tmp_path))[0] == 0
    plan = tmp_path / "platform.yaml"
    before = plan.stat().st_mtime_ns
    code, out, err = run_cli("examples", "simulate-named-plan", "--copy", str(tmp_path))
    assert code == 0, err
    assert str(tmp_path / "simulate-named-plan.yaml") in out.split()
    assert plan.stat().st_mtime_ns == before  # kept, not rewritten
    (tmp_path / "simulate-named-plan.yaml").unlink()
    plan.write_text(plan.read_text(encoding="utf-8") + "# mine\n", encoding="utf-8")
    code, out, err = run_cli("examples", "simulate-named-plan", "--copy", str(tmp_path))
    assert code == 1 and out == "" and "would overwrite" in err
    assert not (tmp_path / "simulate-named-plan.yaml").exists()


def test_copied_example_prices_the_worked_example(run_cli, tmp_path):
    run_cli("examples", "llama-3.3-70b-h100", "--copy", str(tmp_path))
    code, out, _ = run_cli("price", str(tmp_path / "llama-3.3-70b-h100.yaml"), "--json")
    assert code == 0
    assert round(json.loads(out)["results"]["output_weight"], 2) == 3.09


def test_copy_all_keeps_companion_files(run_cli, tmp_path):
    code, out, _ = run_cli("examples", "--copy", str(tmp_path / "all"))
    assert code == 0
    # Each file once: a scenario's named plan is an example of its own too.
    expected = sorted(
        {
            str(path.relative_to(examples_dir()))
            for example in shipped_examples()
            for member in example.members
            for path in ([member] if member.is_file() else member.rglob("*"))
            if path.is_file()
        }
    )
    written = sorted(str(Path(line).relative_to(tmp_path / "all")) for line in out.splitlines())
    assert written == expected


def test_unknown_example_is_a_usage_error(run_cli):
    code, out, err = run_cli("examples", "llama")
    assert code == 2 and out == ""
    assert err.startswith("quotacalc: error: NAME: unknown example 'llama' (did you mean ") and err.count("\n") == 1
    assert "llama-3.3-70b-h100" in err


def test_examples_json(run_cli):
    code, out, _ = run_cli("examples", "--json")
    document = json.loads(out)
    assert code == 0
    assert document["command"] == "examples" and document["schema_version"] == JSON_SCHEMA_VERSION
    assert {entry["name"] for entry in document["examples"]} == {example.name for example in shipped_examples()}
    llama = next(entry for entry in document["examples"] if entry["name"] == "llama-3.3-70b-h100")
    assert llama["files"] == ["llama-3.3-70b-h100.yaml"]
    assert llama["description"].startswith("The worked example")


def test_the_wheel_ships_the_examples():
    """pyproject's force-include puts examples/ at quotacalc/examples, where examples_dir() looks first."""
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    assert '"examples" = "quotacalc/examples"' in text


def test_no_pointer_to_a_method_outside_the_repository():
    """The method a user can read is docs/method.md; nothing points at the development-only shared folder."""
    assert (ROOT / "docs" / "method.md").is_file()
    texts = [ROOT / "README.md", *(ROOT / "quotacalc").rglob("*.py"), *(ROOT / "examples").glob("*.yaml")]
    offenders = [str(path.relative_to(ROOT)) for path in texts if "METHOD.md" in path.read_text(encoding="utf-8")]
    assert not offenders, f"point these at docs/method.md: {offenders}"


def test_a_description_runs_to_its_first_full_stop(run_cli):
    """gpt-oss's first comment line ends mid-sentence: the listing carries the sentence on to its full stop."""
    code, out, _ = run_cli("examples")
    assert code == 0
    line = next(line for line in out.splitlines() if line.startswith("gpt-oss-120b-h100 "))
    assert line.endswith("alternating 128-token sliding windows and full attention, on one H100 with an FP8 KV cache.")


def test_a_folder_example_copies_as_its_folder_and_its_readme_command_runs(run_cli, tmp_path, monkeypatch):
    code, out, _ = run_cli("examples", "calibration", "--copy", str(tmp_path))
    assert code == 0
    csv = tmp_path / "calibration" / "nim-llama-3.3-70b-h100-tp2.csv"
    assert str(csv) in out.splitlines() and csv.read_text(encoding="utf-8") == (
        ROOT / "examples" / "calibration" / csv.name
    ).read_text(encoding="utf-8")
    readme = (tmp_path / "calibration" / "README.md").read_text(encoding="utf-8")
    command = readme.split("```sh\n", 1)[1].split("```", 1)[0].replace("\\\n", " ").split()
    assert command[0] == "quotacalc"
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli(*command[1:])
    assert code == 0, err
    assert "RMS error" in out


def test_copied_secrets_stay_owner_only(run_cli, tmp_path):
    code, _, _ = run_cli("examples", "platform", "--copy", str(tmp_path))
    assert code == 0
    # platform.secret holds the salt secret; the generated salts.json is what generate writes 0600.
    for secret in (tmp_path / "platform.secret", tmp_path / "platform" / "canonical" / "salts.json"):
        assert secret.stat().st_mode & 0o777 == 0o600, secret
    assert (tmp_path / "platform.yaml").stat().st_mode & 0o777 == 0o644


def test_a_scenario_is_copied_with_the_plan_it_names(run_cli, tmp_path):
    code, out, err = run_cli("examples", "simulate-named-plan", "--copy", str(tmp_path))
    assert code == 0, err
    assert sorted(Path(line).name for line in out.splitlines()) == ["platform.yaml", "simulate-named-plan.yaml"]
    code, out, err = run_cli("simulate", str(tmp_path / "simulate-named-plan.yaml"), "--requests", "50", "--json")
    assert code == 0, err
