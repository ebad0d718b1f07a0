# SPDX-License-Identifier: Apache-2.0
"""Reading what a memory.sh call left: its result lines and its command line.

memory.sh's own summary (the helper it embeds), pool_memory.py and merge_memory.py read the same
files, and must read them alike: a pooled or merged cell counts the runs its call's summary
counted, and names the flags that call ran with."""
import json
import os
import shlex


def call_file(summary_path: str, suffix: str, out_name: str) -> str:
    """A file of the call whose summary is SUMMARY_PATH: NAME-SUFFIX beside NAME.json (the names
    docs/results gives a call's files), else OUT_NAME in the summary's folder (the call's $OUT)."""
    base, ext = os.path.splitext(summary_path)
    beside = base + suffix
    if ext == ".json" and os.path.exists(beside):
        return beside
    return os.path.join(os.path.dirname(summary_path) or ".", out_name)


def read_result_lines(path: str):
    """([(line number, object), ...], [problem, ...]): every JSON object in a file of result
    lines. Two jobs append to one file; a line that holds more than one object (an interleaved
    write) is split, and a fragment that is not JSON is reported as a problem, not raised, so one
    bad line cannot cost a call's whole summary."""
    records, problems, dec = [], [], json.JSONDecoder()
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            text, i = line.strip(), 0
            if not text.startswith("{"):
                continue
            while i < len(text):
                try:
                    obj, i = dec.raw_decode(text, i)
                except json.JSONDecodeError as e:
                    problems.append(f"{path}:{n}: not JSON from column {i + 1}: {e.msg}")
                    break
                records.append((n, obj))
                while i < len(text) and text[i].isspace():
                    i += 1
    return records, problems


def window_rates(record):
    """The it_per_s list of a result line when it is a list of rates >= 0 (numbers, not
    booleans), else None: what every reader counts as a run's windows."""
    w = record.get("it_per_s") if isinstance(record, dict) else None
    if isinstance(w, list) and all(isinstance(x, (int, float)) and not isinstance(x, bool) and x >= 0 for x in w):
        return w
    return None


def command_word(command: str, key: str):
    """The value of KEY=VALUE in a memory.sh command line (None when it has none)."""
    try:
        words = shlex.split(command)
    except ValueError:
        return None
    for w in words:
        if w.startswith(key + "="):
            return w[len(key) + 1:]
    return None
