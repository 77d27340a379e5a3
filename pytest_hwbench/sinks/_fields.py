"""What each `BenchmarkRecord` field holds (int, float, text, tuple or mapping, and whether it may
be None), derived once from the record's type hints, so that MLflow's text and DuckDB's typed
columns stay in step with `record.py`."""

from __future__ import annotations

import dataclasses
import datetime as _dt
import json
import types
import typing
from collections.abc import Mapping
from typing import Any, Literal

from pytest_hwbench.record import BenchmarkRecord, SessionInfo

Kind = Literal["str", "int", "float", "int_tuple", "float_tuple", "mapping"]

#: How MLflow params spell None, the same for every param so names and types stay stable.
NONE_TEXT = "none"


@dataclasses.dataclass(frozen=True)
class FieldKind:
    """The storage kind of one record field and whether it may be None."""

    name: str
    kind: Kind
    optional: bool


def _kind_of(name: str, hint: Any) -> FieldKind:
    optional = False
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        optional = len(args) < len(typing.get_args(hint))
        if len(args) != 1:
            raise TypeError(f"BenchmarkRecord.{name}: unsupported union {hint!r}")
        hint = args[0]
        origin = typing.get_origin(hint)
    if origin is Literal:
        return FieldKind(name, "str", optional)
    if hint in (str, int, float):
        return FieldKind(name, hint.__name__, optional)  # type: ignore[arg-type]
    items = typing.get_args(hint)
    if origin is tuple and items and items[0] in (int, float):
        return FieldKind(name, f"{items[0].__name__}_tuple", optional)  # type: ignore[arg-type]
    if origin in (Mapping, dict) or hint in (Mapping, dict):
        return FieldKind(name, "mapping", optional)
    raise TypeError(f"BenchmarkRecord.{name}: no sink mapping for type {hint!r}")


_HINTS = typing.get_type_hints(BenchmarkRecord)
#: Every record field, in dataclass order.
FIELDS: dict[str, FieldKind] = {f.name: _kind_of(f.name, _HINTS[f.name]) for f in dataclasses.fields(BenchmarkRecord)}
#: `SessionInfo`'s text fields (its id first), in dataclass order.
SESSION_TEXT = tuple(name for name, hint in typing.get_type_hints(SessionInfo).items() if hint is str)


def to_text(name: str, value: Any) -> str:
    """A field value as text for MLflow; the same field always gets the same spelling of its type."""
    if value is None:
        return NONE_TEXT
    kind = FIELDS[name].kind
    if kind == "int":
        return str(int(value))
    if kind == "float":
        return repr(float(value))
    if kind in ("int_tuple", "float_tuple"):
        return json.dumps(list(value))
    if kind == "mapping":
        return json.dumps(dict(value), sort_keys=True, default=str)
    return str(value)


def from_text(name: str, text: str | None) -> Any:
    """Inverse of `to_text`: a stored string cast back to the field's type; ValueError (naming the
    field and the text) when it does not parse."""
    field = FIELDS[name]
    if text is None or (text == NONE_TEXT and (field.optional or field.kind != "str")):
        return None
    try:
        if field.kind == "int":
            try:
                return int(text)
            except ValueError:
                return int(float(text))
        if field.kind == "float":
            return float(text)
        if field.kind == "int_tuple":
            return tuple(int(v) for v in json.loads(text))
        if field.kind == "float_tuple":
            return tuple(float(v) for v in json.loads(text))
        if field.kind == "mapping":
            data = json.loads(text)
            return dict(data) if isinstance(data, dict) else {}
    except (ValueError, TypeError) as exc:
        raise ValueError(f"cannot read BenchmarkRecord.{name} from {text!r}: {exc}") from exc
    return text


def utc_stamp(iso: str | None) -> _dt.datetime | None:
    """An ISO-8601 timestamp as an aware UTC datetime (naive means UTC); None if empty or unparsable."""
    if not iso:
        return None
    try:
        stamp = _dt.datetime.fromisoformat(str(iso).replace("Z", "+00:00"))
    except ValueError:
        return None
    return stamp.replace(tzinfo=_dt.timezone.utc) if stamp.tzinfo is None else stamp.astimezone(_dt.timezone.utc)


def epoch_ms(iso: str | None) -> int | None:
    """Milliseconds since the epoch of an ISO-8601 timestamp (naive means UTC); None if unparsable."""
    stamp = utc_stamp(iso)
    return None if stamp is None else int(stamp.timestamp() * 1000)


def parse_json(text: Any) -> Any:
    """`text` parsed as JSON; {} for a NULL cell (None, NaN), empty or unparsable text."""
    try:  # a NULL cell (None, NaN) is a TypeError too
        return json.loads(text)
    except (TypeError, ValueError):
        return {}


def truncate(text: str, limit: int) -> str:
    """`text` cut to at most `limit` characters, marking the cut."""
    if len(text) <= limit:
        return text
    marker = "...[truncated]"
    return text[: max(0, limit - len(marker))] + marker


__all__ = ["FIELDS", "NONE_TEXT", "SESSION_TEXT", "FieldKind", "epoch_ms", "from_text", "parse_json", "to_text", "truncate",
           "utc_stamp"]
