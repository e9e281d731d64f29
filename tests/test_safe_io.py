"""Hostile folders and files, as an attacker with write access to a repository that CI runs quotacalc in would plant
them: nothing quotacalc writes, removes, reads back or prints resolves outside the folder it was given."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from quotacalc.errors import EXIT_INVALID_INPUT

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
PLATFORM = EXAMPLES / "platform.yaml"
SECRET = "test-secret-not-for-production"
PRECIOUS = "precious: a file outside --out that no run may touch or show\n"


@pytest.fixture(autouse=True)
def _secret(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("QUOTACALC_SALT_SECRET", SECRET)


def one_error_line(code: int, out: str, err: str, expected_code: int) -> str:
    assert code == expected_code, f"exit {code}, want {expected_code}: {err!r}"
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.strip() and not line.startswith("quotacalc: note:")]
    assert len(lines) == 1, err
    assert lines[0].startswith("quotacalc: error: ")
    return lines[0].removeprefix("quotacalc: error: ")


def tree(directory: Path) -> dict[str, bytes]:
    return {
        str(path.relative_to(directory)): path.read_bytes() for path in sorted(directory.rglob("*")) if path.is_file()
    }


def canonical(run_cli, out: Path, *extra: object) -> tuple[int, str, str]:
    return run_cli("generate", PLATFORM, "--out", out, "--target", "canonical", *extra)


@pytest.fixture
def elsewhere(tmp_path: Path) -> Path:
    """A folder outside --out holding a file an attacker wants removed or shown."""
    folder = tmp_path / "elsewhere"
    folder.mkdir()
    (folder / "victim.txt").write_text(PRECIOUS, encoding="utf-8")
    return folder


def _forge_stale_entry(out_dir: Path, path: str) -> None:
    """The committed manifest edited to own ``path`` (with the victim's digest), as if quotacalc had written it."""
    manifest = out_dir / ".quotacalc-manifest.json"
    document = json.loads(manifest.read_text(encoding="utf-8"))
    digest = hashlib.sha256(PRECIOUS.encode("utf-8")).hexdigest()
    document["files"][path] = {"sha256": digest, "target": "canonical"}
    manifest.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")


# --- remove ----------------------------------------------------------------------------------------------------


def test_generate_removes_no_stale_file_through_a_planted_folder_link(run_cli, tmp_path: Path, elsewhere: Path):
    """The manifest claims a stale file under out/canonical/old, and out/canonical/old is a link to a folder
    elsewhere: the stale removal would delete the victim there. generate refuses in one line naming the link."""
    out_dir = tmp_path / "out"
    assert canonical(run_cli, out_dir)[0] == 0
    _forge_stale_entry(out_dir, "canonical/old/victim.txt")
    (out_dir / "canonical" / "old").symlink_to(elsewhere, target_is_directory=True)
    before = tree(out_dir)
    line = one_error_line(*canonical(run_cli, out_dir), EXIT_INVALID_INPUT)
    assert line.startswith(f"{out_dir / 'canonical' / 'old'}: --out: is a symbolic link where a directory")
    assert "nothing was written" in line
    assert (elsewhere / "victim.txt").read_text(encoding="utf-8") == PRECIOUS
    assert tree(out_dir) == before


def test_a_stale_file_that_is_itself_a_link_is_never_removed_through(run_cli, tmp_path: Path, elsewhere: Path):
    """A stale path that is a link to the victim: the link is not quotacalc's file (its digest is not the victim's
    read through it), so the run refuses it as edited, and the victim stays."""
    out_dir = tmp_path / "out"
    assert canonical(run_cli, out_dir)[0] == 0
    _forge_stale_entry(out_dir, "canonical/victim.txt")
    (out_dir / "canonical" / "victim.txt").symlink_to(elsewhere / "victim.txt")
    line = one_error_line(*canonical(run_cli, out_dir), EXIT_INVALID_INPUT)
    assert line.startswith(f"{out_dir / 'canonical' / 'victim.txt'}: was edited since quotacalc wrote it")
    assert (elsewhere / "victim.txt").read_text(encoding="utf-8") == PRECIOUS


# --- write -----------------------------------------------------------------------------------------------------


def test_generate_writes_nothing_through_a_planted_folder_link(run_cli, tmp_path: Path, elsewhere: Path):
    """out/canonical is a link to a folder elsewhere before the first run: refused, nothing written there."""
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    (out_dir / "canonical").symlink_to(elsewhere, target_is_directory=True)
    line = one_error_line(*canonical(run_cli, out_dir), EXIT_INVALID_INPUT)
    assert line.startswith(f"{out_dir / 'canonical'}: --out: is a symbolic link where a directory")
    assert tree(elsewhere) == {"victim.txt": PRECIOUS.encode()}
    assert sorted(path.name for path in out_dir.iterdir()) == ["canonical"]


def test_a_link_swapped_in_after_the_check_cannot_redirect_a_write(tmp_path: Path, elsewhere: Path):
    """Race: the folder is checked and opened, then replaced by a link to elsewhere before the file is written. The
    write goes through the descriptor opened before the swap, so it lands in the folder quotacalc checked (now
    moved aside), never elsewhere."""
    from quotacalc.fileio import ConfinedDir

    out_dir = tmp_path / "out"
    (out_dir / "canonical").mkdir(parents=True)
    with ConfinedDir(out_dir, field="--out", contents="the generated files", outcome="nothing was written") as folder:
        assert folder.directory(("canonical",)) is not None
        (out_dir / "canonical").rename(tmp_path / "moved")
        (out_dir / "canonical").symlink_to(elsewhere, target_is_directory=True)
        folder.replace(folder.stage("canonical/policy.yaml", b"written\n", 0o644), "canonical/policy.yaml")
        folder.unlink("canonical/policy.yaml")
        folder.replace(folder.stage("canonical/again.yaml", b"written\n", 0o644), "canonical/again.yaml")
    assert tree(elsewhere) == {"victim.txt": PRECIOUS.encode()}
    assert tree(tmp_path / "moved") == {"again.yaml": b"written\n"}


# --- check -----------------------------------------------------------------------------------------------------


def test_check_neither_reads_nor_prints_through_a_planted_folder_link(run_cli, tmp_path: Path, elsewhere: Path):
    """--check diffs a stale file's whole content: through a planted link it would print a file from outside --out.
    It refuses in one line instead, and shows nothing of the victim."""
    out_dir = tmp_path / "out"
    assert canonical(run_cli, out_dir)[0] == 0
    _forge_stale_entry(out_dir, "canonical/old/victim.txt")
    (out_dir / "canonical" / "old").symlink_to(elsewhere, target_is_directory=True)
    code, out, err = canonical(run_cli, out_dir, "--check")
    line = one_error_line(code, out, err, EXIT_INVALID_INPUT)
    assert line.startswith(f"{out_dir / 'canonical' / 'old'}: --out: is a symbolic link where a directory")
    assert "nothing was compared" in line
    assert "precious" not in out + err


def test_check_does_not_diff_a_target_folder_that_is_a_link(run_cli, tmp_path: Path, elsewhere: Path):
    """A target's whole folder replaced by a link to a folder holding a file of a generated name."""
    out_dir = tmp_path / "out"
    assert canonical(run_cli, out_dir)[0] == 0
    (elsewhere / "policy.yaml").write_text(PRECIOUS, encoding="utf-8")
    for path in (out_dir / "canonical").iterdir():
        path.unlink()
    (out_dir / "canonical").rmdir()
    (out_dir / "canonical").symlink_to(elsewhere, target_is_directory=True)
    code, out, err = canonical(run_cli, out_dir, "--check")
    one_error_line(code, out, err, EXIT_INVALID_INPUT)
    assert "precious" not in out + err


# --- copy ------------------------------------------------------------------------------------------------------


def test_examples_copy_writes_nothing_through_a_planted_folder_link(run_cli, tmp_path: Path, elsewhere: Path):
    """DIR/platform (where the example's generated folder goes) is a link to elsewhere: refused, nothing written."""
    target = tmp_path / "dir"
    target.mkdir()
    (target / "platform").symlink_to(elsewhere, target_is_directory=True)
    line = one_error_line(*run_cli("examples", "platform", "--copy", target), EXIT_INVALID_INPUT)
    assert line.startswith(f"{target / 'platform'}: --copy: is a symbolic link where a directory")
    assert tree(elsewhere) == {"victim.txt": PRECIOUS.encode()}
    assert sorted(path.name for path in target.iterdir()) == ["platform"]


def test_examples_copy_does_not_write_through_a_file_link(run_cli, tmp_path: Path, elsewhere: Path):
    """DIR/llama-3.3-70b-h100.yaml is a link to the victim: refused as a file in the way, the victim unchanged."""
    target = tmp_path / "dir"
    target.mkdir()
    (target / "llama-3.3-70b-h100.yaml").symlink_to(elsewhere / "victim.txt")
    line = one_error_line(*run_cli("examples", "llama-3.3-70b-h100", "--copy", target), EXIT_INVALID_INPUT)
    assert line.startswith(f"--copy: would overwrite {target / 'llama-3.3-70b-h100.yaml'}")
    assert (elsewhere / "victim.txt").read_text(encoding="utf-8") == PRECIOUS


def test_a_copy_into_a_folder_given_as_a_link_is_the_users_choice(run_cli, tmp_path: Path):
    """The folder named on the command line may itself be a link (a home folder on another disk): only links inside
    it are refused."""
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "named").symlink_to(real, target_is_directory=True)
    code, _, err = run_cli("examples", "llama-3.3-70b-h100", "--copy", tmp_path / "named")
    assert code == 0, err
    assert (real / "llama-3.3-70b-h100.yaml").is_file()
    assert os.path.islink(tmp_path / "named")


# --- the manifest ----------------------------------------------------------------------------------------------

ROOT = Path(__file__).resolve().parent.parent


def run_subprocess(*args: object, timeout: float = 60, **kwargs) -> subprocess.CompletedProcess[str]:
    """quotacalc as CI runs it: a process of its own (a hang is a timeout, not a stuck test run)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "QUOTACALC_SALT_SECRET": SECRET}
    command = [sys.executable, "-c", "from quotacalc.cli.entry import main; main()", *(str(arg) for arg in args)]
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env, **kwargs)


@pytest.mark.parametrize("check", [False, True], ids=["generate", "check"])
def test_a_manifest_that_is_a_fifo_is_refused_not_waited_on(tmp_path: Path, check: bool):
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    os.mkfifo(out_dir / ".quotacalc-manifest.json")
    extra = ["--check"] if check else []
    proc = run_subprocess("generate", PLATFORM, "--out", out_dir, "--target", "canonical", *extra)
    line = one_error_line(proc.returncode, proc.stdout, proc.stderr, EXIT_INVALID_INPUT)
    assert line.startswith(f"{out_dir / '.quotacalc-manifest.json'}: is not a regular file, not a quotacalc manifest")
    assert sorted(path.name for path in out_dir.iterdir()) == [".quotacalc-manifest.json"]


def test_a_manifest_linked_to_dev_zero_is_refused_unread(run_cli, tmp_path: Path):
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    (out_dir / ".quotacalc-manifest.json").symlink_to("/dev/zero")
    line = one_error_line(*canonical(run_cli, out_dir), EXIT_INVALID_INPUT)
    assert line.startswith(f"{out_dir / '.quotacalc-manifest.json'}: is a symbolic link, not a quotacalc manifest")


def test_a_manifest_linked_to_a_manifest_elsewhere_is_refused(run_cli, tmp_path: Path):
    """Even a link to a real manifest: what it lists would then be judged against another folder's record."""
    assert canonical(run_cli, tmp_path / "first")[0] == 0
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    (out_dir / ".quotacalc-manifest.json").symlink_to(tmp_path / "first" / ".quotacalc-manifest.json")
    line = one_error_line(*canonical(run_cli, out_dir, "--check"), EXIT_INVALID_INPUT)
    assert "is a symbolic link, not a quotacalc manifest" in line


def test_a_manifest_nested_100k_deep_is_a_clean_error(run_cli, tmp_path: Path):
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    (out_dir / ".quotacalc-manifest.json").write_text("[" * 100_000 + "]" * 100_000, encoding="utf-8")
    for extra in ((), ("--check",)):
        line = one_error_line(*canonical(run_cli, out_dir, *extra), EXIT_INVALID_INPUT)
        assert line.startswith(f"{out_dir / '.quotacalc-manifest.json'}: is not a quotacalc manifest")


def test_a_manifest_too_large_to_be_one_is_refused_before_it_is_read(run_cli, tmp_path: Path):
    from quotacalc.exporters.writer import MAX_MANIFEST_BYTES

    out_dir = tmp_path / "out"
    out_dir.mkdir()
    with open(out_dir / ".quotacalc-manifest.json", "wb") as handle:
        handle.truncate(MAX_MANIFEST_BYTES + 1)  # sparse: no disk used
    line = one_error_line(*canonical(run_cli, out_dir), EXIT_INVALID_INPUT)
    assert line.startswith(
        f"{out_dir / '.quotacalc-manifest.json'}: is larger than {MAX_MANIFEST_BYTES:,} bytes, not a quotacalc manifest"
    )
