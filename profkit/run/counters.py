"""NVML samples of a profkit run (``nvml/rank{R}.{C}.npz``) as the long counters table, which
they share with the trace's own counter samples (profkit.trace.countersamples)."""

from __future__ import annotations

import logging
import zipfile
import zlib
from pathlib import Path

import numpy as np
import pandas as pd
from pandas.api.types import union_categoricals

from profkit import schema as S
from profkit.columns import to_int
from profkit.model import SkippedFile, empty_frame
from profkit.validate import MAX_ABS_NS

log = logging.getLogger(__name__)
NVML_DIR = "nvml"
KEY_COLUMNS = ("ts_ns", "gpu", "source")  # not metrics


def counter_files(run_dir: Path, rank: int) -> list[Path]:
    folder = run_dir / NVML_DIR
    if not folder.is_dir():
        return []
    files = folder.glob(f"rank{rank}.*.npz")
    return sorted(files, key=lambda p: int(p.name.split(".")[1]) if p.name.split(".")[1].isdigit() else -1)


class ChunkError(ValueError):
    """An NVML chunk that cannot be used, and why."""


def _columns(path: Path) -> dict[str, np.ndarray]:
    """The chunk's columns, checked: equal-length 1-D numeric arrays with a ts_ns column."""
    try:
        with np.load(path, allow_pickle=False) as npz:
            cols = {k: npz[k] for k in npz.files}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile, zlib.error) as exc:
        raise ChunkError(f"unreadable ({exc})") from None
    if "ts_ns" not in cols:
        raise ChunkError("no ts_ns column")
    shapes = {k: v.shape for k, v in cols.items()}
    n = shapes["ts_ns"][0] if len(shapes["ts_ns"]) == 1 else -1
    bad = sorted(k for k, shape in shapes.items() if shape != (n,))
    if bad:
        raise ChunkError("columns are not equal-length 1-D arrays (shapes: "
                         + ", ".join(f"{k} {shapes[k]}" for k in dict.fromkeys(["ts_ns", *bad]))
                         + ")")
    for key in ("ts_ns", "gpu"):
        if key in cols and cols[key].dtype.kind not in "iuf":
            raise ChunkError(f"{key} is not numeric ({cols[key].dtype})")
    return cols


def _int_column(values: np.ndarray) -> np.ndarray:
    """int64 column (-1 where a value is not an integer within +-2**62); integer arrays are
    taken exactly, not through float64 (epoch ns need all 64 bits)."""
    if values.dtype.kind not in "iu":
        return to_int(values)
    out = values.astype(np.int64)
    out[(values > MAX_ABS_NS) | (out < -MAX_ABS_NS)] = -1
    return out


def read_npz(path: Path) -> pd.DataFrame:
    """One chunk, long format; raises :class:`ChunkError` for a chunk that cannot be used.
    Samples whose time or GPU index is not a valid integer are dropped."""
    cols = _columns(path)
    n = len(cols["ts_ns"])
    ts = _int_column(cols["ts_ns"])
    gpu = _int_column(cols.get("gpu", np.zeros(n, dtype=np.int64)))
    keep = (ts >= 0) & (ts <= MAX_ABS_NS) & (gpu >= 0)
    if not keep.all():
        log.warning("%s: %d NVML samples without a valid ts_ns or gpu dropped", path,
                    len(keep) - int(keep.sum()))
    wide = pd.DataFrame({S.TS_NS: ts[keep], S.DEVICE: gpu[keep]})
    for key, values in cols.items():
        if key not in KEY_COLUMNS and values.dtype.kind in "fiub":
            wide[key] = values[keep].astype(np.float64)
    long = wide.melt(id_vars=[S.TS_NS, S.DEVICE], var_name=S.METRIC, value_name=S.VALUE)
    return long.dropna(subset=[S.VALUE])


def load_counters(run_dir: Path, rank: int, skipped: list[SkippedFile] | None = None) -> pd.DataFrame:
    """NVML samples of one rank (long format); a chunk that cannot be used is logged and
    listed in ``skipped`` (never fatal)."""
    frames = []
    for path in counter_files(run_dir, rank):
        try:
            frames.append(read_npz(path))
        except ChunkError as exc:
            log.warning("%s: NVML chunk skipped: %s", path, exc)
            if skipped is not None:
                skipped.append(SkippedFile(str(path), f"NVML chunk skipped: {exc}"))
    frames = [f for f in frames if not f.empty]
    if not frames:
        return empty_frame(S.COUNTER_COLUMNS)
    out = pd.concat(frames, ignore_index=True).sort_values([S.METRIC, S.TS_NS], kind="stable")
    out[S.METRIC] = out[S.METRIC].astype("category")
    return out.reset_index(drop=True)


def with_nvml(trace_counters: pd.DataFrame, nvml: pd.DataFrame) -> pd.DataFrame:
    """One rank's counters table: its NVML samples (:func:`load_counters`), then its trace's
    own counter samples. NVML's rows come first, keeping the row labels they had alone."""
    if trace_counters.empty:
        return nvml
    if nvml.empty:
        return trace_counters
    out = pd.concat([nvml, trace_counters], ignore_index=True)
    out[S.METRIC] = union_categoricals([nvml[S.METRIC].astype("category"),
                                        trace_counters[S.METRIC].astype("category")])
    return out


def nvml_samples(counters: pd.DataFrame) -> pd.DataFrame:
    """The NVML rows of a counters table (without the trace's own counter samples), as
    :func:`load_counters` read them: what NVML-based measures read."""
    if counters.empty:
        return counters
    metric = counters[S.METRIC]
    names = metric.cat.categories if isinstance(metric.dtype, pd.CategoricalDtype) \
        else pd.Index(metric.unique())
    if not names.astype(str).str.startswith(S.TRACE_METRIC_PREFIX).any():
        return counters
    nvml = counters[~metric.astype(str).str.startswith(S.TRACE_METRIC_PREFIX).to_numpy()]
    if nvml.empty:  # as load_counters finds no sample
        return empty_frame(S.COUNTER_COLUMNS)
    if isinstance(metric.dtype, pd.CategoricalDtype):
        nvml = nvml.assign(**{S.METRIC: nvml[S.METRIC].cat.remove_unused_categories()})
    return nvml
