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

#: module -> the public names it defines, each imported on first use (PEP 562): a sink module is
#: imported when its names are used or when the registry loads the entry-point group, never by
#: importing this package.
_MODULES: dict[str, tuple[str, ...]] = {
    "_recorder": ("Recorder", "RecorderReport", "replay", "replay_each", "SinkReplay", "SinkTimeout"),
    "base": ("SESSION_STATUSES", "SINKS", "Sink", "SessionSource", "SinkFactory", "normalize_status",
             "open_sink", "read_sink", "register_sink", "registered_sinks", "resolve_sink"),
    "duckdb_sink": ("DuckDBSink", "import_mlflow_sessions"),
    "_duckdb_file": ("DuckDBFileError", "read_connection"),
    "_duckdb_read": ("export_parquet", "list_sessions", "load_records", "load_results", "load_timings",
                     "records_from_results", "typed_results"),
    "_duckdb_schema": ("RESULT_COLUMNS",),
    "mlflow_sink": ("MlflowSink", "MlflowStoreError"),
    "mlflow_uri": ("ping", "resolve_tracking_uri", "validate_tracking_uri"),
    "readers": ("read_all", "read_records", "records_frame", "source_kind"),
    "redact": ("redact_uri",),
    "spool": ("Spool", "replay_command"),
    "transfer": ("ImportResult", "copy_sessions"),
}
#: public name -> the module that defines it
_EXPORTS: dict[str, str] = {name: module for module, names in _MODULES.items() for name in names}

__all__ = list(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, __all__)
