"""At most a few expensive callbacks at once, so that a crowd of them never makes the cheap
requests wait.

A timeline redraw, the details of a clicked event and the merged-trace download each take
the CPU for a tenth of a second to seconds. Sixteen of them at once (a user dragging the
zoom, several tabs, another user) held every server thread and the GIL: every request,
a plain page included, waited seconds behind them. Now :data:`MAX_EXPENSIVE` are worked on
at once; another waits up to :data:`WAIT_S` for a turn, then is answered 429 with a
``Retry-After``, its server thread free again for the cheap requests. Only the page's latest
request for a callback matters (Dash applies no other), so a refused redraw costs a click.
"""

from __future__ import annotations

import logging
import threading

from flask import g, jsonify, request
from profkit.dashboard import ids

log = logging.getLogger(__name__)
MAX_EXPENSIVE = 2  # expensive callbacks worked on at once
WAIT_S = 0.2  # how long another waits for a turn before it is refused
RETRY_AFTER_S = 1
# Outputs (``id.property``) of the callbacks that cost the CPU in proportion to the run.
EXPENSIVE = (f"{ids.TL_GRAPH}.figure", f"{ids.TL_EVENT}.children", f"{ids.TL_DOWNLOAD}.data")
UPDATE_PATH = "_dash-update-component"


def expensive(body) -> bool:
    """Whether a callback request's body asks for one of the :data:`EXPENSIVE` outputs."""
    output = body.get("output") if isinstance(body, dict) else None
    return isinstance(output, str) and any(name in output for name in EXPENSIVE)


class Turns:
    """The turns of the expensive callbacks of one app."""

    def __init__(self, most: int = MAX_EXPENSIVE, wait_s: float = WAIT_S):
        self._turns = threading.BoundedSemaphore(most)
        self.wait_s = wait_s

    def before(self, prefix: str):
        """Flask's before-request hook: a turn for an expensive callback, or a 429."""
        if request.method != "POST" or request.path != prefix + UPDATE_PATH:
            return None
        if not expensive(request.get_json(silent=True)):  # parsed once: guard's, cached
            return None
        if not self._turns.acquire(timeout=self.wait_s):
            log.info("refused an expensive callback: %d already being worked on",
                     MAX_EXPENSIVE)
            answer = jsonify(error="busy: other timelines are being drawn; try again")
            return answer, 429, {"Retry-After": str(RETRY_AFTER_S)}
        g.profkit_turn = self
        return None

    def after(self, _exc) -> None:
        """Flask's teardown hook: the turn back, however the request ended."""
        if g.pop("profkit_turn", None) is self:
            self._turns.release()


def install(app, turns: Turns | None = None) -> Turns:
    """Bound the expensive callbacks of ``app`` (after :func:`guard.install`, whose check
    runs first)."""
    turns = turns or Turns()
    prefix = app.config.routes_pathname_prefix
    app.server.before_request(lambda: turns.before(prefix))
    app.server.teardown_request(turns.after)
    return turns
