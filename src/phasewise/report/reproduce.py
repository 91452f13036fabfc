"""The command line that writes a document again, rebuilt from the inputs it records."""

from __future__ import annotations

import shlex
from typing import Any

from phasewise.report.sections import document_kind

# Document inputs and the flag each came from, in the order the verbs declare them.
_ESTIMATE_FLAGS = (("model", "--model"), ("hardware", "--hardware"), ("isl", "--isl"),
                   ("osl", "--osl"), ("batch_size", "--batch-size"),
                   ("weight_dtype", "--weight-dtype"), ("act_dtype", "--act-dtype"),
                   ("kv_dtype", "--kv-dtype"), ("kv_keep", "--kv-keep"), ("tp", "--tp"),
                   ("pp", "--pp"), ("ep", "--ep"), ("cost_model", "--cost"),
                   ("engine", "--engine"), ("calibration", "--calibration"))
_COMPARE_FLAGS = (("model", "--model"), ("isl", "--isl"), ("osl", "--osl"),
                  ("batch_size", "--batch-size"), ("weight_dtype", "--weight-dtype"),
                  ("act_dtype", "--act-dtype"), ("kv_dtype", "--kv-dtype"),
                  ("kv_keep", "--kv-keep"), ("cost_model", "--cost"), ("rank_by", "--rank-by"))


def _flags(values: dict[str, Any], table: tuple[tuple[str, str], ...]) -> list[str]:
    """The flags of the recorded inputs. Weight formats that came from the checkpoint (or its
    lack of one) are left to --weight-dtype's default, auto, which reads them again."""
    out: list[str] = []
    from_flag = values.get("formats_source") in (None, "--weight-dtype")
    for key, flag in table:
        value = values.get(key)
        if key == "weight_dtype" and not from_flag:
            continue
        if value is not None:
            out += [flag, str(value)]
    return out


def _join(words: list[str]) -> str:
    return " ".join(shlex.quote(w) for w in words)


def command_for(doc: Any) -> str:
    """``phasewise VERB --flag value … --format json`` for the kinds whose inputs the
    document records in full; for the others, the report command over the saved file."""
    kind = document_kind(doc)
    if kind == "estimate":
        words = ["phasewise", "estimate", *_flags(doc["inputs"], _ESTIMATE_FLAGS)]
        if doc.get("ops"):
            words.append("--detail")
    elif kind == "explain":
        words = ["phasewise", "explain", *_flags(doc["inputs"], _ESTIMATE_FLAGS)]
        if doc.get("batch_sweep"):
            words += ["--batches", ",".join(str(p["batch_size"])
                                            for p in doc["batch_sweep"]["points"])]
    elif kind == "compare":
        names = [r["hardware"] for r in doc["results"]] + \
            [key.split(" TP")[0] for key in doc.get("skipped", {})]
        words = ["phasewise", "compare", *_flags(doc, _COMPARE_FLAGS),
                 "--hardware", ",".join(sorted(set(names)))]
        if any(not r["fits"] for r in doc["results"]):
            words.append("--all")
        degrees = sorted({r["tp"] for r in doc["results"]})
        if degrees and degrees != [1]:
            words += ["--tp", ",".join(map(str, degrees))]
    elif kind == "validate":
        words = ["phasewise", "validate"]
    else:
        return "phasewise report DOCUMENT.json -o report.html  (DOCUMENT.json: the saved document)"
    return _join(words + ["--format", "json"])
