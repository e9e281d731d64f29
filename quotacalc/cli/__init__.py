"""Outputs: the command line, its tables, and its JSON."""
