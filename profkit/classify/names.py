"""Kernel names as people read them: ``elementwise(GeluCUDA)``, ``nvjet gemm 64x32 bf16``,
``nccl AllReduce bf16 RING LL``, ``cub::DeviceRadixSortOnesweepKernel``.

A pure function of the name (the dashboard imports it for labels and keeps the full name for
hover; reports keep the full name in JSON and ``--tables``). What is dropped: return types
(``void``, ``std::enable_if<...>::type``), argument lists, template arguments and namespaces,
except a library's own namespace (cub, cutlass, cudnn, flash, ...) that says where a kernel
comes from. PyTorch's generic elementwise / reduce / foreach launchers are named by the
functor they run. GEMM and collective libraries that encode their configuration in the name
(nvjet, xmma, CUTLASS, Tensile, MIOpen, NCCL) are read as library, kind, tile and precision.
Whatever is left is cut from the right, after the meaningful part, at :data:`MAX_CHARS`.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence

from profkit.classify.flops import kernel_precision

MAX_CHARS = 60
_CUT = "..."
# PyTorch launchers whose name says nothing about the op: read the functor they run.
LAUNCHERS = {
    "vectorized_elementwise_kernel": "elementwise", "unrolled_elementwise_kernel": "elementwise",
    "elementwise_kernel": "elementwise", "elementwise_kernel_manual_unroll": "elementwise",
    "unrolled_elementwise_kernel_for_multi_outputs": "elementwise",
    "elementwise_kernel_with_index": "elementwise", "index_elementwise_kernel": "index",
    "reduce_kernel": "reduce", "multi_tensor_apply_kernel": "foreach",
    "_scatter_gather_elementwise_kernel": "scatter_gather",
    "distribution_elementwise_grid_stride_kernel": "random",
    "vectorized_gather_kernel": "gather",
}
# Entry points that only wrap the real kernel (CUTLASS, CK tile): name it by what they wrap.
GENERIC = {"Kernel", "Kernel2", "kernel", "kentry", "device_kernel"}
# Identifiers inside a launcher's template arguments that are not the functor.
_NOT_FUNCTOR = {
    "float", "double", "int", "long", "bool", "char", "unsigned", "signed", "short", "void",
    "const", "half", "Half", "BFloat16", "true", "false", "lambda", "operator", "anon",
    "operator_call",
    "gpu_kernel_impl", "gpu_kernel_impl_nocast", "AUnaryFunctor", "BUnaryFunctor",
    "BinaryFunctor", "UnaryFunctor", "func_wrapper_t", "ReduceOp", "OpaqueType",
    "TensorListMetadata", "TensorListScalarListMetadata", "FusedOptimizerTensorListMetadata",
    "gpu_index_kernel", "_cuda_scatter_gather_internal_kernel", "Array", "array", "ul",
    "TensorIteratorBase", "TensorIterator", "TrivialOffsetCalculator", "OffsetCalculator",
    "LoadWithCast", "StoreWithCast", "LoadWithoutCast", "StoreWithoutCast", "type",
}
_FUNCTOR_SUFFIXES = ("_kernel_cuda", "_kernel_impl", "_cuda_kernel", "_cuda_out", "KernelImpl",
                     "_kernel", "_functor", "Functor", "Ops", "_impl", "_cuda")
_FUNCTOR_PREFIX_RE = re.compile(r"^(?:CUDAFunctor\w*?_|launch_)(?=\w)")
# A library's namespace is kept (normalised): where the kernel comes from is worth knowing.
_LIBRARY_RE = re.compile(
    r"^(?:(cub)|(cutlass)\w*|(cudnn)\w*|cask_(cudnn)\w*|(cublasLt|cublas)|(flash|pytorch_flash)"
    r"|(fbgemm_gpu)|(vllm)|(thrust)|(flashinfer)|(aiter)|(ck_tile|ck)|(sgl_\w+)|(deep_gemm)"
    r"|(transformer_engine)|(xformers)|(apex))$")
_DTYPES = {"float": "f32", "double": "f64", "Half": "f16", "half": "f16", "BFloat16": "bf16",
           "bfloat16": "bf16", "long": "i64", "int": "i32", "bool": "bool"}
_IDENT_RE = re.compile(r"[A-Za-z_]\w*")
_TILE_RE = re.compile(r"(\d+x\d+)(?=x\d|_|$)")
_NCCL_RE = re.compile(r"^nccl(?:Dev)?Kernel_(\w+)")
_NCCL_ALGOS = {"RING", "TREE", "COLLNET", "DIRECT", "CHAIN", "NVLS", "PAT"}
_NCCL_PROTOS = {"LL", "LL128", "SIMPLE"}
_NCCL_OPS = {"Sum", "Prod", "Max", "Min", "PreMulSum", "SumPostDiv"}


@functools.lru_cache(maxsize=8192)  # the reports and the dashboard ask for a name many times
def short_kernel_name(name: str) -> str:
    """The name of a GPU kernel as people read it (see the module doc); never longer than
    :data:`MAX_CHARS`. Two different kernels may share a short name: use
    :func:`short_kernel_names` for the rows of one table."""
    text = " ".join(str(name).split())
    short = _library_name(text)
    if short is None:
        if text.startswith("_Z"):
            short = _mangled(text)
        elif any(c in text for c in "<(:"):
            short = _cpp(text)
        else:
            short = text
    return _cut(short)


def short_kernel_names(names: Sequence[str]) -> list[str]:
    """:func:`short_kernel_name` of each name, made distinct: different kernels that read
    alike get the first word of their full name that tells them apart (``[NNT]``,
    ``[f32]``), else a number."""
    short = [short_kernel_name(n) for n in names]
    groups: dict[str, list[int]] = {}
    for i, s in enumerate(short):
        groups.setdefault(s, []).append(i)
    for label, rows in groups.items():
        distinct = list(dict.fromkeys(names[i] for i in rows))  # one tag per kernel
        if len(distinct) > 1:
            tags = dict(zip(distinct, _tags(distinct)))
            for i in rows:
                short[i] = f"{label} [{tags[names[i]]}]"
    return short


def _tags(names: list[str]) -> list[str]:
    """What tells each of ``names`` apart: their element types when those differ (``f32``,
    ``bf16``), else the first word where the names differ (``NNT``, ``unrolled``), with a
    number added where that is still not enough."""
    words = [re.findall(r"[A-Za-z0-9]+", n) for n in names]
    dtypes = [next((_DTYPES[w] for w in ws if w in _DTYPES), "") for ws in words]
    if all(dtypes) and len(set(dtypes)) == len(dtypes):
        return dtypes
    at = next((i for i in range(max(map(len, words)))
               if len({ws[i] if i < len(ws) else "" for ws in words}) > 1), 0)
    tags = [(ws[at] if at < len(ws) else "")[:20] for ws in words]
    if len(set(tags)) < len(tags):
        tags = [f"{t} {d}".strip() for t, d in zip(tags, dtypes)]
    seen: dict[str, int] = {}
    out = []
    for tag in tags:
        seen[tag] = seen.get(tag, 0) + 1
        out.append(tag if tags.count(tag) == 1 else f"{tag} #{seen[tag]}".strip())
    return out


def _cut(text: str, limit: int = MAX_CHARS) -> str:
    return text if len(text) <= limit else text[:limit - len(_CUT)] + _CUT


# --- libraries that encode their configuration in the name --------------------------------

def _library_name(name: str) -> str | None:
    """``nccl AllReduce bf16 RING LL``, ``nvjet gemm 64x32 bf16``, ... or None."""
    nccl = _NCCL_RE.match(name)
    if nccl:
        return _nccl(nccl.group(1))
    for pattern, build in _FAMILIES:
        found = pattern.match(name)
        if found:
            return " ".join(p for p in build(found, name) if p)
    return None


def _nccl(body: str) -> str:
    """ncclDevKernel_<Coll>_<Op>_<type>_<ALGO>_<PROTO> (NCCL >= 2.19) or the older
    ncclKernel_<Coll>_<ALGO>_<PROTO>_<Op>_<type>: collective, type, algorithm, protocol."""
    parts = body.split("_")
    rest = parts[1:]
    algo = [p for p in rest if p in _NCCL_ALGOS]
    proto = [p for p in rest if p in _NCCL_PROTOS]
    ops = [p for p in rest if p in _NCCL_OPS and p != "Sum"]
    dtype = [p for p in rest if p not in _NCCL_ALGOS | _NCCL_PROTOS | _NCCL_OPS]
    return " ".join(["nccl", parts[0], *ops, *dtype[:1], *algo, *proto])


def _tile(name: str) -> str:
    found = _TILE_RE.search(name)
    return found.group(1) if found else ""


_FAMILIES = (
    # cuBLAS's nvjet (Hopper+): nvjet_[sm90_]tst_<tile>_<cluster>_..._<layout>
    (re.compile(r"^nvjet_(?:sm\d+_)?[a-z]{3,5}_(\d+x\d+)_"),  # qqtst: fp8 inputs
     lambda m, n: ("nvjet gemm", m.group(1), kernel_precision(n))),
    # cuBLAS / cuDNN xmma: sm90_xmma_gemm_..., sm80_xmma_fprop_implicit_gemm_...
    (re.compile(r"^sm\d+_xmma_([a-z]+)_"),
     lambda m, n: ("xmma", m.group(1), kernel_precision(n))),
    # CUTLASS instance names: cutlass_80_tensorop_s1688gemm_128x128_16x4_nn_align4
    (re.compile(r"^cutlass_\w*?(gemm|dgrad|wgrad|fprop)"),
     lambda m, n: ("cutlass", m.group(1), _tile(n[m.end():]), kernel_precision(n))),
    # AMD Tensile (rocBLAS / hipBLASLt): Cijk_Ailk_Bjlk_BBS_BH_..._MT128x64x32_...
    (re.compile(r"^Cijk_\w*?_MT(\d+x\d+x\d+)"),
     lambda m, n: ("tensile gemm", m.group(1), kernel_precision(n))),
    # MIOpen implicit GEMM convolutions: igemm_fwd_gtcx2_nhwc_bf16_..._bt128x128x32_...
    (re.compile(r"^igemm_(fwd|bwd|wrw)_\w*?_bt(\d+x\d+x\d+)"),
     lambda m, n: ("igemm", m.group(1), m.group(2), kernel_precision(n))),
    # cuDNN's generated SDPA (flash attention) kernels
    (re.compile(r"^cudnn_generated_\w*?sdpa_\w*?flash_([a-z]+)"),
     lambda m, n: ("cudnn flash", m.group(1), kernel_precision(n))),
)


# --- C++ names ----------------------------------------------------------------------------

def _cpp(name: str) -> str:
    """A demangled C++ kernel name without return type, arguments, templates and namespaces
    (a library's namespace kept); a PyTorch launcher named by its functor."""
    text = name.replace("(anonymous namespace)", "{anon}").replace("operator()", "operator_call")
    head = _before_arguments(text)
    parts = _name_parts(head)
    if not parts:
        return name
    base, targs = _base_and_targs(parts[-1])
    spaces = [_base_and_targs(p)[0] for p in parts[:-1]]
    library = next((_library(s) for s in spaces if _library(s)), "")
    if base in LAUNCHERS:
        family, functor = LAUNCHERS[base], _functor(targs)
        if not functor or functor.startswith(family):  # index_put, not index(index_put)
            return functor or family
        return f"{family}({functor})"
    if base in GENERIC:  # a library's entry point: the wrapped kernel, else its class
        inner = _first_identifier(targs)
        named = _library_name(inner) if inner else None
        if named:
            return named
        if library and inner:
            base = inner
        elif spaces:
            base = f"{spaces[-1]}::{base}"
    return f"{library}::{base}" if library and not base.startswith(library) else base


def _library(space: str) -> str:
    found = _LIBRARY_RE.match(space)
    return next((g for g in found.groups() if g), "") if found else ""


_MARKS_RE = re.compile(r"[<>(){}\[\] :]")  # the characters the readers of _scan look at


def _scan(text: str):
    """(index, char, depth before it) of the brackets, spaces and colons of ``text`` (the
    other characters neither nest nor split: ~10x fewer steps on a long C++ name); ``<``
    ``(`` ``{`` ``[`` nest, and a ``>`` closes only a ``<`` (so ``(8)>(0)`` inside a template
    stays inside it)."""
    stack: list[str] = []
    pairs = {")": "(", "}": "{", "]": "["}
    for mark in _MARKS_RE.finditer(text):
        i, c = mark.start(), mark.group()
        yield i, c, len(stack)
        if c in "<({[":
            stack.append(c)
        elif c == ">" and stack and stack[-1] == "<":
            stack.pop()
        elif c in pairs:
            while stack and stack.pop() != pairs[c]:
                pass


def _before_arguments(text: str) -> str:
    for i, c, depth in _scan(text):
        if c == "(" and depth == 0 and i > 0:
            return text[:i].strip()
    return text


def _name_parts(head: str, sep: str = "::") -> list[str]:
    """The ``sep``-separated top-level parts of ``head`` after its return type (after the last
    top-level space), from one scan: the stack is empty at that space, so the marks after it
    nest as a scan of the rest alone would find them."""
    marks = list(_scan(head))
    cut = max((i for i, c, depth in marks if c == " " and depth == 0), default=-1)
    parts, start = [], cut + 1
    for i, _c, depth in marks:
        if i > cut and depth == 0 and head.startswith(sep, i) and i >= start:
            parts.append(head[start:i])
            start = i + len(sep)
    parts.append(head[start:])
    return [p.strip() for p in parts if p.strip()]


def _base_and_targs(part: str) -> tuple[str, str]:
    """``name<args>`` -> (name, args)."""
    for i, c, depth in _scan(part):
        if c == "<" and depth == 0:
            return part[:i], part[i + 1:part.rfind(">")] if ">" in part else part[i + 1:]
    return part, ""


def _identifiers(targs: str):
    """Identifiers of template arguments that are not namespace or class qualifiers."""
    for m in _IDENT_RE.finditer(targs):
        if not targs.startswith("::", m.end()):
            yield m.group(0)


def _first_identifier(targs: str) -> str:
    return next((w for w in _identifiers(targs) if w not in _NOT_FUNCTOR), "")


def _functor(targs: str) -> str:
    """The op a launcher runs: ``GeluCUDAKernelImpl`` -> ``GeluCUDA``, ``MulFunctor`` ->
    ``Mul``, ``direct_copy_kernel_cuda`` -> ``direct_copy``, ``sum_functor`` -> ``sum``."""
    word = _first_identifier(targs)
    changed = True
    while changed and word:
        changed = False
        stripped = _FUNCTOR_PREFIX_RE.sub("", word)
        word, changed = stripped, stripped != word
        for suffix in _FUNCTOR_SUFFIXES:
            if word.endswith(suffix) and len(word) > len(suffix):
                word, changed = word[:-len(suffix)], True
    return word.lstrip("_")


# --- mangled names (Itanium ABI) ----------------------------------------------------------

def _mangled(name: str) -> str:
    """``_ZN5aiter24add_rmsnorm_quant_kernelI...`` -> ``aiter::add_rmsnorm_quant_kernel``:
    the nested name's parts, without demangling the template arguments."""
    parts, pos = _source_names(name, 3 if name.startswith("_ZN") else 2)
    if not parts:
        return name
    base = parts[-1]
    if base in GENERIC:  # the wrapped kernel: the first class-like name after it
        rest, _ = _source_names(name, pos, anywhere=True)
        base = next((w for w in rest if any(c.isupper() for c in w) and len(w) > 3), base)
    library = next((_library(p) for p in parts[:-1] if _library(p)), "")
    return f"{library}::{base}" if library else base


def _source_names(name: str, pos: int, anywhere: bool = False) -> tuple[list[str], int]:
    """The ``<length><identifier>`` names from ``pos`` on: consecutive ones (the nested
    name), or, with ``anywhere``, every one found further on."""
    out = []
    while pos < len(name):
        digits = re.match(r"\d+", name[pos:])
        if not digits:
            if not anywhere:
                break
            pos += 1
            continue
        n = int(digits.group(0))
        start = pos + len(digits.group(0))
        word = name[start:start + n]
        if len(word) == n and _IDENT_RE.fullmatch(word):
            out.append(word)
            pos = start + n
        elif anywhere:
            pos = start
        else:
            break
    return out, pos
