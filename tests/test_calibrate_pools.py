"""calibrate on a platform plan: ``--pool`` picks the pool calibrated, ``--write`` writes into that pool, and
price, size and check on the plan say whether each pool's figures are calibrated.

The synthetic runs are predicted by the replica model from a known parameter set
(examples/calibration/make_synthetic.py, whose header the CSV repeats): the fit must give that set back.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).parent.parent
PLATFORM = ROOT / "examples" / "platform.yaml"
FLAT = ROOT / "examples" / "llama-3.3-70b-h100.yaml"
SYNTHETIC_CSV = ROOT / "examples" / "calibration" / "synthetic-llama-3.3-70b-h100-tp4.csv"
#: The CSV header's parameters (Llama 3.3 70B FP8, BF16 KV, TP 4 on H100: the platform plan's deployment).
KNOWN = {"mfu": 0.42, "mbu": 0.68, "sequence_overhead_s": 4.1e-05, "request_overhead_s": 0.025}


@pytest.fixture
def platform(tmp_path) -> Path:
    target = tmp_path / "platform.yaml"
    shutil.copy(PLATFORM, target)
    shutil.copy(SYNTHETIC_CSV, tmp_path / SYNTHETIC_CSV.name)
    return target


def _bench(platform: Path) -> Path:
    return platform.parent / SYNTHETIC_CSV.name


def test_pool_write_sets_that_pools_values_and_keeps_the_rest(run_cli, platform):
    before_text = platform.read_text(encoding="utf-8")
    before = yaml.safe_load(before_text)
    code, _, err = run_cli("calibrate", platform, "--pool", "shared", "--bench", _bench(platform), "--write", platform)
    assert code == 0, err
    text = platform.read_text(encoding="utf-8")
    after = yaml.safe_load(text)
    shared = after["pools"][0]
    for name, value in KNOWN.items():
        assert shared["deployment"][name] == pytest.approx(value, rel=0.02)
    assert shared["deployment"]["batch"] == 128 and shared["deployment"]["context"] == 1700
    section = shared["calibration"]
    assert section["rows"] == 6 and section["files"][0]["path"] == SYNTHETIC_CSV.name
    assert section["calibrated_on"]["tp"] == 4 and section["calibrated_on"]["kv_dtype"] == "bf16"
    # Everything else as it was: the defaults, the other pools, tiers and tenants, and the comments.
    assert after["deployment"] == before["deployment"]
    assert after["pools"][1:] == before["pools"][1:]
    assert {key: after[key] for key in ("tiers", "tenants")} == {key: before[key] for key in ("tiers", "tenants")}
    assert {key: value for key, value in shared.items() if key not in ("deployment", "calibration")} == {
        key: value for key, value in before["pools"][0].items() if key != "deployment"
    }
    for comment in ("# prompts above 32K tokens go to the long-context pool", "# few, long sequences per step"):
        assert comment in text
    assert text.count("calibration:") == 1


def test_pool_write_is_deterministic_and_replaces_its_section(run_cli, platform):
    copy = platform.parent / "calibrated.yaml"
    args = ("calibrate", platform, "--pool", "shared", "--bench", _bench(platform), "--write", copy)
    assert run_cli(*args)[0] == 0
    first = copy.read_text(encoding="utf-8")
    # The same plan and files again, into the file already written: the same bytes, one section.
    assert run_cli(*args)[0] == 0
    assert copy.read_text(encoding="utf-8") == first
    assert first.count("calibration:") == 1


def test_pool_write_to_a_new_file_copies_the_plan(run_cli, platform):
    copy = platform.parent / "calibrated.yaml"
    code, _, err = run_cli("calibrate", platform, "--pool", "long", "--bench", _bench(platform), "--write", copy)
    assert code == 0, err
    assert yaml.safe_load(platform.read_text(encoding="utf-8")) == yaml.safe_load(PLATFORM.read_text("utf-8"))
    written = yaml.safe_load(copy.read_text(encoding="utf-8"))
    assert written["pools"][1]["calibration"]["rows"] == 6
    assert "calibration" not in written["pools"][0]


def _json(run_cli, *args) -> dict:
    code, out, err = run_cli(*args, "--json")
    assert code == 0, err
    return json.loads(out)


def test_price_size_and_check_say_which_pool_is_calibrated(run_cli, platform):
    assert run_cli("calibrate", platform, "--pool", "shared", "--bench", _bench(platform), "--write", platform)[0] == 0
    priced = _json(run_cli, "price", platform, "--pool", "shared")
    assert priced["calibrated"]["rows"] == 6
    assert priced["calibrated"]["sources"] == [SYNTHETIC_CSV.name]
    assert priced["calibrated"]["parameters"]["mfu"] == pytest.approx(KNOWN["mfu"], rel=0.02)
    # Another pool of the same plan was not calibrated: it says so (null), with no warning.
    other = _json(run_cli, "price", platform, "--pool", "long")
    assert other["calibrated"] is None and other["warnings"] == []
    # A flag that changes the calibrated deployment: not calibrated, and the warning says what changed.
    moved = _json(run_cli, "price", platform, "--pool", "shared", "--gpu", "h200", "--kv-pool-tokens", "600000")
    assert moved["calibrated"] is None
    assert any("gpu h100-sxm -> h200" in warning for warning in moved["warnings"])
    sized = _json(run_cli, "size", platform)
    by_pool = {entry["name"]: entry["calibrated"] for entry in sized["pools"]}
    assert by_pool["shared"]["rows"] == 6 and by_pool["long"] is None and by_pool["acme-dedicated"] is None
    code, out, _ = run_cli("check", platform, "--json")
    checked = json.loads(out)
    assert checked["calibrated"]["shared"]["rows"] == 6 and checked["calibrated"]["long"] is None
    # The table says it too.
    code, out, err = run_cli("price", platform, "--pool", "shared")
    assert code == 0, err
    assert "calibrated" in out and "6 points" in out


def test_check_and_size_on_an_uncalibrated_plan_say_null(run_cli, platform):
    checked = json.loads(run_cli("check", platform, "--json")[1])
    assert checked["calibrated"] == {"shared": None, "long": None, "acme-dedicated": None}
    flat = json.loads(run_cli("check", FLAT, "--json")[1])
    assert flat["calibrated"] == {"default": None}


# --------------------------------------------------------------------------- bad input


def _one_line(err: str) -> str:
    assert "Traceback" not in err
    return err.strip()


def test_several_pools_without_pool_is_an_error_naming_the_file_and_flag(run_cli, platform):
    text = platform.read_text(encoding="utf-8")
    code, _, err = run_cli("calibrate", platform, "--bench", _bench(platform), "--write", platform)
    assert code == 2
    message = _one_line(err)
    assert str(platform) in message and "--pool" in message and "shared" in message
    assert platform.read_text(encoding="utf-8") == text


def test_unknown_pool_is_an_error_naming_the_file_and_flag(run_cli, platform):
    text = platform.read_text(encoding="utf-8")
    code, _, err = run_cli("calibrate", platform, "--pool", "shard", "--bench", _bench(platform), "--write", platform)
    assert code == 2
    message = _one_line(err)
    assert str(platform) in message and "--pool" in message and "no pool 'shard'" in message
    assert "did you mean 'shared'" in message
    assert platform.read_text(encoding="utf-8") == text


def test_pool_missing_from_the_target_plan_is_an_error(run_cli, platform):
    target = platform.parent / "other.yaml"
    document = yaml.safe_load(platform.read_text(encoding="utf-8"))
    document["pools"] = [pool for pool in document["pools"] if pool["name"] != "long"]
    document["pools"][0].pop("long_context_pool")
    document["pools"][0].pop("route_above_prompt_tokens")
    target.write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")
    text = target.read_text(encoding="utf-8")
    code, _, err = run_cli("calibrate", platform, "--pool", "long", "--bench", _bench(platform), "--write", target)
    assert code == 2
    message = _one_line(err)
    assert str(target) in message and "--pool" in message and "no pool 'long'" in message
    assert target.read_text(encoding="utf-8") == text


def test_pool_without_a_plan_or_on_a_flat_plan_is_an_error(run_cli, platform):
    code, _, err = run_cli("calibrate", "--pool", "shared", "--bench", _bench(platform))
    assert code == 2 and "--pool" in _one_line(err) and "needs a plan file" in err
    code, _, err = run_cli("calibrate", FLAT, "--pool", "shared", "--bench", _bench(platform))
    assert code == 2 and str(FLAT) in _one_line(err) and "--pool" in err


def test_a_platform_target_for_a_flat_calibration_and_back_is_an_error(run_cli, platform, tmp_path):
    text = platform.read_text(encoding="utf-8")
    code, _, err = run_cli("calibrate", FLAT, "--bench", _bench(platform), "--write", platform)
    assert code == 2 and str(platform) in _one_line(err) and "--write" in err and "platform plan" in err
    assert platform.read_text(encoding="utf-8") == text
    flat = tmp_path / "flat.yaml"
    shutil.copy(FLAT, flat)
    flat_text = flat.read_text(encoding="utf-8")
    code, _, err = run_cli("calibrate", platform, "--pool", "shared", "--bench", _bench(platform), "--write", flat)
    assert code == 2 and str(flat) in _one_line(err) and "--write" in err and "flat plan" in err
    assert flat.read_text(encoding="utf-8") == flat_text


def test_a_broken_pool_calibration_section_names_its_yaml_path(run_cli, platform):
    assert run_cli("calibrate", platform, "--pool", "long", "--bench", _bench(platform), "--write", platform)[0] == 0
    text = platform.read_text(encoding="utf-8")
    platform.write_text(text.replace("      rows: 6\n", "      rows: many\n"), encoding="utf-8")
    code, _, err = run_cli("price", platform, "--pool", "long")
    assert code != 0
    message = _one_line(err)
    assert str(platform) in message and "pools[1].calibration.rows" in message
    # The same exit code as a flat plan's broken section.
    flat = platform.parent / "flat.yaml"
    shutil.copy(FLAT, flat)
    assert run_cli("calibrate", flat, "--bench", _bench(platform), "--write", flat)[0] == 0
    flat.write_text(flat.read_text(encoding="utf-8").replace("  rows: 6\n", "  rows: many\n"), encoding="utf-8")
    assert run_cli("price", flat)[0] == code
    code, _, err = run_cli("check", platform)
    assert code != 0 and "pools[1].calibration.rows" in _one_line(err)


def test_a_pool_whose_calibration_no_longer_holds_says_why(run_cli, platform):
    assert run_cli("calibrate", platform, "--pool", "shared", "--bench", _bench(platform), "--write", platform)[0] == 0
    # The plan's author moves the calibrated pool to TP 8 afterwards (its measured pool dropped with it).
    text = platform.read_text(encoding="utf-8")
    moved = text.replace(
        "deployment: {batch: 128, context: 1700, mfu:",
        "deployment: {tp: 8, kv_pool_tokens: null, batch: 128, context: 1700, mfu:",
    )
    assert moved != text
    platform.write_text(moved, encoding="utf-8")
    code, out, err = run_cli("check", platform, "--json")
    checked = json.loads(out)
    assert checked["calibrated"]["shared"] is None
    # check says it as a finding (counted, and an error under --strict), not on stderr besides its table.
    (finding,) = [f for f in checked["findings"] if f["code"] == "calibration-not-held"]
    assert finding["subject"] == "pools.shared" and "not calibrated" in finding["message"]
    assert "tp 4 -> 8" in finding["message"]
    code, out, err = run_cli("size", platform, "--json")
    assert code == 0, err
    assert {entry["name"]: entry["calibrated"] for entry in json.loads(out)["pools"]}["shared"] is None
    assert "pool 'shared': not calibrated" in err and "tp 4 -> 8" in err


def test_calibrate_json_names_the_pool(run_cli, platform):
    code, out, err = run_cli("calibrate", platform, "--pool", "long", "--bench", _bench(platform), "--json")
    assert code == 0, err
    document = json.loads(out)
    assert document["pool"] == "long" and document["written"] is None
    assert document["inputs"]["deployment"]["context"] == 65536  # the pool's own key over the defaults
    code, out, err = run_cli("calibrate", FLAT, "--bench", _bench(platform), "--json")
    assert code == 0, err
    assert json.loads(out)["pool"] is None


def test_a_vllm_log_of_another_tp_share_or_gpu(run_cli, tmp_path):
    """The log's own TP and memory share must be the deployment's; a reserve a quarter of the GPU or more (an H100's
    pool read as an H200's) is said, and fails --strict."""
    config = (
        "INFO [core.py:74] Initializing a V1 LLM engine (v0.10.1.1) with config: model='meta-llama/Llama-3.1-8B-Instruct'"
        ", max_seq_len=131072, tensor_parallel_size=1, pipeline_parallel_size=1\n"
        "Available KV cache memory: 55.66 GiB\nGPU KV cache size: 455,952 tokens\n"
    )
    log = tmp_path / "serve.log"
    log.write_text(config, encoding="utf-8")
    model = ("--model", "Llama-3.1-8B-Instruct")
    code, out, err = run_cli("calibrate", *model, "--gpu", "h100-sxm", "--tp", "2", "--log", log)
    assert code == 1 and out == "" and "the log ran at TP 1, the deployment is TP 2 (give --tp 1" in err
    shared = "INFO non-default args: {'model': 'm', 'gpu_memory_utilization': 0.95}\n" + config
    log.write_text(shared, encoding="utf-8")
    code, out, err = run_cli("calibrate", *model, "--gpu", "h100-sxm", "--log", log)
    assert code == 1 and "sized at gpu_memory_utilization 0.95, the deployment's share is 0.9" in err
    # vLLM 0.8 and earlier print their arguments as a Namespace: the share is read there too.
    namespace = "INFO api_server.py:912] args: Namespace(host=None, port=8000, gpu_memory_utilization=0.95, seed=0)\n"
    log.write_text(namespace + config, encoding="utf-8")
    code, out, err = run_cli("calibrate", *model, "--gpu", "h100-sxm", "--log", log)
    assert code == 1 and "sized at gpu_memory_utilization 0.95, the deployment's share is 0.9" in err
    log.write_text(config, encoding="utf-8")
    # 55.66 GiB of KV beside 15 GiB of weights is an H100's pool at 0.9: on an H200 (139.8 GiB) it leaves 55 GiB.
    code, out, err = run_cli("calibrate", *model, "--gpu", "h200", "--log", log, "--strict")
    assert code == 1 and "GiB of h200's 139.8 GiB outside the KV pool at a memory share of 0.9" in err
    code, out, err = run_cli("calibrate", *model, "--gpu", "h100-sxm", "--log", log, "--strict")
    assert code == 0, err


def test_pool_write_refuses_a_deployment_shared_through_an_anchor(run_cli, platform):
    """Pool shared's deployment anchored (&dd) and acme-dedicated's an alias of it (*dd): writing the fit into the
    anchor's text would move acme-dedicated's MFU and MBU too, with no word. Refused in one line naming the pool's
    key; the file is left byte for byte."""
    text = platform.read_text(encoding="utf-8")
    first = "deployment: {batch: 128, context: 1700}"
    assert text.count(first) == 2
    at = text.index(first)
    second = text.index(first, at + 1)
    text = text[:second] + "deployment: *dd" + text[second + len(first) :]
    text = text[:at] + "deployment: &dd {batch: 128, context: 1700}" + text[at + len(first) :]
    platform.write_text(text, encoding="utf-8")
    code, _out, err = run_cli(
        "calibrate", platform, "--pool", "shared", "--bench", _bench(platform), "--write", platform
    )
    assert code == 1 and err.count("\n") == 1, err
    assert "pools[0].deployment: is shared with another part of the plan through a YAML anchor" in err
    assert platform.read_text(encoding="utf-8") == text
