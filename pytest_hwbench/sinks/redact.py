"""`redact_uri`, the one place that hides credentials in store URIs (user-info, secret query
values) before a URI or a message quoting one (MLflow's errors do) is shown, logged or stored; the
real URI is kept for connecting."""

from __future__ import annotations

import base64
import os
import re
from urllib.parse import unquote, urlsplit, urlunsplit

#: What a masked secret reads as.
MASK = "***"

# scheme://USERINFO@ : the user-info is everything up to the last "@" before the host ends
# ("/", "?", "#", whitespace or a quote), so a password holding an unescaped "@" is masked whole.
_USERINFO = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.\-]*://)[^/?#\s'\"<>]*@")
# ?password=... / &token=... in a query string (SQLAlchemy URLs, presigned links).
_QUERY_SECRET = re.compile(
    r"(?P<key>[?&;](?:password|passwd|pwd|pass|token|access_token|secret|api_key|apikey|key|sig|signature)=)"
    r"[^&#\s'\"<>]*",
    re.IGNORECASE,
)


def redact_uri(text: object) -> str:
    """`text` (a URI, or free text holding URIs such as an error message) with the user-info of
    every URI and secret query values replaced by ``***`` (``http://alice:pw@host`` ->
    ``http://***@host``)."""
    value = str(text)
    if "@" not in value and "=" not in value:  # the common case: nothing to hide, no regex work
        return value
    value = _USERINFO.sub(lambda m: f"{m['scheme']}{MASK}@", value)
    return _QUERY_SECRET.sub(lambda m: f"{m['key']}{MASK}", value)


def split_credentials(uri: str) -> tuple[str, dict[str, str]]:
    """(URI without user-info, HTTP headers carrying the credentials) for an ``http(s)://`` URI.

    User-info in the URI wins; else ``MLFLOW_TRACKING_USERNAME``/``MLFLOW_TRACKING_PASSWORD``
    (basic auth), else ``MLFLOW_TRACKING_TOKEN`` (bearer), as MLflow's REST client reads them.
    """
    parts = urlsplit(uri)
    headers: dict[str, str] = {}
    user, password = parts.username, parts.password
    if user is not None:
        host = parts.hostname or ""
        if ":" in host:
            host = f"[{host}]"
        netloc = host + (f":{parts.port}" if parts.port else "")
        uri = urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))
        user, password = unquote(user), unquote(password or "")
    else:
        user, password = os.environ.get("MLFLOW_TRACKING_USERNAME"), os.environ.get("MLFLOW_TRACKING_PASSWORD")
    if user:
        token = base64.b64encode(f"{user}:{password or ''}".encode()).decode("ascii")
        headers["Authorization"] = f"Basic {token}"
    elif os.environ.get("MLFLOW_TRACKING_TOKEN"):
        headers["Authorization"] = f"Bearer {os.environ['MLFLOW_TRACKING_TOKEN']}"
    return uri, headers


__all__ = ["MASK", "redact_uri", "split_credentials"]
