"""``quotacalc models`` and ``quotacalc gpus``: the rows, as JSON or as a table (rich, imported only for a table)."""

from __future__ import annotations

from quotacalc.cli.json_out import emit_json, listing_json


def families_listing(*, as_json: bool) -> None:
    """The config ``model_type`` values quotacalc reads: any config of these families prices, shipped or not."""
    from quotacalc.inputs.architectures import supported_model_types

    model_types = supported_model_types()
    if as_json:
        emit_json(listing_json("models", "model_types", model_types))
        return
    import textwrap

    print(f"{len(model_types)} model_type values priced (a config of any other is refused, naming it):")
    print(textwrap.fill(", ".join(model_types), width=100, break_on_hyphens=False))


def models_listing(*, as_json: bool) -> None:
    from quotacalc.catalog.models import shipped_models
    from quotacalc.core import memory
    from quotacalc.inputs.resolve import load_arch

    rows = []
    for shipped in shipped_models():
        arch, resolved = load_arch(shipped.name)
        rows.append(
            {
                "name": shipped.name,
                "hf_ids": list(shipped.hf_ids),
                "model_type": arch.model_type,
                "total_params": arch.total_params(),
                "active_params": arch.active_params(),
                "layer_kinds": arch.mixer_counts(),
                "kv_bytes_per_token_bf16": memory.kv_bytes_per_token(arch, 2),
                "checkpoint_dtype": arch.checkpoint_dtype,
                "quantization": (resolved.config.get("quantization_config") or {}).get("quant_method"),
                "max_context_tokens": arch.max_context_tokens,
            }
        )
    if as_json:
        emit_json(listing_json("models", "models", rows))
        return
    from quotacalc.cli.tables import models_table

    models_table(rows)


def gpus_listing(*, as_json: bool, sources: bool) -> None:
    from quotacalc.catalog.gpus import load_gpu_catalog

    catalog = load_gpu_catalog()
    if as_json:
        document = listing_json("gpus", "gpus", [gpu.model_dump() for gpu in catalog.gpus.values()])
        # What matmul_efficiency is measured against: MFU is stated on this GPU and dtype.
        emit_json({**document, "mfu_reference": catalog.mfu_reference.model_dump()})
        return
    from quotacalc.cli.tables import gpus_table

    gpus_table(catalog, sources=sources)


def engines_listing(*, as_json: bool) -> None:
    from quotacalc.catalog.engines import load_engine_catalog

    catalog = load_engine_catalog()
    if as_json:
        emit_json(listing_json("engines", "engines", [engine.model_dump() for engine in catalog.engines.values()]))
        return
    from quotacalc.cli.tables import engines_table

    engines_table(catalog)
