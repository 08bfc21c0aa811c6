"""Reading a trace file's JSON bytes with a bound on their size.

A few MB of gzip can expand to many GB (a gzip bomb, or a corrupt file), so gzip is
decompressed as a stream and stopped once the JSON passes the limit: half the memory free
now, at most :data:`ABS_MAX_TRACE_BYTES`, and for gzip at most :data:`MAX_GZIP_RATIO` times
the compressed size (Kineto traces compress 7-25x; a bomb ~1000x). ``PROFKIT_MAX_TRACE_BYTES``
(bytes) replaces that limit for users whose traces are larger. Plain JSON files are held to
the same limit (without the ratio).
"""

from __future__ import annotations

import logging
import os
import zlib
from pathlib import Path

from profkit.errors import TraceError

log = logging.getLogger(__name__)
MAX_TRACE_BYTES_ENV = "PROFKIT_MAX_TRACE_BYTES"
ABS_MAX_TRACE_BYTES = 8 << 30  # ~20 GB of peak ingest memory at ~2.5 bytes per JSON byte
MIN_TRACE_LIMIT_BYTES = 256 << 20  # a small trace is read even when free memory is short
MAX_GZIP_RATIO = 100  # JSON bytes per gzip byte; 4x the most seen in real traces
MIN_GZIP_LIMIT_BYTES = 64 << 20  # the ratio does not apply below this
GZIP_MAGIC = b"\x1f\x8b"
_PIECE_BYTES = 64 << 10  # compressed bytes fed to zlib at a time (small outputs stay in cache)
_STEP_BYTES = 16 << 20  # JSON bytes produced between two checks of the limit


def available_memory_bytes() -> int | None:
    """Memory the system can give without swapping (MemAvailable), else free pages; None
    where neither can be read."""
    try:
        with open("/proc/meminfo", "rb") as fh:
            for line in fh:
                if line.startswith(b"MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError):
        return None


def _override_bytes() -> int | None:
    text = os.environ.get(MAX_TRACE_BYTES_ENV, "").strip()
    if not text:
        return None
    if text.isdecimal() and int(text) > 0:
        return int(text)
    log.warning("%s=%r is not a positive number of bytes; ignored", MAX_TRACE_BYTES_ENV, text)
    return None


def max_trace_bytes(gzip_bytes: int | None = None) -> int:
    """The most JSON bytes one trace may have (see module doc); ``gzip_bytes``: the size of
    the compressed file, when it is gzip."""
    override = _override_bytes()
    if override is not None:
        return override
    free = available_memory_bytes()
    limit = ABS_MAX_TRACE_BYTES if free is None else \
        min(ABS_MAX_TRACE_BYTES, max(MIN_TRACE_LIMIT_BYTES, free // 2))
    if gzip_bytes is not None:
        limit = min(limit, max(MIN_GZIP_LIMIT_BYTES, MAX_GZIP_RATIO * gzip_bytes))
    return limit


def _too_large(path: Path, size_bytes: int, limit: int, gunzipped: bool) -> TraceError:
    what = (f"decompresses to more than {size_bytes:,} bytes (stopped there)" if gunzipped
            else f"has {size_bytes:,} bytes of JSON")
    rule = (f"half the free memory, at most {ABS_MAX_TRACE_BYTES >> 30} GiB"
            + (f", and {MAX_GZIP_RATIO}x the compressed size" if gunzipped else ""))
    if _override_bytes() is not None:
        rule = f"{MAX_TRACE_BYTES_ENV}={limit}"
    return TraceError(str(path), f"{what}, over the limit of {limit:,} bytes ({rule}); set "
                      f"{MAX_TRACE_BYTES_ENV} to read larger traces")


def _gunzip(path: Path, data: bytes, limit: int) -> bytearray:
    """Every gzip member of ``data``, decompressed until ``limit`` is passed."""
    out = bytearray()
    view = memoryview(data)
    stream = zlib.decompressobj(wbits=31)
    pos = 0
    while True:
        if stream.eof:  # a finished member: what follows is another member or zero padding
            pos -= len(stream.unused_data)
            if data.count(b"\0", pos) == len(data) - pos:
                return out
            if data[pos:pos + 2] != GZIP_MAGIC:
                raise TraceError(str(path), "corrupt gzip: data after the end of the gzip "
                                 "stream is not gzip")
            stream = zlib.decompressobj(wbits=31)
        if pos >= len(data):
            raise TraceError(str(path), "corrupt or truncated gzip: the file ends inside its "
                             "compressed data (was the writer interrupted?)")
        piece = view[pos:pos + _PIECE_BYTES]
        pos += len(piece)
        while piece and not stream.eof:
            out += stream.decompress(piece, _STEP_BYTES)
            if len(out) > limit:
                raise _too_large(path, len(out), limit, gunzipped=True)
            piece = stream.unconsumed_tail


def read_trace_bytes(path: str | Path) -> bytes | bytearray:
    """The file's JSON bytes, gunzipped when the file is gzip (by content, not name), at
    most :func:`max_trace_bytes` of them; raises :class:`TraceError` naming the file."""
    path = Path(path)
    try:
        # unbuffered: read() then allocates the file's size once and reads into it (a
        # buffered reader returns its buffered head joined to the rest: a second copy of
        # the file, twice the page faults, measured ~2x the time on a 75 MB trace)
        with open(path, "rb", buffering=0) as fh:
            head = fh.read(2)
            if not head:
                raise TraceError(str(path), "empty file")
            size = os.fstat(fh.fileno()).st_size
            limit = max_trace_bytes(gzip_bytes=size if head == GZIP_MAGIC else None)
            if head != GZIP_MAGIC and size > limit:
                raise _too_large(path, size, limit, gunzipped=False)
            fh.seek(0)
            data = fh.read()  # gzip: the compressed bytes, ~1/12 of the JSON
        if head != GZIP_MAGIC:
            return data
        raw = _gunzip(path, data, limit)
    except OSError as exc:
        raise TraceError(str(path), f"cannot read: {exc.strerror or exc}") from None
    except zlib.error as exc:
        raise TraceError(str(path), f"corrupt or truncated gzip: {exc}") from None
    if not raw:
        raise TraceError(str(path), "empty file (after gunzip)")
    return raw
