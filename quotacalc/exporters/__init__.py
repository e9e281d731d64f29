"""One module per config target, each a pure function from the canonical policy to files."""
