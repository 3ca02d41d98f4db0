"""Reading a request trace: CSV or JSON Lines, one request per row.

CSV needs a header naming ``arrival``, ``prompt_tokens`` and ``output_tokens``
(any order; other columns are ignored); JSON Lines needs one object per line
with the same keys. ``arrival`` is in seconds (>= 0, any origin: the trace is
shifted to start at 0 and replayed in arrival order); the token counts are
integers >= 1. Blank lines are skipped. Every problem is a ``TraceFileError``
whose message starts with ``FILE:LINE``.
"""

from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path
from typing import Any, Optional

from ..files import read_input
from .errors import TraceFileError
from .workload import TraceReplay

COLUMNS = ("arrival", "prompt_tokens", "output_tokens")


def load_trace(path: str) -> TraceReplay:
    """Parse ``path`` (``.csv``, or ``.jsonl`` / ``.ndjson``; otherwise by its first character)."""
    try:
        text = read_input(path).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise TraceFileError(path, 1, f"not UTF-8 text ({exc.reason})") from None
    except OSError as exc:
        raise TraceFileError(path, 0, f"cannot read the trace: {exc.strerror or exc}") from None
    suffix = Path(path).suffix.lower()
    first = text.lstrip()[:1]
    if suffix in (".jsonl", ".ndjson") or (suffix != ".csv" and first == "{"):
        rows = _jsonl_rows(path, text)
    else:
        rows = _csv_rows(path, text)
    if not rows:
        raise TraceFileError(path, 1, "no requests in the trace")
    for (line0, a0, _, _), (line1, a1, _, _) in zip(rows, rows[1:]):  # a trace is a log: in arrival order
        if a1 < a0:
            raise TraceFileError(path, line1, f"arrival {a1:g} s is earlier than line {line0}'s {a0:g} s: the requests "
                                 "must be listed in arrival order (sort the trace by arrival)")
    origin = rows[0][1]
    return TraceReplay(
        rows=tuple((a - origin, p, o) for _, a, p, o in rows),
        name=path,
        lines=tuple(line for line, *_ in rows),
        origin_s=origin,
    )


def _csv_rows(path: str, text: str) -> list[tuple[int, float, int, int]]:
    lines = text.splitlines()
    header_line = next((i for i, line in enumerate(lines) if line.strip()), None)
    if header_line is None:
        raise TraceFileError(path, 1, "empty trace: expected a CSV header with " + ", ".join(COLUMNS))
    header = [h.strip() for h in next(csv.reader([lines[header_line]]))]
    missing = [c for c in COLUMNS if c not in header]
    if missing:
        raise TraceFileError(
            path, header_line + 1, f"CSV header {','.join(header)!r} lacks {', '.join(missing)} (needs {', '.join(COLUMNS)})"
        )
    index = {c: header.index(c) for c in COLUMNS}
    rows = []
    for number, line in enumerate(lines[header_line + 1 :], start=header_line + 2):
        if not line.strip():
            continue
        try:
            cells = next(csv.reader(io.StringIO(line)))
        except csv.Error as exc:
            raise TraceFileError(path, number, f"malformed CSV: {exc}") from None
        if len(cells) != len(header):
            raise TraceFileError(path, number, f"{len(cells)} fields, the header has {len(header)}")
        rows.append(_row(path, number, {c: cells[i].strip() for c, i in index.items()}))
    return rows


def _jsonl_rows(path: str, text: str) -> list[tuple[int, float, int, int]]:
    rows = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise TraceFileError(path, number, f"not JSON: {exc.msg} at column {exc.colno}") from None
        if not isinstance(obj, dict):
            raise TraceFileError(path, number, f"expected a JSON object with {', '.join(COLUMNS)}, got {type(obj).__name__}")
        missing = [c for c in COLUMNS if c not in obj]
        if missing:
            raise TraceFileError(path, number, f"missing {', '.join(missing)}")
        rows.append(_row(path, number, obj))
    return rows


def _row(path: str, line: int, fields: dict[str, Any]) -> tuple[int, float, int, int]:
    arrival = _number(fields["arrival"])
    if arrival is None or not math.isfinite(arrival) or arrival < 0:
        raise TraceFileError(path, line, f"arrival must be a finite number of seconds >= 0, got {fields['arrival']!r}")
    counts = []
    for name in ("prompt_tokens", "output_tokens"):
        value = _integer(fields[name])
        if value is None or value < 1:
            raise TraceFileError(path, line, f"{name} must be an integer >= 1, got {fields[name]!r}")
        counts.append(value)
    return line, arrival, counts[0], counts[1]


def _number(x: Any) -> Optional[float]:
    if isinstance(x, bool):
        return None
    if isinstance(x, (int, float)):
        return float(x)
    if isinstance(x, str):
        try:
            return float(x)
        except ValueError:
            return None
    return None


def _integer(x: Any) -> Optional[int]:
    if isinstance(x, bool):
        return None
    if isinstance(x, int):
        return x
    if isinstance(x, str) and x.strip().lstrip("+").isdigit():
        return int(x)
    return None
