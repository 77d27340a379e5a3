"""Where an MLflow store is: the tracking URI resolved (`resolve_tracking_uri`, the one place it
is), checked without side effects (`validate_tracking_uri`), and asked whether it answers (`ping`).

Imports no ``mlflow``: these are cheap and usable in any process, before a sink is built.
"""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import urlsplit

from pytest_hwbench.sinks.redact import redact_uri, split_credentials
from pytest_hwbench.vocabulary import DEFAULT_STORE_DIR

ACCEPTED_FORMS = (
    "sqlite:///PATH/mlflow.db (relative) or sqlite:////ABS/PATH/mlflow.db, "
    "http(s)://HOST:PORT (an `mlflow server`), postgresql://USER:PASS@HOST:PORT/DB, "
    "mysql://..., mssql://..., databricks"
)
_SQL_SCHEMES = frozenset({"postgresql", "mysql", "mssql"})
_HTTP_SCHEMES = frozenset({"http", "https"})


def resolve_tracking_uri(
    tracking_uri: str | None = None, store_dir: str | os.PathLike[str] | None = None
) -> str:
    """The tracking URI to use: `tracking_uri`, else ``$MLFLOW_TRACKING_URI``, else the local default.

    The local default is ``sqlite:///<store_dir>/mlflow.db`` with `store_dir` defaulting to
    ``mlruns/`` in the current directory (made absolute here, so a later chdir does not move it).
    """
    if tracking_uri:
        return tracking_uri
    env = os.environ.get("MLFLOW_TRACKING_URI", "").strip()
    if env:
        return env
    store = Path(store_dir if store_dir is not None else DEFAULT_STORE_DIR).resolve()
    return f"sqlite:///{store / 'mlflow.db'}"


def sqlite_path(uri: str) -> Path:
    """The database file of a ``sqlite:///`` URI (``sqlite:////abs`` is absolute)."""
    return Path(uri[len("sqlite:///") :].split("?", 1)[0])


def require_existing(uri: str) -> None:
    """Refuse a ``sqlite:///`` store whose file does not exist (FileNotFoundError): a reader never
    makes a store, and MLflow would create the folders and an empty database."""
    if uri.lower().startswith("sqlite:///") and not sqlite_path(uri).is_file():
        raise FileNotFoundError(f"{redact_uri(uri)}: {sqlite_path(uri)} does not exist; name an existing store "
                                "(a session writes one)")


def is_http(uri: str) -> bool:
    """Whether `uri` names a tracking server (``http://`` or ``https://``)."""
    return urlsplit(uri).scheme.lower() in _HTTP_SCHEMES


#: The first bytes of every SQLite 3 database file.
_SQLITE_HEADER = b"SQLite format 3\x00"


def _file_head(path: Path) -> bytes:
    try:
        with path.open("rb") as f:
            return f.read(len(_SQLITE_HEADER))
    except OSError:
        return _SQLITE_HEADER  # unreadable here: MLflow says why when it opens it


def validate_tracking_uri(uri: str) -> str:
    """Check that MLflow 3 can use `uri` as a tracking store; return it stripped.

    Side-effect free: nothing is created or contacted (an existing SQLite file's first bytes are
    read). Raises ValueError naming the URI and the accepted forms. Plain paths and ``file:`` URIs are refused: MLflow 3 raises on the file store
    unless ``MLFLOW_ALLOW_FILE_STORE=true`` (see FACTS.md), so we say so up front.
    """
    text = str(uri).strip()
    shown = redact_uri(text)  # for the messages: a password in the URI must not reach a terminal
    hint = f"accepted forms: {ACCEPTED_FORMS}"
    if not text:
        raise ValueError(f"MLflow tracking URI is empty; {hint}")
    parsed = urlsplit(text)
    scheme = parsed.scheme.lower()
    base = scheme.split("+", 1)[0]
    if base == "databricks" or text.lower() == "databricks":  # alone: the workspace in the environment
        return text
    if base == "sqlite":
        if not text.lower().startswith("sqlite:///") or not sqlite_path(text).name or ":memory:" in text:
            raise ValueError(
                f"MLflow tracking URI {shown!r} names no database file; use sqlite:///PATH/mlflow.db; {hint}"
            )
        path = sqlite_path(text)
        if path.is_dir():
            raise ValueError(f"MLflow tracking URI {shown!r} names a directory; use sqlite:///{path / 'mlflow.db'}")
        if path.is_file() and path.stat().st_size and _file_head(path) != _SQLITE_HEADER:
            raise ValueError(f"MLflow tracking URI {shown!r}: {path} is not an SQLite database; name another "
                             "file (it is made on first use)")
        return text
    if base in _HTTP_SCHEMES:
        if not parsed.hostname:
            raise ValueError(f"MLflow tracking URI {shown!r} has no host; use http://HOST:PORT; {hint}")
        try:
            parsed.port  # noqa: B018  (raises ValueError on a non-numeric port)
        except ValueError as exc:
            raise ValueError(f"MLflow tracking URI {shown!r} has a bad port ({redact_uri(exc)}); {hint}") from None
        return text
    if base in _SQL_SCHEMES:
        if not parsed.netloc:
            raise ValueError(f"MLflow tracking URI {shown!r} has no host; {hint}")
        return text
    if base in ("", "file") or len(scheme) == 1:  # "" or a Windows drive letter: a plain path
        path = parsed.path if base == "file" else text
        suggestion = f"sqlite:///{Path(path) / 'mlflow.db'}"
        raise ValueError(
            f"MLflow tracking URI {shown!r} is a file store, which MLflow 3 refuses; "
            f"use a SQLite store instead, e.g. {suggestion!r}; {hint}"
        )
    raise ValueError(f"MLflow tracking URI {shown!r} has an unsupported scheme {scheme!r}; {hint}")


#: What `ping` says of a server that refuses the credentials it was given (HTTP 401 or 403): a
#: usage error (another URI or other credentials fix it), not a server to wait for.
REFUSED_CREDENTIALS = "refuses these credentials"


def ping(uri: str, timeout: float = 2.0) -> str | None:
    """Why `uri` is not usable right now, or None if it looks fine.

    For ``http(s)://`` asks the server's ``/health`` endpoint, then its tracking API (a search
    for one experiment, so that a server whose ``/health`` answers while its store hangs, or
    that refuses the credentials, is caught here), each within `timeout` seconds. A refusal of
    the credentials says `REFUSED_CREDENTIALS`. Other stores have nothing to reach over the
    network: None. Never raises; the caller decides whether an unreachable server is fatal (the
    recorder spools either way).
    """
    try:
        text = validate_tracking_uri(uri)
    except ValueError as exc:
        return str(exc)
    if not is_http(text):
        return None
    plain, headers = split_credentials(text)  # user-info goes as basic auth, as MLflow's client sends it
    base, shown_base = plain.rstrip("/"), redact_uri(text.rstrip("/"))  # credentials masked in what is shown
    import urllib.error  # with urllib.request, ssl and http.client: 18 ms that only a ping needs
    import urllib.request

    for path in ("/health", "/api/2.0/mlflow/experiments/search?max_results=1"):
        shown = shown_base + path.split("?", 1)[0]
        try:
            with urllib.request.urlopen(urllib.request.Request(base + path, headers=headers),  # noqa: S310 (http(s))
                                        timeout=timeout) as response:
                if response.status != 200:
                    return f"{shown} answered HTTP {response.status}"
        except urllib.error.HTTPError as exc:
            if exc.code in (401, 403):
                return (f"{shown} answered HTTP {exc.code} {exc.reason}: the server {REFUSED_CREDENTIALS}; give "
                        "them as user:password@ in the URI or in MLFLOW_TRACKING_USERNAME and "
                        "MLFLOW_TRACKING_PASSWORD")
            return f"{shown} answered HTTP {exc.code} {exc.reason}"
        except urllib.error.URLError as exc:
            return f"cannot reach {shown}: {redact_uri(str(exc.reason))}"
        except (TimeoutError, OSError) as exc:
            return f"cannot reach {shown} within {timeout:g} s: {redact_uri(str(exc))}"
    return None


__all__ = [
    "ACCEPTED_FORMS",
    "REFUSED_CREDENTIALS",
    "is_http",
    "ping",
    "require_existing",
    "resolve_tracking_uri",
    "sqlite_path",
    "validate_tracking_uri",
]
