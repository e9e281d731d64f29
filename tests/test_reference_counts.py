"""Every test config's parameter total and embedding tying, against transformers' own count on the meta device.

The references are transformers 5.24's counts (``tests/data/make_reference_params.py``, run in a torch
virtualenv outside the project): ``reference_params_hybrid.json`` (Mamba-2 hybrids),
``reference_params_dense_families.json`` (dense and multimodal families), ``reference_params_deltanet_hybrids.json``
(Gated DeltaNet and Kimi Delta Attention hybrids), ``reference_params_moe_families.json`` (more MoE families),
``reference_params_dsa.json`` (DeepSeek Sparse Attention), ``reference_params_olmoe_dbrx_lfm2_longcat.json`` (OLMoE, DBRX, LFM2 and
others), ``reference_params_vlmoe.json`` (MoE models with a vision tower) and ``reference_params_dsv4.json``
(DeepSeek V4).
The shipped models' counts (``reference_params.json``) are checked in tests/test_golden_models.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from quotacalc.inputs.resolve import load_arch

DATA = Path(__file__).parent / "data"
CONFIGS = DATA / "configs"
REFERENCE_FILES = (
    "reference_params_hybrid.json",
    "reference_params_dense_families.json",
    "reference_params_deltanet_hybrids.json",
    "reference_params_moe_families.json",
    "reference_params_dsa.json",
    "reference_params_olmoe_dbrx_lfm2_longcat.json",
    "reference_params_vlmoe.json",
    "reference_params_dsv4.json",
)
REFERENCE = {
    folder: counts
    for name in REFERENCE_FILES
    for folder, counts in json.loads((DATA / name).read_text(encoding="utf-8"))["models"].items()
}
#: Fixtures of measured deployments, whose totals are counted by hand in the tests that use them.
HAND_COUNTED = {
    "llama2_70b",
    "llama2_7b",
    "llama3_1_405b",
    "mixtral_8x22b",
    "qwen2_7b_instruct",
    "qwen3_30b_a3b",
    "qwen1_5_moe_a2_7b",  # tests/test_families_moe.py
    "qwen3_32b",
    "starcoder2_15b_published",  # the tied fixture's reference + its own LM head: tests/test_families_dense.py
    "longcat_flash_chat",  # transformers over-counts its experts: checked in tests/test_families_olmoe_dbrx_lfm2_longcat.py
    # Published configs holding Infinity, totals against their published figures: tests/test_config_non_finite.py
    "nemotron_h_56b_base",
    "nemotron_3_super_120b_a12b_fp8",
}


pytestmark = pytest.mark.usefixtures("private_cache")


@pytest.mark.parametrize("folder", sorted(REFERENCE))
def test_total_and_tying_match_transformers(folder):
    arch, _ = load_arch(str(CONFIGS / folder))
    assert arch.total_params() == REFERENCE[folder]["total_params"]
    assert arch.tie_word_embeddings == REFERENCE[folder]["tie_word_embeddings"]


def test_every_fixture_has_a_reference_count():
    folders = {path.name for path in CONFIGS.iterdir() if (path / "config.json").is_file()}
    assert folders - HAND_COUNTED == set(REFERENCE)


def test_pre_resolved_archs_match_their_configs():
    """tests/data/archs/ (read by the fast goldens without transformers) is what the readers make of each config now:
    rebuild with ``python scripts/build_test_archs.py`` after changing a reader or a config."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "build_test_archs", DATA.parent.parent / "scripts/build_test_archs.py"
    )
    assert spec is not None and spec.loader is not None
    builder = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(builder)
    assert sorted(path.stem for path in (DATA / "archs").glob("*.json")) == sorted(builder.FOLDERS)
    for folder in builder.FOLDERS:
        assert (DATA / "archs" / f"{folder}.json").read_text(encoding="utf-8") == builder.arch_text(folder), folder
