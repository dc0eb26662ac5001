"""Benchmarks (``sluice bench ...``)."""
