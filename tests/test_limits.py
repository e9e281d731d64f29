"""Every target's LIMITS.md is rendered from its declared capabilities (quotacalc/exporters/registry.py): a line
for every part of the policy, enforced, approximated or lost, under the options chosen, and no free text but the
exporter's notes about this plan, each under the part it explains."""

from __future__ import annotations

import importlib
import itertools
import re

import pytest
from policy_samples import platform_policy, sample_salts

from quotacalc.exporters import registry
from quotacalc.exporters.base import Export, ExportOptions
from quotacalc.exporters.limits import UnknownPart, limit_items, limits_markdown, lost_and_approximated, part_line

PART_LINE = re.compile(r"^- \*\*(?P<part>[a-z_]+)\*\*: (?P<word>enforced|approximated|lost)\. \S")


def _runs():
    """(target, options) for every declared target under every value of each of its options."""
    for target in registry.TARGETS.values():
        choices = [[(option.name, value) for value in (option.choices or (False, True))] for option in target.options]
        for chosen in itertools.product(*choices):
            yield pytest.param(target.name, dict(chosen), id=f"{target.name}-{'-'.join(str(v) for _, v in chosen)}")


def _listed(text: str) -> list[str]:
    """LIMITS.md's lines of parts and notes: after the title and the paragraph, before the parts' legend."""
    return text.split("\n\n")[2].splitlines()


def _export(name: str, chosen: dict) -> tuple[Export, ExportOptions]:
    policy = platform_policy()
    if chosen.get("envoy_quota") == "quotapolicy":
        # what a QuotaPolicy can say: no LoRA adapters, one set of weights per pool (test_export_envoy_quota.py)
        same = policy.tenants[0].weights
        tenants = tuple(tenant.model_copy(update={"lora_adapters": (), "weights": same}) for tenant in policy.tenants)
        policy = policy.model_copy(update={"tenants": tenants})
    options = ExportOptions(**chosen)
    module = importlib.import_module(registry.get(name).module)
    return module.export(policy, sample_salts(policy), options), options


@pytest.mark.parametrize(("name", "chosen"), list(_runs()))
def test_limits_md_is_a_line_per_declared_part_and_notes_under_them(name, chosen):
    export, options = _export(name, chosen)
    text = limits_markdown(export, options)
    parts, notes = [], 0
    for line in _listed(text):
        if line.startswith("  - "):
            assert parts, f"a note before any part: {line}"
            notes += 1
            continue
        match = PART_LINE.match(line)
        assert match, f"{name}: a line that is neither a part nor a note under one: {line!r}"
        parts.append(match["part"])
        declared = registry.get(name).capabilities(options)[match["part"]]
        assert match["word"] == registry.SUPPORT_WORDS[declared.support]
        assert line == f"- {part_line(match['part'], declared)}"
    assert parts == list(registry.PARTS)
    assert notes == len(export.notes)
    # the legend names every part once
    assert text.endswith("".join(f"- **{part}**: {what}.\n" for part, what in registry.PARTS.items()))


@pytest.mark.parametrize(("name", "chosen"), list(_runs()))
def test_every_note_sits_under_the_part_it_names(name, chosen):
    export, options = _export(name, chosen)
    items = dict(limit_items(export, options))
    declared = registry.get(name).capabilities(options)
    for part, text in export.notes:
        assert text in items[part_line(part, declared[part])]


def test_a_note_naming_no_declared_part_is_refused():
    export = Export(target="vllm", files=(), notes=(("bucket", "a part no declaration has"),))
    with pytest.raises(UnknownPart, match="vllm: a note names part 'bucket'"):
        limits_markdown(export, ExportOptions())


def test_an_export_built_with_the_old_free_text_list_is_refused():
    with pytest.raises(ValueError, match="limits"):
        Export(target="vllm", files=(), limits=("free text",))


@pytest.mark.parametrize(
    ("name", "chosen", "part", "word", "said"),
    [
        ("kong", {}, "rate", "approximated", "ai-rate-limiting-advanced counts a sliding window"),
        ("kong", {"kong_edition": "oss"}, "rate", "lost", "Kong OSS has no token or cost rate limiting"),
        ("kong", {"kong_edition": "oss"}, "files", "enforced", "every plugin it names ships with Kong OSS"),
        ("envoy", {}, "admission", "lost", "a request is admitted while the window's count is under the limit"),
        ("envoy", {"envoy_quota": "quotapolicy"}, "admission", "lost", "a stream is never cut at the limit"),
        ("envoy", {"envoy_quota": "quotapolicy"}, "lora", "lost", "tenants with adapters are refused"),
        ("gie", {}, "priority", "lost", "Priority tiers: not emitted"),
        ("gie", {"gie_objectives": True}, "priority", "approximated", "An InferenceObjective (v1alpha2) per tier"),
        ("litellm", {}, "kv_cap", "enforced", "pins it to that replica's deployment"),
        ("litellm", {"litellm_deployments": "pool"}, "kv_cap", "approximated", "one deployment at its Service"),
        # The builtin limiters hold no KV cap, whichever layout: their variant wins over the layout's.
        ("litellm", {"litellm_enforce": "builtin", "litellm_deployments": "pool"}, "kv_cap", "lost", "Not expressible"),
        ("litellm", {}, "fairness", "enforced", "Virtual Token Counter"),
        ("litellm", {"litellm_enforce": "builtin"}, "fairness", "lost", "no per-tenant queues"),
    ],
)
def test_the_options_chosen_pick_the_declared_variant(name, chosen, part, word, said):
    export, options = _export(name, chosen)
    (line,) = [line for line in _listed(limits_markdown(export, options)) if line.startswith(f"- **{part}**:")]
    assert line.startswith(f"- **{part}**: {word}.") and said in line


def test_litellms_builtin_limits_keep_the_corrected_claims():
    """priority_reservation works without a licence on the normalised-weights path, and a deployment's
    max_input_tokens binds because the generated config turns router_settings.enable_pre_call_checks on."""
    from quotacalc.exporters import litellm

    options = ExportOptions(litellm_enforce="builtin")
    export, _ = _export("litellm", {"litellm_enforce": "builtin"})
    text = limits_markdown(export, options)
    (priority,) = [line for line in _listed(text) if line.startswith("- **priority**:")]
    assert "is enforced without a LiteLLM licence" in priority and "_normalize_priority_weights" in priority
    assert "which changes nothing" in priority
    (context,) = [line for line in _listed(text) if line.startswith("- **max_context**:")]
    assert "max_input_tokens" in context and "router_settings.enable_pre_call_checks is set" in context
    assert litellm.config(platform_policy(), "builtin")["router_settings"]["enable_pre_call_checks"] is True


def test_the_count_on_stderr_is_the_declared_table(run_cli, tmp_path, monkeypatch):
    from pathlib import Path

    monkeypatch.setenv("QUOTACALC_SALT_SECRET", "test-secret-not-for-production")
    plan = Path(__file__).resolve().parent.parent / "examples" / "platform.yaml"
    code, _, err = run_cli("generate", plan, "--out", tmp_path, "--target", "canonical,kong")
    assert code == 0, err
    export, options = _export("kong", {})
    lost, approximated = lost_and_approximated(export, options)
    assert (lost, approximated) == (7, 5)  # the kong declaration: 7 "no" and 5 "partly" of 14 parts
    assert f"quotacalc: note: kong loses {lost} and approximates {approximated} of the policy's parts" in err
    assert "canonical loses" not in err  # the whole policy: nothing to say
