"""Peak throughput of common accelerators, and matching a trace's device name to one.

All TFLOP/s are **dense** (no 2:4 structured sparsity: half the datasheets' "with sparsity"
figures) and per device as PyTorch sees it: an MI250/MI250X is two devices (GCDs), so its
entries are half the card's datasheet numbers. One peak per precision class
(``profkit.classify.flops.PRECISIONS``): ``fp32_tflops`` the fastest fp32 path (vector / SIMT on
NVIDIA, which has no fp32 tensor path; matrix cores on AMD), ``tf32_tflops`` TF32 tensor
cores (AMD: xf32 on MI300), ``bf16_tflops`` 16-bit tensor / matrix cores (bf16 and fp16
have the same rate; fp16 on V100, which has no bf16), ``fp8_tflops``, ``fp4_tflops``,
``fp64_tflops`` (the fastest fp64 path: tensor / matrix cores where there are any) and
``int8_tops`` (dense int8 tensor ops per second); NaN where the device has no such path. ``mem_bw_tbps`` is HBM/GDDR bandwidth in TB/s (10^12
bytes/s) and ``mem_gb`` the capacity in GB (10^9 bytes). Numbers are the boost-clock
datasheet values; sustained clocks under power caps give less.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

NAN = math.nan
FASTER_THAN_16_BIT = ("fp8", "fp4", "int8")
ALL_PRECISIONS = ("fp64", "fp32", "tf32", "bf16", "fp16", "fp8", "int8", "fp4")


@dataclass(frozen=True)
class DevicePeak:
    """Datasheet peaks of one accelerator model (units in the field names)."""

    key: str
    bf16_tflops: float
    fp32_tflops: float
    mem_bw_tbps: float
    mem_gb: float
    tf32_tflops: float = NAN
    fp8_tflops: float = NAN
    fp4_tflops: float = NAN
    fp64_tflops: float = NAN
    int8_tops: float = NAN
    has_bf16: bool = True  # False where the 16-bit entry is fp16 alone (V100, T4)

    def rate(self, precision: str) -> float:
        """Dense peak of one precision class in T(FL)OP/s, NaN where the device lacks it
        (fp16 shares the 16-bit entry; bf16 is NaN on a device without it)."""
        if precision in ("fp16", "bf16", "16-bit"):
            return self.bf16_tflops if precision != "bf16" or self.has_bf16 else NAN
        name = "int8_tops" if precision == "int8" else f"{precision}_tflops"
        return float(getattr(self, name, NAN))

    @property
    def sixteen_bit(self) -> str:
        """The 16-bit float its tensor cores run when nothing else says: fp16 without bf16."""
        return "bf16" if self.has_bf16 else "fp16"

    def peak_tflops(self, precision: str) -> float:
        """Dense peak for a precision class; a class the device lacks (fp8 on an A100: such
        a kernel cannot run there, the name was misread) falls back to its 16-bit peak."""
        value = self.rate(precision)
        return self.bf16_tflops if math.isnan(value) else value

    def mfu_peak(self, precisions) -> tuple[str, float]:
        """(precision, dense TFLOP/s) that MFU is judged against, as PaLM defines it: the
        fastest precision the step's GEMMs could use on this device. A float GEMM can run
        in 16 bits (fp32 and TF32 ones too: autocast), so the 16-bit peak at least; fp8,
        fp4 and int8 where the step's GEMMs already run in them."""
        precisions = tuple(precisions)
        best = ("fp16" if "fp16" in precisions and "bf16" not in precisions
                else self.sixteen_bit, self.bf16_tflops)
        for p in precisions:
            if p in FASTER_THAN_16_BIT and self.rate(p) > best[1]:
                best = (p, self.rate(p))
        return best

    @property
    def fastest_tflops(self) -> float:
        """The device's fastest dense peak of any precision: no kernel mix can run faster."""
        rates = [self.rate(p) for p in ALL_PRECISIONS]
        return max(r for r in rates if not math.isnan(r))

    def flop_weighted_tflops(self, flops: dict[str, float]) -> float:
        """The peak of FLOPs run in several precisions (precision -> FLOPs): total / sum of
        FLOPs / peak, so that the total over this peak is the time each precision's FLOPs
        would take at its own peak. One precision: that precision's peak."""
        total = sum(flops.values())
        if total <= 0:
            return NAN
        return total / sum(f / self.peak_tflops(p) for p, f in flops.items())

    def time_weighted_tflops(self, time: dict[str, float]) -> float:
        """The peak of kernel time spent in several precisions (precision -> time): each
        precision's peak weighted by its time, which is the FLOP-weighted peak when every
        precision runs at the same fraction of its own peak."""
        total = sum(time.values())
        return sum(t * self.peak_tflops(p) for p, t in time.items()) / total if total else NAN


DEVICES = {
    d.key: d
    for d in (
        # NVIDIA H100 Tensor Core GPU datasheet (sparse figures halved): SXM TF32 989, BF16
        # 1,979, FP8 and INT8 3,958; PCIe 756 / 1,513 / 3,026; NVL 835 / 1,671 / 3,341.
        # FP32 67 / 51 / 60; FP64 tensor core 67 / 51 / 60; 3.35 / 2.0 / 3.9 TB/s.
        DevicePeak("H100 SXM", 989.4, 66.9, 3.35, 80, 494.7, 1978.9,
                   fp64_tflops=66.9, int8_tops=1978.9),
        DevicePeak("H100 PCIe", 756.5, 51.2, 2.0, 80, 378.0, 1513.0,
                   fp64_tflops=51.2, int8_tops=1513.0),
        DevicePeak("H100 NVL", 835.5, 60.0, 3.9, 94, 417.5, 1670.5,
                   fp64_tflops=60.0, int8_tops=1670.5),
        # NVIDIA H800 datasheet: the H100's tensor and FP32 rates (SXM TF32 989, BF16 1,979,
        # FP8 3,958 with sparsity; PCIe 756 / 1,513 / 3,026), FP64 1 TFLOPS, less NVLink.
        DevicePeak("H800 SXM", 989.4, 66.9, 3.35, 80, 494.7, 1978.9,
                   fp64_tflops=1.0, int8_tops=1978.9),
        DevicePeak("H800 PCIe", 756.5, 51.2, 2.0, 80, 378.0, 1513.0,
                   fp64_tflops=0.8, int8_tops=1513.0),
        # NVIDIA H200 datasheet (sparse halved): SXM the H100 SXM's compute (TF32 989, BF16
        # 1,979, FP8 / INT8 3,958; FP32 67, FP64 tensor core 67), 141 GB HBM3e at 4.8 TB/s;
        # NVL: TF32 835, BF16 1,671, FP8 / INT8 3,341, FP32 60, FP64 tensor core 60.
        DevicePeak("H200", 989.4, 66.9, 4.8, 141, 494.7, 1978.9,
                   fp64_tflops=66.9, int8_tops=1978.9),
        DevicePeak("H200 NVL", 835.5, 60.0, 4.8, 141, 417.5, 1670.5,
                   fp64_tflops=60.0, int8_tops=1670.5),
        # NVIDIA H20 (Hopper, export part) product brief, dense: FP8 / INT8 296, BF16 148,
        # TF32 74, FP32 44, FP64 1; 96 GB HBM3 at 4.0 TB/s.
        DevicePeak("H20", 148.0, 44.0, 4.0, 96, 74.0, 296.0, fp64_tflops=1.0, int8_tops=296.0),
        # NVIDIA GH200 Grace Hopper Superchip datasheet, GPU side: the H100 SXM's tensor and
        # FP32 rates; 96 GB HBM3 at 4 TB/s ("GH200 480GB": 480 GB of CPU LPDDR5X beside
        # it), or 144 GB HBM3e at 4.9 TB/s.
        DevicePeak("GH200", 989.4, 66.9, 4.0, 96, 494.7, 1978.9,
                   fp64_tflops=66.9, int8_tops=1978.9),
        DevicePeak("GH200 144GB", 989.4, 66.9, 4.9, 144, 494.7, 1978.9,
                   fp64_tflops=66.9, int8_tops=1978.9),
        # NVIDIA A100 datasheet: FP64 tensor core 19.5, TF32 156, BF16 312, INT8 624 dense
        # (the sparse figures are twice these), FP32 19.5, no FP8; 40GB 1,555 GB/s, 80GB SXM
        # 2,039 GB/s, 80GB PCIe 1,935 GB/s.
        DevicePeak("A100 40GB", 312.0, 19.5, 1.555, 40, 156.0, fp64_tflops=19.5, int8_tops=624.0),
        DevicePeak("A100 80GB SXM", 312.0, 19.5, 2.039, 80, 156.0,
                   fp64_tflops=19.5, int8_tops=624.0),
        DevicePeak("A100 80GB PCIe", 312.0, 19.5, 1.935, 80, 156.0,
                   fp64_tflops=19.5, int8_tops=624.0),
        # NVIDIA V100 datasheet: tensor (fp16) 125 SXM2 / 112 PCIe, FP32 15.7 / 14, FP64 7.8
        # / 7; 900 GB/s; no int8 tensor cores.
        DevicePeak("V100 SXM2", 125.0, 15.7, 0.9, 32, fp64_tflops=7.8, has_bf16=False),
        DevicePeak("V100 PCIe", 112.0, 14.0, 0.9, 32, fp64_tflops=7.0, has_bf16=False),
        # NVIDIA HGX B200 datasheet (8 GPUs, sparse): FP4 144, FP8 72, INT8 72 POPS,
        # FP16/BF16 36, TF32 18 PFLOPS -> per GPU dense 9,000 / 4,500 / 4,500 / 2,250 /
        # 1,125; FP32 600 -> 75 and FP64 / FP64 tensor core 296 -> 37 per GPU; 8 TB/s; 180 GB
        # per GPU (1.44 TB total).
        DevicePeak("B200", 2250.0, 75.0, 8.0, 180, 1125.0, 4500.0, 9000.0,
                   fp64_tflops=37.0, int8_tops=4500.0),
        # NVIDIA GB200 NVL72 datasheet (72 GPUs, sparse): FP4 1,440, FP8 720, INT8 720 POPS,
        # BF16 360, TF32 180 PFLOPS, FP32 5,760, FP64 2,880 TFLOPS -> per GPU dense 10,000 /
        # 5,000 / 5,000 / 2,500 / 1,250; 80; 40.
        DevicePeak("GB200", 2500.0, 80.0, 8.0, 186, 1250.0, 5000.0, 10000.0,
                   fp64_tflops=40.0, int8_tops=5000.0),
        # NVIDIA L4 datasheet (sparse): TF32 120, BF16 242, FP8 / INT8 485; FP32 30.3; 300 GB/s.
        DevicePeak("L4", 121.0, 30.3, 0.3, 24, 60.0, 242.5, int8_tops=242.5),
        # NVIDIA T4 datasheet: mixed-precision (FP16) tensor 65, INT8 130, FP32 8.1, no bf16 /
        # TF32 / FP8 (the 16-bit entry is FP16, as on V100); 320 GB/s GDDR6, 16 GB.
        DevicePeak("T4", 65.0, 8.1, 0.32, 16, int8_tops=130.0, has_bf16=False),
        # NVIDIA A10 datasheet (dense | sparse): BF16 125 | 250, TF32 62.5 | 125, INT8 250 |
        # 500, FP32 31.2; 600 GB/s, 24 GB. The A10G (AWS G5) has no NVIDIA datasheet: the
        # same memory, FP32 31.5 and about half the A10's tensor rate (fp16 70, TF32 35) as
        # third-party comparisons list it.
        DevicePeak("A10", 125.0, 31.2, 0.6, 24, 62.5, int8_tops=250.0),
        DevicePeak("A10G", 70.0, 31.5, 0.6, 24, 35.0),
        # NVIDIA L40S datasheet (dense | sparse): TF32 183 | 366, BF16 362.05 | 733, FP8 and
        # INT8 733 | 1,466; FP32 91.6; 864 GB/s, 48 GB.
        DevicePeak("L40S", 362.0, 91.6, 0.864, 48, 183.0, 733.0, int8_tops=733.0),
        # AMD Instinct MI300X datasheet (dense): FP64 matrix 163.4 (vector 81.7), FP32 vector
        # and matrix 163.4, TF32 653.7, FP16/BF16 1,307.4, FP8 and INT8 2,614.9; 5.3 TB/s,
        # 192 GB.
        DevicePeak("MI300X", 1307.4, 163.4, 5.3, 192, 653.7, 2614.9,
                   fp64_tflops=163.4, int8_tops=2614.9),
        # AMD Instinct MI325X datasheet: the MI300X's compute (CDNA 3, the same dense
        # figures); 6 TB/s HBM3E, 256 GB.
        DevicePeak("MI325X", 1307.4, 163.4, 6.0, 256, 653.7, 2614.9,
                   fp64_tflops=163.4, int8_tops=2614.9),
        # AMD Instinct MI355X datasheet (dense): FP16/BF16 2,516.6, FP8 and INT8 5,033.2,
        # FP6/FP4 10,066.3, FP32 vector 157.3, FP64 78.6, TF32 1,258; 8 TB/s HBM3E, 288 GB.
        DevicePeak("MI355X", 2516.6, 157.3, 8.0, 288, 1258.3, 5033.2, 10066.3,
                   fp64_tflops=78.6, int8_tops=5033.2),
        # AMD Instinct MI210 datasheet (one GCD, one PyTorch device): FP16/BF16 and INT8 181,
        # FP32 and FP64 matrix 45.3 (vector 22.6); 1.6384 TB/s HBM2e, 64 GB; no TF32 / FP8.
        DevicePeak("MI210", 181.0, 45.3, 1.6384, 64, fp64_tflops=45.3, int8_tops=181.0),
        # AMD Instinct MI250X datasheet per OAM card of two GCDs: FP16/BF16 and INT8 383,
        # FP32 and FP64 matrix 95.7 (vector 47.9), 3.2768 TB/s, 128 GB; MI250: 362.1, 90.5
        # (45.3). No TF32 / FP8. Halved here: one GCD per PyTorch device.
        DevicePeak("MI250X GCD", 191.5, 47.85, 1.6384, 64, fp64_tflops=47.85, int8_tops=191.5),
        DevicePeak("MI250 GCD", 181.05, 45.25, 1.6384, 64, fp64_tflops=45.25, int8_tops=181.05),
    )
}

# (pattern on the lower-cased device name, key), first match wins: specific before generic.
_NAME_RULES = (
    (r"gb200", "GB200"),
    (r"b200", "B200"),
    (r"gh200", "GH200"),  # before h200: "NVIDIA GH200 480GB" is no H200
    (r"h200.*nvl", "H200 NVL"),
    (r"h200", "H200"),
    (r"\bh20\b", "H20"),  # "NVIDIA H20": no H200
    (r"h800.*pcie", "H800 PCIe"),
    (r"h800", "H800 SXM"),
    (r"h100.*pcie", "H100 PCIe"),
    (r"h100.*nvl", "H100 NVL"),
    (r"h100", "H100 SXM"),
    (r"a100.*80gb.*pcie|a100.*pcie.*80gb", "A100 80GB PCIe"),
    (r"a100.*80gb", "A100 80GB SXM"),
    (r"a100", "A100 40GB"),  # A100-SXM4-40GB, A100-PCIE-40GB, A100-PG509-200 (40 GB board)
    (r"v100.*pcie", "V100 PCIe"),
    (r"v100", "V100 SXM2"),
    (r"l40s", "L40S"),
    (r"\bl4\b", "L4"),
    (r"\bt4\b", "T4"),  # "Tesla T4"
    (r"\ba10g\b", "A10G"),
    (r"\ba10\b", "A10"),
    (r"mi355x", "MI355X"),
    (r"mi325x", "MI325X"),
    (r"mi300x", "MI300X"),
    (r"mi210", "MI210"),
    (r"mi250x", "MI250X GCD"),
    (r"mi250", "MI250 GCD"),
)
_NAME_RES = tuple((re.compile(rx), key) for rx, key in _NAME_RULES)

# Unnamed or generic names ("AMD Radeon Graphics", ""): multiprocessor count (AMD: compute
# units per device) and memory identify a few models unambiguously.
_SM_RULES = (
    (304, 150, 250, "MI300X"),  # 304 CUs, 192 GB
    (110, 50, 70, "MI250X GCD"),  # 110 CUs, 64 GB per GCD
    (104, 50, 70, "MI250 GCD"),  # 104 CUs, 64 GB per GCD
    (148, 150, 200, "B200"),
)


def match_device(name: str | None, num_sms: int | None = None,
                 mem_bytes: float | None = None) -> DevicePeak | None:
    """The :class:`DevicePeak` for a device name as CUDA/HIP reports it ("NVIDIA H200",
    "NVIDIA A100-SXM4-80GB", "AMD Instinct MI300X"), falling back to the SM/CU count and
    memory size for generic names; None when unknown."""
    text = (name or "").lower()
    for rx, key in _NAME_RES:
        if rx.search(text):
            if key == "A100 40GB" and mem_bytes and mem_bytes > 60e9:
                return DEVICES["A100 80GB SXM"]
            if key == "GH200" and mem_bytes and mem_bytes > 110e9:
                return DEVICES["GH200 144GB"]
            return DEVICES[key]
    if num_sms is None:
        return None
    mem_gb = (mem_bytes or 0) / 1e9
    for sms, lo_gb, hi_gb, key in _SM_RULES:
        if num_sms == sms and (not mem_bytes or lo_gb <= mem_gb <= hi_gb):
            return DEVICES[key]
    return None


def device_info(rank_meta: dict[str, Any], run_meta: dict[str, Any],
                device: int) -> dict[str, Any]:
    """Name, SM count and memory bytes of GPU ``device`` of a rank, from the trace's
    deviceProperties, else the run's ``gpus`` list (profkit runs); empty values if unknown."""
    info: dict[str, Any] = {"name": "", "num_sms": None, "mem_bytes": None}
    props = [p for p in rank_meta.get("devices") or [] if isinstance(p, dict)]
    prop = next((p for p in props if p.get("id") == device), props[0] if props else None)
    if prop:
        info.update(name=str(prop.get("name") or ""), num_sms=prop.get("numSms"),
                    mem_bytes=prop.get("totalGlobalMem"))
    gpus = [g for g in run_meta.get("gpus") or [] if isinstance(g, dict)]
    host = rank_meta.get("host")
    gpu = next((g for g in gpus if g.get("index") == device
                and (host is None or g.get("host") in (None, host))), None)
    if gpu:
        info["name"] = info["name"] or str(gpu.get("name") or "")
        info["num_sms"] = info["num_sms"] or gpu.get("sm_count")
        info["mem_bytes"] = info["mem_bytes"] or gpu.get("memory_bytes")
    return info


def lookup_device(rank_meta: dict[str, Any], run_meta: dict[str, Any],
                  device: int) -> tuple[dict[str, Any], DevicePeak | None]:
    """The one lookup of a rank's GPU in the peak table, which every measurement reading a
    peak goes through: its facts (:func:`device_info`) and its row (:func:`match_device`),
    None when the table does not know it."""
    info = device_info(rank_meta, run_meta, device)
    return info, match_device(info["name"], info["num_sms"], info["mem_bytes"])


def peak_of(key: object) -> DevicePeak | None:
    """The table's row of a device key a table column carries (``device_model``)."""
    return DEVICES.get(key) if isinstance(key, str) else None
