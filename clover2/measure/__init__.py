"""Measurement: method specs, the interleaved benchmark, the verification cost curve, trees fitted to
the machine, greedy tau by replay and the provenance recorded beside every number."""
