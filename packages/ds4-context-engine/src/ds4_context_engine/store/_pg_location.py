"""A PostgreSQL store URL split into what may be shown (host, port, database, user) and the secret.

The secret never travels with the rest: it is taken out of the URL (``user:password@`` or a
``password=`` parameter), else read from :data:`STORE_PASSWORD_ENV`; with neither, libpq's own
``PGPASSWORD`` and ``~/.pgpass`` apply. Every message and repr uses :attr:`PgLocation.display`, which
holds no password and no other secret parameter. TLS and other libpq parameters (``sslmode``,
``sslrootcert``, ``sslcert``, ``sslkey``, ``connect_timeout``...) are passed through unchanged.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final
from urllib.parse import parse_qsl, quote, unquote, urlencode

from ds4_context_engine._exceptions import DerivedStoreError

__all__ = ["STORE_PASSWORD_ENV", "STORE_URL_SCHEMES", "PgLocation", "is_store_url", "parse_store_url"]

STORE_URL_SCHEMES: Final = ("postgresql", "postgres")
STORE_PASSWORD_ENV: Final = "DS4_CONTEXT_STORE_PASSWORD"  # noqa: S105 - the variable, not a secret
# libpq parameters whose values are secrets: taken out of the URL and never shown
_SECRET_PARAMETERS: Final = frozenset({"password", "sslpassword"})


def is_store_url(location: object) -> bool:
    """Whether ``location`` is a ``postgresql://`` (or ``postgres://``) URL rather than a file path."""
    if not isinstance(location, str):
        return False
    scheme, separator, _ = location.partition("://")
    return bool(separator) and scheme.lower() in STORE_URL_SCHEMES


def _invalid(reason: str) -> DerivedStoreError:
    # the URL itself is never quoted: it may hold a password
    return DerivedStoreError("derived-store-url-invalid", f"the PostgreSQL store URL is unusable: {reason}")


@dataclass(frozen=True, slots=True)
class PgLocation:
    """``conninfo`` (a URL without secrets), the secrets as libpq keywords, and a display form."""

    conninfo: str
    display: str
    secrets: Mapping[str, str] = field(repr=False, default_factory=dict)

    def __repr__(self) -> str:
        return f"PgLocation({self.display!r})"


def parse_store_url(url: str, *, environ: Mapping[str, str] | None = None) -> PgLocation:
    """Split ``url``; a malformed one raises ``derived-store-url-invalid`` without quoting it."""
    environment = os.environ if environ is None else environ
    if not is_store_url(url):
        raise _invalid("it must start with postgresql:// or postgres://")
    if any(ord(char) < 0x20 or ord(char) == 0x7F for char in url):
        raise _invalid("it holds control characters")
    rest = url.partition("://")[2]
    rest, _, fragment = rest.partition("#")
    if fragment:
        raise _invalid("a URL fragment (#...) has no meaning here")
    before_query, _, query = rest.partition("?")
    authority, _, path = before_query.partition("/")
    userinfo, at, hosts = authority.rpartition("@")
    if not at:
        userinfo, hosts = "", authority
    user, colon, password = userinfo.partition(":")
    try:
        parameters = parse_qsl(query, keep_blank_values=True, strict_parsing=bool(query))
    except ValueError:
        raise _invalid("its query string is malformed") from None
    secrets: dict[str, str] = {}
    if colon:
        secrets["password"] = unquote(password)
    kept: list[tuple[str, str]] = []
    for key, value in parameters:
        if key in _SECRET_PARAMETERS:
            secrets[key] = value
        else:
            kept.append((key, value))
    if "password" not in secrets and environment.get(STORE_PASSWORD_ENV):
        secrets["password"] = environment[STORE_PASSWORD_ENV]
    if "/" in path:
        raise _invalid("the database name must be one path segment")
    shown_user = f"{quote(unquote(user), safe='')}@" if user else ""
    database = f"/{path}" if path else ""
    encoded = f"?{urlencode(kept)}" if kept else ""
    conninfo = f"postgresql://{shown_user}{hosts}{database}{encoded}"
    # the display names where the store is, never how to get in: no secrets and no parameters
    where = [(key, value) for key, value in kept if key in ("host", "hostaddr", "port")]
    display = f"postgresql://{shown_user}{hosts}{database}" + (f"?{urlencode(where)}" if where else "")
    return PgLocation(conninfo=conninfo, display=display, secrets=secrets)
