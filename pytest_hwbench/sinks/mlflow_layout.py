"""How hwbench's sessions and records lie in an MLflow experiment (default ``hwbench``), written
from `SessionInfo` and `BenchmarkRecord` and read back into them; imports no ``mlflow``:

- the experiment carries ``mlflow.experimentKind=custom_model_development`` (MLflow's UI then
  opens its runs table, not a GenAI overview);
- a parent run per session, named by `session_run_name`: tags ``hwbench.kind=session``, the
  session's fields as ``hwbench.<field>`` (git also as ``mlflow.source.git.*``), package
  versions; on close, an artifact ``hwbench_records/part-*.json`` with the full records written
  (their raw timings included, which child runs do not carry);
- a child run per record, named ``record.run_name``: tags ``mlflow.parentRunId``,
  ``hwbench.kind=record`` and every context field as ``hwbench.<field>``; params
  `record.params()` (every name always present, None spelled ``none``, one type per field);
  metrics `record.metrics()` minus the Nones; status FINISHED (passed), FAILED (failed, with
  ``hwbench.error``) or KILLED (crashed).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from pytest_hwbench.record import METRIC_FIELDS, PARAM_FIELDS, BenchmarkRecord, SessionInfo
from pytest_hwbench.sinks import _fields
from pytest_hwbench.sinks._fields import FIELDS, from_text, parse_json, to_text, truncate, utc_stamp

KIND_TAG = "hwbench.kind"
SESSION_TAG = "hwbench.session_id"
RECORD_TAG = "hwbench.record_id"
PARENT_TAG = "mlflow.parentRunId"
RECORDS_ARTIFACT_DIR = "hwbench_records"
#: The experiment tag MLflow 3's UI reads for an experiment's kind (its `ExperimentKind` values).
EXPERIMENT_KIND_TAG = "mlflow.experimentKind"
EXPERIMENT_KIND = "custom_model_development"
#: MLflow allows 8000 characters per tag value; stay clear of it (the spool keeps the full text).
TAG_VALUE_LIMIT = 5000

#: Context fields (neither params, metrics nor raw timings) travel as tags ``hwbench.<field>``.
CONTEXT_FIELDS: tuple[str, ...] = tuple(
    name for name in FIELDS if name not in PARAM_FIELDS and name not in METRIC_FIELDS and name != "timings_ms"
)
#: session status -> parent run status, and back
RUN_STATUS = {"finished": "FINISHED", "failed": "FAILED", "killed": "KILLED"}
SESSION_STATUS = {v: k for k, v in RUN_STATUS.items()}
#: record status -> child run status, and back (a crashed case's process was killed)
CASE_RUN_STATUS = {"passed": "FINISHED", "failed": "FAILED", "crashed": "KILLED"}
CASE_STATUS = {run: case for case, run in CASE_RUN_STATUS.items()}
TERMINAL = frozenset({"FINISHED", "FAILED", "KILLED"})


def session_run_name(session: SessionInfo) -> str:
    """The parent run's name: what the session ran (suite and ``-m`` expression, from the
    session's ``extra``), where (host), on what (commit) and when (UTC), e.g.
    ``bench_suites/test_quick.py -m cpu · ci-runner-3 · 1a2b3c4d · 2026-11-24 14:05 UTC``."""
    extra = dict(session.extra or {})
    suite = str(extra.get("suite") or "").strip()
    markers = str(extra.get("markers") or "").strip()
    what = " ".join(part for part in (suite, f"-m {markers}" if markers else "") if part)
    stamp = utc_stamp(session.started_at)
    when = stamp.strftime("%Y-%m-%d %H:%M UTC") if stamp else str(session.started_at or "")[:16]
    parts = [what or "hwbench", session.host, session.git_commit[:8] if session.git_commit else "", when]
    return truncate(" · ".join(p for p in parts if p), 240)


def run_duration_ms(record: BenchmarkRecord) -> int:
    """Rough wall time of the case before its record was made (load + timed iterations)."""
    total = sum(record.timings_ms) + 1000.0 * (record.load_time_s or 0.0)
    return max(0, int(total))


def session_tags(session: SessionInfo) -> dict[str, str]:
    """A parent run's tags: its kind, the session's id and fields, package versions, git source."""
    tags: dict[str, str] = {KIND_TAG: "session"}
    for key in _fields.SESSION_TEXT:  # the session's id is SESSION_TAG
        value = getattr(session, key)
        if value:
            tags[f"hwbench.{key}"] = truncate(str(value), TAG_VALUE_LIMIT)
    if session.package_versions:
        versions = dict(session.package_versions)
        tags["hwbench.package_versions"] = truncate(json.dumps(versions, sort_keys=True), TAG_VALUE_LIMIT)
        for package, version in sorted(versions.items())[:50]:
            key = "".join(c if c.isalnum() or c in "._-" else "_" for c in str(package))
            tags[f"hwbench.version.{key}"] = truncate(str(version), 250)
    if session.extra:
        tags["hwbench.extra"] = truncate(
            json.dumps(dict(session.extra), sort_keys=True, default=str), TAG_VALUE_LIMIT
        )
    if session.git_commit:
        tags["mlflow.source.git.commit"] = session.git_commit
    if session.git_branch:
        tags["mlflow.source.git.branch"] = session.git_branch
    return tags


def record_tags(record: BenchmarkRecord, parent_run_id: str) -> dict[str, str]:
    """A child run's tags: its parent, its kind and every context field that has a value."""
    tags = {PARENT_TAG: parent_run_id, KIND_TAG: "record"}
    for name in CONTEXT_FIELDS:
        value = getattr(record, name)
        if value is None or value == "":
            continue
        tags[f"hwbench.{name}"] = truncate(to_text(name, value), TAG_VALUE_LIMIT)
    return tags


def quoted(value: str, what: str) -> str:
    """`value` for a search filter's quoted string; ValueError for one holding a quote."""
    if "'" in value or "`" in value or "\\" in value:
        raise ValueError(f"{what} {value!r} contains a quote or backslash; it cannot be searched for in MLflow")
    return value


def runs_filter(kind: str, session_id: str | None = None) -> str:
    """The search filter for the runs of `kind` (``session``: parent runs, ``record``: child
    runs), of one session where `session_id` is given."""
    runs = f"tags.`{KIND_TAG}` = '{kind}'"
    if session_id is None:
        return runs
    return f"tags.`{SESSION_TAG}` = '{quoted(session_id, 'session_id')}' AND {runs}"


def session_from_tags(tags: Mapping[str, str]) -> SessionInfo:
    return SessionInfo(
        **{key: tags.get(f"hwbench.{key}", "") for key in _fields.SESSION_TEXT},
        package_versions=parse_json(tags.get("hwbench.package_versions")),
        extra=parse_json(tags.get("hwbench.extra")),
    )


def record_data(params: Mapping[str, str], metrics: Mapping[str, float], tags: Mapping[str, str],
                run_status: str) -> dict[str, Any]:
    """A record dict from a child run's params, metrics, tags and status: params and context tags
    cast back, metrics as logged."""
    data: dict[str, Any] = {}
    for name in PARAM_FIELDS:
        if name in params:
            data[name] = from_text(name, params[name])
    for name in METRIC_FIELDS:
        if name in metrics:
            value = metrics[name]
            data[name] = int(round(value)) if FIELDS[name].kind == "int" else float(value)
    for name in CONTEXT_FIELDS:
        text = tags.get(f"hwbench.{name}")
        if text is None:
            continue
        try:
            data[name] = from_text(name, text)
        except ValueError:
            data[name] = None  # cut at TAG_VALUE_LIMIT; the caller may fill it from the artifact
    if "status" not in data:
        data["status"] = CASE_STATUS.get(run_status, "failed")
    return data


__all__ = ["CASE_RUN_STATUS", "CASE_STATUS", "CONTEXT_FIELDS", "EXPERIMENT_KIND", "EXPERIMENT_KIND_TAG",
           "KIND_TAG", "PARENT_TAG", "RECORDS_ARTIFACT_DIR", "RECORD_TAG", "RUN_STATUS", "SESSION_STATUS",
           "SESSION_TAG", "TAG_VALUE_LIMIT", "TERMINAL", "quoted", "record_data", "record_tags",
           "runs_filter", "run_duration_ms", "session_from_tags", "session_run_name", "session_tags"]
