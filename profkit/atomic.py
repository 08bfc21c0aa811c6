"""Writing files so that readers never see half of one: temporary name, then rename."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO


@contextlib.contextmanager
def atomic_open(path: str | Path) -> Iterator[BinaryIO]:
    """Open a temporary file beside ``path`` for binary writing; on success it replaces
    ``path``, on any exception it is removed and ``path`` is left untouched."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    with atomic_open(path) as fh:
        fh.write(data)
