"""A target is one declaration (quotacalc/exporters/registry.py): the CLI's --target choices and help, the target's
flags, the salt secret's need, check's findings and the targets table all follow it, with no other file edited."""

from __future__ import annotations

import importlib
import json
import sys
import types
from pathlib import Path

import pytest

from quotacalc.cli.app import commands
from quotacalc.errors import EXIT_USAGE
from quotacalc.exporters import registry
from quotacalc.exporters.base import ExportOptions

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
PLATFORM = EXAMPLES / "platform.yaml"
SECRET = "test-secret-not-for-production"
DOCS = Path(__file__).resolve().parent.parent / "docs" / "targets.md"


@pytest.fixture
def probe(monkeypatch: pytest.MonkeyPatch) -> dict:
    """A test-only target, ``probe``, declared through the registry alone: a module with export and prechecks, an
    option with choices, salted files. Returns what its export saw."""
    from quotacalc.core.checks import Finding
    from quotacalc.exporters.base import Export, GeneratedFile

    seen: dict = {}
    module = types.ModuleType("quotacalc_test_probe_target")

    def export(policy, salts, options):
        seen.update(options=options, salts=dict(salts))
        text = f"flavour: {options.probe_flavour}\ntenants: {len(policy.tenants)}\n"
        return Export(
            target="probe",
            files=(GeneratedFile(path="probe/probe.yaml", text=text),),
            notes=(("fairness", "all of it"),),
        )

    def prechecks(policy):
        return [
            Finding(severity="warning", code="probe-tenant", subject=f"tenants.{tenant.name}", message="probed")
            for tenant in policy.tenants[:1]
        ]

    module.export = export
    module.prechecks = prechecks
    monkeypatch.setitem(sys.modules, module.__name__, module)
    declaration = registry.Target(
        name="probe",
        module=module.__name__,
        summary="a target only the tests declare",
        files="probe/probe.yaml",
        salts=True,
        salting="writes nothing of the salts, but asks for them",
        prechecks=f"{module.__name__}:prechecks",
        options=(
            registry.TargetOption("probe_flavour", "probe: the flavour", default="plain", choices=("plain", "salty")),
        ),
        enforces=registry._caps(fairness=("yes", "by probing")),
    )
    monkeypatch.setitem(registry.TARGETS, "probe", declaration)
    monkeypatch.setattr(commands, "built", {})  # generate is built again, from the declarations above
    return seen


def test_a_declared_target_appears_in_generates_help_and_flags(run_cli, probe) -> None:
    code, out, _ = run_cli("generate", "--help")
    assert code == 0
    unwrapped = "".join(out.split())  # the help wraps the list of names anywhere
    assert "comma-separated:" + ",".join(registry.names()) + "(all)" in unwrapped
    assert ",probe(all)" in unwrapped  # a declared target, last
    assert "--probe-flavour plain|salty" in out and "probe: the flavour [default: plain]" in " ".join(out.split())
    assert "--gie-objectives" in out


def test_a_declared_target_is_generated_with_its_option_and_needs_the_secret(
    run_cli, tmp_path: Path, probe, monkeypatch
) -> None:
    # salts=True in its declaration: without a secret, a plan with salted tenants is refused for it alone.
    code, _, err = run_cli("generate", PLATFORM, "--out", tmp_path / "none", "--target", "probe")
    assert code != 0 and "salt" in err and not (tmp_path / "none").exists()
    monkeypatch.setenv("QUOTACALC_SALT_SECRET", SECRET)
    code, out, _ = run_cli(
        "generate", PLATFORM, "--out", tmp_path / "out", "--target", "probe", "--probe-flavour", "salty", "--json"
    )
    assert code == 0, out
    assert (tmp_path / "out/probe/probe.yaml").read_text(encoding="utf-8").startswith("flavour: salty\n")
    assert probe["options"].probe_flavour == "salty" and probe["salts"]
    (listed,) = json.loads(out)["limits"].values()
    assert len(listed) == len(registry.PARTS) + 1
    assert listed[listed.index("**fairness**: enforced. by probing.") + 1] == "all of it"
    limits = (tmp_path / "out/probe/LIMITS.md").read_text(encoding="utf-8")
    assert "- **fairness**: enforced. by probing.\n  - all of it\n" in limits


def test_an_option_is_checked_against_its_declaration(run_cli, tmp_path: Path, probe, monkeypatch) -> None:
    monkeypatch.setenv("QUOTACALC_SALT_SECRET", SECRET)
    code, _, err = run_cli(
        "generate", PLATFORM, "--out", tmp_path / "a", "--target", "probe", "--probe-flavour", "sweet"
    )
    assert code == EXIT_USAGE
    assert err.strip().splitlines() == [
        "quotacalc: error: --probe-flavour: must be one of plain, salty, got 'sweet' (e.g. --probe-flavour plain)"
    ]
    # An option of a target left out would do nothing: refused, not ignored.
    code, _, err = run_cli(
        "generate", PLATFORM, "--out", tmp_path / "b", "--target", "canonical", "--probe-flavour", "salty"
    )
    assert code == EXIT_USAGE
    assert err.strip().splitlines() == [
        "quotacalc: error: --probe-flavour: applies to the probe target, which --target leaves out "
        "(add probe to --target, or drop --probe-flavour)"
    ]
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_checks_findings_come_from_the_declared_prechecks(run_cli, probe) -> None:
    code, out, _ = run_cli("check", PLATFORM, "--json")
    findings = json.loads(out)["findings"]
    assert [finding["code"] for finding in findings].count("probe-tenant") == 1
    assert code == 0  # a pre-check warning does not fail check


def test_the_targets_table_and_json_come_from_the_declarations(run_cli, probe) -> None:
    code, out, _ = run_cli("targets")
    assert code == 0
    assert "| `probe` | no | no | no | no | no | yes | `--probe-flavour` |" in out
    code, out, _ = run_cli("targets", "--json")
    listed = json.loads(out)
    assert [target["name"] for target in listed["targets"]] == registry.names()
    (entry,) = [target for target in listed["targets"] if target["name"] == "probe"]
    assert entry["options"] == [
        {"flag": "--probe-flavour", "help": "probe: the flavour", "default": "plain", "choices": ["plain", "salty"]}
    ]
    assert entry["enforces"]["fairness"] == {"support": "yes", "how": "by probing", "fix": ""}
    assert list(entry["enforces"]) == list(listed["parts"]) == list(registry.PARTS)
    assert entry["salts"] is True


def test_export_options_know_only_declared_options() -> None:
    assert ExportOptions().gie_objectives is False
    assert ExportOptions(gie_objectives=True).gie_objectives is True
    with pytest.raises(ValueError, match="no target declares an option 'no_such_option'"):
        ExportOptions(no_such_option=True)
    with pytest.raises(AttributeError):
        _ = ExportOptions().no_such_option


@pytest.mark.parametrize("name", registry.names())
def test_every_shipped_declaration_resolves(name: str) -> None:
    target = registry.get(name)
    module = importlib.import_module(target.module)
    assert callable(module.export)
    if target.prechecks is not None:
        module_name, _, function = target.prechecks.partition(":")
        assert callable(getattr(importlib.import_module(module_name), function))
    assert list(target.enforces) == list(registry.PARTS)
    # every part declared with its own reason: none left at _caps's fallback
    assert [name for name, capability in target.enforces.items() if capability.how == registry.UNDECLARED] == []
    declared = {option.name: option for option in target.options}
    for option, by_value in target.variants.items():
        choices = declared[option].choices or (False, True)
        assert set(by_value) <= set(choices), (option, by_value)
        for changes in by_value.values():
            assert set(changes) <= set(registry.PARTS)
    assert all(option.name.isidentifier() and option.help for option in target.options)
    for option in target.options:
        assert (option.choices is None and option.default is False) or option.default in (option.choices or ())


def test_option_names_are_declared_once(monkeypatch: pytest.MonkeyPatch) -> None:
    registry.options()  # the shipped declarations pass
    twice = registry.Target(
        name="twice",
        module="x",
        summary="",
        salts=False,
        salting="",
        enforces=registry._caps(),
        options=(registry.TargetOption("gie_objectives", "again"),),
    )
    monkeypatch.setitem(registry.TARGETS, "twice", twice)
    with pytest.raises(ValueError, match="declared by gie and twice"):
        registry.options()


def test_docs_table_is_the_registrys() -> None:
    from quotacalc.cli.targets import capability_table

    assert capability_table() in DOCS.read_text(encoding="utf-8"), "regenerate with: quotacalc targets"
