"""`redact_uri`: the one place that hides credentials in store URIs before they are shown.

A tracking URI may carry a password (``http://alice:SECRET@host:5000``,
``postgresql://user:pass@db/mlflow``) or a token in its query (``?password=...``). MLflow puts
the URI it was given into its own error messages ("API request to http://alice:SECRET@... failed"),
so every URI or message that hwbench prints, logs, warns with, stores as a param or tag, or puts
into an error goes through `redact_uri` first. The real URI is kept for connecting.
"""

from __future__ import annotations

import re

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
    """`text` with the user-info of every URI in it, and secret query values, replaced by ``***``.

    Works on a bare URI (``http://alice:pw@host:5000`` -> ``http://***@host:5000``) and on free
    text holding URIs, such as an exception message. Text without credentials comes back as is.
    """
    value = str(text)
    if "@" not in value and "=" not in value:  # the common case: nothing to hide, no regex work
        return value
    value = _USERINFO.sub(lambda m: f"{m['scheme']}{MASK}@", value)
    return _QUERY_SECRET.sub(lambda m: f"{m['key']}{MASK}", value)


__all__ = ["MASK", "redact_uri"]
