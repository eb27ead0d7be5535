"""The one exception type clover2 raises for bad input (a user's mistake, not a bug)."""


class Clover2Error(ValueError):
    """Bad input: an unknown target, an over-long prompt, a malformed file, a nonsense config value.

    The message says what was wrong and, where it can, what would be right.
    """
