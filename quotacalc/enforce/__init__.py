"""The enforcement point: quotacalc's admission contract in a gateway (docs/enforce.md)."""
