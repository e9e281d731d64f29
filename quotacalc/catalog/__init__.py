"""Catalogs: the facts quotacalc prices from (GPUs, dtypes, shipped model configs)."""
