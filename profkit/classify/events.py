"""Classification of events by category and name, done once per unique value.

Functions here take arrays of *unique* strings and return arrays of labels; ingest maps
them back onto rows through categorical codes, so no regex ever runs per event.

GPU kernels are classified from the strongest evidence available (ingest applies the
evidence that needs the whole trace, ``profkit/classify/comm.py``):

1. a user rule (``--classify FILE`` or ``[tool.profkit.classify]`` in the project's
   pyproject.toml; ``profkit/classify/rules.py``): final, the user knows their kernels;
2. collective arguments on the kernel (Kineto copies them onto collective kernels only);
3. the kernel name: a known communication family, or a known compute family (GEMM,
   attention, conv, reduction, elementwise);
4. for kernels whose name says nothing: launched by a communication CPU op or inside a CPU
   range / annotation named dispatch, combine, all_reduce, all_to_all, ... ; or running on
   a stream whose other work is communication.

When a known compute name and a communication range disagree (a gating GEMM launched inside
"dispatch(F)"), the name wins: a range is coarse, a kernel name says what ran.
"""

from __future__ import annotations

import functools
import re
from typing import NamedTuple

import numpy as np

from profkit import schema as S
from profkit.classify.folded import FoldedPattern
from profkit.classify.patterns import COLL_RULES, COMPUTE_RULES, MEMCPY_DIRECTIONS
from profkit.classify.rules import active_rules, rules_fingerprint, use_rules  # noqa: F401 (their home)

# Kineto category (lower-cased) -> normalised kind. Old traces use capitalised names.
_CAT_KIND = {
    "kernel": S.KIND_KERNEL,
    "gpu_memcpy": S.KIND_MEMCPY,
    "memcpy": S.KIND_MEMCPY,
    "gpu_memset": S.KIND_MEMSET,
    "memset": S.KIND_MEMSET,
    "gpu_user_annotation": S.KIND_GPU_ANNOTATION,
    "cpu_op": S.KIND_CPU_OP,
    "operator": S.KIND_CPU_OP,
    "user_annotation": S.KIND_ANNOTATION,
    "cuda_runtime": S.KIND_RUNTIME,
    "runtime": S.KIND_RUNTIME,
    "hip_runtime": S.KIND_RUNTIME,
    "cuda_driver": S.KIND_DRIVER,
    "driver": S.KIND_DRIVER,
    "hip_driver": S.KIND_DRIVER,
    "python_function": S.KIND_PYTHON,
    "cuda_sync": S.KIND_SYNC,
    "sync": S.KIND_SYNC,
    # Meta's MTIA accelerator: its device work (PE executions, DMA, merges, stream events)
    # is device activity like a GPU's kernels; its runtime calls (enqueueCommand, recordEvent,
    # synchronizeStream) are the runtime's
    "mtia_ccp_events": S.KIND_KERNEL,
    "mtia_runtime": S.KIND_RUNTIME,
}

# Communication kernel families by name, for kernels that lack the collective args.
COMM_KERNEL_RE = re.compile("|".join((
    # NCCL (ncclKernel_* before 2.19, ncclDevKernel_* since), RCCL (ncclDevKernel_Generic on
    # ROCm, no collective in the name), MSCCL and MSCCL++ (mscclpp)
    r"nccl|rccl|msccl",
    # DeepEP: deep_ep::{intranode,internode,internode_ll}::{dispatch,combine,notify_dispatch,
    # cached_notify,...}; DeepSeek's own build names the namespace dpsk::ep
    r"deep_?ep|dpsk::ep::(?:intranode|internode|low_latency)",
    r"nvshmem",  # NVSHMEM device kernels (nvshmem*, nvshmemi_*)
    r"\bucc_|ucc::",  # UCC (ucc_tl_cuda_*, ucc_ec_*)
    # vLLM / SGLang custom all-reduce (cross_device_reduce_1stage / 2stage), AMD QuickReduce
    r"cross_device_reduce|custom_?all_?reduce|quick_?reduce",
    # torch symmetric memory (one_shot / two_shot / multimem all-reduce), TensorRT-LLM /
    # FlashInfer all-reduce fusion, generic collective kernels
    r"one_?shot_?all_?reduce|two_?shot_?all_?reduce|multimem|all_?reduce_?(?:kernel|fusion)",
    r"allgather_?kernel|reduce_?scatter_?kernel|alltoall_?kernel",
)), re.IGNORECASE)

# CPU-side communication ops: their GPU work is communication even with a generic name.
COMM_OP_RE = re.compile(r"^(?:nccl:|gloo:|c10d::|record_param_comms$|c10d_functional::)")

# The same patterns, searched per distinct name (folded: ~8x faster on ASCII names).
_COMM_KERNEL = FoldedPattern(COMM_KERNEL_RE.pattern)
_COMPUTE_RES = tuple((label, FoldedPattern(rx)) for label, rx in COMPUTE_RULES)

_COLL_RES = tuple((label, FoldedPattern(rx)) for label, rx in COLL_RULES)



# The legacy torch.autograd.profiler export (before Kineto) writes no "cat": its events are
# the ops, under the process name "CPU functions".
LEGACY_PID_CATEGORY = {"CPU functions": "cpu_op"}


def legacy_categories(cats: list, pids: list) -> list:
    """``cats`` with the category of a legacy export's events filled in from their pid
    (:data:`LEGACY_PID_CATEGORY`); unchanged when every event has one."""
    if all(c is not None for c in cats):
        return cats
    return [LEGACY_PID_CATEGORY.get(p) if c is None and isinstance(p, str) else c
            for c, p in zip(cats, pids)]


def kinds_for_categories(cats: np.ndarray) -> np.ndarray:
    """Normalised kind for each unique raw category."""
    return np.array([_CAT_KIND.get(str(c).lower(), S.KIND_OTHER) for c in cats], dtype=object)


def compute_subclass(name: str) -> str:
    for label, rx in _COMPUTE_RES:
        if rx.search(name):
            return label
    return "other"


def collective_kind(text: str) -> str:
    """Normalised collective ('all_reduce', ...) from a collective name or kernel name."""
    text = str(text)
    return _remembered_kind(text) if len(text) <= 512 else _collective_kind(text)


# A rank names a few collectives hundreds of times: each (short) name is worked out once.
_remembered_kind = functools.lru_cache(maxsize=4096)(lambda text: _collective_kind(text))


def _collective_kind(text: str) -> str:
    # ncclDevKernel_AllReduce_Sum_f32_RING_LL -> "AllReduce"; strip the NCCL prefix first.
    text = re.sub(r"^(ncclDevKernel_|ncclKernel_|rcclKernel_?|nccl:)", "", text)
    for label, rx in _COLL_RES:
        if rx.search(text):
            return label
    return "other"


def memcpy_direction(name: str, kind_arg: object = None) -> str:
    for direction in MEMCPY_DIRECTIONS:
        if direction in name or kind_arg == direction:
            return direction
    return "other"


# How sure a GPU event's class is (GpuClasses.strength): evidence may only change weaker ones.
UNKNOWN, NAMED, RULED = 0, 1, 2


class GpuClasses(NamedTuple):
    classes: np.ndarray
    subclasses: np.ndarray
    strength: np.ndarray  # UNKNOWN: compute/"other" by default; NAMED; RULED (user rule)


def classify_gpu_names(kinds: np.ndarray, names: np.ndarray, rules=None) -> GpuClasses:
    """(class, subclass, strength) for unique (kind, name) pairs of GPU events.

    Kernels: a user rule (``rules``, default :func:`active_rules`) first, then the name; a
    kernel whose name says nothing is compute/"other" with strength UNKNOWN, for ingest's
    evidence to upgrade (module doc)."""
    rules = active_rules() if rules is None else rules
    classes = np.empty(len(names), dtype=object)
    subs = np.empty(len(names), dtype=object)
    strength = np.full(len(names), NAMED, dtype=np.int8)
    for i, (kind, name) in enumerate(zip(kinds, names)):
        name = str(name)
        rule = rules.match(name) if kind == S.KIND_KERNEL else None
        if rule is not None:
            classes[i], subs[i] = rule.cls, rule.subclass or guess_subclass(rule.cls, name)
            strength[i] = RULED
        elif kind == S.KIND_MEMCPY:
            classes[i], subs[i] = S.CLS_MEMCPY, memcpy_direction(name)
        elif kind == S.KIND_MEMSET:
            classes[i], subs[i] = S.CLS_MEMSET, "memset"
        elif kind != S.KIND_KERNEL:
            classes[i], subs[i] = "", ""
        elif _COMM_KERNEL.search(name):
            classes[i], subs[i] = S.CLS_COMMUNICATION, collective_kind(name)
        else:
            classes[i], subs[i] = S.CLS_COMPUTE, compute_subclass(name)
            strength[i] = UNKNOWN if subs[i] == "other" else NAMED
    return GpuClasses(classes, subs, strength)


def guess_subclass(cls: str, name: str) -> str:
    """The sub-class a kernel of class ``cls`` gets from its name."""
    if cls == S.CLS_COMMUNICATION:
        return collective_kind(name)
    if cls == S.CLS_MEMCPY:
        return memcpy_direction(name)
    return "memset" if cls == S.CLS_MEMSET else compute_subclass(name)



# The user rules in force (use_rules, active_rules, rules_fingerprint) are kept in
# profkit.classify.rules, which imports no numpy: cache keys are computed without it.
