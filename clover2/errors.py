"""The one exception type clover2 raises for bad input (a user's mistake, not a bug)."""


class Clover2Error(ValueError):
    """Bad input: an unknown target, an over-long prompt, a malformed file, a nonsense config value.

    The message says what was wrong and, where it can, what would be right.
    """


def require_extra(extra: str, *modules: str) -> None:
    """Fail with an install hint when an optional dependency group is missing."""
    import importlib.util

    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if missing:
        raise Clover2Error(f"this needs the '{extra}' extra ({', '.join(missing)} missing): "
                           f"pip install 'clover2[{extra}]'")
