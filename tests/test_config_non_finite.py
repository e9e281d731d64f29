"""NaN and infinity in a config.json: accepted where no reader sizes or times the model with them, refused where one
does.

transformers writes a float default of inf as ``Infinity`` (Python's json), so published configs of the Mamba-2
hybrids hold one: Nemotron-H's ``time_step_limit`` is ``[0.0, Infinity]``. The two configs here are published ones,
verbatim (provenance in tests/data/configs/SOURCES.md): Nemotron-H-56B-Base-8K (Mamba-2, MLP and attention blocks)
and NVIDIA-Nemotron-3-Super-120B-A12B-FP8 (Mamba-2, latent MoE and attention blocks).
"""

from __future__ import annotations

import json

import pytest
from conftest import CONFIGS
from conftest import config_with as _config_with
from conftest import one_line_error as _one_line_error

from quotacalc.inputs.hf_arch import ConfigView
from quotacalc.inputs.resolve import load_arch

pytestmark = pytest.mark.usefixtures("private_cache")

PUBLISHED = ("nemotron_h_56b_base", "nemotron_3_super_120b_a12b_fp8")


def _strict(text: str) -> dict:
    def refuse(constant: str) -> None:
        raise AssertionError(f"{constant} in the JSON output")

    return json.loads(text, parse_constant=refuse)


@pytest.mark.parametrize("folder", PUBLISHED)
def test_published_config_holds_infinity(folder):
    raw = json.loads((CONFIGS / folder / "config.json").read_text(encoding="utf-8"))
    assert raw["time_step_limit"] == [0.0, float("inf")]


@pytest.mark.parametrize(
    ("folder", "published_total"),
    [
        # The model names state the totals: "Nemotron-H-56B" (Nemotron-H paper, arXiv 2504.03624: 56B), and
        # "Nemotron-3-Super-120B-A12B" (120B total). Rounded to the digits they quote.
        ("nemotron_h_56b_base", 56e9),
        ("nemotron_3_super_120b_a12b_fp8", 120e9),
    ],
)
def test_published_config_is_priced(run_cli, folder, published_total):
    code, out, err = run_cli("price", "--model", CONFIGS / folder, "--gpu", "h100-sxm", "--tp", "8", "--json")
    assert code == 0, err
    results = _strict(out)["results"]
    assert results["total_params"] == pytest.approx(published_total, rel=0.01)


def test_super_active_params_leave_out_the_idle_experts():
    """22 of 512 routed experts run per token: the active count is the total less 490/512 of the routed experts."""
    arch, _ = load_arch(str(CONFIGS / "nemotron_3_super_120b_a12b_fp8"))
    routed = arch.params_by_group()["routed_experts"]
    assert arch.active_params() == arch.total_params() - routed * 490 // 512


@pytest.mark.parametrize(
    ("key", "value"),
    [("sliding_window", float("inf")), ("intermediate_size", float("nan")), ("hidden_size", float("nan"))],
)
def test_non_finite_size_is_refused_at_its_field(tmp_path, key, value):
    message = _one_line_error(_config_with(tmp_path, "nemotron_h_56b_base", lambda config: config.update({key: value})))
    assert f"{key}:" in message
    assert "nan" in message.lower() or "inf" in message.lower()


def test_reader_refuses_non_finite_inside_a_list_it_reads():
    view = ConfigView({"moe_layers": [1, float("nan")]}, "config.json")
    with pytest.raises(Exception, match=r"moe_layers\[1\]: must be a finite number"):
        view.get("moe_layers")
    assert view.has("moe_layers")


def test_reader_leaves_what_it_does_not_read():
    view = ConfigView({"time_step_limit": [0.0, float("inf")], "hidden_size": 8}, "config.json")
    assert view.positive_int("hidden_size") == 8
