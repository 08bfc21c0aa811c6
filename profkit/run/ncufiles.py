"""The Nsight Compute counters of a run (``RUN/ncu/counters.csv``, written by
``profkit ncu``) as one table: a row per measured launch, units in the column names
(:data:`profkit.trace.ncu.COLUMNS`)."""

from __future__ import annotations

import logging
from pathlib import Path

import pandas as pd

from profkit.model import SkippedFile
from profkit.trace import ncu as N

log = logging.getLogger(__name__)
TEXT_COLUMNS = ("kernel", "function", "grid", "block", "cc", "stream", "trace_kernel")


def empty_counters() -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype=object if c in TEXT_COLUMNS else "float64")
                         for c in N.COLUMNS})


def load_ncu_counters(folder: Path, skipped: list[SkippedFile] | None = None) -> pd.DataFrame:
    """The run's measured launches (empty when it has none); an unreadable table is listed
    in ``skipped`` and read as none, never an error."""
    path = Path(folder) / N.NCU_DIR / N.TABLE_NAME
    if not path.is_file():
        return empty_counters()
    try:
        frame = pd.read_csv(path, dtype={c: str for c in TEXT_COLUMNS}, keep_default_na=False,
                            na_values={c: [""] for c in N.COLUMNS if c not in TEXT_COLUMNS})
    except (OSError, ValueError, pd.errors.ParserError) as exc:
        return _skip(path, f"unreadable Nsight Compute table ({exc})", skipped)
    if "kernel" not in frame.columns:
        return _skip(path, "not a profkit ncu table (no kernel column)", skipped)
    out = {}
    for col in N.COLUMNS:  # a column the writer did not know yet is missing, not an error
        values = frame[col] if col in frame.columns else pd.Series([None] * len(frame))
        out[col] = (values.fillna("").astype(str) if col in TEXT_COLUMNS
                    else pd.to_numeric(values, errors="coerce").astype("float64"))
    return pd.DataFrame(out).reset_index(drop=True)


def _skip(path: Path, reason: str, skipped: list[SkippedFile] | None) -> pd.DataFrame:
    log.warning("%s: %s", path, reason)
    if skipped is not None:
        skipped.append(SkippedFile(str(path), reason))
    return empty_counters()
