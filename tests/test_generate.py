"""`quotacalc generate`: deterministic files, the manifest that protects files quotacalc did not write,
`--check` drift, owner-only salts, the secret never printed, and the checked-in example kept current."""

from __future__ import annotations

import dataclasses
import json
import os
import stat
from pathlib import Path

import pytest
import yaml

from quotacalc.cli.app import commands
from quotacalc.errors import EXIT_INVALID_INPUT, EXIT_USAGE

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
PLATFORM = EXAMPLES / "platform.yaml"
EXAMPLE_SECRET = EXAMPLES / "platform.secret"
SECRET = "test-secret-not-for-production"


@pytest.fixture(autouse=True)
def _no_ambient_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("QUOTACALC_SALT_SECRET", raising=False)


def one_line_error(code: int, out: str, err: str, expected_code: int) -> str:
    assert code == expected_code, f"exit {code}, want {expected_code}: {err!r}"
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.strip() and not line.startswith("quotacalc: note:")]
    assert len(lines) == 1, err
    assert lines[0].startswith("quotacalc: error: ")
    return lines[0].removeprefix("quotacalc: error: ")


def canonical(run_cli, out: Path, *extra: object, plan: Path = PLATFORM) -> tuple[int, str, str]:
    return run_cli("generate", plan, "--out", out, "--target", "canonical", *extra)


def tree(directory: Path) -> dict[str, bytes]:
    return {
        str(path.relative_to(directory)): path.read_bytes() for path in sorted(directory.rglob("*")) if path.is_file()
    }


def write_plan(tmp_path: Path, document: dict, name: str = "plan.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")
    return path


def platform_document() -> dict:
    return yaml.safe_load(PLATFORM.read_text(encoding="utf-8"))


# --- the checked-in example ----------------------------------------------------------------------------


def test_checked_in_example_is_current(run_cli) -> None:
    """CI's drift check: the files under examples/platform are what the plan generates with the example secret."""
    code, out, err = run_cli(
        "generate", PLATFORM, "--out", EXAMPLES / "platform", "--check", "--salt-secret-file", EXAMPLE_SECRET
    )
    assert code == 0, f"examples/platform is stale; regenerate it (see docs/targets.md):\n{out}{err}"
    assert out == ""


# --- determinism ---------------------------------------------------------------------------------------


def test_same_plan_and_secret_give_byte_identical_files(run_cli, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("QUOTACALC_SALT_SECRET", SECRET)
    assert canonical(run_cli, tmp_path / "a")[0] == 0
    assert canonical(run_cli, tmp_path / "b")[0] == 0
    first, second = tree(tmp_path / "a"), tree(tmp_path / "b")
    assert first == second
    assert set(first) == {
        ".quotacalc-manifest.json",
        "canonical/LIMITS.md",
        "canonical/policy.json",
        "canonical/policy.schema.json",
        "canonical/policy.yaml",
        "canonical/salts.json",
    }
    # A second run into the same directory changes nothing.
    code, out, _ = canonical(run_cli, tmp_path / "a", "--json")
    assert code == 0
    assert {change["status"] for change in json.loads(out)["files"]} == {"unchanged"}


def test_policy_yaml_and_json_are_the_same_document(run_cli, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("QUOTACALC_SALT_SECRET", SECRET)
    assert canonical(run_cli, tmp_path)[0] == 0
    from_yaml = yaml.safe_load((tmp_path / "canonical/policy.yaml").read_text(encoding="utf-8"))
    from_json = json.loads((tmp_path / "canonical/policy.json").read_text(encoding="utf-8"))
    assert from_yaml == from_json
    assert from_json["schema_version"] == 1
    assert len(from_json["tenants"]) == 8


def test_salts_differ_with_the_secret_and_match_hmac(run_cli, tmp_path: Path, monkeypatch) -> None:
    import hashlib
    import hmac

    monkeypatch.setenv("QUOTACALC_SALT_SECRET", SECRET)
    assert canonical(run_cli, tmp_path / "a")[0] == 0
    monkeypatch.setenv("QUOTACALC_SALT_SECRET", SECRET + "2")
    assert canonical(run_cli, tmp_path / "b")[0] == 0
    a = json.loads((tmp_path / "a/canonical/salts.json").read_text(encoding="utf-8"))
    b = json.loads((tmp_path / "b/canonical/salts.json").read_text(encoding="utf-8"))
    # Salted tenants only (hooli and wayne share the cache), keyed by salt_ref.
    assert list(a) == ["globex", "stark", "acme", "initech", "umbrella", "cyberdyne"]
    assert a["globex"] == hmac.new(SECRET.encode(), b"globex", hashlib.sha256).hexdigest()
    assert all(a[name] != b[name] for name in a)


# --- secrets -------------------------------------------------------------------------------------------


def test_salts_file_is_owner_only(run_cli, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("QUOTACALC_SALT_SECRET", SECRET)
    assert canonical(run_cli, tmp_path)[0] == 0
    assert stat.S_IMODE((tmp_path / "canonical/salts.json").stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "canonical/policy.yaml").stat().st_mode) == 0o644
    # Loosened by hand (or by a checkout): --check notes it without calling it drift, generate restores it.
    os.chmod(tmp_path / "canonical/salts.json", 0o644)
    code, _, err = canonical(run_cli, tmp_path, "--check")
    assert code == 0 and "salts.json has other permissions than owner-only (0600)" in err
    assert canonical(run_cli, tmp_path)[0] == 0
    assert stat.S_IMODE((tmp_path / "canonical/salts.json").stat().st_mode) == 0o600


def test_missing_secret_is_one_line_and_writes_nothing(run_cli, tmp_path: Path) -> None:
    out_dir = tmp_path / "out"
    line = one_line_error(*canonical(run_cli, out_dir), EXIT_USAGE)
    assert line == (
        "--salt-secret-file: 6 salted tenants (globex, stark, acme and 3 more) need a salt secret; nothing was "
        "written (set QUOTACALC_SALT_SECRET or pass --salt-secret-file FILE)"
    )
    assert not out_dir.exists()


def test_targets_without_salts_need_no_secret(run_cli, tmp_path: Path, monkeypatch) -> None:
    # vLLM and the Inference Extension take the salt from the request, so their files carry no salt: they generate
    # without the secret, byte-identical to the example made with it. (LiteLLM's plugin sets the salt: it needs it.)
    monkeypatch.delenv("QUOTACALC_SALT_SECRET", raising=False)
    out_dir = tmp_path / "out"
    code, _, err = run_cli("generate", PLATFORM, "--out", out_dir, "--target", "vllm,gie")
    assert code == 0, err
    for target in ("vllm", "gie"):
        generated = tree(out_dir / target)
        assert generated and generated == tree(EXAMPLES / "platform" / target)
    for target in ("envoy", "kong", "canonical", "litellm"):
        line = one_line_error(
            *run_cli("generate", PLATFORM, "--out", tmp_path / target, "--target", f"vllm,{target}"), EXIT_USAGE
        )
        assert line.startswith("--salt-secret-file: 6 salted tenants")
        assert not (tmp_path / target).exists()


def test_empty_or_missing_secret_file(run_cli, tmp_path: Path) -> None:
    empty = tmp_path / "empty.secret"
    empty.write_text("\n", encoding="utf-8")
    line = one_line_error(*canonical(run_cli, tmp_path / "out", "--salt-secret-file", empty), EXIT_INVALID_INPUT)
    assert line == f"{empty}: --salt-secret-file: is empty (put the secret in it)"
    missing = tmp_path / "missing.secret"
    line = one_line_error(*canonical(run_cli, tmp_path / "out", "--salt-secret-file", missing), EXIT_USAGE)
    assert line == f"{missing}: --salt-secret-file: no such file (check the path to the salt secret)"
    assert not (tmp_path / "out").exists()


def test_no_secret_needed_when_no_tenant_is_salted(run_cli, tmp_path: Path) -> None:
    document = platform_document()
    for tenant in document["tenants"]:
        tenant["cache_isolation"] = "shared"
    code, _, err = canonical(run_cli, tmp_path / "out", plan=write_plan(tmp_path, document))
    assert code == 0, err
    assert not (tmp_path / "out/canonical/salts.json").exists()


def test_secret_and_salts_never_printed(run_cli, tmp_path: Path) -> None:
    from quotacalc.core.salts import derive_salt

    secret_file = tmp_path / "s.secret"
    secret_file.write_text(SECRET + "\n", encoding="utf-8")
    salt = derive_salt(SECRET.encode(), "globex")
    outputs = []
    for extra in ((), ("--json",), ("--check",), ("--check", "--json")):
        code, out, err = canonical(run_cli, tmp_path / "out", "--salt-secret-file", secret_file, *extra)
        outputs.append(out + err)
    (tmp_path / "out/canonical/salts.json").unlink()  # drift in the salts file: its diff must not show them
    code, out, err = canonical(run_cli, tmp_path / "out", "--salt-secret-file", secret_file, "--check")
    assert code == 1 and "holds salts: would be created, contents not shown" in out
    outputs.append(out + err)
    for text in outputs:
        assert SECRET not in text and salt not in text


def test_salt_equal_to_a_lora_name_refuses_to_generate(run_cli, tmp_path: Path, monkeypatch) -> None:
    from quotacalc.core.salts import derive_salt

    monkeypatch.setenv("QUOTACALC_SALT_SECRET", SECRET)
    document = platform_document()
    document["tenants"][3]["lora_adapters"] = [derive_salt(SECRET.encode(), "stark")]
    plan = write_plan(tmp_path, document)
    line = one_line_error(*canonical(run_cli, tmp_path / "out", plan=plan), EXIT_INVALID_INPUT)
    assert line.startswith(f"{plan}: the plan is not sound: tenants.")
    assert "nothing was written" in line
    assert not (tmp_path / "out").exists()


# --- nothing lost: the manifest ---------------------------------------------------------------------------


def test_foreign_file_is_never_overwritten(run_cli, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("QUOTACALC_SALT_SECRET", SECRET)
    out_dir = tmp_path / "out"
    (out_dir / "canonical").mkdir(parents=True)
    mine = out_dir / "canonical/policy.json"
    mine.write_text("my own file\n", encoding="utf-8")
    line = one_line_error(*canonical(run_cli, out_dir), EXIT_INVALID_INPUT)
    assert line == (
        f"{mine}: exists and quotacalc did not write it (not in the manifest); nothing was written "
        "(move it away, or choose another --out)"
    )
    assert mine.read_text(encoding="utf-8") == "my own file\n"
    assert tree(out_dir) == {"canonical/policy.json": b"my own file\n"}


def test_unrelated_files_survive_and_stale_files_are_removed(run_cli, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("QUOTACALC_SALT_SECRET", SECRET)
    out_dir = tmp_path / "out"
    assert canonical(run_cli, out_dir)[0] == 0
    (out_dir / "README.md").write_text("ours\n", encoding="utf-8")
    (out_dir / "canonical/notes.txt").write_text("ours too\n", encoding="utf-8")
    # Every tenant moves to the shared cache: the salts file is no longer generated, so it goes.
    document = platform_document()
    for tenant in document["tenants"]:
        tenant["cache_isolation"] = "shared"
    code, out, _ = canonical(run_cli, out_dir, "--json", plan=write_plan(tmp_path, document))
    assert code == 0
    statuses = {change["path"]: change["status"] for change in json.loads(out)["files"]}
    assert statuses["canonical/salts.json"] == "removed"
    assert not (out_dir / "canonical/salts.json").exists()
    assert (out_dir / "README.md").read_text(encoding="utf-8") == "ours\n"
    assert (out_dir / "canonical/notes.txt").read_text(encoding="utf-8") == "ours too\n"
    manifest = json.loads((out_dir / ".quotacalc-manifest.json").read_text(encoding="utf-8"))
    assert "canonical/salts.json" not in manifest["files"]


def test_hand_edited_file_is_not_overwritten(run_cli, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("QUOTACALC_SALT_SECRET", SECRET)
    out_dir = tmp_path / "out"
    assert canonical(run_cli, out_dir)[0] == 0
    edited = out_dir / "canonical/policy.yaml"
    edited.write_text(edited.read_text(encoding="utf-8") + "# my note\n", encoding="utf-8")
    before = tree(out_dir)
    line = one_line_error(*canonical(run_cli, out_dir), EXIT_INVALID_INPUT)
    assert line.startswith(f"{edited}: was edited since quotacalc wrote it; nothing was written")
    assert tree(out_dir) == before


def test_check_on_a_hand_edit_says_what_generate_needs_first(run_cli, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("QUOTACALC_SALT_SECRET", SECRET)
    out_dir = tmp_path / "out"
    assert canonical(run_cli, out_dir)[0] == 0
    edited = out_dir / "canonical/policy.yaml"
    edited.write_text(edited.read_text(encoding="utf-8") + "# my note\n", encoding="utf-8")
    code, _, err = canonical(run_cli, out_dir, "--check")
    assert code == 1
    # The advice works when followed: generate refuses the edited file until it is deleted.
    assert f"move any change into the plan and delete {out_dir}/canonical/policy.yaml" in err
    assert canonical(run_cli, out_dir)[0] == EXIT_INVALID_INPUT
    edited.unlink()
    assert canonical(run_cli, out_dir)[0] == 0
    assert canonical(run_cli, out_dir, "--check")[0] == 0


def test_corrupt_manifest_is_an_error(run_cli, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("QUOTACALC_SALT_SECRET", SECRET)
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    (out_dir / ".quotacalc-manifest.json").write_text("{not json", encoding="utf-8")
    line = one_line_error(*canonical(run_cli, out_dir), EXIT_INVALID_INPUT)
    assert line.startswith(f"{out_dir / '.quotacalc-manifest.json'}: is not a quotacalc manifest")


def test_out_is_a_file(run_cli, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("QUOTACALC_SALT_SECRET", SECRET)
    file = tmp_path / "file"
    file.write_text("x", encoding="utf-8")
    # A place that cannot be written to is the command line's problem (exit 2), as examples --copy onto a file is.
    assert (
        one_line_error(*canonical(run_cli, file), EXIT_USAGE) == f"{file}: --out: is not a directory (name a directory)"
    )


# --- --check: the CI drift check ----------------------------------------------------------------------------


def test_check_reports_drift_with_a_unified_diff_and_writes_nothing(run_cli, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("QUOTACALC_SALT_SECRET", SECRET)
    out_dir = tmp_path / "out"
    assert canonical(run_cli, out_dir)[0] == 0
    code, out, _ = canonical(run_cli, out_dir, "--check")
    assert (code, out) == (0, "")
    document = platform_document()
    document["tenants"][0]["units_per_s"] = 18000  # globex buys more: 18,000 units/s, depth 1,080,000
    plan = write_plan(tmp_path, document)
    before = tree(out_dir)
    code, out, err = canonical(run_cli, out_dir, "--check", plan=plan)
    assert code == 1
    assert tree(out_dir) == before
    assert "--- a/canonical/policy.yaml\n+++ b/canonical/policy.yaml\n" in out
    assert (
        "-    bucket_rate_units_per_s: 17725.0\n-    bucket_depth_units: 1063500.0\n"
        "+    bucket_rate_units_per_s: 18000.0\n+    bucket_depth_units: 1080000.0\n"
    ) in out
    assert "differs from the plan" in err
    code, out, _ = canonical(run_cli, out_dir, "--check", "--json", plan=plan)
    result = json.loads(out)
    assert code == 1 and result["drift"] is True and "bucket_depth_units" in result["diff"]
    # Generating brings the directory back in line.
    assert canonical(run_cli, out_dir, plan=plan)[0] == 0
    assert canonical(run_cli, out_dir, "--check", plan=plan)[0] == 0


def test_check_on_an_empty_directory_is_drift(run_cli, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("QUOTACALC_SALT_SECRET", SECRET)
    code, out, _ = canonical(run_cli, tmp_path / "none", "--check")
    assert code == 1 and "+++ b/canonical/policy.json" in out
    assert not (tmp_path / "none").exists()


# --- targets ------------------------------------------------------------------------------------------


def test_unknown_target(run_cli, tmp_path: Path) -> None:
    line = one_line_error(*run_cli("generate", PLATFORM, "--out", tmp_path, "--target", "envoi"), EXIT_USAGE)
    assert line == "--target: unknown target 'envoi' (did you mean 'envoy'?)"


def test_missing_target_module_skipped_under_all_and_an_error_when_named(run_cli, tmp_path: Path, monkeypatch) -> None:
    from quotacalc.exporters import registry

    monkeypatch.setenv("QUOTACALC_SALT_SECRET", SECRET)
    canonical_target = registry.TARGETS["canonical"]
    future = dataclasses.replace(canonical_target, name="future", module="quotacalc.exporters.future_target")
    monkeypatch.setattr(registry, "TARGETS", {"canonical": canonical_target, "future": future})
    monkeypatch.setattr(commands, "built", {})  # generate's flags are built from the declarations above
    code, _, err = run_cli("generate", PLATFORM, "--out", tmp_path / "all")
    assert code == 0
    assert "quotacalc: note: skipped targets not in this build: future" in err
    assert (tmp_path / "all/canonical/policy.yaml").exists()
    line = one_line_error(*run_cli("generate", PLATFORM, "--out", tmp_path / "named", "--target", "future"), EXIT_USAGE)
    assert (
        line
        == "--target: target 'future' is not available in this build (quotacalc.exporters.future_target is missing)"
    )
    assert not (tmp_path / "named").exists()


def test_limits_written_beside_each_target(run_cli, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("QUOTACALC_SALT_SECRET", SECRET)
    code, out, _ = run_cli("generate", PLATFORM, "--out", tmp_path, "--json")
    assert code == 0
    result = json.loads(out)
    for target in result["targets"]:
        limits = (tmp_path / target / "LIMITS.md").read_text(encoding="utf-8")
        assert limits.startswith(f"# What the {target} target enforces")
        for limit in result["limits"][target]:
            assert limit in limits
    canonical_limits = (tmp_path / "canonical/LIMITS.md").read_text("utf-8")
    assert "- **rate**: enforced." in canonical_limits
    assert ": lost." not in canonical_limits and ": approximated." not in canonical_limits


def test_subset_of_targets_leaves_the_others_files(run_cli, tmp_path: Path, monkeypatch) -> None:
    from quotacalc.exporters import registry

    monkeypatch.setenv("QUOTACALC_SALT_SECRET", SECRET)
    out_dir = tmp_path / "out"
    assert canonical(run_cli, out_dir)[0] == 0
    # A second target whose files live beside the canonical ones; generating it alone keeps canonical's.
    module = type(os)("quotacalc_test_extra_target")

    def export(policy, salts, options):
        from quotacalc.exporters.base import Export, GeneratedFile

        return Export(
            target="extra", files=(GeneratedFile(path="extra/x.txt", text="x\n"),), notes=(("rate", "no buckets"),)
        )

    module.export = export
    monkeypatch.setitem(__import__("sys").modules, "quotacalc_test_extra_target", module)
    extra = dataclasses.replace(registry.TARGETS["gie"], name="extra", module="quotacalc_test_extra_target", options=())
    monkeypatch.setitem(registry.TARGETS, "extra", extra)
    monkeypatch.setattr(commands, "built", {})
    code, _, err = run_cli("generate", PLATFORM, "--out", out_dir, "--target", "extra")
    assert code == 0
    # gie's declared capabilities, with the default --gie-objectives (off): 13 parts lost, identity approximated
    assert (
        f"quotacalc: note: extra loses 13 and approximates 1 of the policy's parts: see {out_dir / 'extra/LIMITS.md'}"
        in err
    )
    assert (out_dir / "canonical/policy.yaml").exists() and (out_dir / "extra/x.txt").exists()
    limits = (out_dir / "extra/LIMITS.md").read_text(encoding="utf-8")
    assert "- **rate**: lost. None: the Inference Extension's flow control" in limits
    assert "\n  - no buckets\n- **weights**" in limits
    manifest = json.loads((out_dir / ".quotacalc-manifest.json").read_text(encoding="utf-8"))
    assert {entry["target"] for entry in manifest["files"].values()} == {"canonical", "extra"}
    assert canonical(run_cli, out_dir, "--check")[0] == 0


def test_yaml_text_round_trips_hostile_strings() -> None:
    """The fast YAML emitter: whatever it writes, PyYAML (YAML 1.1) reads back as the same data."""
    from quotacalc.exporters.yaml_text import dump_yaml

    strings = [
        *(
            [
                "yes",
                "No",
                "on",
                "OFF",
                "~",
                "null",
                "Null",
                "true",
                "y",
                "n",
                "1",
                "1.5",
                "0x10",
                "0o17",
                "1e3",
                ".inf",
                "-.inf",
                ".nan",
                "=",
                "<<",
                "-",
                "?",
                "|",
                "[",
                "{}",
            ]
        ),
        *(
            "- x",
            "a: b",
            "#x",
            "a #b",
            " lead",
            "trail ",
            "multi\nline",
            "tab\t",
            "é",
            "\u2028",
            "\x85",
            "\x7f",
            "\ufeff",
            "'q'",
            '"dq"',
        ),
        *("", "@x", "`x", "!tag", "&a", "*a", "%x", "> x", "2026-11-30", "12:30", "x-tenant-id", "/v1/chat"),
    ]
    document = {
        "strings": strings,
        "numbers": [0, -1, 1.0, 1e-07, 1e300, -2.5e-10, 2**70, True, False, None],
        "empty": {"mapping": {}, "list": []},
        "nested": [[1, [2]], {"x": [{"y": 1, "z": [3]}]}, []],
        **{text: index for index, text in enumerate(strings)},
    }
    assert yaml.safe_load(dump_yaml(document)) == document
    assert dump_yaml({"a": [{"b": 1, "c": 2}]}) == "a:\n  - b: 1\n    c: 2\n"
    assert dump_yaml({"w": 1.5235551602942003e-07, "v": 1e-07}) == "w: 1.5235551602942003e-07\nv: 1.0e-07\n"
    with pytest.raises(ValueError):
        dump_yaml({"x": float("nan")})


def test_interrupted_run_leaves_nothing_the_next_run_refuses(run_cli, tmp_path: Path, monkeypatch) -> None:
    """A run killed between two renames (the interim manifest and one file in place): the next run neither calls a
    file foreign or edited nor loses one, and no staged file is left behind."""
    from quotacalc.exporters import writer

    monkeypatch.setenv("QUOTACALC_SALT_SECRET", SECRET)
    out_dir = tmp_path / "out"
    assert canonical(run_cli, out_dir)[0] == 0
    document = platform_document()
    document["tenants"][0]["units_per_s"] = 18000
    plan = write_plan(tmp_path, document)
    real_put = writer._put
    calls = []

    def dying_put(temporary, path):
        calls.append(path)
        if len(calls) == 3:  # the interim manifest, one file, then the crash
            raise KeyboardInterrupt
        real_put(temporary, path)

    monkeypatch.setattr(writer, "_put", dying_put)
    code, _, _ = canonical(run_cli, out_dir, plan=plan)
    assert code == 130
    assert not [name for name in tree(out_dir) if name.endswith(".tmp")]
    monkeypatch.setattr(writer, "_put", real_put)
    code, _, err = canonical(run_cli, out_dir, plan=plan)
    assert code == 0, err
    assert canonical(run_cli, out_dir, "--check", plan=plan)[0] == 0


def test_an_out_directory_several_levels_new_is_made(run_cli, tmp_path: Path, monkeypatch) -> None:
    """--out new/deeper/generated, none of which exists: made, as mkdir -p would (the staged writer once made only
    --out's own subfolders)."""
    monkeypatch.setenv("QUOTACALC_SALT_SECRET", SECRET)
    out_dir = tmp_path / "new" / "deeper" / "generated"
    code, _, err = canonical(run_cli, out_dir)
    assert code == 0, err
    assert (out_dir / "canonical" / "policy.yaml").is_file()


def test_a_write_that_fails_changes_nothing(run_cli, tmp_path: Path, monkeypatch) -> None:
    """A full disk (ENOSPC) on the third file this run writes: every file, the manifest included, stays byte for
    byte as the earlier run left it, no staged file remains, and the one-line error names the file it was writing
    (not a temporary name) and a fix for a full disk."""
    import errno
    import os

    monkeypatch.setenv("QUOTACALC_SALT_SECRET", SECRET)
    out_dir = tmp_path / "out"
    assert canonical(run_cli, out_dir)[0] == 0
    before = tree(out_dir)
    document = platform_document()
    document["tenants"][0]["units_per_s"] = 18000
    plan = write_plan(tmp_path, document)
    real_fdopen = os.fdopen
    opened = []

    class FullDisk:
        def __init__(self, handle):
            self.handle = handle

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.handle.close()

        def write(self, data):
            raise OSError(errno.ENOSPC, "No space left on device")

    def fdopen(descriptor, mode="r", *args, **kwargs):
        handle = real_fdopen(descriptor, mode, *args, **kwargs)
        if mode != "wb":  # a read elsewhere (os is one module): not this run's writes
            return handle
        opened.append(handle)
        return FullDisk(handle) if len(opened) == 3 else handle

    monkeypatch.setattr(os, "fdopen", fdopen)
    code, out, err = canonical(run_cli, out_dir, plan=plan)
    monkeypatch.setattr(os, "fdopen", real_fdopen)
    line = one_line_error(code, out, err, EXIT_INVALID_INPUT)
    assert "cannot write there: No space left on device; nothing was changed" in line
    assert ".tmp" not in line and "free space on that file system" in line
    assert tree(out_dir) == before


def test_a_symlinked_target_folder_is_refused_not_followed(run_cli, tmp_path: Path, monkeypatch) -> None:
    """out/canonical replaced by a link to a folder elsewhere: generate refuses it (one line naming the link), and
    nothing elsewhere is written or removed."""
    monkeypatch.setenv("QUOTACALC_SALT_SECRET", SECRET)
    out_dir = tmp_path / "out"
    assert canonical(run_cli, out_dir)[0] == 0
    elsewhere = tmp_path / "elsewhere"
    (out_dir / "canonical").rename(elsewhere)
    (out_dir / "canonical").symlink_to(elsewhere)
    before = tree(elsewhere)
    document = platform_document()
    document["tenants"][0]["units_per_s"] = 18000
    line = one_line_error(*canonical(run_cli, out_dir, plan=write_plan(tmp_path, document)), EXIT_INVALID_INPUT)
    assert line.startswith(f"{out_dir / 'canonical'}: --out: is a symbolic link where a directory")
    assert tree(elsewhere) == before


def test_a_symlink_at_a_generated_path_is_never_followed(run_cli, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("QUOTACALC_SALT_SECRET", SECRET)
    target = tmp_path / "elsewhere.txt"
    target.write_text("precious\n", encoding="utf-8")
    out_dir = tmp_path / "out"
    (out_dir / "canonical").mkdir(parents=True)
    (out_dir / "canonical/policy.yaml").symlink_to(target)
    line = one_line_error(*canonical(run_cli, out_dir), EXIT_INVALID_INPUT)
    assert "canonical/policy.yaml: exists and quotacalc did not write it" in line
    assert target.read_text(encoding="utf-8") == "precious\n"


def test_generate_a_flat_plan(run_cli, tmp_path: Path) -> None:
    """A flat plan generates as a one-pool plan: pool 'default', its tenant on the shared cache (no secret)."""
    code, _, err = canonical(run_cli, tmp_path, plan=EXAMPLES / "llama-3.3-70b-h100.yaml")
    assert code == 0, err
    policy = json.loads((tmp_path / "canonical/policy.json").read_text(encoding="utf-8"))
    assert [pool["name"] for pool in policy["pools"]] == ["default"]
    (tenant,) = policy["tenants"]
    assert (tenant["name"], tenant["cache_isolation"], tenant["salt_ref"]) == ("tenant", "shared", None)
    assert tenant["retry_after"]["max_s"] == 60  # the file's burst_s default, 60 s


def test_gie_objectives_only_on_request(run_cli, tmp_path: Path, monkeypatch) -> None:
    from quotacalc.exporters.registry import TARGETS

    if "gie" not in TARGETS:
        pytest.skip("no gie target in this build")
    monkeypatch.setenv("QUOTACALC_SALT_SECRET", SECRET)
    assert run_cli("generate", PLATFORM, "--out", tmp_path / "plain", "--target", "gie")[0] == 0
    assert "InferenceObjective" not in "".join(
        path.read_text(encoding="utf-8") for path in (tmp_path / "plain/gie").glob("*.yaml")
    )
    assert run_cli("generate", PLATFORM, "--out", tmp_path / "asked", "--target", "gie", "--gie-objectives")[0] == 0
    assert "kind: InferenceObjective" in "".join(
        path.read_text(encoding="utf-8") for path in (tmp_path / "asked/gie").glob("*.yaml")
    )


def test_a_local_model_path_is_flagged_and_serve_model_names_what_the_engine_loads(run_cli, tmp_path, monkeypatch):
    """A pool priced from a local config folder: the engine files would load that path, which is where this machine
    keeps a config.json, not necessarily where the engine's host keeps the weights. check and generate say so;
    serve_model names what the engine loads (and clients send its name)."""
    import shutil

    monkeypatch.setenv("QUOTACALC_SALT_SECRET", SECRET)
    shutil.copytree(Path(__file__).resolve().parent.parent / "models" / "Llama-3.1-8B-Instruct", tmp_path / "mine")
    plan = tmp_path / "plan.yaml"
    plan.write_text("model: ./mine\ngpu: h100-sxm\n", encoding="utf-8")
    code, out, err = run_cli("check", str(plan), "--json")
    assert code == 0
    findings = [f for f in json.loads(out)["findings"] if "local config" in f["message"]]
    assert [(f["severity"], f["subject"]) for f in findings] == [("warning", "pools.default")]
    code, _, err = run_cli("generate", str(plan), "--out", str(tmp_path / "out"), "--target", "vllm")
    assert code == 0 and "the engine files load as their model: set the deployment's serve_model" in err
    engine = yaml.safe_load((tmp_path / "out" / "vllm" / "default.yaml").read_text(encoding="utf-8"))
    assert engine["model"].endswith("mine") and engine["served-model-name"] == "mine"
    plan.write_text("model: ./mine\ngpu: h100-sxm\nserve_model: acme/llama-8b-ft\n", encoding="utf-8")
    code, _, err = run_cli("generate", str(plan), "--out", str(tmp_path / "out2"), "--target", "vllm")
    assert code == 0 and "local config" not in err
    engine = yaml.safe_load((tmp_path / "out2" / "vllm" / "default.yaml").read_text(encoding="utf-8"))
    assert (engine["model"], engine["served-model-name"]) == ("acme/llama-8b-ft", "acme/llama-8b-ft")
    # A shipped config needs nothing: its hub id is what the engine loads.
    plan.write_text("model: Llama-3.1-8B-Instruct\ngpu: h100-sxm\n", encoding="utf-8")
    code, out, _ = run_cli("check", str(plan), "--json")
    assert code == 0 and not any("local config" in f["message"] for f in json.loads(out)["findings"])


@pytest.mark.parametrize(
    ("extra", "longest"),
    [
        # max_model_len 32,768: the engine admits nothing longer, so neither does the tier.
        ("max_model_len: 32768\n", 32_768),
        # One H100 holds 45 sequences of 1,700 tokens of gpt-oss-120b at BF16 KV (76,500 tokens at the pool's context, its
        # windows paid in full), less than the model's 131,072: the tier takes what the pool holds. (46 before its
        # expert biases were priced in BF16: the pool lost 4,608 x 8,640 x (2 - 0.53125) = 58,475,520 B, to
        # 3,107,190,471.68 B; tests/test_quantized_biases.py.)
        ("", 45 * 1_700),
    ],
)
def test_a_flat_plans_tier_fits_what_its_pool_serves(run_cli, tmp_path, monkeypatch, extra, longest):
    monkeypatch.setenv("QUOTACALC_SALT_SECRET", SECRET)
    plan = tmp_path / "plan.yaml"
    plan.write_text(
        "model: gpt-oss-120b\ngpu: h100-sxm\n" + extra + "tenant: {rps: 1, prompt_tokens: 1000, output_tokens: 200}\n",
        encoding="utf-8",
    )
    code, out, err = run_cli("check", str(plan), "--json")
    assert code == 0, err
    assert not [f for f in json.loads(out)["findings"] if f["severity"] == "error"]
    code, _, err = run_cli("generate", str(plan), "--out", str(tmp_path / "out"), "--target", "canonical")
    assert code == 0, err
    policy = yaml.safe_load((tmp_path / "out" / "canonical" / "policy.yaml").read_text(encoding="utf-8"))
    (tenant,) = policy["tenants"]
    assert tenant["max_context_tokens"] == longest
    assert tenant["kv_cap_tokens_per_replica"] == longest


@pytest.mark.parametrize(
    ("engine", "target", "key"), [("generic", "vllm", "kv-cache-dtype"), ("sglang", "sglang", "kv-cache-dtype")]
)
def test_an_fp8_format_named_in_the_plan_reaches_the_engine_file(run_cli, tmp_path, engine, target, key):
    plan = tmp_path / "plan.yaml"
    plan.write_text(
        f"model: Qwen2.5-7B-Instruct\ngpu: a100-80gb-sxm\nkv_dtype: fp8_e5m2\nengine: {engine}\n", encoding="utf-8"
    )
    code, _, err = run_cli("generate", str(plan), "--out", str(tmp_path / "out"), "--target", target)
    assert code == 0, err
    config = yaml.safe_load((tmp_path / "out" / target / "default.yaml").read_text(encoding="utf-8"))
    assert config[key] == "fp8_e5m2"


def test_a_flat_plans_tenant_of_no_requests_names_the_file_and_its_tenant(run_cli, tmp_path):
    plan = tmp_path / "plan.yaml"
    plan.write_text(
        "model: Llama-3.1-8B-Instruct\ngpu: h100\ntenant: {rps: 0, prompt_tokens: 100, output_tokens: 10}\n",
        encoding="utf-8",
    )
    for command in (("check", str(plan)), ("generate", str(plan), "--out", str(tmp_path / "out"))):
        code, out, err = run_cli(*command)
        assert (code, out) == (1, "")
        assert err == (
            f"quotacalc: error: {plan}: tenant: sizes to 0 units/s, a token bucket that admits nothing: give rps and "
            "tokens above 0\n"
        )
    assert not (tmp_path / "out").exists()


def test_canonical_refuses_a_salted_tenant_without_its_salt():
    """As envoy and kong do: a policy naming salt_refs without salts.json would leave salted tenants unsalted."""
    import sys

    sys.path.insert(0, str(Path(__file__).parent))
    from policy_samples import platform_policy, sample_salts

    from quotacalc.errors import QuotacalcError
    from quotacalc.exporters import canonical
    from quotacalc.exporters.base import ExportOptions

    policy = platform_policy()
    with pytest.raises(QuotacalcError) as refused:
        canonical.export(policy, {}, ExportOptions())
    assert refused.value.field.endswith(".salt_ref") and "no salt was derived" in refused.value.problem
    files = {f.path: f for f in canonical.export(policy, sample_salts(policy), ExportOptions()).files}
    assert files["canonical/salts.json"].secret


def test_a_tenant_of_more_adapters_than_one_envoy_route_holds_names_the_plan_file(run_cli, tmp_path, monkeypatch):
    """The Envoy target's refusal is an error of the plan: its file, the tenant's YAML path, one line, nothing
    written; the other targets still generate the plan."""
    monkeypatch.setenv("QUOTACALC_SALT_SECRET", SECRET)
    document = platform_document()
    index = next(i for i, tenant in enumerate(document["tenants"]) if tenant["name"] == "umbrella")
    document["tenants"][index]["lora_adapters"] = [f"umbrella-a{n}" for n in range(2000)]
    plan = write_plan(tmp_path, document)
    out = tmp_path / "out"
    line = one_line_error(*run_cli("generate", plan, "--out", out), EXIT_INVALID_INPUT)
    assert line == (
        f"{plan}: tenants[{index}].lora_adapters: tenant umbrella's 2,000 LoRA adapters need 16 Envoy AIGatewayRoute "
        "rules of 128 model matches (one per adapter and the base model), more than the 15 one route holds; nothing "
        "was written (give the tenant at most 1,919 adapters, or leave the envoy target out with --target)"
    )
    assert not out.exists()
    code, _, err = run_cli("generate", plan, "--out", out, "--target", "kong,vllm")
    assert code == 0, err
    document["tenants"][index]["lora_adapters"] = document["tenants"][index]["lora_adapters"][:1919]
    code, _, err = run_cli("generate", write_plan(tmp_path, document, "fits.yaml"), "--out", tmp_path / "fits")
    assert code == 0, err


@pytest.mark.parametrize("short", ["abc", "x" * 15])
def test_a_salt_secret_too_short_to_keep_the_salts_is_refused(run_cli, tmp_path, monkeypatch, short):
    monkeypatch.delenv("QUOTACALC_SALT_SECRET", raising=False)
    secret = tmp_path / "short.secret"
    secret.write_text(short + "\n", encoding="utf-8")
    line = one_line_error(*canonical(run_cli, tmp_path / "out", "--salt-secret-file", secret), EXIT_INVALID_INPUT)
    assert line == (
        f"{secret}: --salt-secret-file: is {len(short)} bytes, shorter than 16: the salts could be guessed offline "
        "from the committed manifest (use a random secret (e.g. openssl rand -hex 32))"
    )
    assert not (tmp_path / "out").exists()
    monkeypatch.setenv("QUOTACALC_SALT_SECRET", short)
    line = one_line_error(*canonical(run_cli, tmp_path / "out"), EXIT_INVALID_INPUT)
    assert line.startswith(f"QUOTACALC_SALT_SECRET: is {len(short)} bytes, shorter than 16")


def test_a_short_secret_fails_only_where_salts_are_written(run_cli, tmp_path, monkeypatch):
    # vllm carries no salt, and check only reads one: a short secret is no reason to stop them.
    monkeypatch.setenv("QUOTACALC_SALT_SECRET", "abc")
    code, _, err = run_cli("generate", PLATFORM, "--out", tmp_path / "v", "--target", "vllm")
    assert code == 0, err
    code, out, err = run_cli("check", PLATFORM, "--json")
    (finding,) = [f for f in json.loads(out)["findings"] if f["code"] == "salt-secret-short"]
    assert (finding["severity"], finding["subject"]) == ("warning", "QUOTACALC_SALT_SECRET")
    assert finding["message"].startswith("the salt secret is 3 bytes, shorter than 16")
    assert run_cli("check", PLATFORM, "--strict")[0] == 1
