"""A bad value's error names where its value was read, from the origin recorded as the plan is read
(quotacalc/inputs/origins.py): (a) a flag, (b) a flat plan's key, (c) a platform pool's own key, (d) a key the pool
inherits from the plan's top-level ``deployment:``. Every command that reads the deployment says the same.

Two kinds of bad value: one the Deployment refuses (a TP of -4), and one refused after validation, while the
measured pool's record is compared (an unknown KV dtype 'fp9', read against ``kv_pool_measured_with``).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
FLAT = ROOT / "examples" / "llama-3.3-70b-h100.yaml"
PLATFORM = ROOT / "examples" / "platform.yaml"
TP_PROBLEM = "must be a positive integer, got -4"
DTYPE_PROBLEM = "unknown dtype 'fp9' (did you mean fp8, fp4?)"


def _write(tmp_path: Path, document: dict, name: str) -> str:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")
    return str(path)


def _flat(tmp_path: Path, **keys) -> str:
    return _write(tmp_path, {**yaml.safe_load(FLAT.read_text(encoding="utf-8")), **keys}, "flat.yaml")


def _platform(
    tmp_path: Path, *, inherited: dict | None = None, long_pool: dict | None = None, measured: bool = True
) -> str:
    """examples/platform.yaml with ``inherited`` in its top-level deployment and ``long_pool`` in pool 1's (long);
    without its measured pool unless ``measured``."""
    document = yaml.safe_load(PLATFORM.read_text(encoding="utf-8"))
    document["deployment"].update(inherited or {})
    if not measured:
        del document["deployment"]["kv_pool_tokens"], document["deployment"]["kv_pool_measured_with"]
    document["pools"][1]["deployment"].update(long_pool or {})
    return _write(tmp_path, document, "platform.yaml")


def _error(run_cli, *args) -> str:
    code, out, err = run_cli(*args)
    assert code != 0 and out == "", err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0].removeprefix("quotacalc: error: ")


SIZE_FLAGS = ("--rps", "1", "--prompt-tokens", "100", "--output-tokens", "10")


@pytest.mark.parametrize("command", [("price",), ("size", *SIZE_FLAGS), ("kv", "--context", "1000")])
@pytest.mark.parametrize(("key", "value", "problem"), [("tp", "-4", TP_PROBLEM), ("kv_dtype", "fp9", DTYPE_PROBLEM)])
def test_a_flag_is_named_as_the_flag(run_cli, command, key, value, problem):
    flag = "--" + key.replace("_", "-")
    assert _error(run_cli, *command, FLAT, flag, value) == f"{flag}: {problem}"
    assert _error(run_cli, *command, PLATFORM, "--pool", "long", flag, value) == f"{flag}: {problem}"


@pytest.mark.parametrize("command", [("price",), ("size",), ("kv", "--context", "1000"), ("check",)])
@pytest.mark.parametrize(("key", "value", "problem"), [("tp", -4, TP_PROBLEM), ("kv_dtype", "fp9", DTYPE_PROBLEM)])
def test_a_flat_plans_key_is_named_as_its_key(tmp_path, run_cli, command, key, value, problem):
    plan = _flat(tmp_path, **{key: value})
    assert _error(run_cli, command[0], plan, *command[1:]) == f"{plan}: {key}: {problem}"


@pytest.mark.parametrize(
    "command", [("price", "--pool", "long"), ("size", "--pool", "long", *SIZE_FLAGS), ("kv", "--pool", "long")]
)
@pytest.mark.parametrize(("key", "value", "problem"), [("tp", -4, TP_PROBLEM), ("kv_dtype", "fp9", DTYPE_PROBLEM)])
def test_a_pools_own_key_is_named_at_its_yaml_path(tmp_path, run_cli, command, key, value, problem):
    plan = _platform(tmp_path, long_pool={key: value})
    extra = ("--context", "1000") if command[0] == "kv" else ()
    expected = f"{plan}: pools[1].deployment.{key}: {problem}"
    assert _error(run_cli, command[0], plan, *command[1:], *extra) == expected
    # the plan commands read every pool: the same place
    assert _error(run_cli, "check", plan) == expected
    assert _error(run_cli, "size", plan) == expected


@pytest.mark.parametrize(("key", "value", "problem"), [("tp", -4, TP_PROBLEM), ("kv_dtype", "fp9", DTYPE_PROBLEM)])
def test_an_inherited_key_is_named_at_the_pool_and_where_it_is_written(tmp_path, run_cli, key, value, problem):
    plan = _platform(tmp_path, inherited={key: value})
    for pool, index in (("shared", 0), ("long", 1)):
        expected = f"{plan}: pools[{index}].deployment.{key} (inherited from deployment.{key}): {problem}"
        assert _error(run_cli, "price", plan, "--pool", pool) == expected
        assert _error(run_cli, "kv", plan, "--pool", pool, "--context", "1000") == expected
        assert _error(run_cli, "size", plan, "--pool", pool, *SIZE_FLAGS) == expected
    # check and size of the whole plan stop at its first pool
    first = f"{plan}: pools[0].deployment.{key} (inherited from deployment.{key}): {problem}"
    assert _error(run_cli, "check", plan) == first
    assert _error(run_cli, "size", plan) == first


def test_a_model_that_does_not_resolve_is_placed_without_reading_the_plan_again(tmp_path, run_cli, monkeypatch):
    """A pool whose model does not resolve (and no measured pool's record that would name it first) is refused
    while the plan's references are checked: named at the pool's key, from the origins recorded as the plan was
    read, without reading the file again to ask whether the pool inherits it."""
    import quotacalc.inputs.text_file as text_file

    plan = _platform(tmp_path, inherited={"model": "no-such-model-anywhere"}, measured=False)
    opened: list[str] = []
    read = text_file.read_text_file

    def counting(path, *args, **kwargs):
        if str(path) == plan:
            opened.append(str(path))
        return read(path, *args, **kwargs)

    monkeypatch.setattr(text_file, "read_text_file", counting)
    line = _error(run_cli, "check", plan)
    assert line.startswith(f"{plan}: pools[0].deployment.model (inherited from deployment.model): "), line
    assert opened == [plan]


def test_the_max_model_len_fix_names_the_key_where_it_was_set(tmp_path, run_cli):
    """The core words the fix over the key (``{max_model_len}``); the command names it by its origin."""
    problem = "9,000 tokens exceed max_model_len 8,192 (the engine refuses longer sequences)"
    line = _error(run_cli, "kv", FLAT, "--context", "9000", "--max-model-len", "8192", "--kv-pool-tokens", "646503")
    assert line == f"--context: {problem} (at most 8,192 tokens, or raise --max-model-len)"
    plan = _flat(tmp_path, max_model_len=8192)
    line = _error(run_cli, "kv", plan, "--context", "9000")
    assert line == f"--context: {problem} (at most 8,192 tokens, or raise max_model_len)"
    plan = _platform(tmp_path, long_pool={"context": 8000, "max_model_len": 8192})
    line = _error(run_cli, "kv", plan, "--pool", "long", "--context", "9000")
    assert line == f"--context: {problem} (at most 8,192 tokens, or raise pools.long.deployment.max_model_len)"


def test_a_scenarios_embedded_plan_is_read_at_its_plan_key(tmp_path, run_cli):
    """The plan reader records the embedded plan's values under ``plan.``: every part of an error's place says so,
    the inherited key's too (it was prefixed after the fact, and named ``deployment.tp`` without it)."""
    document = yaml.safe_load((ROOT / "examples" / "simulate-platform.yaml").read_text(encoding="utf-8"))
    plan = document["plan"]
    plan["deployment"] = {"tp": -4}
    for pool in plan["pools"]:
        pool["deployment"].pop("tp", None)
    path = _write(tmp_path, document, "scenario.yaml")
    expected = f"{path}: plan.pools[0].deployment.tp (inherited from plan.deployment.tp): {TP_PROBLEM}"
    assert _error(run_cli, "simulate", path) == expected
    plan["deployment"] = {}
    plan["pools"][1]["deployment"]["engine"] = "sglng"
    path = _write(tmp_path, document, "scenario.yaml")
    assert _error(run_cli, "simulate", path).startswith(f"{path}: plan.pools[1].deployment.engine: unknown engine")
