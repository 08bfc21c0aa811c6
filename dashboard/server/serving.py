"""Serving the dashboard: on waitress, a production WSGI server (threads, no debugger, no
per-request log lines unless asked for), only to requests for its own host names
(:mod:`~profkit.dashboard.server.hosts`), behind a token unless started with
``--no-token``.

With a token every request must carry it: as ``?token=...`` (answered with a redirect to the
same address without it, and a cookie that carries it from then on), as that cookie, or as
``Authorization: Bearer ...``. It is compared in constant time; anything else is a 401.
"""

from __future__ import annotations

import hmac
import logging
import secrets
import threading
from collections.abc import Callable, Iterable
from http.cookies import CookieError, SimpleCookie
from urllib.parse import parse_qsl, urlencode

from profkit.dashboard.server.hosts import AllowedHosts, HostGate

log = logging.getLogger(__name__)
TOKEN_PARAM = "token"
THREADS = 8  # page requests wait on analyses; callbacks should not queue behind them
DENIED = (b"profkit dashboard: this server needs its token. Open the address it printed "
          b"(with ?token=...), or send Authorization: Bearer <token>.\n")


def new_token() -> str:
    return secrets.token_urlsafe(24)


def _same(given: str, token: str) -> bool:
    return hmac.compare_digest(given.encode("utf-8", "replace"), token.encode("utf-8"))


class TokenGate:
    """WSGI middleware: only requests that carry ``token`` reach ``app``."""

    def __init__(self, app, token: str, port: int):
        if not token:
            raise ValueError("an empty token would let anyone in")
        self.app, self.token = app, token
        self.cookie = f"profkit_token_{port}"  # per port: two dashboards on one host

    def __call__(self, environ, start_response):
        query = parse_qsl(environ.get("QUERY_STRING", ""), keep_blank_values=True)
        given = [v for k, v in query if k == TOKEN_PARAM]
        if given and _same(given[-1], self.token):
            return self._welcome(environ, query, start_response)
        if self._carried(environ):
            return self.app(environ, start_response)
        start_response("401 Unauthorized", [("Content-Type", "text/plain; charset=utf-8"),
                                             ("Content-Length", str(len(DENIED)))])
        return [DENIED]

    def _carried(self, environ) -> bool:
        auth = environ.get("HTTP_AUTHORIZATION", "")
        if auth.startswith("Bearer ") and _same(auth[len("Bearer "):], self.token):
            return True
        try:
            morsel = SimpleCookie(environ.get("HTTP_COOKIE", "")).get(self.cookie)
        except CookieError:
            return False
        return morsel is not None and _same(morsel.value, self.token)

    def _welcome(self, environ, query, start_response):
        """The same address without the token (out of the address bar and history), and
        the cookie that carries it from now on."""
        rest = urlencode([(k, v) for k, v in query if k != TOKEN_PARAM])
        location = (environ.get("SCRIPT_NAME", "") + environ.get("PATH_INFO", "/")
                    + (f"?{rest}" if rest else ""))
        cookie = f"{self.cookie}={self.token}; Path=/; HttpOnly; SameSite=Strict"
        start_response("303 See Other", [("Location", location), ("Set-Cookie", cookie),
                                         ("Content-Length", "0")])
        return [b""]


class AccessLog:
    """WSGI middleware: one log line per request (at INFO: ``profkit -v dashboard``)."""

    def __init__(self, app):
        self.app = app

    def __call__(self, environ, start_response):
        def logged(status, headers, *exc_info):
            log.info("%s %s %s %s", environ.get("REMOTE_ADDR", "-"),
                     environ.get("REQUEST_METHOD", "-"), environ.get("PATH_INFO", ""), status)
            return start_response(status, headers, *exc_info)

        return self.app(environ, logged)


def wsgi_app(app, port: int, token: str | None = None, allowed: AllowedHosts | None = None):
    """The Dash ``app``'s server with the access log, the host and origin check
    (:mod:`~profkit.dashboard.server.hosts`; by default for a server bound to 127.0.0.1) and, given
    a token, the token gate. The access log is outermost (a refused request is logged too),
    then the host check: a request for another site's name gets nothing else."""
    wrapped = TokenGate(app.server, token, port) if token else app.server
    return AccessLog(HostGate(wrapped, allowed or AllowedHosts.build("127.0.0.1", port)))


def serve(app, host: str = "127.0.0.1", port: int = 8050, token: str | None = None,
          allowed_hosts: Iterable[str] = (), meanwhile: Callable[[], None] | None = None) -> None:
    """Serve ``app`` on waitress until interrupted. ``allowed_hosts``: host names the
    requests may use besides loopback and ``host`` (``--allowed-host``). ``meanwhile``: run
    in this thread once the port is bound, while the server answers on its own threads (an
    exception it raises ends the serving)."""
    server = listening(app, host, port, token, allowed_hosts)
    if meanwhile is None:
        server.run()
        return
    thread = threading.Thread(target=server.run, name="profkit-server", daemon=True)
    thread.start()
    meanwhile()
    while thread.is_alive():  # until Ctrl-C or SIGTERM (handled in this, the main, thread)
        thread.join(3600)


def listening(app, host: str = "127.0.0.1", port: int = 8050, token: str | None = None,
              allowed_hosts: Iterable[str] = ()):
    """A waitress server of ``app`` (as :func:`serve`), bound to its port already; its
    ``run()`` serves until interrupted."""
    import waitress.server

    logging.getLogger("waitress.queue").setLevel(logging.ERROR)  # "task queue depth" chatter
    allowed = AllowedHosts.build(host, port, allowed_hosts)
    return waitress.server.create_server(wsgi_app(app, port, token, allowed), host=host,
                                         port=port, threads=THREADS, ident="profkit")
