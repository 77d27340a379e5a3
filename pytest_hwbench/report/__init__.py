"""Markdown report, PNG plots and the compatibility matrix, from measured benchmark rows.

Input is a pandas DataFrame with one row per `BenchmarkRecord` and the record's field names as
columns (what ``sinks.load_results`` returns, or
``sinks.records_frame(sinks.read_records(source))``). Every number written comes from those
rows; nothing is estimated.

Modules:

- `data`: checks and types the rows (`prepare`), groups them into table cells, speedups and
  compiled/eager pairs, and formats numbers.
- `compatibility`: the compatibility matrix, its failure counts and performance ratings, and
  ``compatibility.json``.
- `plots`: the PNG plots of each family (matplotlib imported on first use).
- `markdown`: ``report.md`` (tables, sections, "Compiled vs eager") and `write_report`, which
  writes the three outputs.

Vocabulary used in the outputs:

- **config**: ``hardware/backend/precision`` (e.g. ``cuda/torch/fp16``), one column of the
  latency and throughput tables.
- **target**: ``hardware/backend`` (e.g. ``cuda/torch``), one column of the compatibility
  matrix. Precision is folded in: a target is compatible with a family when any of its
  precisions passed a case of that family.
- **baseline**: ``cpu/torch/fp32``; speedup = baseline median latency / config median latency
  for the same model and batch size (equal to the throughput ratio).
- **compiled**: a record with a ``compile_time_s`` (its backend compiled the model apart from the
  timed calls, e.g. ``torch-compile``); it is compared with eager ``torch`` on the same case
  (model, hardware, precision, batch size, mode, new tokens): the report names every compiled
  case slower than eager on a line of its own, and the Generation section puts eager and compiled
  tokens/s side by side.
"""

from __future__ import annotations

from .compatibility import COMPATIBILITY_SCHEMA_VERSION, RATING_THRESHOLDS, compatibility_matrix
from .data import BASELINE, EAGER_BACKEND, REPORT_COLUMNS, REQUIRED_COLUMNS
from .markdown import ReportPaths, write_report

__all__ = [
    "BASELINE",
    "COMPATIBILITY_SCHEMA_VERSION",
    "EAGER_BACKEND",
    "RATING_THRESHOLDS",
    "REPORT_COLUMNS",
    "REQUIRED_COLUMNS",
    "ReportPaths",
    "compatibility_matrix",
    "write_report",
]
