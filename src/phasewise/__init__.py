"""phasewise: where the time goes in the two phases of LLM inference."""

__version__ = "0.1.0"


def estimate(*args, **kwargs):  # noqa: ANN002, ANN003, ANN201 - re-exported lazily
    """See ``phasewise.estimate.core.estimate``."""
    from phasewise.estimate.core import estimate as _estimate

    return _estimate(*args, **kwargs)


__all__ = ["__version__", "estimate"]
