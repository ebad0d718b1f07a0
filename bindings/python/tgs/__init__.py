# SPDX-License-Identifier: Apache-2.0
"""tgs from Python: the simulator's runs (`pairs`, `mixed`, `replay`, as tgs-sim runs them), the
trace readers, every registered policy stepped by hand, and plots (`tgs.plot`).

    import tgs
    r = tgs.replay("philly_jobs_pollux.csv", policies=["tgs"])
    r["summary"][1]["production_jct"]          # mean production JCT under tgs / exclusive
    tgs.plot.cdf(r, "cdf.png")

Results are plain dicts and numpy columns (`pandas.DataFrame(r["jobs"])` makes a table). Bad
input raises tgs.InputError (a ValueError) with the message tgs-sim prints; a policy setting out of
range raises tgs.ConfigError, a malformed trace tgs.TraceError. See docs/python.md.
"""
import math
import numbers
import sys


def _built_for_another_python(error):
    """The ImportError of an interpreter that cannot load the extension (one with another ABI: the
    import system looks for `_tgs` with none of its suffixes): it names the one that can."""
    import importlib.machinery
    import os
    from ._build import INTERPRETER, SOABI, VERSION
    here = os.path.dirname(__file__)
    if any(os.path.exists(os.path.join(here, "_tgs" + suffix))
           for suffix in importlib.machinery.EXTENSION_SUFFIXES):
        return None  # this interpreter's extension is there: it failed for another reason
    this = f"{sys.implementation.name} {sys.version_info[0]}.{sys.version_info[1]}"
    return ImportError(
        f"the module tgs in {here} was built for {INTERPRETER} (Python {VERSION}, {SOABI}); this is "
        f"{sys.executable} ({this}), which cannot load its extension. Run {INTERPRETER}, or make a "
        f"virtual environment from it ({INTERPRETER} -m venv --system-site-packages DIR). "
        f"({error})", name="tgs._tgs")


try:
    from ._tgs import (ConfigError, Controller, InputError, MemoryPolicy, Model, Trace, TraceError,
                       __version__, baseline_policy, default_cluster_policies, default_pair_policies,
                       memory_policies, mixed, pairs, parse_trace, policy_traits, rate_policies,
                       read_trace, replay, settings, trace_formats, write_trace)
except ImportError as _error:
    _other = _built_for_another_python(_error)
    if _other is None:
        raise
    raise _other from None

__all__ = ["ConfigError", "Controller", "InputError", "MemoryPolicy", "Model", "Trace", "TraceError",
           "__version__", "baseline_policy", "default_cluster_policies", "default_pair_policies",
           "make_trace", "memory_policies", "mixed", "pairs", "parse_trace", "policy_traits",
           "rate_policies", "read_trace", "replay", "settings", "trace_formats", "write_trace"]

#: The columns make_trace takes: those of the tgs job-stream CSV (traces/README.md).
TRACE_COLUMNS = ("submit_s", "gpus", "duration_s", "iterations", "name", "class", "model",
                 "batch_size", "vc")
_SECONDS = ("submit_s", "duration_s")
_COUNTS = ("gpus", "iterations", "batch_size")


def _columns_of(jobs):
    """{column: list} from a DataFrame, a dict of sequences or a list of dicts."""
    if hasattr(jobs, "columns") and hasattr(jobs, "__getitem__"):  # a pandas DataFrame
        return {str(c): list(jobs[c]) for c in jobs.columns}
    if isinstance(jobs, dict):
        return {str(c): list(v) for c, v in jobs.items()}
    if isinstance(jobs, (list, tuple)) and all(isinstance(r, dict) for r in jobs):
        names = list(dict.fromkeys(str(k) for r in jobs for k in r))
        return {c: [r.get(c) for r in jobs] for c in names}
    raise InputError(f"make_trace: expected a pandas DataFrame, a dict of columns or a list of dicts, "
                     f"got {type(jobs).__name__}")


def _missing(value):
    if value is None:
        return True
    try:
        return bool(value != value)  # NaN and NaT are not equal to themselves
    except (TypeError, ValueError):
        return type(value).__name__ == "NAType"  # pandas.NA, whose truth is undefined


def _cell(value, column, row, source):
    """One CSV field of the job stream, as the reader expects it (seconds in decimal digits)."""
    if _missing(value):
        return ""
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        return str(int(value))
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        v = float(value)
        if column in _COUNTS and v.is_integer():
            return str(int(v))  # a pandas column of counts with a gap holds floats
        if column in _SECONDS and math.isfinite(v):
            return format(v, ".9f").rstrip("0").rstrip(".")
        return repr(v)
    text = str(value)
    if "\n" in text or "\r" in text:
        raise InputError(f"{source}: row {row}: column \"{column}\": a line break cannot be part of a job stream")
    if any(c in text for c in ',"'):
        text = '"' + text.replace('"', '""') + '"'
    return text


def make_trace(jobs, *, source="python"):
    """A tgs.Trace from Python: a pandas DataFrame, a dict of columns or a list of dicts, with the
    columns of the tgs job-stream CSV (TRACE_COLUMNS): submit_s and gpus, duration_s or iterations
    per job, and optionally name, class ("production"/"opportunistic"), model, batch_size, vc.
    None and NaN mean "not given". The rows go through the job-stream reader, so its rules and
    messages apply; a bad value raises tgs.TraceError naming `source` and the row (from 0).

        t = tgs.make_trace({"submit_s": [0, 60], "gpus": [1, 2], "duration_s": [3600, 1800],
                            "class": ["production", "opportunistic"], "model": ["resnet50", "gcn"]})
    """
    columns = _columns_of(jobs)
    unknown = [c for c in columns if c not in TRACE_COLUMNS]
    if unknown:
        raise InputError(f"make_trace: unknown column \"{unknown[0]}\" (known: {', '.join(TRACE_COLUMNS)})")
    lengths = {len(v) for v in columns.values()}
    if len(lengths) > 1:
        sizes = ", ".join(f"{c}: {len(v)}" for c, v in columns.items())
        raise InputError(f"make_trace: the columns differ in length ({sizes})")
    rows = lengths.pop() if lengths else 0
    lines = [",".join(columns)]
    lines += [",".join(_cell(columns[c][i], c, i, source) for c in columns) for i in range(rows)]
    try:
        return parse_trace("\n".join(lines) + "\n", "tgs-csv", source=source)
    except TraceError as e:
        if e.line < 2:
            raise
        # The reader counts CSV lines (the header is line 1); a Python caller counts rows from 0.
        prefix = f"{e.file}:{e.line}: "
        detail = str(e)[len(prefix):] if str(e).startswith(prefix) else str(e)
        error = TraceError(f"{source}: row {e.line - 2}: {detail}")
        error.file, error.line, error.row = e.file, e.line, e.line - 2
        raise error from None


def __getattr__(name):
    # tgs.plot imports matplotlib, which a run needs not pay for: loaded on first use.
    if name == "plot":
        import importlib
        return importlib.import_module(".plot", __name__)
    raise AttributeError(f"module 'tgs' has no attribute '{name}'")
