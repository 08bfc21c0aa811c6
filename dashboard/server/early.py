"""The dashboard's first answers, given before its pages and the analysis code are loaded.

``profkit dashboard`` serves as soon as Dash itself is loaded (:func:`~profkit.dashboard.app.
create_shell`); the pages, pandas and the analyzers (most of a start: ~0.9 of ~1.3 s on an
idle 2-core machine, several seconds on a busy one) are loaded while the browser fetches and
runs the page's scripts. Meanwhile :class:`EarlyGate` answers what needs none of them: a
page's HTML (Dash's index: its script tags at once, the rest, which the pages' clientside
callbacks add to it, once the app is complete) and the files it names (the component
libraries' scripts, ``assets/``, the favicon). Every other request (the layout,
the callbacks, the first of them included) waits until the app is complete, then goes on
as usual; so does every request after that.
"""

from __future__ import annotations

import logging
import re
import threading

from flask import Response, request

log = logging.getLogger(__name__)
WAIT_S = 600.0  # a request held longer than this while the app is loaded gets a 503
SUITES = "_dash-component-suites/"
# Dash's routes that are files (no page or callback behind them), and the static-file
# endpoints (Flask's ``static``, Dash's assets: ``_dash_assets.static``)
FILE_RULES = ("_favicon.ico",)
STATIC_ENDPOINT = "static"
SOURCES = re.compile(r'<(?:script src|link rel="stylesheet" href)="([^"]+)"')
RELOAD = "<script>window.location.reload()</script></footer></body></html>"


class EarlyGate:
    """Installed on a Dash app whose pages are not registered yet (:meth:`install`); the
    app is complete once :meth:`ready` is called (or :meth:`failed`, with why)."""

    def __init__(self, app, wait_s: float = WAIT_S):
        self.app = app
        self.wait_s = wait_s
        self._ready = threading.Event()
        self._failure: str | None = None
        self._assets_lock = threading.Lock()
        self._assets_listed = False
        self.early_paths: set[str] = set()  # the pages whose index was answered here
        self._setting_up: int | None = None  # the thread of ready(), which runs the hooks

    def install(self) -> EarlyGate:
        """Ahead of every other before-request hook of the app's server (Dash's first-request
        set-up, the page router's, the guard's): an answer given here skips them."""
        self.app.server.before_request_funcs.setdefault(None, []).insert(0, self._before)
        return self

    def ready(self) -> None:
        """Run the app's first-request set-up here (Dash's: the callbacks of every page into
        its list; the page router's), then let the held requests go: released together,
        each would take the set-up as done by another one still at it (a callback list
        sent half made: the renderer's TypeError)."""
        with self.app.server.test_request_context(self.app.config.routes_pathname_prefix
                                                  + "_dash-layout"):
            self._setting_up = threading.get_ident()
            try:
                self.app.server.preprocess_request()
            finally:
                self._setting_up = None
        self._ready.set()

    def failed(self, why: str) -> None:
        self._failure = why
        self._ready.set()

    @property
    def is_ready(self) -> bool:
        return self._ready.is_set()

    def _before(self):
        if self._ready.is_set() or self._setting_up == threading.get_ident():
            return self._refusal() if self._failure else None
        if request.url_rule is None:  # no route: Flask's 404 or 405 needs nothing loaded
            return None
        rule = request.url_rule.rule
        prefix = self.app.config.routes_pathname_prefix
        if request.method == "GET" and _is_file(rule, prefix, request.url_rule):
            return self._file()
        if request.method == "GET" and rule in (prefix, prefix + "<path:path>"):
            self.early_paths.add(request.path)
            return self._index()
        log.debug("held until the app is loaded: %s %s", request.method, request.path)
        if not self._ready.wait(self.wait_s):
            return "profkit dashboard: still loading, try again\n", 503
        return self._refusal() if self._failure else None

    def _refusal(self):
        return f"profkit dashboard could not start: {self._failure}\n", 500

    def _file(self):
        """The route's own view, without the app's other hooks (none of which a file
        needs); an unknown component-suite file is a 404 there, as later."""
        view = self.app.server.view_functions[request.url_rule.endpoint]
        return self.app.server.ensure_sync(view)(**(request.view_args or {}))

    def _index(self):
        """Dash's index page, streamed in two parts: at once, all of it up to the last of
        its scripts' tags (the component libraries loaded by now, as the shell loads every
        one a page renders, and the files of ``assets/``); once the app is complete, the
        rest (the inline scripts of the pages' clientside callbacks, the renderer's start)
        from the index page it then serves. The browser fetches and runs the scripts
        meanwhile. Should that page name other scripts or stylesheets, the rest is a
        reload."""
        with self._assets_lock:
            if not self._assets_listed:  # Dash's first-request set-up would list them again
                self.app._walk_assets_directory()  # noqa: SLF001 - Dash's own listing
                self.app.config.include_assets_files = False
                self._assets_listed = True
        head, _ = _split(self.app.index())

        def parts():
            yield head
            self._ready.wait(self.wait_s)
            whole_head, tail = _split(self.app.index())
            yield tail if SOURCES.findall(whole_head) == SOURCES.findall(head) else RELOAD

        return Response(parts(), mimetype="text/html")


def _split(index: str) -> tuple[str, str]:
    """``index`` up to the end of its last script tag with a source, and the rest."""
    cut = index.index("</script>", index.rindex("<script src=")) + len("</script>")
    return index[:cut], index[cut:]


def _is_file(rule: str, prefix: str, url_rule) -> bool:
    return (rule.startswith(prefix + SUITES) or rule in (prefix + r for r in FILE_RULES)
            or url_rule.endpoint.rsplit(".", 1)[-1] == STATIC_ENDPOINT)
