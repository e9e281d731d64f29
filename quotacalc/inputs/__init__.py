"""Inputs: model configs, deployment files and flags, parsed once into validated objects."""
