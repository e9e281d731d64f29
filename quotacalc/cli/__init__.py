"""Outputs: the command line, its tables, and its JSON."""

import os

# pydantic scans every installed package's entry points for plugins on first use (~25 ms);
# the CLI uses none.
os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
