"""Markdown report, PNG plots and the compatibility matrix, from measured benchmark rows.

Input is a pandas DataFrame with one row per `BenchmarkRecord` and the record's field names as
columns (what ``sinks.load_results`` returns, or ``sinks.records_frame(sinks.read_records(source))``);
every number written comes from those rows. A **config** is ``hardware/backend/precision`` (a
column of the latency tables), a **target** ``hardware/backend`` (a column of the compatibility
matrix, its precisions folded in); speedups are over `BASELINE`, and compiled cases are compared
with eager `EAGER_BACKEND` on the same case.
"""

from __future__ import annotations

from .compatibility import COMPATIBILITY_SCHEMA_VERSION, RATING_THRESHOLDS, compatibility_matrix
from .data import BASELINE, EAGER_BACKEND, REPORT_COLUMNS, REQUIRED_COLUMNS
from .markdown import ReportPaths, write_report

__all__ = ["BASELINE", "COMPATIBILITY_SCHEMA_VERSION", "EAGER_BACKEND", "RATING_THRESHOLDS", "REPORT_COLUMNS",
           "REQUIRED_COLUMNS", "ReportPaths", "compatibility_matrix", "write_report"]
