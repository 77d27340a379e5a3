"""Where records go: the spool first, then MLflow, DuckDB or any registered sink.

Importing this package imports no sink: each sink module registers itself (`register_sink`) when
the registry loads the ``pytest_hwbench.sinks`` entry points; the names below are imported on
first use. Typical use (what the pytest plugin does)::

    recorder = Recorder(Spool("mlruns/spool"), [open_sink("mlflow"), open_sink("duckdb")])
    recorder.start(session)
    recorder.emit(record)            # per finished case; never raises for a sink
    report = recorder.finish("finished")
    replay(Spool("mlruns/spool"), [open_sink("mlflow")])   # later: what is still pending
"""

from __future__ import annotations

from pytest_hwbench._lazy import lazy_exports

#: public name -> the module that defines it, imported on first use (PEP 562): a sink module is
#: imported when its names are used or when the registry loads the entry-point group, never by
#: importing this package.
_EXPORTS: dict[str, str] = {
    "DEFAULT_DEADLINE_S": "_recorder",
    "DEFAULT_RETRY_EVERY": "_recorder",
    "Recorder": "_recorder",
    "RecorderReport": "_recorder",
    "replay": "_recorder",
    "replay_each": "_recorder",
    "SinkReplay": "_recorder",
    "SinkTimeout": "_recorder",
    "SESSION_STATUSES": "base",
    "SINKS": "base",
    "Sink": "base",
    "SessionSource": "base",
    "SinkFactory": "base",
    "normalize_status": "base",
    "open_sink": "base",
    "read_sink": "base",
    "register_sink": "base",
    "registered_sinks": "base",
    "resolve_sink": "base",
    "DuckDBSink": "duckdb_sink",
    "DuckDBFileError": "_duckdb_file",
    "export_parquet": "_duckdb_read",
    "list_sessions": "_duckdb_read",
    "load_records": "_duckdb_read",
    "load_results": "_duckdb_read",
    "load_timings": "_duckdb_read",
    "records_from_results": "_duckdb_read",
    "typed_results": "_duckdb_read",
    "read_connection": "_duckdb_file",
    "RESULT_COLUMNS": "_duckdb_schema",
    "MlflowSink": "mlflow_sink",
    "MlflowStoreError": "mlflow_calls",
    "ping": "mlflow_uri",
    "resolve_tracking_uri": "mlflow_uri",
    "validate_tracking_uri": "mlflow_uri",
    "read_all": "readers",
    "read_records": "readers",
    "records_frame": "readers",
    "source_kind": "readers",
    "redact_uri": "redact",
    "Spool": "spool",
    "replay_command": "spool",
    "ImportResult": "transfer",
    "export_records": "duckdb_sink",
    "import_mlflow": "duckdb_sink",
    "import_mlflow_sessions": "duckdb_sink",
    "copy_sessions": "transfer",
}


__all__ = list(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, __all__)
