"""A salt secret file others can read gets a warning, as ssh warns of a private key that is open to others:
whoever reads the secret can derive every tenant's salt (and read or poison its prefix cache)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
PLATFORM = EXAMPLES / "platform.yaml"


@pytest.fixture(autouse=True)
def _no_ambient_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("QUOTACALC_SALT_SECRET", raising=False)


def _secret_file(tmp_path: Path, mode: int) -> Path:
    path = tmp_path / f"salt-{mode:o}.secret"
    path.write_text("a-random-secret-of-enough-bytes-0123456789\n", encoding="utf-8")
    os.chmod(path, mode)
    return path


def _warnings(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("quotacalc: warning: ")]


@pytest.mark.parametrize(
    ("mode", "who"), [(0o644, "its group and others"), (0o640, "its group"), (0o604, "others"), (0o660, "its group")]
)
def test_generate_warns_of_a_secret_file_open_to_others(run_cli, tmp_path: Path, mode: int, who: str):
    secret = _secret_file(tmp_path, mode)
    code, _, err = run_cli(
        "generate", PLATFORM, "--out", tmp_path / "out", "--target", "canonical", "--salt-secret-file", secret
    )
    assert code == 0, err
    assert _warnings(err) == [
        f"quotacalc: warning: {secret}: --salt-secret-file: is open to {who} (mode {mode:04o}): whoever can read it "
        f"can derive every tenant's salt (chmod 600 {secret})"
    ]
    assert "a-random-secret" not in err


@pytest.mark.parametrize("mode", [0o600, 0o400])
def test_an_owner_only_secret_file_gets_no_warning(run_cli, tmp_path: Path, mode: int):
    secret = _secret_file(tmp_path, mode)
    code, _, err = run_cli(
        "generate", PLATFORM, "--out", tmp_path / "out", "--target", "canonical", "--salt-secret-file", secret
    )
    assert code == 0, err
    assert _warnings(err) == []


def _check_findings(run_cli, secret: Path, *extra: str) -> tuple[int, list[dict]]:
    code, out, _ = run_cli("check", PLATFORM, "--salt-secret-file", secret, "--json", *extra)
    return code, json.loads(out)["findings"]


def test_check_finds_an_open_secret_file_and_strict_fails_on_it(run_cli, tmp_path: Path):
    private, open_ = _secret_file(tmp_path, 0o600), _secret_file(tmp_path, 0o644)
    _, private_findings = _check_findings(run_cli, private)
    _, open_findings = _check_findings(run_cli, open_)
    (added,) = [finding for finding in open_findings if finding["code"] == "salt-secret-file-open"]
    assert not [finding for finding in private_findings if finding["code"] == "salt-secret-file-open"]
    assert len(open_findings) == len(private_findings) + 1
    assert added["severity"] == "warning" and added["subject"] == "--salt-secret-file"
    assert added["message"].startswith(f"{open_} is open to its group and others (mode 0644)")
    assert added["fix"] == f"chmod 600 {open_}"
    # --strict makes it an error, so a CI job with an open secret file fails.
    code, strict_findings = _check_findings(run_cli, open_, "--strict")
    assert code == 1
    (strict,) = [finding for finding in strict_findings if finding["code"] == "salt-secret-file-open"]
    assert strict["severity"] == "error"
