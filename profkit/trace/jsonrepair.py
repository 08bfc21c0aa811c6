"""Repairs of trace bytes that a JSON decoder refuses as a whole, so that one bad value does
not cost the whole file: invalid UTF-8, and nesting deeper than any real trace has.

Both run only when the fast decode has failed for that reason, so a well-formed trace pays
nothing but a check of whether it is pure ASCII.
"""

from __future__ import annotations

import codecs

import numpy as np

# Kineto traces nest at most ~6 levels (document, events, event, args, shapes); past this a
# value is cut to 0. Well below the ~1000 levels at which decoders give up on recursion.
MAX_JSON_DEPTH = 64
_CHUNK_BYTES = 16 << 20  # checked or repaired at a time
_QUOTE, _BACKSLASH = ord('"'), ord("\\")
_OPEN = (ord("["), ord("{"))
_CLOSE = (ord("]"), ord("}"))


def is_valid_utf8(raw: bytes) -> bool:
    """Whether ``raw`` is valid UTF-8, checked chunk by chunk (no copy of the whole file)."""
    if raw.isascii():
        return True
    decoder = codecs.getincrementaldecoder("utf-8")()
    view = memoryview(raw)
    try:
        for i in range(0, len(raw), _CHUNK_BYTES):
            decoder.decode(view[i:i + _CHUNK_BYTES], final=i + _CHUNK_BYTES >= len(raw))
    except UnicodeDecodeError:
        return False
    return True


def repair_utf8(raw: bytes) -> bytes:
    """Invalid UTF-8 sequences replaced by U+FFFD."""
    return raw.decode("utf-8", errors="replace").encode()


def _string_toggles(a: np.ndarray, carried_run: int) -> np.ndarray:
    """1 at the quotes of ``a`` that open or close a JSON string: those not preceded by an
    odd run of backslashes (``carried_run``: backslashes that ended the previous chunk)."""
    toggles = (a == _QUOTE).astype(np.uint8)
    after_backslash = np.flatnonzero(toggles[1:] & (a[:-1] == _BACKSLASH)) + 1
    candidates = after_backslash.tolist() + ([0] if len(a) and a[0] == _QUOTE and carried_run else [])
    for q in candidates:  # rare in traces: only quotes written inside strings
        run = 0
        while q - run - 1 >= 0 and a[q - run - 1] == _BACKSLASH:
            run += 1
        if q - run == 0:
            run += carried_run
        if run % 2:
            toggles[q] = 0
    return toggles


def _trailing_backslashes(a: np.ndarray, carried_run: int) -> int:
    run = len(a) - 1 - int(np.flatnonzero(a != _BACKSLASH)[-1]) if (a != _BACKSLASH).any() else -1
    return carried_run + len(a) if run < 0 else run


def cut_deep_nesting(raw: bytes, max_depth: int = MAX_JSON_DEPTH) -> tuple[bytes, int]:
    """(``raw`` with every array or object nested deeper than ``max_depth`` replaced by 0,
    how many were cut). Vectorised over chunks of the bytes; brackets inside strings are
    ignored. A byte is cut when the depth after it exceeds ``max_depth``, or it closes a
    container at ``max_depth + 1``; the opening bracket of that container becomes ``0``."""
    src = np.frombuffer(raw, dtype=np.uint8)
    out = src.copy()
    in_string, depth, run, cut = 0, 0, 0, 0
    for lo in range(0, len(src), _CHUNK_BYTES):
        a = src[lo:lo + _CHUNK_BYTES]
        inside = np.bitwise_xor.accumulate(_string_toggles(a, run)) ^ in_string
        structural = inside == 0  # a closing quote reads as outside: it is no bracket
        step = (np.isin(a, _OPEN) & structural).astype(np.int64)
        closes = np.isin(a, _CLOSE) & structural
        level = np.cumsum(step - closes, dtype=np.int64) + depth
        zero = (step == 1) & (level == max_depth + 1)
        chunk = out[lo:lo + _CHUNK_BYTES]
        chunk[(level > max_depth) | (closes & (level == max_depth))] = ord(" ")
        chunk[zero] = ord("0")
        cut += int(zero.sum())
        in_string, depth = int(inside[-1]), int(level[-1])
        run = _trailing_backslashes(a, run)
    return (out.tobytes(), cut) if cut else (raw, 0)
