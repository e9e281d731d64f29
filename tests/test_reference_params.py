"""Every shipped config's parameter count equals what transformers builds on the meta device.

The reference counts come from ``tests/data/make_reference_params.py`` (needs torch; its
docstring has the command). These tests need no torch.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from quotacalc import load_arch
from quotacalc.catalog.models import shipped_models

REFERENCE = json.loads((Path(__file__).parent / "data" / "reference_params.json").read_text())


def test_reference_covers_every_shipped_model():
    assert set(REFERENCE["models"]) == {model.name for model in shipped_models()}


@pytest.mark.parametrize("name", sorted(REFERENCE["models"]))
def test_total_params_match_transformers(name):
    arch, _ = load_arch(name)
    reference = REFERENCE["models"][name]
    assert arch.total_params() == reference["total_params"]
    assert arch.tie_word_embeddings == reference["tie_word_embeddings"]
