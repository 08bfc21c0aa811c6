"""The profkit dashboard: a local Dash app over the same Analysis as the CLI.

``create_app(runs, roots)`` builds it; ``profkit dashboard`` serves it on 127.0.0.1.
"""

from __future__ import annotations


def create_app(runs, roots):
    from profkit.dashboard.app import create_app as _create_app

    return _create_app(runs, roots)


__all__ = ["create_app"]
