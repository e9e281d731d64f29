"""The package's layers hold: every import runs downward, read from the source (ast), not from a run.

    cli  ->  exporters, sim, render  ->  priced  ->  inputs  ->  core  ->  catalog  ->  errors, fileio, cache

A module may import its own layer and any layer below it (the leaves may use one another; the
parts that share rank 4 may not). Imports inside functions and under
``TYPE_CHECKING`` count too: they are dependencies all the same. Besides the direction:
exporters never read input files (no ``quotacalc.inputs``, where the plan reader lives); the core
does no I/O and knows no CLI or file format (no os, pathlib, json, yaml, rich, typer, no open or
print); and no two modules import each other at load time.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import quotacalc

PACKAGE = Path(quotacalc.__file__).resolve().parent

#: Rank of each top-level part of the package: a module imports only parts of its rank or lower.
RANKS = {
    "errors": 0,
    "fileio": 0,
    "cache": 0,
    "catalog": 1,
    "core": 2,
    "admission": 2,
    "inputs": 3,
    # Between the readers and every plan consumer; a fraction so the integer ranks other parts use stay as they are.
    "priced": 3.5,
    # The enforcement point: a pure gate over the admission contract, its settings reader and the LiteLLM driver;
    # the LiteLLM exporter writes its settings file from the settings model.
    "enforce": 3,
    "exporters": 4,
    "sim": 4,
    "emulate": 4,
    "fleet": 4,
    "render": 4,
    "cli": 5,
}
#: Modules of the core must not import these (I/O, formats, presentation).
CORE_FORBIDDEN = {
    "os",
    "io",
    "sys",
    "pathlib",
    "shutil",
    "subprocess",
    "socket",
    "tempfile",
    "urllib",
    "http",
    "json",
    "yaml",
    "rich",
    "typer",
    "click",
    "transformers",
    "huggingface_hub",
    "quotacalc.fileio",
    "quotacalc.cache",
}
CORE_FORBIDDEN_CALLS = {"open", "print", "input"}
#: Modules of a forbidden package that only compute: ``urllib.parse`` splits text (the plan checks an engine's base
#: URL with it), where ``urllib.request`` would reach the network.
CORE_PURE_MODULES = {"urllib.parse"}


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def _imports(module: str, path: Path, *, load_time_only: bool = False) -> list[tuple[str, int]]:
    """(imported module, line) for every import in a module; relative imports made absolute."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: list[tuple[str, int]] = []

    def visit(node: ast.AST, at_load: bool) -> None:
        for child in ast.iter_child_nodes(node):
            inner_load = at_load
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                inner_load = False
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                inner_load = False
            if isinstance(child, ast.Import) and (at_load or not load_time_only):
                found.extend((alias.name, child.lineno) for alias in child.names)
            elif isinstance(child, ast.ImportFrom) and (at_load or not load_time_only):
                base = child.module or ""
                if child.level:
                    anchor = package.split(".")[: len(package.split(".")) - child.level + 1]
                    base = ".".join([*anchor, base] if base else anchor)
                # ``from quotacalc.core import memory`` imports the module quotacalc.core.memory.
                for alias in child.names:
                    candidate = f"{base}.{alias.name}"
                    found.append((candidate if candidate in MODULES else base, child.lineno))
            visit(child, inner_load)

    visit(tree, True)
    return found


def _part(module: str) -> str | None:
    """The layer part of a quotacalc module (``quotacalc.core.price`` -> ``core``), None for the package itself."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None


PACKAGE_MODULES = sorted(name for name in MODULES if name != "quotacalc")


def test_every_module_belongs_to_a_layer():
    unplaced = sorted({_part(name) for name in PACKAGE_MODULES} - set(RANKS))
    assert not unplaced, f"add these parts of the package to RANKS in tests/test_layers.py: {unplaced}"


@pytest.mark.parametrize("module", PACKAGE_MODULES)
def test_imports_run_downward(module):
    part = _part(module)
    rank = RANKS[part]
    wrong = []
    for imported, line in _imports(module, MODULES[module]):
        if imported == "quotacalc":
            wrong.append(f"line {line}: imports the package facade; import the defining module")
            continue
        if not imported.startswith("quotacalc."):
            continue
        target = _part(imported)
        if target == part:
            continue
        if RANKS.get(target, 99) > rank:
            wrong.append(f"line {line}: {part} (rank {rank}) imports {imported} (rank {RANKS.get(target)})")
        elif RANKS.get(target) == rank and rank > 0:
            wrong.append(f"line {line}: {part} imports its sibling layer {imported}")
    assert not wrong, f"{module}:\n" + "\n".join(wrong)


@pytest.mark.parametrize("module", [name for name in PACKAGE_MODULES if _part(name) == "exporters"])
def test_exporters_never_read_inputs(module):
    imported = [name for name, _ in _imports(module, MODULES[module])]
    assert not [name for name in imported if name.startswith("quotacalc.inputs")]


#: Parts held to the core's rules: pure, no I/O, no presentation.
PURE_PARTS = ("core", "admission")


@pytest.mark.parametrize("module", [name for name in PACKAGE_MODULES if _part(name) in PURE_PARTS])
def test_core_does_no_io(module):
    path = MODULES[module]
    bad = [
        f"line {line}: {name}"
        for name, line in _imports(module, path)
        if (name in CORE_FORBIDDEN or name.split(".")[0] in CORE_FORBIDDEN) and name not in CORE_PURE_MODULES
    ]
    tree = ast.parse(path.read_text(encoding="utf-8"))
    bad += [
        f"line {node.lineno}: calls {node.func.id}()"
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in CORE_FORBIDDEN_CALLS
    ]
    assert not bad, f"{module}:\n" + "\n".join(bad)


#: Import cycles excused, counting imports inside functions and under TYPE_CHECKING: none. An entry would be a debt
#: to pay (the test fails on an entry that no longer holds a cycle); never add one.
KNOWN_CYCLES: list[frozenset[str]] = []


def _cycles(*, load_time_only: bool) -> set[str]:
    graph = {
        module: {
            name
            for name, _ in _imports(module, path, load_time_only=load_time_only)
            if name in MODULES and name != module
        }
        for module, path in MODULES.items()
    }
    # A package's __init__ is loaded by its submodules' imports, not a cycle of the code's own making.
    cycles = []
    state: dict[str, int] = {}

    def walk(module: str, trail: list[str]) -> None:
        state[module] = 1
        for target in sorted(graph[module]):
            if state.get(target) == 1:
                cycles.append(" -> ".join([*trail[trail.index(target) :], target]))
            elif target not in state:
                walk(target, [*trail, target])
        state[module] = 2

    for module in sorted(graph):
        if module not in state:
            walk(module, [module])
    return set(cycles)


def test_no_import_cycles_at_load_time():
    cycles = _cycles(load_time_only=True)
    assert not cycles, "import cycles:\n" + "\n".join(sorted(cycles))


def test_no_import_cycles_counting_imports_in_functions_and_type_checking():
    """A cycle hidden in a function body or under TYPE_CHECKING is a cycle all the same: the modules cannot be
    understood, tested or moved apart."""
    cycles = {cycle: frozenset(cycle.split(" -> ")) for cycle in _cycles(load_time_only=False)}
    new = sorted(cycle for cycle, modules in cycles.items() if not any(modules <= known for known in KNOWN_CYCLES))
    assert not new, "import cycles:\n" + "\n".join(new)
    gone = [sorted(known) for known in KNOWN_CYCLES if not any(modules <= known for modules in cycles.values())]
    assert not gone, f"no cycle left among {gone}: remove it from KNOWN_CYCLES"


def test_the_checker_sees_what_it_checks():
    """The parser finds nested, relative and TYPE_CHECKING imports (so the layer tests can fail)."""
    price = [name for name, _ in _imports("quotacalc.core.price", MODULES["quotacalc.core.price"])]
    assert "quotacalc.core.memory" in price  # ``from quotacalc.core import memory``
    resolve = [name for name, _ in _imports("quotacalc.inputs.resolve", MODULES["quotacalc.inputs.resolve"])]
    assert "quotacalc.core.pricing_inputs" in resolve
    # imported inside a function
    model_arch = [name for name, _ in _imports("quotacalc.inputs.model_arch", MODULES["quotacalc.inputs.model_arch"])]
    assert "quotacalc.inputs.architectures" in model_arch
    # under TYPE_CHECKING
    replica = [name for name, _ in _imports("quotacalc.core.replica", MODULES["quotacalc.core.replica"])]
    assert "quotacalc.core.pricing_inputs" in replica
    pricing = [name for name, _ in _imports("quotacalc.cli.pricing", MODULES["quotacalc.cli.pricing"])]
    # imported inside a command's function body
    assert "quotacalc.priced.deployment" in pricing


def test_shipped_yaml_passes_the_strict_loader():
    """The cache parses shipped catalogs with PyYAML's plain safe loader; they must also pass the strict one."""
    from quotacalc.catalog.models import shipped_models_dir
    from quotacalc.inputs.yaml_strict import load_yaml_text

    for path in (PACKAGE / "catalog" / "gpus.yaml", shipped_models_dir() / "index.yaml"):
        assert isinstance(load_yaml_text(path.read_text(encoding="utf-8"), source=str(path)), dict)


def test_every_layer_kind_declares_its_interface():
    """Mixers and feed-forward blocks are subclasses of a declared interface, not duck-typed."""
    import typing

    from quotacalc.core import arch

    mixers = typing.get_args(typing.get_args(arch.Mixer)[0])
    blocks = typing.get_args(typing.get_args(arch.FeedForward)[0])
    assert mixers and blocks
    assert all(issubclass(kind, arch.TokenMixer) for kind in mixers)
    assert all(issubclass(kind, arch.FeedForwardBlock) for kind in blocks)
    # Sliding-window attention is a sibling of full attention, not a kind of it.
    assert not issubclass(arch.SlidingWindowAttention, arch.FullAttention)
    assert not issubclass(arch.FullAttention, arch.SlidingWindowAttention)


def test_a_mixer_missing_a_method_cannot_be_built():
    from quotacalc.core.arch import ParamGroup, TokenMixer

    class HalfMixer(TokenMixer):
        kind: str = "half"

        def params(self) -> dict[ParamGroup, int]:
            return {}

    with pytest.raises(TypeError, match="abstract"):
        HalfMixer()


#: Fixture configs whose layers differ from one another: hybrids of attention and state, windows, sparse MLA,
#: DeepSeek V4's compressed attention, KV-shared layers.
HYBRID_AND_SPARSE_FIXTURES = (
    "bamba",
    "falcon_h1",
    "nemotron_h",
    "qwen3_next",
    "kimi_linear",
    "deepseek_v3_2",
    "deepseek_v4_flash",
    "gemma4_e2b",
    "mimo_v2_flash",
    "llama4_scout",
    "lfm2_8b_a1b",
    "cohere2_7b",
)


def grouping_archs() -> dict:
    """Every shipped model's architecture and the mixed-layer fixtures', by name."""
    from conftest import fixture_arch

    from quotacalc import Deployment, resolve
    from quotacalc.catalog.models import shipped_models

    archs = {model.name: resolve(Deployment(model=model.name, gpu="h100-sxm")).arch for model in shipped_models()}
    for folder in HYBRID_AND_SPARSE_FIXTURES:
        archs[folder] = fixture_arch(folder)
    return archs


def test_sums_over_mixer_groups_equal_sums_over_layers():
    """ModelArch.mixer_groups lets the KV, state and attention sums visit each distinct mixer once, times its count:
    on every shipped model and on fixtures whose layers differ (windowed, hybrid, sparse, compressed, KV-shared)
    they equal the sums layer by layer."""

    from quotacalc.core import memory

    archs = grouping_archs()
    for name, arch in archs.items():
        mixers = [layer.mixer for layer in arch.layers if layer.mixer is not None]
        assert sum(n for _, n in arch.mixer_groups()) == len(mixers), name
        for tp in (1, 2, 8):
            by_layer = sum(m.cache_bytes_per_token(2.0, tp) for m in mixers if m.grows_with_context())
            assert memory.kv_bytes_per_token_per_gpu(arch, 2.0, tp) == pytest.approx(by_layer, rel=1e-12), name
            state = sum(m.state_bytes_per_sequence(2.0, tp, 2.0) for m in mixers)
            assert memory.state_bytes_per_sequence(arch, 2.0, tp) == pytest.approx(state, rel=1e-12), name
            kv = sum(m.cache_bytes_per_token(1.0, tp) * m.cached_tokens(5000) for m in mixers)
            assert memory.request_kv_bytes_per_gpu(arch, 5000, 1.0, 2.0, tp) == pytest.approx(kv + state, rel=1e-12)
        flops = sum(m.prompt_attention_flops_per_token(3000, 2) for m in mixers)
        assert memory.attention_flops_per_prompt_token(arch, 3000, 2) == pytest.approx(flops, rel=1e-12), name


def test_feed_forward_groups_equal_the_layers():
    """ModelArch.feed_forward_groups and the cached MoE layers stand for the layers: the same blocks, counts,
    all-reduces per step (one per block under TP) and widest intermediate as a walk over the layers."""

    from quotacalc.core import memory
    from quotacalc.core.arch import DenseMLP, MoE
    from quotacalc.core.replica import allreduces_per_step

    archs = grouping_archs()
    for name, arch in archs.items():
        blocks = [layer.feed_forward for layer in arch.layers if layer.feed_forward is not None]
        assert sum(n for _, n in arch.feed_forward_groups()) == len(blocks), name
        assert arch.moe_layers() == [block for block in blocks if isinstance(block, MoE)], name
        blocks_and_mixers = len(blocks) + sum(layer.mixer is not None for layer in arch.layers)
        assert allreduces_per_step(arch, 2) == blocks_and_mixers, name
        widths = [0]
        for block in blocks:
            if isinstance(block, DenseMLP):
                widths.append(block.intermediate_size)
            elif isinstance(block, MoE):
                widths.append(
                    block.top_k * block.expert_intermediate_size
                    + block.num_shared_experts * block.shared_intermediate_size
                )
        assert memory.feed_forward_width(arch) == max(widths), name
