"""``profkit dashboard`` and ``profkit launch``: the commands that start something that keeps
running (a web server, a job)."""

from __future__ import annotations

import logging
import os
from pathlib import Path

from profkit.errors import UsageError

log = logging.getLogger(__name__)

def cmd_launch(args) -> int:
    from profkit.collectors.launch import launch

    return launch(args.run_dir, args.command)


LOOPBACK = ("127.0.0.1", "localhost", "::1")


TOKEN_ENV = "PROFKIT_DASHBOARD_TOKEN"


NEW_TOKEN = "new"  # --token without a value: make one up
# what the analysis workers import, once, in the dashboard's worker server: a large run's
# (the map) and the Runs page's pool (a whole small run: loading.show)
WORKER_PRELOAD = ("profkit.analyzers.executor", "profkit.analyzers.summaries",
                  "profkit.run.counters", "profkit.dashboard.server.runpool",
                  "profkit.dashboard.server.loading")


def dashboard_token(given: str | None, use_token: bool, environ) -> str | None:
    """The token the dashboard asks for: none with ``--no-token``; else ``--token VALUE``,
    else ``$PROFKIT_DASHBOARD_TOKEN``, else a random one (``--token`` alone too), as
    Jupyter does: on a shared GPU node any local user can reach a port on 127.0.0.1."""
    if not use_token:
        return None
    from profkit.dashboard.server.serving import new_token

    token = given if given is not None else environ.get(TOKEN_ENV) or NEW_TOKEN
    return new_token() if token == NEW_TOKEN else token


def cmd_dashboard(args) -> int:
    from profkit.children import start_workers_by
    from profkit.dashboard.server.hosts import allowed_names
    from profkit.dashboard.server.serving import serve

    paths = [Path(p) for p in args.runs] + list(args.root or [])
    missing = [str(p) for p in paths if not p.exists()]
    if missing:
        raise UsageError(f"no such file or folder: {', '.join(missing)}")
    token = dashboard_token(args.token, args.use_token, os.environ)
    if token is not None and len(token) < 16:
        raise UsageError(f"--token / {TOKEN_ENV}: at least 16 characters, or --token alone "
                         "for a random one")
    try:
        allowed = allowed_names(args.allowed_host or ())
    except ValueError as exc:
        raise UsageError(str(exc)) from exc
    # while this process has one thread (the server's threads must not fork workers), and
    # so that the worker server loads the analysis code while this one loads Dash
    # started now unless a named run is analysed first (early_runs: it starts it after)
    start_workers_by("forkserver", WORKER_PRELOAD, start_now=False)
    from profkit.children import start_forkserver
    from profkit.dashboard.server import early_runs

    if not early_runs.start([Path(p) for p in args.runs]):  # its analysis, before Dash
        start_forkserver()
    from profkit.dashboard.app import create_shell

    # serving from here on (the index page and its scripts, which the browser loads while
    # finish() loads the rest; the other requests wait for that)
    app = create_shell()
    if args.host not in LOOPBACK and token is None:
        log.warning("serving on %s with no authentication (--no-token): anyone who can reach "
                    "port %d can read these runs and download their traces. Leave the token "
                    "on, or serve on 127.0.0.1 behind an SSH tunnel", args.host, args.port)
    host = f"[{args.host}]" if ":" in args.host else args.host
    query = f"?token={token}" if token else ""

    def meanwhile() -> None:
        print(f"profkit dashboard: http://{host}:{args.port}/{query} (Ctrl-C to stop)",
              flush=True)
        finish(app, args)

    serve(app, args.host, args.port, token, allowed, meanwhile=meanwhile)
    return 0


def finish(app, args) -> None:
    """Start analysing the runs named on the command line, then load the pages and the
    analysis code into ``app`` (:func:`~profkit.dashboard.app.finish_app`); on an error the
    app's held requests are answered with it, and it is raised."""
    from profkit.dashboard.app import default_roots, finish_app, warm_up

    try:
        results = None
        named = [Path(p) for p in args.runs]
        if named:  # analyse the named runs from now on, while the pages load
            from profkit.dashboard.server.registry import RunRegistry
            from profkit.dashboard.server.results import ResultCache

            results = ResultCache(RunRegistry(named, list(args.root or [])),
                                  background=args.background)
            results.prefetch_named(named)
        roots = list(args.root or []) or ([] if named else default_roots())
        finish_app(app, named, roots, results, background=args.background)
    except BaseException as exc:
        app.profkit_gate.failed(f"{type(exc).__name__}: {exc}")
        raise
    warm_up(app, named)
