"""Optional DCGM source: scrape a dcgm-exporter Prometheus text endpoint (``/metrics``).

Only the fields that map onto the NVML sample columns are kept, converted to the columns'
units. The endpoint is polled at a low rate from the NVML sampler thread.
"""

from __future__ import annotations

import logging
import math
import re
import urllib.request
from collections.abc import Sequence
from typing import Any

log = logging.getLogger(__name__)

# DCGM field -> (column, factor to the column's unit).
DCGM_FIELDS: dict[str, tuple[str, float]] = {
    "DCGM_FI_DEV_GPU_UTIL": ("gpu_util_pct", 1.0),
    "DCGM_FI_DEV_MEM_COPY_UTIL": ("mem_util_pct", 1.0),
    "DCGM_FI_DEV_FB_USED": ("mem_used_bytes", float(2**20)),  # MiB
    "DCGM_FI_DEV_SM_CLOCK": ("sm_clock_mhz", 1.0),
    "DCGM_FI_DEV_MEM_CLOCK": ("mem_clock_mhz", 1.0),
    "DCGM_FI_DEV_POWER_USAGE": ("power_w", 1.0),
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": ("energy_mj", 1.0),
    "DCGM_FI_DEV_GPU_TEMP": ("temp_c", 1.0),
    "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS": ("clocks_event_reasons", 1.0),
    "DCGM_FI_DEV_CLOCKS_EVENT_REASONS": ("clocks_event_reasons", 1.0),
    "DCGM_FI_PROF_SM_ACTIVE": ("gpm_sm_active_pct", 100.0),  # ratio 0..1
    "DCGM_FI_PROF_SM_OCCUPANCY": ("gpm_sm_occupancy_pct", 100.0),
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": ("gpm_tensor_active_pct", 100.0),
    "DCGM_FI_PROF_DRAM_ACTIVE": ("gpm_dram_bw_pct", 100.0),
    "DCGM_FI_PROF_PCIE_TX_BYTES": ("pcie_tx_mibps", 1.0 / 2**20),  # bytes/s
    "DCGM_FI_PROF_PCIE_RX_BYTES": ("pcie_rx_mibps", 1.0 / 2**20),
    "DCGM_FI_PROF_NVLINK_TX_BYTES": ("nvlink_tx_mibps", 1.0 / 2**20),
    "DCGM_FI_PROF_NVLINK_RX_BYTES": ("nvlink_rx_mibps", 1.0 / 2**20),
}

_LINE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(\{(.*)\})?\s+(\S+)(\s+\S+)?\s*$")
_LABEL = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"')


def parse_prometheus(text: str) -> list[tuple[str, dict[str, str], float]]:
    """Samples of a Prometheus text exposition: ``(name, labels, value)``; comments,
    blank and malformed lines are skipped."""
    out = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        m = _LINE.match(line)
        if not m:
            continue
        name, labels_text, value = m.group(1), m.group(3) or "", m.group(4)
        try:
            v = float(value)
        except ValueError:
            continue
        labels = {k: bytes(val, "utf-8").decode("unicode_escape")
                  for k, val in _LABEL.findall(labels_text)}
        out.append((name, labels, v))
    return out


def dcgm_rows(samples: list[tuple[str, dict[str, str], float]],
              uuids: Sequence[str] = ()) -> list[tuple[int, dict[str, float]]]:
    """Group mapped DCGM samples into ``(gpu index, {column: value})`` rows, keeping only
    the GPUs whose ``UUID`` label is in ``uuids`` (all when empty)."""
    rows: dict[int, dict[str, float]] = {}
    for name, labels, value in samples:
        field = DCGM_FIELDS.get(name)
        if field is None or (uuids and labels.get("UUID") not in uuids):
            continue
        try:
            gpu = int(labels.get("gpu", "-1"))
        except ValueError:
            gpu = -1
        col, factor = field
        rows.setdefault(gpu, {})[col] = value * factor if math.isfinite(value) else math.nan
    return sorted(rows.items())


class DcgmScraper:
    """Polls ``url`` at most every ``interval_s`` (by the sampler's clock)."""

    def __init__(self, url: str, uuids: Sequence[str] = (), interval_s: float = 1.0,
                 timeout_s: float = 0.5):
        self.url, self.uuids = url, list(uuids)
        self.interval_ns, self.timeout_s = int(interval_s * 1e9), timeout_s
        self._last_ns = -(2**62)
        self.failures = 0

    def poll(self, now_ns: int) -> list[tuple[int, dict[str, float]]]:
        if now_ns - self._last_ns < self.interval_ns:
            return []
        self._last_ns = now_ns
        try:
            with urllib.request.urlopen(self.url, timeout=self.timeout_s) as resp:  # noqa: S310
                text = resp.read().decode("utf-8", "replace")
        except Exception as e:  # noqa: BLE001 - an unreachable exporter must not stop sampling
            self.failures += 1
            if self.failures == 1:
                log.warning("profkit: cannot scrape DCGM exporter %s (%s)", self.url, e)
            return []
        return dcgm_rows(parse_prometheus(text), self.uuids)


def make_scraper(url: str | None, uuids: Sequence[str] = ()) -> Any:
    """A :class:`DcgmScraper` for ``url``, or None."""
    return DcgmScraper(url, uuids) if url else None
