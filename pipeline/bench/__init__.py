"""Benchmarks and probes: measurements of this machine that the pipeline's design relies on."""
