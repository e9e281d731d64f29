"""Plan values that would pass into generated configs and do something else there: a YAML set whose order is the
hash seed's, a tenant header HTTP strips between hops, a model name an engine reads as a flag. Each is refused with
one line naming the file and the key."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from quotacalc.core.plan import HTTP_CONNECTION_HEADERS
from quotacalc.errors import EXIT_INVALID_INPUT

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
PLATFORM = EXAMPLES / "platform.yaml"


@pytest.fixture(autouse=True)
def _secret(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("QUOTACALC_SALT_SECRET", "test-secret-not-for-production")


def one_error_line(code: int, out: str, err: str) -> str:
    assert code == EXIT_INVALID_INPUT, f"exit {code}: {err!r}"
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith("quotacalc: error: ")
    return lines[0].removeprefix("quotacalc: error: ")


def _document() -> dict:
    return yaml.safe_load(PLATFORM.read_text(encoding="utf-8"))


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "plan.yaml"
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("tagged", "problem"),
    [
        ("!!set {platform-system-prompt-v3, tool-schemas-v1}", "!!set (line {line}) is a set, whose order changes"),
        ("!!omap [{a: 1}]", "!!omap (line {line}) is an ordered map"),
        ("!!pairs [{a: 1}]", "!!pairs (line {line}) is a list of pairs"),
        ("!!binary aGVsbG8=", "!!binary (line {line}) is binary data"),
    ],
)
def test_yaml_types_beyond_lists_and_mappings_are_refused(run_cli, tmp_path: Path, tagged: str, problem: str):
    """A !!set of public prefixes was accepted as a tuple in Python's hash order, so the policy (and every file
    generated from it) changed with PYTHONHASHSEED."""
    document = _document()
    document["public_prefixes"] = "PLACEHOLDER"
    text = yaml.safe_dump(document, sort_keys=False)
    line = text[: text.index("PLACEHOLDER")].count("\n") + 1
    plan = _write(tmp_path, text.replace("PLACEHOLDER", tagged))
    for command in ("check", "generate"):
        extra = ("--out", tmp_path / "out", "--target", "vllm") if command == "generate" else ()
        error = one_error_line(*run_cli(command, plan, *extra))
        assert error.startswith(f"{plan}: {problem.format(line=line)}"), error
    assert not (tmp_path / "out").exists()


def test_a_plain_list_of_prefixes_is_read_in_its_order(run_cli, tmp_path: Path):
    document = _document()
    document["public_prefixes"] = ["zeta", "alpha"]
    plan = _write(tmp_path, yaml.safe_dump(document, sort_keys=False))
    code, _, err = run_cli("generate", plan, "--out", tmp_path / "out", "--target", "canonical")
    assert code == 0, err
    policy = yaml.safe_load((tmp_path / "out" / "canonical" / "policy.yaml").read_text(encoding="utf-8"))
    assert "zeta" in str(policy) and "alpha" in str(policy)


@pytest.mark.parametrize("header", sorted(HTTP_CONNECTION_HEADERS - {"host", "content-length"}))
def test_a_tenant_header_http_strips_between_hops_is_refused(run_cli, tmp_path: Path, header: str):
    document = _document()
    document["tenant_header"] = header
    plan = _write(tmp_path, yaml.safe_dump(document, sort_keys=False))
    error = one_error_line(*run_cli("check", plan))
    assert error.startswith(f"{plan}: tenant_header: '{header}' is a header HTTP consumes between hops"), error


@pytest.mark.parametrize("header", ["host", "content-length", ":authority", ":path", "Connection"])
def test_headers_that_frame_the_request_and_pseudo_headers_are_refused(run_cli, tmp_path: Path, header: str):
    document = _document()
    document["tenant_header"] = header
    plan = _write(tmp_path, yaml.safe_dump(document, sort_keys=False))
    error = one_error_line(*run_cli("check", plan))
    assert error.startswith(f"{plan}: tenant_header: '{header}' "), error


def test_the_hop_by_hop_list_holds_rfc_9110s_connection_options():
    """RFC 9110 section 7.6.1 names Proxy-Connection, Keep-Alive, TE, Transfer-Encoding and Upgrade as the
    headers a proxy must treat as connection options; Connection itself; RFC 9113 section 8.2.2 adds them to
    what HTTP/2 forbids, with Host and Content-Length framing the message."""
    assert {
        "connection",
        "proxy-connection",
        "keep-alive",
        "te",
        "transfer-encoding",
        "upgrade",
        "host",
        "content-length",
    } <= HTTP_CONNECTION_HEADERS


@pytest.mark.parametrize(
    ("key", "value"),
    [("serve_model", "--trust-remote-code"), ("serve_model", " -x"), ("model", "--trust-remote-code")],
)
def test_a_model_name_an_engine_reads_as_a_flag_is_refused(run_cli, tmp_path: Path, key: str, value: str):
    """The vLLM and SGLang files pass it as --model / --model-path's value: '--trust-remote-code' there would be a
    flag of its own."""
    document = _document()
    document["pools"][0].setdefault("deployment", {})[key] = value
    plan = _write(tmp_path, yaml.safe_dump(document, sort_keys=False))
    for command in ("check", "generate"):
        extra = ("--out", tmp_path / "out", "--target", "vllm,sglang") if command == "generate" else ()
        error = one_error_line(*run_cli(command, plan, *extra))
        assert error.startswith(f"{plan}: pools[0].deployment.{key}: must not start with '-'"), error
    assert not (tmp_path / "out").exists()


def test_a_lora_adapter_named_like_a_flag_is_refused(run_cli, tmp_path: Path):
    """vLLM takes adapters as --lora-modules NAME=PATH: a name starting with '-' is an option there."""
    document = _document()
    tenant = next(tenant for tenant in document["tenants"] if tenant.get("lora_adapters"))
    tenant["lora_adapters"] = ["--enable-lora"]
    plan = _write(tmp_path, yaml.safe_dump(document, sort_keys=False))
    error = one_error_line(*run_cli("check", plan))
    assert "lora_adapters[0]: must not start with '-'" in error, error


@pytest.mark.parametrize("value", ["./-weights", "/models/--trust-remote-code/", "org/sub/-x"])
def test_a_path_whose_served_name_is_a_flag_is_refused(run_cli, tmp_path: Path, value: str):
    """A local path is served under its last component (vLLM's --served-model-name): that must not be a flag
    either."""
    document = _document()
    document["pools"][0].setdefault("deployment", {})["serve_model"] = value
    plan = _write(tmp_path, yaml.safe_dump(document, sort_keys=False))
    error = one_error_line(*run_cli("check", plan))
    assert error.startswith(f"{plan}: pools[0].deployment.serve_model: must not start with '-', nor end in"), error


def test_a_path_with_a_dash_inside_is_served(run_cli, tmp_path: Path):
    document = _document()
    for pool in document["pools"]:
        pool.setdefault("deployment", {})["serve_model"] = "/models/llama-3.3-70b"
    plan = _write(tmp_path, yaml.safe_dump(document, sort_keys=False))
    code, _, err = run_cli("generate", plan, "--out", tmp_path / "out", "--target", "vllm")
    assert code == 0, err
    text = (tmp_path / "out" / "vllm" / f"{document['pools'][0]['name']}.yaml").read_text(encoding="utf-8")
    assert "/models/llama-3.3-70b" in text
