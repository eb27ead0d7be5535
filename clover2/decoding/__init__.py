"""The decoding engine, independent of any draft model: the target p, token trees, verification,
lossless sampling, the KV-cache commit, the decode loop, the drafter interface and prompt lookup."""
