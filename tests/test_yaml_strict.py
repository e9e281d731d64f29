"""The strict YAML loader: alias bombs are refused before anything walks them, and merge keys (``<<``) override as
https://yaml.org/type/merge.html says while a key written twice in one mapping is still refused."""

from __future__ import annotations

import json

import pytest

from quotacalc.errors import EXIT_INVALID_INPUT, QuotacalcError
from quotacalc.inputs.yaml_strict import MAX_ALIAS_NODES, load_yaml_text

PLAN_HEAD = """\
deployment: {model: Llama-3.1-8B-Instruct, gpu: h100-sxm, tp: 1}
pools:
  - {name: std, replicas: 2, deployment: {batch: 64, context: 2000}}
tiers:
  - {name: gold, max_context_tokens: 32768, kv_cap_tokens_per_replica: 100000, max_concurrent_sequences: 16, \
max_output_tokens: 4096, priority: 0}
"""

BOMB_ERROR = (
    f"too many YAML nodes through aliases (more than {MAX_ALIAS_NODES:,}): is it an alias bomb? "
    "(write the values out, or use fewer nested aliases)"
)


def load(text: str) -> object:
    return load_yaml_text(text, source="f.yaml")


def refusal(text: str) -> str:
    with pytest.raises(QuotacalcError) as caught:
        load(text)
    message = str(caught.value)
    assert "\n" not in message and message.startswith("f.yaml: ")
    return message.removeprefix("f.yaml: ")


def laughs(levels: int) -> str:
    """``levels`` nested lists of nine aliases each: 9**levels leaves from a few hundred bytes."""
    lines = ["public_prefixes: &a0 [p]"]
    lines += [f"x{level}: &a{level} [{', '.join([f'*a{level - 1}'] * 9)}]" for level in range(1, levels + 1)]
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- alias bombs


def test_a_billion_laughs_plan_is_refused_in_one_line(run_cli, tmp_path) -> None:
    """Nine levels: 9**9 = 387 million leaves in 700 bytes. Before the limit, `check` walked them all (minutes at
    100% CPU, looking for NaNs) before it got to say x1 is an unknown key."""
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text(PLAN_HEAD + "tenants:\n  - {name: alpha, tier: gold, units_per_s: 5000}\n" + laughs(9))
    assert len(bomb.read_bytes()) < 1000
    code, out, err = run_cli("check", str(bomb))
    assert (code, out) == (EXIT_INVALID_INPUT, "")
    assert err.strip() == f"quotacalc: error: {bomb}: {BOMB_ERROR}"


@pytest.mark.parametrize("levels", [6, 9, 30])
def test_nested_aliases_past_the_limit_are_refused(levels) -> None:
    assert refusal(laughs(levels)) == BOMB_ERROR


def test_a_bomb_of_merge_keys_is_refused() -> None:
    """``<<: [*m, *m]`` forty times over: PyYAML's own merge would copy 2**40 key pairs."""
    text = "m0: &m0 {a: 1, b: 2}\n" + "".join(
        f"m{i}: &m{i} {{<<: [*m{i - 1}, *m{i - 1}], k{i}: {i}}}\n" for i in range(1, 41)
    )
    assert refusal(text) == BOMB_ERROR


def test_the_limit_counts_the_nodes_aliases_add() -> None:
    """An anchored list of 999 scalars is 1,000 nodes; each alias to it adds 1,000 more. Exactly the limit loads."""
    anchor = "a: &a [" + ", ".join(["x"] * 999) + "]\n"
    uses = MAX_ALIAS_NODES // 1000
    document = load(anchor + "b: [" + ", ".join(["*a"] * uses) + "]\n")
    assert isinstance(document, dict) and len(document["b"]) == uses and document["b"][0] is document["a"]
    assert refusal(anchor + "b: [" + ", ".join(["*a"] * (uses + 1)) + "]\n") == BOMB_ERROR


def test_a_plan_of_10000_tenants_loads() -> None:
    tenants = "".join(f"  - {{name: t{i}, tier: gold, units_per_s: 5}}\n" for i in range(10_000))
    document = load(PLAN_HEAD + "tenants:\n" + tenants)
    assert isinstance(document, dict) and len(document["tenants"]) == 10_000
    assert document["tenants"][-1] == {"name": "t9999", "tier": "gold", "units_per_s": 5}


def test_a_plan_of_10000_tenants_merging_one_anchor_loads() -> None:
    """Each tenant merges a ten-key mapping: 210,000 nodes through aliases, well under the limit."""
    defaults = ", ".join(f"k{i}: {i}" for i in range(9))
    tenants = "".join(f"  - {{<<: *t, name: t{i}}}\n" for i in range(10_000))
    document = load(f"x-tenant: &t {{tier: gold, {defaults}}}\n" + PLAN_HEAD + "tenants:\n" + tenants)
    assert isinstance(document, dict) and len(document["tenants"]) == 10_000
    assert document["tenants"][-1] == {"tier": "gold", **{f"k{i}": i for i in range(9)}, "name": "t9999"}


@pytest.mark.parametrize("text", ["x: &a [*a]\n", "x: &a {k: *a}\n", "x: &a {<<: *a}\n", "x: &a [1, {k: [*a]}]\n"])
def test_a_structure_inside_itself_is_refused(text) -> None:
    assert refusal(text) == "an alias refers to its own anchor (a structure inside itself)"


def test_a_shared_anchor_is_not_a_structure_inside_itself() -> None:
    document = load("a: &a [1]\nb: [*a, *a, {c: *a}]\n")
    assert document == {"a": [1], "b": [[1], [1], {"c": [1]}]}


# --------------------------------------------------------------------------- merge keys


def test_a_key_written_next_to_a_merge_overrides_the_merged_one() -> None:
    document = load(
        "tenants:\n  - &a {name: alpha, tier: gold, units_per_s: 5000}\n  - {<<: *a, name: beta}\n"
        "  - {name: gamma, <<: *a}\n"
    )
    assert document == {
        "tenants": [
            {"name": "alpha", "tier": "gold", "units_per_s": 5000},
            {"name": "beta", "tier": "gold", "units_per_s": 5000},
            {"name": "gamma", "tier": "gold", "units_per_s": 5000},
        ]
    }


def test_the_earlier_mapping_in_a_merge_list_wins() -> None:
    document = load("a: &a {x: 1, y: 2}\nb: &b {x: 3, z: 4}\nc: {<<: [*a, *b]}\nd: {<<: [*b, *a], z: 5}\n")
    assert isinstance(document, dict)
    assert document["c"] == {"x": 1, "y": 2, "z": 4}
    assert document["d"] == {"x": 3, "z": 5, "y": 2}
    assert document["a"] == {"x": 1, "y": 2} and document["b"] == {"x": 3, "z": 4}  # the anchors are untouched


def test_merges_nest_and_take_inline_mappings() -> None:
    document = load("a: &a {x: 1, y: 1}\nb: &b {<<: *a, y: 2}\nc: {<<: [*b, {w: 0, x: 9}], z: 3}\n")
    assert isinstance(document, dict) and document["c"] == {"x": 1, "y": 2, "w": 0, "z": 3}


def test_the_merge_override_idiom_passes_check(run_cli, tmp_path) -> None:
    plan = tmp_path / "merge.yaml"
    plan.write_text(
        PLAN_HEAD + "tenants:\n  - &a {name: alpha, tier: gold, units_per_s: 5000}\n  - {<<: *a, name: beta}\n"
    )
    code, out, err = run_cli("check", str(plan), "--json")
    assert code == 0, err
    report = json.loads(out)
    (capacity,) = [finding for finding in report["findings"] if finding["code"] == "capacity"]
    assert report["ok"] and capacity["figures"]["units_sold_per_s"] == 10_000  # alpha and beta, 5,000 each


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("a: {x: 1,\n  x: 2}\n", "duplicate key 'x' (line 2); keep one"),
        ("a: &a {x: 1}\nb: {<<: *a, y: 1,\n  y: 2}\n", "duplicate key 'y' (line 3); keep one"),
        (
            "a: &a {x: 1}\nb: {<<: *a,\n  <<: *a}\n",
            "duplicate key '<<' (line 3); merge several mappings with one <<: [*a, *b]",
        ),
        ("a: &a [1]\nb: {<<: *a}\n", "'<<' (line 2) merges a mapping or a list of mappings, not a plain value"),
        ("b: {<<: 3}\n", "'<<' (line 1) merges a mapping or a list of mappings, not a plain value"),
        ("b: {<<: [{x: 1}, [2]]}\n", "'<<' (line 1) merges a mapping or a list of mappings, not a list"),
        ("a: &a {1: x}\nb: {<<: *a}\n", "key '1' (line 1) is read as int, not a name; quote it"),
    ],
)
def test_a_key_written_twice_or_a_bad_merge_is_still_refused(text, problem) -> None:
    assert refusal(text) == problem


def test_a_quoted_merge_key_is_a_plain_key() -> None:
    assert load("b: {<<: {x: 1}, '<<': 2}\n") == {"b": {"x": 1, "<<": 2}}


# --------------------------------------------------------------------------- numbers: YAML 1.2's core schema


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("010", 10),  # YAML 1.2: decimal; PyYAML's YAML 1.1 reads 8 (octal)
        ("0o17", 15),  # YAML 1.2's octal
        ("0x1F", 31),
        ("-3", -3),
        ("+4", 4),
        ("1e4", 10_000),  # a whole mantissa to a positive power: a whole number
        ("1.5", 1.5),
        (".5", 0.5),
        ("1.2e-3", 0.0012),
        ("1:30", "1:30"),  # YAML 1.1 base 60 (90): a string in 1.2, which a number field refuses
        ("6_0", "6_0"),  # YAML 1.1 digit grouping (60)
        ("1_000.5", "1_000.5"),
        ("'010'", "010"),
    ],
)
def test_numbers_are_read_as_yaml_1_2_reads_them(text, value) -> None:
    loaded = load(f"a: {text}\n")["a"]
    assert loaded == value and type(loaded) is type(value)


def test_a_yaml_1_1_number_in_a_plan_is_refused_not_read_as_another_number(run_cli, tmp_path) -> None:
    """`replicas: 1:30` was 90 replicas and `replicas: 010` 8; now 1:30 is refused at its key and 010 is 10."""
    plan = tmp_path / "p.yaml"
    plan.write_text(PLAN_HEAD.replace("replicas: 2", "replicas: 1:30"), encoding="utf-8")
    code, out, err = run_cli("size", str(plan), "--json")
    assert code == 1 and out == "" and err.count("\n") == 1
    assert "pools[0].replicas" in err
    plan.write_text(PLAN_HEAD.replace("replicas: 2", "replicas: 010"), encoding="utf-8")
    code, out, err = run_cli("size", str(plan), "--json")
    assert code == 0, err
    assert json.loads(out)["pools"][0]["replicas"] == 10


def test_a_number_of_thousands_of_digits_is_refused_with_its_line_not_pythons_limit() -> None:
    """Before: 'a value cannot be read: Exceeds the limit (4300 digits) ... use sys.set_int_max_str_digits()'."""
    message = refusal("pools:\n  - replicas: " + "9" * 5000 + "\n")
    assert message == "a number of 5,000 digits (line 2) is far out of range"
    assert load("a: " + "9" * 400 + "\n")["a"] == int("9" * 400)  # read, then refused at its key as out of range


@pytest.mark.parametrize(
    "text",
    [
        "model: " + "[" * 100_000,  # flow sequences, never closed
        "model: " + "[" * 50_000 + "]" * 50_000,  # closed: valid YAML, still too deep
        "- " * 100_000,  # block sequences on one line
        "{a: " * 100_000,  # flow mappings
        "? " * 100_000,  # complex keys
    ],
    ids=["flow-open", "flow-closed", "block-dashes", "flow-maps", "complex-keys"],
)
def test_deep_nesting_is_one_error_not_a_crash(text: str) -> None:
    """libyaml's C composer overflows the stack at some tens of thousands of levels and kills the interpreter, so
    the depth is judged before composing. Run in a child: a regression would crash it, not the test session."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from quotacalc.errors import QuotacalcError\n"
        "from quotacalc.inputs.yaml_strict import load_yaml_text\n"
        "try:\n"
        "    load_yaml_text(sys.stdin.read(), source='plan.yaml')\n"
        "except QuotacalcError as error:\n"
        "    print(error)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], input=text, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-500:]
    assert done.stdout.strip() == "plan.yaml: YAML nested too deeply to read (more than 256 levels)"


def test_nesting_at_the_bound_is_read() -> None:
    from quotacalc.inputs.yaml_strict import MAX_YAML_DEPTH

    # The mapping holding "a" is one level, the sequences the rest.
    inner = MAX_YAML_DEPTH - 1
    assert load_yaml_text("a: " + "[" * inner + "]" * inner, source="plan.yaml") is not None
