"""Reading a trace file's JSON bytes with a bound on their size.

A few MB of gzip can expand to many GB (a gzip bomb, or a corrupt file), so gzip is
decompressed as a stream (:func:`trace_pieces`, which the native reader reads piece by
piece, so that neither the compressed file nor its JSON is held whole) and stopped once the
JSON passes the limit: half the memory free
now, shared by the traces read at once (:func:`memory_budget_bytes`), at most
:data:`ABS_MAX_TRACE_BYTES`, and for gzip at most :data:`MAX_GZIP_RATIO` times the
compressed size (Kineto traces compress 7-25x; a bomb ~1000x). The ratio is checked as the
stream is read, against the compressed bytes read so far, so a bomb is refused after
:data:`MIN_GZIP_LIMIT_BYTES` of JSON and one step, whatever its size (a 42 MB bomb grew to
4.2 GB before, checked against its whole size only). ``PROFKIT_MAX_TRACE_BYTES`` (bytes)
replaces the limit and the ratio for users whose traces are larger. Plain JSON files are
held to the same limit (without the ratio).
"""

from __future__ import annotations

import logging
import os
import zlib
from collections.abc import Iterator
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
_STEP_BYTES = 4 << 20  # JSON bytes produced (at most) between two checks of the limit
_PLAIN_PIECE_BYTES = 4 << 20  # JSON bytes of a plain file read at a time


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


def memory_budget_bytes(readers: int = 1, free_bytes: int | None = None) -> int:
    """The most JSON bytes one of ``readers`` traces read at once (a pool's workers) may
    hold: half the free memory is one budget between them all, not half for each (three
    workers each allowing themselves half took over 10 GB); at least
    :data:`MIN_TRACE_LIMIT_BYTES`, at most :data:`ABS_MAX_TRACE_BYTES`. ``free_bytes``:
    the free memory (default: :func:`available_memory_bytes` now)."""
    if free_bytes is None:
        free_bytes = available_memory_bytes()
    if free_bytes is None:
        return ABS_MAX_TRACE_BYTES
    share = free_bytes // 2 // max(1, readers)
    return min(ABS_MAX_TRACE_BYTES, max(MIN_TRACE_LIMIT_BYTES, share))


def max_trace_bytes(gzip_bytes: int | None = None, readers: int = 1) -> int:
    """The most JSON bytes one trace may have (see module doc); ``gzip_bytes``: the size of
    the compressed file, when it is gzip; ``readers``: traces read at once."""
    override = _override_bytes()
    if override is not None:
        return override
    limit = memory_budget_bytes(readers)
    if gzip_bytes is not None:
        limit = min(limit, max(MIN_GZIP_LIMIT_BYTES, MAX_GZIP_RATIO * gzip_bytes))
    return limit


def _too_large(path: Path, size_bytes: int, limit: int, gunzipped: bool) -> TraceError:
    what = (f"decompresses to more than {size_bytes:,} bytes (stopped there)" if gunzipped
            else f"has {size_bytes:,} bytes of JSON")
    rule = (f"half the free memory shared by the traces read at once, at most "
            f"{ABS_MAX_TRACE_BYTES >> 30} GiB"
            + (f", and {MAX_GZIP_RATIO}x the compressed size" if gunzipped else ""))
    if _override_bytes() is not None:
        rule = f"{MAX_TRACE_BYTES_ENV}={limit}"
    return TraceError(str(path), f"{what}, over the limit of {limit:,} bytes ({rule}); set "
                      f"{MAX_TRACE_BYTES_ENV} to read larger traces")


def _inflated(path: Path, json_bytes: int, gzip_bytes: int) -> TraceError:
    return TraceError(str(path), f"decompresses at over {MAX_GZIP_RATIO}x its compressed size "
                      f"({json_bytes:,} bytes of JSON from the first {gzip_bytes:,} bytes of "
                      f"gzip, {json_bytes // max(gzip_bytes, 1):,}x; stopped there): a gzip "
                      f"bomb or a corrupt file, not a trace; set {MAX_TRACE_BYTES_ENV} to read "
                      "it anyway")


def _check_growth(path: Path, out_bytes: int, read_bytes: int, limit: int,
                  ratio_applies: bool) -> None:
    """Raise once the JSON passes ``limit``, or (``ratio_applies``) grows past
    :data:`MAX_GZIP_RATIO` times the ``read_bytes`` of gzip read so far (beyond the
    :data:`MIN_GZIP_LIMIT_BYTES` any file may have)."""
    if out_bytes > limit:
        raise _too_large(path, out_bytes, limit, gunzipped=True)
    if ratio_applies and out_bytes > max(MIN_GZIP_LIMIT_BYTES, MAX_GZIP_RATIO * read_bytes):
        raise _inflated(path, out_bytes, read_bytes)


def _gunzip(path: Path, fh, limit: int) -> Iterator[bytes]:
    """Every gzip member of the file ``fh`` (read from its start), decompressed piece by
    piece until ``limit`` is passed or the JSON outgrows the ratio (:func:`_check_growth`):
    neither the compressed file nor its JSON is held whole here."""
    ratio_applies = _override_bytes() is None
    out_bytes = taken = 0  # JSON bytes made; gzip bytes given to the streams
    stream = zlib.decompressobj(wbits=31)
    piece = b""
    while True:
        if stream.eof:  # a finished member: what follows is another member or zero padding
            taken -= len(stream.unused_data)
            piece = _after_member(path, stream.unused_data, fh)
            if piece is None:
                return
            stream = zlib.decompressobj(wbits=31)
        if not piece:
            piece = fh.read(_PIECE_BYTES)
            if not piece:
                raise TraceError(str(path), "corrupt or truncated gzip: the file ends inside its "
                                 "compressed data (was the writer interrupted?)")
        taken += len(piece)
        while piece and not stream.eof:
            out = stream.decompress(piece, _STEP_BYTES)
            piece = stream.unconsumed_tail
            out_bytes += len(out)
            _check_growth(path, out_bytes, taken - len(piece), limit, ratio_applies)
            if out:
                yield out
        piece = b""


def _after_member(path: Path, rest: bytes, fh) -> bytes | None:
    """The next gzip member's first bytes after the end of one (``rest``: the bytes read
    past it), or None when only zero padding follows to the end of the file."""
    while len(rest) < 2:
        more = fh.read(_PIECE_BYTES)
        if not more:
            break
        rest += more
    if rest[:2] == GZIP_MAGIC:
        return rest
    while rest:
        if rest.count(b"\0") != len(rest):
            raise TraceError(str(path), "corrupt gzip: data after the end of the gzip stream "
                             "is not gzip")
        rest = fh.read(_PIECE_BYTES)
    return None


def trace_pieces(path: str | Path, readers: int = 1,
                 plain_piece_bytes: int = _PLAIN_PIECE_BYTES) -> Iterator[bytes]:
    """The file's JSON bytes piece by piece, gunzipped when the file is gzip (by content,
    not name), at most :func:`max_trace_bytes` of them (``readers``: traces read at once,
    which share the memory); raises :class:`TraceError` naming the file (also part way
    through, for a gzip that turns out corrupt, truncated or too large).
    ``plain_piece_bytes``: a plain file's bytes read at a time; -1: in one read (unbuffered,
    it allocates the file's size once and reads into it; a buffered reader returns its
    buffered head joined to the rest: a second copy of the file, twice the page faults,
    measured ~2x the time on a 75 MB trace)."""
    path = Path(path)
    made = 0
    try:
        with open(path, "rb", buffering=0) as fh:
            head = fh.read(2)
            if not head:
                raise TraceError(str(path), "empty file")
            size = os.fstat(fh.fileno()).st_size
            limit = max_trace_bytes(size if head == GZIP_MAGIC else None, readers)
            if head != GZIP_MAGIC and size > limit:
                raise _too_large(path, size, limit, gunzipped=False)
            fh.seek(0)
            if head != GZIP_MAGIC:
                while piece := fh.read(plain_piece_bytes):
                    yield piece
                return
            for piece in _gunzip(path, fh, limit):
                made += len(piece)
                yield piece
    except OSError as exc:
        raise TraceError(str(path), f"cannot read: {exc.strerror or exc}") from None
    except zlib.error as exc:
        raise TraceError(str(path), f"corrupt or truncated gzip: {exc}") from None
    if not made:
        raise TraceError(str(path), "empty file (after gunzip)")


def read_trace_bytes(path: str | Path, readers: int = 1) -> bytes | bytearray:
    """The file's JSON bytes whole (:func:`trace_pieces`, with its limits and errors): a
    plain file in one read, a gzip one gunzipped into one buffer."""
    pieces = trace_pieces(path, readers, plain_piece_bytes=-1)
    out: bytes | bytearray = next(pieces)  # it raises for a file with nothing in it
    for piece in pieces:
        out = out if isinstance(out, bytearray) else bytearray(out)
        out += piece
    return out
