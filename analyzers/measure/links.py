"""Collective bandwidth against the link it ran on.

nccl-tests' bus bandwidth is comparable with the per-direction bandwidth of the GPU-to-GPU
link, so ``link_util`` = busbw / link peak says how much of the link a collective used. Only
runs on one host are judged: across hosts the network, not NVLink, is the limit and its
speed is not in the trace.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from profkit.analyzers.measure.devices import device_info, match_device
from profkit.analyzers.result import Result
from profkit.analyzers.thresholds import DEFAULT, Thresholds

from profkit.model import Run

# Per-direction GPU-to-GPU peak within one host, GB/s (10^9 B/s), from the vendor datasheets:
# NVLink 4 on H100/H200 SXM 900 GB/s total -> 450 each way; H100/H200 NVL bridges 600 -> 300;
# A100 SXM NVLink 3 600 -> 300; V100 SXM2 NVLink 2 300 -> 150; B200/GB200 NVLink 5
# 1.8 TB/s -> 900; PCIe Gen4 x16 cards (A100 PCIe, V100 PCIe gen3 16, L4, L40S) 32;
# MI300X / MI325X Infinity Fabric 896 GB/s aggregate peer bandwidth -> 448; GH200 NVLink 4
# as the H100; T4 PCIe Gen3 x16 16; A10 / A10G PCIe Gen4 x16 32.
LINK_GBPS = {
    "H100 SXM": 450.0, "H200": 450.0, "H100 NVL": 300.0, "H200 NVL": 300.0,
    "A100 40GB": 300.0, "A100 80GB SXM": 300.0, "A100 80GB PCIe": 32.0, "V100 SXM2": 150.0,
    "V100 PCIe": 16.0, "B200": 900.0, "GB200": 900.0, "L4": 32.0, "L40S": 32.0,
    "MI300X": 448.0, "MI325X": 448.0, "GH200": 450.0, "GH200 144GB": 450.0, "T4": 16.0,
    "A10": 32.0, "A10G": 32.0,
}
LARGE_BYTES = 16 << 20  # collectives this large should approach the link's bandwidth
COLUMNS = ("key", "collective", "bytes", "busbw_gbps", "link_gbps", "link_util")


def link_peak_gbps(run: Run) -> tuple[float, str]:
    """(per-direction link peak, device model) of the run's GPUs; NaN when the run spans
    hosts or the device is unknown."""
    return link_peak(run.meta, {r: d.meta for r, d in run.ranks.items()})


def link_peak(run_meta: dict, rank_metas: dict[int, dict]) -> tuple[float, str]:
    """:func:`link_peak_gbps` from run.json's facts and each rank's trace header."""
    hosts = {m.get("host") for m in rank_metas.values()} | set(run_meta.get("hosts") or [])
    if len(hosts - {None}) > 1 or not rank_metas:
        return float("nan"), ""
    info = device_info(rank_metas[min(rank_metas)], run_meta, 0)
    peak = match_device(info["name"], info["num_sms"], info["mem_bytes"])
    if peak is None:
        return float("nan"), info["name"]
    return LINK_GBPS.get(peak.key, float("nan")), peak.key


def analyze_links(run: Run, comms: Result, th: Thresholds = DEFAULT) -> Result:
    return judge_links(comms, link_peak_gbps(run), th)


def judge_links(comms: Result, peak: tuple[float, str], th: Thresholds = DEFAULT) -> Result:
    """Bus bandwidth of each matched collective against the link ``peak`` (GB/s, model)."""
    coll = comms.tables.get("collectives")
    if coll is None or coll.empty or "busbw_gbps" not in coll:
        return Result(tables={"collective_links": pd.DataFrame(columns=list(COLUMNS))})
    link, model = peak
    table = coll[["key", "collective", "bytes", "busbw_gbps"]].copy()
    table["link_gbps"] = link
    table["link_util"] = table["busbw_gbps"] / link
    large = table[(table["bytes"] >= LARGE_BYTES) & table["link_util"].notna()]
    table["link_util"] = table["link_util"].astype(np.float64)
    return Result(tables={"collective_links": table[list(COLUMNS)]},
                  facts={"topic": "links", "thresholds": th, "large": large,
                         "link_gbps": link, "device": model})
