"""Measurement: method specs, the interleaved benchmark, the verification cost curve, trees fitted to
the machine, the evaluation tasks and the provenance recorded beside every number."""
