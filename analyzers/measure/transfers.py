"""Memory transfers: achieved bandwidth per direction and memory kind, against the link.

A copy moves bytes over the link its direction uses: host<->device copies over PCIe (peak
from the PCIe generation and width when run.json records them, else the device model's
usual host link), peer-to-peer over NVLink/xGMI, device-to-device within HBM (each byte
read and written, so half the memory bandwidth). Pinned vs pageable comes from the trace's
memcpy names ("Memcpy HtoD (Pageable -> Device)"): a pageable copy is staged by the driver
through a pinned buffer, blocks its calling thread, and rarely reaches the link's rate.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
from profkit.analyzers.measure.devices import lookup_device

from profkit import schema as S
from profkit.columns import aggregate, as_text, name_values, values_in
from profkit.model import RankData

COLUMNS = ("rank", "direction", "memory", "copies", "bytes", "gpu_ns", "achieved_gbps",
           "peak_gbps", "link", "peak_frac")
# PCIe GB/s per lane per direction after 128b/130b encoding (gen 3+) or 8b/10b (gen 1-2).
PCIE_LANE_GBPS = {1: 0.25, 2: 0.5, 3: 0.985, 4: 1.969, 5: 3.938, 6: 7.563}
# Host link and peer link (GB/s per direction) by device model key (analyzers.devices),
# from the vendors' datasheets: H100/H200 SXM PCIe Gen5 x16 and NVLink 900 GB/s total;
# A100 Gen4 x16, NVLink 600; V100 Gen3 x16, NVLink 300; B200 Gen5 x16 (to the host), NVLink
# 1.8 TB/s; MI300X Gen5 x16, Infinity Fabric 7 x 64 GB/s; MI250 Gen4 x16.
HOST_LINK = {"H100": (5, 16), "H200": (5, 16), "A100": (4, 16), "V100": (3, 16), "B200": (5, 16),
             "GB200": (5, 16), "L4": (4, 16), "L40S": (4, 16), "MI300X": (5, 16), "MI250": (4, 16)}
PEER_GBPS = {"H100": 450.0, "H200": 450.0, "A100": 300.0, "V100": 150.0, "B200": 900.0,
             "GB200": 900.0, "MI300X": 448.0, "MI250": 200.0}
_MEMORY_RE = re.compile(r"\((\w+) -> (\w+)\)")


def rank_transfers(data: RankData, in_steps: bool) -> pd.DataFrame:
    """Copies of one rank (inside its steps when it has any) by direction and memory kind:
    count, bytes, GPU ns (summed per copy) and achieved GB/s (bytes / GPU time); the peak
    columns are filled by :func:`add_peaks`."""
    ev = data.events
    copies = ev.loc[values_in(ev[S.CLASS], (S.CLS_MEMCPY,)),
                    [S.STEP, S.NAME, S.SUBCLASS, S.BYTES, S.DUR_NS]]
    if in_steps:
        copies = copies[(copies[S.STEP] >= 0).to_numpy()]
    if copies.empty:
        return pd.DataFrame(columns=list(COLUMNS))
    memory = name_values(copies[S.NAME], _memory)
    nbytes, gpu_ns = copies[S.BYTES].to_numpy(), copies[S.DUR_NS].to_numpy()
    frame = pd.DataFrame({"direction": as_text(copies[S.SUBCLASS]).to_numpy(),
                          "memory": memory, "bytes": nbytes, "gpu_ns": gpu_ns,
                          "timed_ns": np.where(np.isnan(nbytes), 0, gpu_ns)})  # bytes known
    table = aggregate(frame.groupby(["direction", "memory"]), dict(
        copies=("gpu_ns", "size"), bytes=("bytes", "sum"), gpu_ns=("gpu_ns", "sum"),
        timed_ns=("timed_ns", "sum"))).reset_index()
    timed = table.pop("timed_ns").to_numpy(np.float64)
    table["achieved_gbps"] = np.where(timed > 0, table["bytes"] / np.where(timed > 0, timed, 1), np.nan)
    table.insert(0, "rank", data.rank)
    for col in ("peak_gbps", "link", "peak_frac"):
        table[col] = np.nan if col != "link" else ""
    return table[list(COLUMNS)]


def _memory(name: str) -> str:
    """'Pinned', 'Pageable', 'Device', ... from "Memcpy HtoD (Pinned -> Device)"."""
    m = _MEMORY_RE.search(name)
    if not m:
        return "unknown"
    src, dst = m.groups()
    host = [k for k in (src, dst) if k != "Device"]
    return host[0] if host else "Device"


def add_peaks(table: pd.DataFrame, metas: dict[int, dict], run_meta: dict) -> pd.DataFrame:
    """Fill peak_gbps / link / peak_frac from each rank's device (``metas``: rank -> trace
    meta with ``devices``; ``run_meta``: run.json, whose ``gpus`` may carry the PCIe link)."""
    if table.empty:
        return table
    out = table.copy()
    links = [link_peak(row["direction"], metas.get(int(row["rank"]), {}), run_meta)
             for row in out.to_dict("records")]
    out["peak_gbps"] = [peak for peak, _ in links]
    out["link"] = [link for _, link in links]
    out["peak_frac"] = out["achieved_gbps"] / out["peak_gbps"]
    return out


def link_peak(direction: str, meta: dict, run_meta: dict, device: int = 0) -> tuple[float, str]:
    """(peak GB/s per direction, link description) of a copy direction on this device."""
    peak = lookup_device(meta, run_meta, device)[1]
    family = _family(peak.key if peak else "")
    gpu = next((g for g in run_meta.get("gpus") or [] if isinstance(g, dict)
                and g.get("index") == device), {})
    if direction in ("HtoD", "DtoH"):
        gen, width = gpu.get("pcie_gen"), gpu.get("pcie_width")
        source = "run.json"
        if not (gen in PCIE_LANE_GBPS and isinstance(width, int) and width > 0):
            gen, width = HOST_LINK.get(family, (None, None))
            source = "device model"
        if gen is None:
            return np.nan, ""
        return PCIE_LANE_GBPS[gen] * width, f"PCIe Gen{gen} x{width} ({source})"
    if direction == "PtoP" and family in PEER_GBPS:
        return PEER_GBPS[family], f"{'xGMI' if family.startswith('MI') else 'NVLink'} ({family})"
    if direction == "DtoD" and peak is not None:
        return peak.mem_bw_tbps * 1000 / 2, f"device memory read+write ({peak.key})"
    return np.nan, ""


def _family(model: str) -> str:
    for key in sorted(HOST_LINK, key=len, reverse=True):
        if key in model:
            return key
    return ""
