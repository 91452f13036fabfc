"""CLI verbs; each module registers its commands on ``_app.app``."""

VERB_MODULES = ["estimate", "catalog", "explain", "compare", "simulate", "plan", "bench",
                "validate", "profile", "calibrate", "report", "ui"]
