"""Errors a user can cause. The CLI turns these into one line and exit code 2."""


# Names longer than this are no typo of a known one (and difflib is quadratic in length).
MAX_HINT_CHARS = 200


class InputError(ValueError):
    """Bad input: the message says what is wrong and how to fix it, in one line."""


def nearest_hint(name: str, known: list[str], *, limit: int = 3) -> str:
    """' Did you mean a, b?' for the closest known names, or '' when none is close."""
    import difflib

    if len(name) > MAX_HINT_CHARS:
        return ""
    lowered = {k.lower(): k for k in known}
    near = difflib.get_close_matches(name.lower(), list(lowered), n=limit, cutoff=0.5)
    return f" Did you mean {', '.join(lowered[n] for n in near)}?" if near else ""
