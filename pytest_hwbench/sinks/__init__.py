"""Where records go: the spool first, then MLflow, DuckDB or any registered sink.

Importing this package imports no heavy library: the sink modules import mlflow, duckdb and
pandas inside the functions that use them, and register themselves with `register_sink` here.

Typical use (what the pytest plugin does)::

    recorder = Recorder(Spool("mlruns/spool"), [open_sink("mlflow"), open_sink("duckdb")])
    recorder.start(session)
    recorder.emit(record)            # per finished case; never raises for a sink
    report = recorder.finish("finished")
    replay(Spool("mlruns/spool"), [open_sink("mlflow")])   # later: what is still pending
"""

from __future__ import annotations

from pytest_hwbench.sinks import duckdb_sink as _duckdb_sink  # noqa: F401  (registers "duckdb")
from pytest_hwbench.sinks import mlflow_sink as _mlflow_sink  # noqa: F401  (registers "mlflow")
from pytest_hwbench.sinks._recorder import DEFAULT_RETRY_EVERY, Recorder, RecorderReport, replay
from pytest_hwbench.sinks.base import (
    SESSION_STATUSES,
    SINKS,
    Sink,
    SinkFactory,
    normalize_status,
    open_sink,
    register_sink,
)
from pytest_hwbench.sinks.duckdb_sink import (
    DuckDBSink,
    export_parquet,
    import_mlflow,
    list_sessions,
    load_records,
    load_results,
    load_timings,
)
from pytest_hwbench.sinks.mlflow_sink import (
    MlflowSink,
    MlflowStoreError,
    ping,
    resolve_tracking_uri,
    validate_tracking_uri,
)
from pytest_hwbench.sinks.readers import read_all, read_records, records_frame, source_kind
from pytest_hwbench.sinks.redact import redact_uri
from pytest_hwbench.sinks.spool import Spool

__all__ = [
    "DEFAULT_RETRY_EVERY",
    "SESSION_STATUSES",
    "SINKS",
    "DuckDBSink",
    "MlflowSink",
    "MlflowStoreError",
    "Recorder",
    "RecorderReport",
    "Sink",
    "SinkFactory",
    "Spool",
    "export_parquet",
    "import_mlflow",
    "list_sessions",
    "load_records",
    "load_results",
    "load_timings",
    "normalize_status",
    "open_sink",
    "ping",
    "read_all",
    "read_records",
    "records_frame",
    "redact_uri",
    "register_sink",
    "replay",
    "resolve_tracking_uri",
    "source_kind",
    "validate_tracking_uri",
]
