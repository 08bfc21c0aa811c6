"""NVML samples of a profkit run (``nvml/rank{R}.{C}.npz``) as the long counters table."""

from __future__ import annotations

import logging
import zipfile
from pathlib import Path

import numpy as np
import pandas as pd

from profkit import schema as S
from profkit.model import empty_frame

log = logging.getLogger(__name__)
NVML_DIR = "nvml"
KEY_COLUMNS = ("ts_ns", "gpu", "source")  # not metrics


def counter_files(run_dir: Path, rank: int) -> list[Path]:
    folder = run_dir / NVML_DIR
    if not folder.is_dir():
        return []
    files = folder.glob(f"rank{rank}.*.npz")
    return sorted(files, key=lambda p: int(p.name.split(".")[1]) if p.name.split(".")[1].isdigit() else -1)


def read_npz(path: Path) -> pd.DataFrame:
    """One chunk, long format; an unreadable chunk is logged and skipped."""
    try:
        with np.load(path, allow_pickle=False) as npz:
            cols = {k: npz[k] for k in npz.files}
    except (OSError, ValueError, zipfile.BadZipFile) as exc:
        log.warning("%s: unreadable NVML chunk skipped (%s)", path, exc)
        return empty_frame(S.COUNTER_COLUMNS)
    if "ts_ns" not in cols:
        log.warning("%s: NVML chunk without ts_ns skipped", path)
        return empty_frame(S.COUNTER_COLUMNS)
    n = len(cols["ts_ns"])
    gpu = cols.get("gpu", np.zeros(n, dtype=np.int64))
    wide = pd.DataFrame({S.TS_NS: cols["ts_ns"].astype(np.int64), S.DEVICE: gpu.astype(np.int64)})
    for key, values in cols.items():
        if key not in KEY_COLUMNS and len(values) == n and values.dtype.kind in "fiub":
            wide[key] = values.astype(np.float64)
    long = wide.melt(id_vars=[S.TS_NS, S.DEVICE], var_name=S.METRIC, value_name=S.VALUE)
    return long.dropna(subset=[S.VALUE])


def load_counters(run_dir: Path, rank: int) -> pd.DataFrame:
    frames = [read_npz(p) for p in counter_files(run_dir, rank)]
    frames = [f for f in frames if not f.empty]
    if not frames:
        return empty_frame(S.COUNTER_COLUMNS)
    out = pd.concat(frames, ignore_index=True).sort_values([S.METRIC, S.TS_NS], kind="stable")
    out[S.METRIC] = out[S.METRIC].astype("category")
    return out.reset_index(drop=True)
