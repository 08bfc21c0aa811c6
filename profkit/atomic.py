"""Writing files so that readers never see half of one: a temporary name beside the target
(starting with ``.tmp-``, which readers skip), then an atomic rename."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

TMP_PREFIX = ".tmp-"


def tmp_path(dest: Path) -> Path:
    """A fresh, unique temporary file beside ``dest``."""
    fd, name = tempfile.mkstemp(prefix=f"{TMP_PREFIX}{dest.name}.", dir=dest.parent)
    os.close(fd)
    return Path(name)


@contextlib.contextmanager
def atomic_open(dest: str | os.PathLike) -> Iterator[BinaryIO]:
    """A binary file to write; on success it replaces ``dest``, on any exception it is
    removed and ``dest`` is left as it was."""
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = tmp_path(dest)
    try:
        with open(tmp, "wb") as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, dest)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


def write_bytes_atomic(dest: str | os.PathLike, data: bytes) -> Path:
    with atomic_open(dest) as fh:
        fh.write(data)
    return Path(dest)
