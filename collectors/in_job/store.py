"""How the ranks hand their in-job summaries to rank 0: through the job's key-value store,
never a collective.

A collective at exit can hang: a rank that failed would meet the others' next training
collective, or wait for ranks that will never come. The store (the default process group's,
under torchrun the rendezvous TCPStore of the job) needs no partner: a ``set`` returns at
once, and a reader only looks at the keys that are there.

Every rank puts one value under :func:`summary_key` (``profkit/<run_id>/summary/<rank>``;
the run id is new for each capture, so a restarted job or a second capture never reads an
old value):

- ``failed: <reason>``: its capture failed; it puts this and does nothing more;
- ``error: <text>``: it could not summarise its trace;
- else a :mod:`profkit.datacodec` blob of its result (JSON plus Arrow tables, never a
  pickle: anyone who can reach the store could write this key).

Rank 0 polls the keys until every rank answered or the bound passed (:func:`collect`);
nobody else waits for anything.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

log = logging.getLogger(__name__)

KEY = "profkit/{run_id}/summary/{rank}"
PART_KEY = "{key}/{part}"
FAILED = b"failed: "
ERROR = b"error: "
PARTS = b"parts: "  # "parts: <count> <bytes>": the value is in <count> parts under PART_KEY
# torch's TCPStore server (libuv) refuses a value over 8 MiB and drops the client's
# connection, which would break the process group's store for the user: larger values go
# in parts of this size.
PART_BYTES = 4 * 2**20
MAX_VALUE_BYTES = 256 * 2**20  # a larger summary is not worth the store server's memory
MAX_REASON_CHARS = 500  # a failure value stays short: the store holds it until job end
FIRST_POLL_S, MAX_POLL_S = 0.02, 0.5  # rank 0 polls often at first, then every 0.5 s


def summary_key(run_id: str, rank: int) -> str:
    return KEY.format(run_id=run_id, rank=rank)


def failed_value(reason: str) -> bytes:
    return FAILED + _short(reason).encode("utf-8", "replace")


def error_value(text: str) -> bytes:
    return ERROR + _short(text).encode("utf-8", "replace")


def put(store: Any, run_id: str, rank: int, value: bytes) -> None:
    """Put ``value`` as ``rank``'s: in parts when over :data:`PART_BYTES`, the parts first
    and the key itself last, so that a reader who sees the key finds every part."""
    key = summary_key(run_id, rank)
    if len(value) > MAX_VALUE_BYTES:
        value = error_value(f"rank {rank}'s summary ({len(value) / 2**20:.0f} MiB) is over "
                            f"the {MAX_VALUE_BYTES // 2**20} MiB the job's store takes; "
                            "run profkit analyze on the run directory instead")
    if len(value) <= PART_BYTES:
        store.set(key, value)
        return
    count = -(-len(value) // PART_BYTES)
    for part in range(count):
        store.set(PART_KEY.format(key=key, part=part),
                  value[part * PART_BYTES:(part + 1) * PART_BYTES])
    store.set(key, PARTS + f"{count} {len(value)}".encode())


def _joined(store: Any, key: str, header: bytes) -> bytes:
    """The value put in parts under ``key`` (an ``error:`` value when they do not add up);
    the parts are deleted."""
    try:
        count, size = map(int, header[len(PARTS):].split())
    except ValueError:
        return error_value(f"{key}: bad parts header {header[:40]!r}")
    if not 0 < count <= MAX_VALUE_BYTES // PART_BYTES + 1:
        return error_value(f"{key}: {count} parts")
    part_keys = [PART_KEY.format(key=key, part=i) for i in range(count)]
    if not store.check(part_keys):
        return error_value(f"{key}: parts missing")
    value = b"".join(bytes(store.get(k)) for k in part_keys)
    for k in part_keys:
        _delete(store, k)
    return value if len(value) == size else error_value(
        f"{key}: parts hold {len(value)} bytes, not {size}")


def _delete(store: Any, key: str) -> None:
    with contextlib.suppress(Exception):  # only frees the store's memory
        store.delete_key(key)


def _short(text: str) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= MAX_REASON_CHARS else text[:MAX_REASON_CHARS - 3] + "..."


def text_of(value: bytes, prefix: bytes) -> str | None:
    """The text of a ``failed:`` / ``error:`` value, or None when ``value`` is not one."""
    if not value.startswith(prefix):
        return None
    return value[len(prefix):].decode("utf-8", "replace")


@contextlib.contextmanager
def bounded(store: Any, timeout_s: float) -> Iterator[Any]:
    """Store calls give up after ``timeout_s`` while inside (a store server that stopped
    answering must not hold a rank past the bound); the store's own timeout (the process
    group's, 30 min by default) is restored afterwards."""
    old = getattr(store, "timeout", None)
    if isinstance(old, timedelta) and old.total_seconds() > timeout_s:
        store.set_timeout(timedelta(seconds=timeout_s))
    else:
        old = None
    try:
        yield store
    finally:
        if old is not None:
            store.set_timeout(old)


@dataclass
class Arrivals:
    """What rank 0 collected: raw values by rank, failure reasons by rank (from a
    ``failed:`` value or the rank's status on disk), and the ranks that never answered."""

    values: dict[int, bytes] = field(default_factory=dict)
    failed: dict[int, str] = field(default_factory=dict)
    missing: list[int] = field(default_factory=list)


def collect(store: Any, run_id: str, ranks: Iterable[int], timeout_s: float, *,
            failed_on_disk: Callable[[int], str | None] = lambda rank: None,
            clock: Callable[[], float] = time.monotonic,
            sleep: Callable[[float], None] = time.sleep) -> Arrivals:
    """Take every rank's value from ``store``, waiting at most ``timeout_s`` seconds in all.
    A rank whose status on disk says it failed (``failed_on_disk(rank)`` gives the reason:
    a rank ended by a signal puts nothing) is not waited for. Values read are deleted."""
    out, pending = Arrivals(), sorted(set(ranks))
    deadline, delay = clock() + timeout_s, FIRST_POLL_S
    while True:
        pending = [r for r in pending if not _take(store, run_id, r, out, failed_on_disk)]
        left_s = deadline - clock()
        if not pending or left_s <= 0:
            break
        sleep(min(delay, left_s))
        delay = min(2 * delay, MAX_POLL_S)
    out.missing = pending
    return out


def _take(store: Any, run_id: str, rank: int, out: Arrivals,
          failed_on_disk: Callable[[int], str | None]) -> bool:
    """Read ``rank``'s value into ``out`` if it is there; True when the rank is settled."""
    key = summary_key(run_id, rank)
    if not store.check([key]):
        reason = failed_on_disk(rank)
        if reason is not None:
            out.failed[rank] = reason
        return reason is not None
    value = bytes(store.get(key))
    _delete(store, key)
    if value.startswith(PARTS):
        value = _joined(store, key, value)
    reason = text_of(value, FAILED)
    if reason is None:
        out.values[rank] = value
    else:
        out.failed[rank] = reason
    return True
