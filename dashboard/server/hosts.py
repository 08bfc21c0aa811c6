"""Which ``Host`` a request may name, and which ``Origin`` may change state: the defence
against DNS rebinding.

A web page on any site can make its own name resolve to 127.0.0.1 and then read whatever a
local server answers, as its own origin; only the ``Host`` header the browser sends still
names that page's site. So the dashboard answers only requests whose ``Host`` is a
loopback name (``localhost``, any ``127.x.y.z``, ``[::1]``), the address it was bound to,
or a name allowed with ``--allowed-host NAME`` (or ``$PROFKIT_DASHBOARD_ALLOWED_HOSTS``,
comma-separated); when bound to every address (``0.0.0.0``, ``::``) also this machine's
name and any IP address (a rebinding page always sends a name, never an address). Others
get 421 before any Dash code runs. A request that can change state (any method but GET,
HEAD and OPTIONS: Dash's callbacks are POSTs) whose ``Origin`` names another site gets
403; a page of another server on this machine (a loopback origin on another port) too.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import re
import socket
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

log = logging.getLogger(__name__)
ENV = "PROFKIT_DASHBOARD_ALLOWED_HOSTS"
LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost"})
WILDCARD = frozenset({"0.0.0.0", "::", ""})
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
DEFAULT_PORTS = {"http": 80, "https": 443}
_NAME_RE = re.compile(r"^[a-z0-9_.-]+$|^[0-9a-f:.]+$")
MISDIRECTED = (b"profkit dashboard: this server does not answer to that host name. Open it "
               b"as http://127.0.0.1:PORT/ (or localhost), or start it with --allowed-host "
               b"NAME for the name you use.\n")
FORBIDDEN = b"profkit dashboard: a page of another site may not use this server.\n"


def split_host(value: str) -> tuple[str, int | None] | None:
    """``("127.0.0.1", 8050)`` of a ``Host`` header (``[::1]:8050`` -> ``("::1", 8050)``),
    lower case, without a trailing dot; None when it is not a host[:port]."""
    value = value.strip().lower()
    port: int | None = None
    if value.startswith("["):
        host, sep, rest = value[1:].partition("]")
        if not sep or (rest and not rest.startswith(":")):
            return None
        rest = rest[1:]
    else:
        host, _, rest = value.partition(":") if value.count(":") <= 1 else (value, "", "")
    if rest:
        if not rest.isdigit() or not 0 < int(rest) < 65536:
            return None
        port = int(rest)
    host = host.rstrip(".")
    return (host, port) if host and _NAME_RE.match(host) else None


def _address(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None


def is_loopback(host: str) -> bool:
    address = _address(host)
    return host in LOOPBACK_NAMES if address is None else address.is_loopback


def allowed_names(given: Iterable[str] = (), environ=os.environ) -> list[str]:
    """The names of ``--allowed-host`` and ``$PROFKIT_DASHBOARD_ALLOWED_HOSTS``, checked:
    ValueError naming one that is not a host name or an address (a scheme, a path, a
    port)."""
    names = [*given, *(n for n in re.split(r"[,\s]+", environ.get(ENV, "")) if n)]
    out = []
    for name in names:
        parsed = split_host(name)
        if parsed is None or parsed[1] is not None:
            raise ValueError(f"--allowed-host / {ENV}: {name[:80]!r} is not a host name or "
                             "an address (give it without scheme, path or port)")
        out.append(parsed[0])
    return out


@dataclass(frozen=True)
class AllowedHosts:
    """The names a request may use, for a server bound to ``bound`` on ``port``."""

    bound: str
    port: int
    names: frozenset[str] = frozenset()

    @classmethod
    def build(cls, bound: str, port: int, extra: Iterable[str] = ()) -> AllowedHosts:
        """``extra``: names allowed besides loopback and ``bound`` (see
        :func:`allowed_names`)."""
        names = set(allowed_names(extra, environ={}))
        bound_name = split_host(bound)
        if bound_name and bound_name[0] not in WILDCARD:
            names.add(bound_name[0])
        elif bound.strip("[]") in WILDCARD:
            names |= {socket.gethostname().lower(), socket.getfqdn().lower()}
        return cls(bound, port, frozenset(names))

    @property
    def wildcard(self) -> bool:
        return self.bound.strip("[]") in WILDCARD

    def allows(self, host: str) -> bool:
        if is_loopback(host) or host in self.names:
            return True
        return self.wildcard and _address(host) is not None

    def allows_origin(self, origin: str) -> bool:
        """An ``Origin`` header (``http://127.0.0.1:8050``) of a page this server served."""
        try:
            parts = urlsplit(origin.strip())
            host, port = (parts.hostname or "").rstrip("."), parts.port
        except ValueError:
            return False
        if parts.scheme not in ("http", "https") or not self.allows(host):
            return False
        # another local server's page: the same name, another port
        return not is_loopback(host) or (port or DEFAULT_PORTS[parts.scheme]) == self.port


class HostGate:
    """WSGI middleware: only requests whose ``Host`` (and, when they can change state,
    ``Origin``) :class:`AllowedHosts` allows reach ``app``."""

    def __init__(self, app, allowed: AllowedHosts):
        self.app, self.allowed = app, allowed

    def __call__(self, environ, start_response):
        host = environ.get("HTTP_HOST")
        parsed = split_host(host) if host is not None else None
        if host is not None and (parsed is None or not self.allowed.allows(parsed[0])):
            log.info("refused a request for host %r", host[:100])
            return _refuse(start_response, "421 Misdirected Request", MISDIRECTED)
        origin = environ.get("HTTP_ORIGIN")
        if (origin is not None and environ.get("REQUEST_METHOD", "GET") not in SAFE_METHODS
                and not self.allowed.allows_origin(origin)):
            log.info("refused a %s from origin %r", environ.get("REQUEST_METHOD"), origin[:100])
            return _refuse(start_response, "403 Forbidden", FORBIDDEN)
        return self.app(environ, start_response)


def _refuse(start_response, status: str, body: bytes):
    start_response(status, [("Content-Type", "text/plain; charset=utf-8"),
                            ("Content-Length", str(len(body)))])
    return [body]
