"""NVML field values of one GPU: the instantaneous power, and per NVLink link the data
throughput counters as MiB/s.

Field ids come from the installed pynvml module (they moved between versions); a field
the module lacks is not read. Every entry's own ``nvmlReturn`` is checked: a failing one
is NaN and the others stand. Links are probed once at open; only those whose counters
answer get columns.

Costs differ by three orders of magnitude (H200, driver 580): the power field ~4 us, but
each link's throughput counters ~0.8 ms of CPU (15.7 ms for the 18 links of an H200). So
power is read with every sample and the links only when asked (``links=True``: the
sampler does it where the torch profiler starts and stops recording, so the stop row holds
each link's mean throughput over the recorded steps).

The per-link counters are off unless ``PROFKIT_NVML_NVLINK_LINKS=1``: on a 2 x H200 host
(driver 580.159, nvidia-ml-py 13.615) a process that opened the readers a second time
after reading them crashed with SIGSEGV inside nvmlDeviceGetFieldValues, and one rank of a
2-rank Lightning capture did too; the cause is not pinned down. GPM's all-links NVLink
columns do not need them.
"""

from __future__ import annotations

import logging
import math
import os
from typing import Any

log = logging.getLogger(__name__)
NAN = math.nan

LINKS_ENV = "PROFKIT_NVML_NVLINK_LINKS"
POWER_COLUMN = "power_instant_w"
LINK_COLUMN = "nvlink_l{link}_{dir}_mibps"  # e.g. nvlink_l3_tx_mibps
# Counter field (in KiB, cumulative) per direction.
LINK_FIELDS = {"tx": "NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX",
               "rx": "NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX"}
# nvmlValue_t member by nvmlValueType_t (NVML_VALUE_TYPE_DOUBLE = 0 ... UNSIGNED_SHORT = 6).
_VALUE_MEMBERS = ("dVal", "uiVal", "ulVal", "ullVal", "sllVal", "siVal", "usVal")
_KIB_PER_MIB = 1024.0


def field_value(entry: Any) -> float:
    """The number an nvmlFieldValue_t holds, by its value type."""
    member = _VALUE_MEMBERS[int(entry.valueType)]
    return float(getattr(entry.value, member))


class FieldReader:
    """Reads ``power_instant_w`` and ``nvlink_l{L}_{tx,rx}_mibps`` of one GPU."""

    def __init__(self, nvml: Any, handle: Any, links: bool | None = None):
        self.nvml, self.handle = nvml, handle
        self.want_links = os.environ.get(LINKS_ENV) == "1" if links is None else links
        self.ok = getattr(nvml, "NVML_SUCCESS", 0)
        self.request: list[tuple[int, int]] = []  # power first, then the links
        self.columns: list[str] = []
        self._last: dict[str, tuple[float, float]] = {}  # link column -> (KiB, time in us)
        if hasattr(nvml, "nvmlDeviceGetFieldValues"):
            self._probe()

    def _candidates(self) -> list[tuple[str, tuple[int, int]]]:
        nvml, out = self.nvml, []
        power = getattr(nvml, "NVML_FI_DEV_POWER_INSTANT", None)
        if power is not None:
            out.append((POWER_COLUMN, (power, 0)))
        ids = {d: getattr(nvml, name, None) for d, name in LINK_FIELDS.items()}
        if self.want_links and None not in ids.values():
            for link in range(self._link_count()):
                for d, fid in ids.items():
                    out.append((LINK_COLUMN.format(link=link, dir=d), (fid, link)))
        return out

    def _link_count(self) -> int:
        """Links to probe: the device's link count field, else the module's maximum."""
        most = int(getattr(self.nvml, "NVML_NVLINK_MAX_LINKS", 18))
        count_id = getattr(self.nvml, "NVML_FI_DEV_NVLINK_LINK_COUNT", None)
        if count_id is None:
            return most
        try:
            entry = self.nvml.nvmlDeviceGetFieldValues(self.handle, [(count_id, 0)])[0]
            if entry.nvmlReturn == self.ok:
                return min(most, int(field_value(entry)))
        except Exception:  # noqa: BLE001 - NVMLError_NotSupported and friends
            log.debug("NVLink link count not readable", exc_info=True)
        return most

    def _probe(self) -> None:
        """Keep the fields whose entries answer once (links that exist and count)."""
        candidates = self._candidates()
        if not candidates:
            return
        try:
            entries = self.nvml.nvmlDeviceGetFieldValues(self.handle, [c[1] for c in candidates])
        except Exception:  # noqa: BLE001 - the call itself is not supported
            log.debug("nvmlDeviceGetFieldValues not supported", exc_info=True)
            return
        for (column, request), entry in zip(candidates, entries):
            if entry.nvmlReturn == self.ok:
                self.columns.append(column)
                self.request.append(request)

    def read(self, now_ns: int, links: bool = False) -> dict[str, float]:
        """The power field, and with ``links`` each link's rate since its previous reading
        (NaN on its first reading, and when its counter did not move forward in time, a
        cached value, or went back); NaN where not read."""
        out = dict.fromkeys(self.columns, NAN)
        n = len(self.request) if links else int(POWER_COLUMN in self.columns)
        if not n:
            return out
        try:
            entries = self.nvml.nvmlDeviceGetFieldValues(self.handle, self.request[:n])
        except Exception:  # noqa: BLE001
            return out
        for column, entry in zip(self.columns, entries):
            if entry.nvmlReturn != self.ok:
                continue
            value = field_value(entry)
            if column == POWER_COLUMN:
                out[column] = value / 1000.0  # mW -> W
            else:
                out[column] = self._rate(column, value, entry.timestamp or now_ns / 1000.0)
        return out

    def _rate(self, column: str, kib: float, t_us: float) -> float:
        prev = self._last.get(column)
        self._last[column] = (kib, t_us)
        if prev is None or t_us <= prev[1] or kib < prev[0]:
            return NAN
        return (kib - prev[0]) / _KIB_PER_MIB / ((t_us - prev[1]) / 1e6)
