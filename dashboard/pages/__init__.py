"""The dashboard's pages, one module per page, each with its ``layout`` and a ``register(app,
results)`` that declares it to Dash with its callbacks. A run's tab pages declare their tab
(:class:`~profkit.dashboard.pages.frame.RunTab`) as ``TAB``; :data:`RUN_PAGES` puts them in
the order of the tab bar, which :mod:`~profkit.dashboard.pages.frame` draws from.
"""

from __future__ import annotations

from profkit.dashboard.pages import (
    comms,
    compare,
    counters,
    kernels,
    memory,
    not_found,
    overview,
    runs,
    tables,
    timeline,
)

# A run's tab pages, left to right in its tab bar.
RUN_PAGES = (overview, timeline, kernels, comms, counters, memory, tables)
RUN_TABS = tuple(page.TAB for page in RUN_PAGES)
# Every page, as the app registers them.
PAGES = (runs, *RUN_PAGES, compare, not_found)


def register(app, results) -> None:
    """Declare every page and its callbacks to ``app``, drawing from ``results``."""
    for page in PAGES:
        page.register(app, results)
