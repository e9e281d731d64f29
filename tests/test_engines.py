"""The engine catalog (quotacalc/catalog/engines.yaml): a profile sets the engine-model defaults a serving engine
changes, an input given explicitly wins, and a bad name or entry is one line naming the field."""

from __future__ import annotations

import json

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from quotacalc import Deployment
from quotacalc.catalog.engines import EngineDefaults, load_engine_catalog, parse_engine_catalog
from quotacalc.errors import QuotacalcError

LLAMA8 = dict(model="Llama-3.1-8B-Instruct", gpu="h100-sxm")


def sglang_layer_s() -> float:
    """The catalog's own figure (the test checks how it is applied, not what was fitted)."""
    value = load_engine_catalog().get("sglang").defaults.prefill_layer_overhead_s
    assert value is not None and value > 0
    return value


def test_a_profile_fills_the_inputs_it_names_and_an_explicit_value_wins():
    layer_s = sglang_layer_s()
    assert Deployment(**LLAMA8, engine="sglang").prefill_layer_overhead_s == layer_s
    assert Deployment(**LLAMA8, engine="SGLang ").engine == "sglang"  # ids and aliases, any case
    assert Deployment(**LLAMA8, engine="sglang", prefill_layer_overhead_s=0.0).prefill_layer_overhead_s == 0.0
    # The inputs it does not name keep their own defaults.
    plain, sglang = Deployment(**LLAMA8), Deployment(**LLAMA8, engine="sglang")
    named = {"engine", *load_engine_catalog().get("sglang").defaults.given()}
    assert plain.model_dump(exclude=named) == sglang.model_dump(exclude=named)
    assert sglang.mixed_prefill is False and plain.mixed_prefill is True
    # vLLM and TensorRT-LLM are what the defaults were fitted on: the generic profile, which changes nothing.
    from quotacalc.core.deployment import GENERIC_ENGINE

    assert plain.engine == GENERIC_ENGINE and load_engine_catalog().get(GENERIC_ENGINE).defaults.given() == {}
    for alias in ("vllm", "tensorrt-llm", "nim"):
        assert Deployment(**LLAMA8, engine=alias) == plain


def test_every_profile_names_only_deployment_inputs():
    """A profile key that is not a Deployment field would never apply: the schemas keep them the same."""
    assert set(EngineDefaults.model_fields) <= set(Deployment.model_fields)
    for engine in load_engine_catalog().engines.values():
        assert engine.source.strip(), engine.id
        for name, value in engine.defaults.given().items():
            Deployment(**LLAMA8, **{name: value})  # within the input's own bounds


def test_the_eager_prefill_reaches_the_first_token_by_hand(run_cli):
    """Llama 3.1 8B has 32 layers: on SGLang its first token pays 32 x the profile's per-layer time once a chunk,
    where the generic engine pays 32 x 90 us."""
    layer_s = sglang_layer_s()
    base = ("price", "--model", "Llama-3.1-8B-Instruct", "--gpu", "h100-sxm", "--context", "1000", "--json")
    figures = {}
    for engine in ("generic", "sglang"):
        code, out, err = run_cli(*base, "--engine", engine)
        assert code == 0, err
        document = json.loads(out)
        assert document["inputs"]["deployment"]["engine"] == engine
        figures[engine] = document["results"]
    assert figures["sglang"]["prefill_overhead_s"] == pytest.approx(32 * layer_s)
    assert figures["generic"]["prefill_overhead_s"] == pytest.approx(32 * 9e-5)
    assert figures["sglang"]["ttft_s"] - figures["generic"]["ttft_s"] == pytest.approx(32 * (layer_s - 9e-5), rel=1e-9)
    assert figures["sglang"]["itl_s"] == figures["generic"]["itl_s"]


def test_unknown_engine_is_one_line_naming_the_flag_and_the_choices(run_cli):
    code, out, err = run_cli("price", "--model", "Llama-3.1-8B-Instruct", "--gpu", "h100-sxm", "--engine", "sglng")
    assert code == 2 and out == ""  # an unknown name is a usage error, as an unknown GPU is
    assert (
        err.strip()
        == "quotacalc: error: --engine: unknown engine 'sglng'; did you mean sglang? choose from generic, sglang, tensorrt-llm-pytorch"
    )


def test_engines_listing_as_json_and_table(run_cli):
    code, out, err = run_cli("engines", "--json")
    assert code == 0, err
    document = json.loads(out)
    assert document["command"] == "engines" and document["schema_version"] == 2
    by_id = {engine["id"]: engine for engine in document["engines"]}
    assert set(by_id) == set(load_engine_catalog().engines)
    assert by_id["sglang"]["defaults"]["prefill_layer_overhead_s"] == sglang_layer_s()
    code, out, err = run_cli("engines")
    assert code == 0 and "sglang" in out and "prefill_layer_overhead_s" in out


@pytest.mark.parametrize(
    ("document", "expected"),
    [
        ({"engines": {"x": {"name": "X", "defaults": {"mfu": 0.4}, "source": "s"}}}, "engines.x.defaults.mfu"),
        (
            {"engines": {"x": {"name": "X", "defaults": {"request_overhead_s": -1}, "source": "s"}}},
            "engines.x.defaults.request_overhead_s",
        ),
        ({"engines": {"x": {"name": "X", "defaults": {}}}}, "engines.x.source"),
        ({"gpus": {}}, None),
    ],
)
def test_a_bad_catalog_entry_names_its_field(document, expected):
    with pytest.raises(QuotacalcError) as caught:
        parse_engine_catalog(document, "engines.yaml")
    assert caught.value.source == "engines.yaml"
    assert caught.value.field == expected


def test_the_shipped_catalog_parses_as_written():
    from pathlib import Path

    import quotacalc.catalog.engines as engines

    path = Path(engines.__file__).with_name(engines.CATALOG_FILE)
    assert parse_engine_catalog(yaml.safe_load(path.read_text(encoding="utf-8")), str(path)) == load_engine_catalog()


def test_tables_name_a_profiled_engine_and_leave_the_generic_one_unsaid(run_cli):
    base = ("price", "--model", "Llama-3.1-8B-Instruct", "--gpu", "h100-sxm")
    code, out, _ = run_cli(*base, "--engine", "sglang")
    assert code == 0 and "$2.5/GPU-h, engine sglang" in out
    code, out, _ = run_cli(*base, "--gpu", "h100-sxm,h200", "--engine", "sglang", "--format", "markdown")
    assert code == 0 and out.splitlines()[0].endswith("$2.5/GPU-h, engine sglang**")
    code, out, _ = run_cli(*base)
    assert code == 0 and "engine" not in out.splitlines()[0]


def test_the_catalog_finds_ids_and_aliases_and_suggests_close_ones():
    catalog = load_engine_catalog()
    assert catalog.find(" VLLM ").id == "generic" and catalog.find("sglang").id == "sglang"
    assert catalog.find("sglng") is None
    with pytest.raises(QuotacalcError) as caught:
        catalog.get("sglng")
    assert (caught.value.field, caught.value.fix) == ("engine", "did you mean sglang?")
    with pytest.raises(QuotacalcError) as caught:
        catalog.get("zzz")
    assert caught.value.fix == "one of generic, sglang, tensorrt-llm-pytorch ('quotacalc engines')"


# SGLang's default --chunked-prefill-size by the GPU's memory, by hand from python/sglang/srt/server_args.py
# (ServerArgs._handle_gpu_memory_settings, 0.5 releases): below 35 GiB 2,048; below 60 GiB 4,096; below 160 GiB
# 8,192; else 16,384. vLLM's (core/memory.py): 8,192 at 70 GiB or more except A100, else 2,048.
@pytest.mark.parametrize(
    ("gpu", "sglang_tokens", "vllm_tokens"),
    [
        ("l4", 2048, 2048),  # 22 GiB
        ("a100-40gb-sxm", 4096, 2048),  # 39.4 GiB
        ("l40s", 4096, 2048),  # 44.3 GiB
        ("a100-80gb-sxm", 8192, 2048),  # 79.2 GiB: vLLM keeps 2,048 on every A100
        ("h100-sxm", 8192, 8192),
        ("h200", 8192, 8192),  # 139.8 GiB
        ("b200", 16384, 8192),  # 178.4 GiB
        ("mi300x", 16384, 8192),  # 192 GiB
    ],
)
def test_an_engine_profile_sets_its_own_token_budget_by_gpu_memory(gpu, sglang_tokens, vllm_tokens):
    from quotacalc.catalog.gpus import load_gpu_catalog
    from quotacalc.core.memory import max_num_batched_tokens

    spec = load_gpu_catalog().get(gpu)
    for engine, tokens in (("sglang", sglang_tokens), ("generic", vllm_tokens), ("trtllm-serve", 8192)):
        assert max_num_batched_tokens(Deployment(model=LLAMA8["model"], gpu=gpu, engine=engine), spec) == tokens
    given = Deployment(model=LLAMA8["model"], gpu=gpu, engine="sglang", max_num_batched_tokens=1024)
    assert max_num_batched_tokens(given, spec) == 1024  # an explicit budget wins over the profile's rule


def test_sglangs_budget_prefills_a_4194_token_prompt_in_one_chunk_on_an_a100(run_cli):
    """Llama 3.3 70B at TP 8 on A100 80GB: SGLang's 8,192-token chunk takes the prompt in one prefill pass where
    vLLM's 2,048 takes three (each paying the pass's overheads), so the profile's first token is the one its
    explicit 8,192 gives, and shorter than at 2,048."""
    base = ("price", "--model", "Llama-3.3-70B-Instruct", "--gpu", "a100-80gb-sxm", "--tp", "8", "--context", "4194")
    ttft = {}
    budgets = {
        "profile": (),
        "8192": ("--max-num-batched-tokens", "8192"),
        "2048": ("--max-num-batched-tokens", "2048"),
    }
    for label, extra in budgets.items():
        code, out, err = run_cli(*base, "--engine", "sglang", *extra, "--json")
        assert code == 0, err
        ttft[label] = json.loads(out)["results"]["ttft_s"]
    assert ttft["profile"] == ttft["8192"] < ttft["2048"]


def test_the_pytorch_backend_borrows_sglangs_eager_prefill_and_sets_its_own_budget():
    """TensorRT-LLM's PyTorch backend runs a step that holds a prefill eagerly, as SGLang runs its prefill: the
    profile takes SGLang's fitted per-layer figure (no first token of this backend is a fit point), charges it to
    each prefill among decodes, and keeps the backend's 8,192-token max_num_tokens on every GPU."""
    catalog = load_engine_catalog()
    pytorch = catalog.get("trtllm-pytorch")
    assert pytorch.id == "tensorrt-llm-pytorch" and catalog.find("TRTLLM-SERVE") is pytorch
    assert pytorch.defaults.prefill_layer_overhead_s == sglang_layer_s()
    assert pytorch.defaults.mixed_prefill is False
    assert [step.tokens for step in pytorch.max_num_batched_tokens] == [8192]
    # The TensorRT engines of the generic profile keep its defaults: 'tensorrt-llm' still names them.
    assert catalog.find("tensorrt-llm").id == "generic"


@pytest.mark.parametrize(
    ("steps", "message"),
    [
        ([{"below_gib": 35, "tokens": 2048}], "the last without below_gib"),
        ([{"tokens": 2048}, {"tokens": 4096}], "the last without below_gib"),
        ([{"below_gib": 60, "tokens": 4096}, {"below_gib": 35, "tokens": 2048}, {"tokens": 8192}], "must grow"),
        ([{"below_gib": 35, "tokens": 0}, {"tokens": 8192}], "greater than 0"),
        ([], "the last without below_gib"),
    ],
)
def test_a_bad_token_budget_rule_names_its_field(steps, message):
    document = {"engines": {"x": {"name": "X", "defaults": {}, "max_num_batched_tokens": steps, "source": "s"}}}
    with pytest.raises(QuotacalcError) as caught:
        parse_engine_catalog(document, "engines.yaml")
    assert caught.value.field.startswith("engines.x.max_num_batched_tokens")
    assert message in str(caught.value)


def test_the_listing_shows_a_profiles_token_budget(run_cli, monkeypatch):
    code, out, err = run_cli("engines", "--json")
    assert code == 0, err
    by_id = {engine["id"]: engine for engine in json.loads(out)["engines"]}
    assert by_id["sglang"]["max_num_batched_tokens"][-1] == {"below_gib": None, "tokens": 16384}
    assert by_id["generic"]["max_num_batched_tokens"] is None
    monkeypatch.setenv("COLUMNS", "400")  # one row a line: the rule is not folded
    code, out, err = run_cli("engines")
    assert code == 0, err
    assert "max_num_batched_tokens 2,048 below 35 GiB, 4,096 below 60 GiB, 8,192 below 160 GiB, else 16,384" in out
    assert "max_num_batched_tokens 8,192 " in out


@settings(max_examples=60, deadline=None, derandomize=True, database=None)
@given(
    bounds=st.lists(st.floats(min_value=1, max_value=400), min_size=0, max_size=5, unique=True).map(sorted),
    tokens=st.lists(st.integers(min_value=1, max_value=65536), min_size=6, max_size=6),
    memory_gib=st.floats(min_value=0.5, max_value=800),
)
def test_a_token_budget_rule_gives_the_first_row_whose_bound_the_gpu_is_under(bounds, tokens, memory_gib):
    """Any valid rule: the budget is the tokens of the first row whose below_gib exceeds the GPU's memory, else the
    last row's; a GPU exactly at a bound belongs to the next row."""
    from quotacalc.catalog.engines import EngineProfile

    rows = [{"below_gib": bound, "tokens": count} for bound, count in zip(bounds, tokens[: len(bounds)], strict=True)]
    rows.append({"tokens": tokens[len(bounds)]})
    profile = EngineProfile(id="x", name="X", defaults={}, max_num_batched_tokens=rows, source="s")
    expected = next((row["tokens"] for row in rows[:-1] if memory_gib < row["below_gib"]), rows[-1]["tokens"])
    assert profile.default_max_num_batched_tokens(memory_gib * 2**30) == expected
    for bound, count in zip(bounds, tokens[1 : len(bounds) + 1], strict=True):
        assert profile.default_max_num_batched_tokens(bound * 2**30) == count
