"""Results as data, never pickle: nested Python values <-> bytes of JSON plus Arrow tables.

Used wherever profkit keeps or moves its own results between processes through a file or a
socket that someone else could write to: the analysis result cache in a run folder (which
may sit on shared storage) and the in-job summaries that ranks hand to rank 0. Decoding
such bytes can never run code: JSON is parsed by orjson, tables by Arrow's IPC reader,
arrays by ``numpy.load(allow_pickle=False)``, and a dataclass is rebuilt only when its class
was registered with :func:`register` (a fixed list of profkit's own result types).

Layout: ``MAGIC``, then length-prefixed frames (8-byte little-endian length): first the JSON
tree, then one frame per table or array it refers to by index. In the tree, values that
JSON cannot hold are tagged objects: ``{"$d": [[key, value], ...]}`` (any dict, so int keys
survive), ``{"$t": [...]}`` (tuple), ``{"$f": "nan"|"inf"|"-inf"}``, ``{"$df": i}`` (a
DataFrame), ``{"$s": i}`` (a Series), ``{"$nd": i}`` (an ndarray), ``{"$dc": name, "f":
{...}}`` (a registered dataclass).
"""

from __future__ import annotations

import dataclasses
import io
import math
import struct
from typing import Any

import orjson

# numpy and pandas are imported where values are encoded or decoded, not here: result types
# register at import, and a cached `profkit analyze` reads no result at all (profkit.run.cache).

MAGIC = b"PROFKIT-DATA/1\n"
_LEN = struct.Struct("<Q")
_CLASSES: dict[str, type] = {}
MAX_DEPTH = 200  # deeper trees are not profkit results


class CodecError(ValueError):
    """Bytes that are not a profkit data blob, or a value that cannot be stored as data."""


def register(cls: type) -> type:
    """Allow instances of the dataclass ``cls`` to be encoded and rebuilt (a decorator)."""
    if not dataclasses.is_dataclass(cls):
        raise TypeError(f"{cls!r} is not a dataclass")
    _CLASSES[f"{cls.__module__}:{cls.__qualname__}"] = cls
    return cls


def encode(value: Any) -> bytes:
    """``value`` (dicts, lists, tuples, scalars, DataFrames, Series, arrays and registered
    dataclasses, nested) as bytes; raises :class:`CodecError` for anything else."""
    blobs: list[bytes] = []
    tree = _enc(value, blobs, 0)
    frames = [orjson.dumps(tree)] + blobs
    return MAGIC + b"".join(_LEN.pack(len(f)) + f for f in frames)


def decode(data: bytes) -> Any:
    """The value :func:`encode` wrote; raises :class:`CodecError` for anything else."""
    if not data.startswith(MAGIC):
        raise CodecError("not a profkit data blob (bad magic)")
    frames, pos, view = [], len(MAGIC), memoryview(data)
    while pos < len(data):
        if pos + _LEN.size > len(data):
            raise CodecError("truncated frame header")
        (size,) = _LEN.unpack_from(data, pos)
        pos += _LEN.size
        if size > len(data) - pos:
            raise CodecError("truncated frame")
        frames.append(view[pos:pos + size])
        pos += size
    if not frames:
        raise CodecError("no content")
    try:
        tree = orjson.loads(frames[0])
    except orjson.JSONDecodeError as exc:
        raise CodecError(f"bad JSON frame ({exc})") from None
    return _dec(tree, frames[1:], 0)


def _enc(v: Any, blobs: list[bytes], depth: int) -> Any:
    if depth > MAX_DEPTH:
        raise CodecError("value nested too deeply")
    if v is None or isinstance(v, (bool, str)):
        return v
    import numpy as np
    import pandas as pd

    if isinstance(v, (int, np.integer)):
        return int(v)
    if isinstance(v, (float, np.floating)):
        f = float(v)
        return f if math.isfinite(f) else {"$f": repr(f)}
    if isinstance(v, np.bool_):
        return bool(v)
    if isinstance(v, dict):
        return {"$d": [[_enc(k, blobs, depth + 1), _enc(x, blobs, depth + 1)] for k, x in v.items()]}
    if isinstance(v, list):
        return [_enc(x, blobs, depth + 1) for x in v]
    if isinstance(v, tuple):
        return {"$t": [_enc(x, blobs, depth + 1) for x in v]}
    if isinstance(v, pd.DataFrame):
        return {"$df": _blob(blobs, _table_bytes(v))}
    if isinstance(v, pd.Series):
        return {"$s": _blob(blobs, _table_bytes(v.to_frame(name="__v__" if v.name is None else v.name)))}
    if isinstance(v, np.ndarray):
        if v.dtype.hasobject:
            return {"$t": [_enc(x, blobs, depth + 1) for x in v.tolist()]}
        buf = io.BytesIO()
        np.save(buf, v, allow_pickle=False)
        return {"$nd": _blob(blobs, buf.getvalue())}
    if dataclasses.is_dataclass(v) and not isinstance(v, type):
        name = f"{type(v).__module__}:{type(v).__qualname__}"
        if _CLASSES.get(name) is not type(v):
            raise CodecError(f"{name} is not a registered result type")
        fields = {f.name: _enc(getattr(v, f.name), blobs, depth + 1) for f in dataclasses.fields(v)}
        return {"$dc": name, "f": fields}
    raise CodecError(f"cannot store a {type(v).__name__} as data")


def _blob(blobs: list[bytes], data: bytes) -> int:
    blobs.append(data)
    return len(blobs) - 1


def _table_bytes(frame) -> bytes:
    import pyarrow as pa

    try:
        table = pa.Table.from_pandas(frame, preserve_index=True)
    except (pa.ArrowException, TypeError, ValueError) as exc:
        raise CodecError(f"table cannot be stored as Arrow ({exc})") from None
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def _read_table(frame: memoryview):
    import pyarrow as pa

    try:
        with pa.ipc.open_stream(pa.py_buffer(frame)) as reader:
            table = reader.read_all()
        # The IPC reader checks the metadata only; offsets and lengths inside the buffers of
        # damaged or forged bytes would be read out of bounds (a crash) without this.
        table.validate(full=True)
        return table.to_pandas()
    except (pa.ArrowException, OSError, ValueError, TypeError, KeyError) as exc:
        raise CodecError(f"bad table frame ({exc})") from None


def _frame(frames: list, index: Any) -> memoryview:
    if not isinstance(index, int) or not 0 <= index < len(frames):
        raise CodecError(f"reference to a missing frame ({index!r})")
    return frames[index]


def _dec(t: Any, frames: list, depth: int) -> Any:
    if depth > MAX_DEPTH:
        raise CodecError("value nested too deeply")
    if isinstance(t, list):
        return [_dec(x, frames, depth + 1) for x in t]
    if not isinstance(t, dict):
        return t
    if "$d" in t:
        pairs = t["$d"]
        if not isinstance(pairs, list) or not all(isinstance(p, list) and len(p) == 2 for p in pairs):
            raise CodecError("bad dict entry")
        out = {}
        for k, x in pairs:
            key = _dec(k, frames, depth + 1)
            try:
                out[key] = _dec(x, frames, depth + 1)
            except TypeError:  # an unhashable key
                raise CodecError("bad dict key") from None
        return out
    if "$t" in t:
        return tuple(_dec(x, frames, depth + 1) for x in _as_list(t["$t"]))
    if "$f" in t:
        if t["$f"] not in ("nan", "inf", "-inf"):
            raise CodecError(f"bad float {t['$f']!r}")
        return float(t["$f"])
    if "$df" in t:
        return _read_table(_frame(frames, t["$df"]))
    if "$s" in t:
        frame = _read_table(_frame(frames, t["$s"]))
        series = frame.iloc[:, 0]
        return series.rename(None) if series.name == "__v__" else series
    if "$nd" in t:
        try:
            import numpy as np

            return np.load(io.BytesIO(bytes(_frame(frames, t["$nd"]))), allow_pickle=False)
        except (ValueError, OSError, EOFError) as exc:
            raise CodecError(f"bad array frame ({exc})") from None
    if "$dc" in t:
        return _dataclass(t, frames, depth)
    raise CodecError(f"unknown tagged value {sorted(t)[:3]}")


def _as_list(v: Any) -> list:
    if not isinstance(v, list):
        raise CodecError("expected a list")
    return v


def _dataclass(t: dict, frames: list, depth: int) -> Any:
    cls = _CLASSES.get(t.get("$dc"))
    if cls is None:
        raise CodecError(f"{t.get('$dc')!r} is not a registered result type")
    given = t.get("f")
    if not isinstance(given, dict):
        raise CodecError("bad dataclass fields")
    values = {k: _dec(v, frames, depth + 1) for k, v in given.items()}
    known = {f.name: f for f in dataclasses.fields(cls)}
    if set(values) - set(known):
        raise CodecError(f"{cls.__qualname__}: unknown fields {sorted(set(values) - set(known))}")
    try:
        obj = cls(**{k: v for k, v in values.items() if known[k].init})
        for k, v in values.items():
            if not known[k].init:
                object.__setattr__(obj, k, v)
    except (TypeError, ValueError) as exc:
        raise CodecError(f"{cls.__qualname__}: {exc}") from None
    return obj
