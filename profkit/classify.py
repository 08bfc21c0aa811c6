"""Classification of events by category and name, done once per unique value.

Functions here take arrays of *unique* strings and return arrays of labels; ingest maps
them back onto rows through categorical codes, so no regex ever runs per event.
"""

from __future__ import annotations

import re

import numpy as np

from profkit import schema as S

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
}

# Communication kernels by name, for traces whose kernels lack the collective args.
# NCCL (ncclKernel_* before 2.19, ncclDevKernel_* after), RCCL, MSCCL, DeepEP, NVSHMEM,
# and the custom all-reduce kernels of inference engines (vLLM, SGLang, TensorRT-LLM).
COMM_KERNEL_RE = re.compile(
    r"nccl|rccl|msccl|deep_?ep|nvshmem|cross_device_reduce|custom_?all_?reduce|"
    r"one_?shot_?all_?reduce|two_?shot_?all_?reduce|all_?reduce_?kernel|allgather_?kernel|"
    r"reduce_?scatter_?kernel|alltoall_?kernel|multimem",
    re.IGNORECASE,
)

# CPU-side communication ops: their GPU work is communication even with a generic name.
COMM_OP_RE = re.compile(r"^(?:nccl:|gloo:|c10d::|record_param_comms$|c10d_functional::)")

# Compute sub-classes, tried in order (conv before gemm: implicit-gemm convolutions).
_COMPUTE_RULES = (
    ("attention", r"flash|fmha|attention|attn|sdpa|_mha|mha_|paged|mla_|_mla|fused_moe_?attn"),
    ("conv", r"conv|implicit_?gemm|winograd|fprop|dgrad|wgrad"),
    (
        "gemm",
        r"gemm|gemv|matmul|cutlass|cublas|xmma|wgmma|nvjet|cijk_|hipblaslt|triton_tem|"
        r"_mm_|bmm|splitk|s\d{3,4}gemm|ampere_.*_nn|sm\d+_.*tensorop",
    ),
    (
        "reduction",
        r"reduce|reduction|softmax|norm|sum_|mean|argmax|argmin|topk|sort|scan|cub::|"
        r"triton_red|triton_per|bn_|batch_norm|layer_norm|cross_entropy|nll_loss",
    ),
    (
        "elementwise",
        r"elementwise|vectorized|unrolled|pointwise|triton_poi|copy|fill|index|cat_?array|"
        r"gather|scatter|where|masked|activation|gelu|relu|silu|dropout|embedding|"
        r"distribution|rope|rotary",
    ),
)
_COMPUTE_RES = tuple((label, re.compile(rx, re.IGNORECASE)) for label, rx in _COMPUTE_RULES)

_COLL_RULES = (
    ("all_reduce", r"all_?reduce"),
    ("reduce_scatter", r"reduce_?scatter"),
    ("all_gather", r"all_?gather"),
    ("all_to_all", r"all_?to_?all"),
    ("broadcast", r"broadcast|bcast"),
    ("send_recv", r"send|recv|p2p|batch_isend_irecv"),
    ("barrier", r"barrier"),
    ("reduce", r"reduce"),
    ("gather", r"gather"),
    ("scatter", r"scatter"),
)
_COLL_RES = tuple((label, re.compile(rx, re.IGNORECASE)) for label, rx in _COLL_RULES)

_MEMCPY_DIRECTIONS = ("HtoD", "DtoH", "DtoD", "HtoH", "PtoP", "DtoA", "AtoD")


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
    # ncclDevKernel_AllReduce_Sum_f32_RING_LL -> "AllReduce"; strip the NCCL prefix first.
    text = re.sub(r"^(ncclDevKernel_|ncclKernel_|rcclKernel_?|nccl:)", "", text)
    for label, rx in _COLL_RES:
        if rx.search(text):
            return label
    return "other"


def memcpy_direction(name: str, kind_arg: object = None) -> str:
    for direction in _MEMCPY_DIRECTIONS:
        if direction in name or kind_arg == direction:
            return direction
    return "other"


def classify_gpu_names(kinds: np.ndarray, names: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(class, subclass) for unique (kind, name) pairs of GPU events.

    Kernels are communication when their name says so (the caller upgrades kernels whose
    args or launching CPU op say so); everything else is compute with a sub-class.
    """
    classes = np.empty(len(names), dtype=object)
    subs = np.empty(len(names), dtype=object)
    for i, (kind, name) in enumerate(zip(kinds, names)):
        name = str(name)
        if kind == S.KIND_MEMCPY:
            classes[i], subs[i] = S.CLS_MEMCPY, memcpy_direction(name)
        elif kind == S.KIND_MEMSET:
            classes[i], subs[i] = S.CLS_MEMSET, "memset"
        elif kind != S.KIND_KERNEL:
            classes[i], subs[i] = "", ""
        elif COMM_KERNEL_RE.search(name):
            classes[i], subs[i] = S.CLS_COMMUNICATION, collective_kind(name)
        else:
            classes[i], subs[i] = S.CLS_COMPUTE, compute_subclass(name)
    return classes, subs
