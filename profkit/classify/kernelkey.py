"""One kernel under two demanglers: the keys that join a trace's kernel names to Nsight
Compute's.

CUPTI (the trace) and ncu demangle the same kernel differently:

- trace: ``void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>,
  std::array<char*, 3ul> >(int, at::native::CUDAFunctor_add<float>, std::array<char*, 3ul>)``
- ncu: ``void vectorized_elementwise_kernel<4, CUDAFunctor_add<float>, std::array<char *, 3>>(int,
  T2, T3)`` (namespaces dropped or kept depending on the build, generic parameter lists,
  ``[lambda(float) (instance 1)]`` for ``{lambda(float)#1}``, ``0`` for ``false``).

:func:`kernel_key` removes what differs (return types, namespaces, whitespace, integer
suffixes, parameter lists) and keeps what tells kernels apart (template arguments, functors,
lambda numbers). :func:`function_name` is the bare function name, the one ncu's
``--kernel-name-base function`` filter matches. :func:`match_names` pairs names by key, then
by their closest name among kernels of the same function.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable

_ANON = re.compile(r"\(anonymous namespace\)::|<?unnamed>::|\{anonymous\}::")
_LAMBDA_GNU = re.compile(r"\{lambda\(([^(){}]*)\)#(\d+)\}")
_LAMBDA_EDG = re.compile(r"\[lambda\(([^(){}\[\]]*)\)\s*\(instance (\d+)\)\]")
_NAMESPACE = re.compile(r"\b[A-Za-z_]\w*::(?!~)")
_VOID = re.compile(r"\bvoid\b")
_INT_SUFFIX = re.compile(r"\b(\d+)(?:ull|ul|ll|u|l)\b", re.IGNORECASE)
_BOOL = {"true": "1", "false": "0"}
_BOOL_RE = re.compile(r"\b(true|false)\b")
_SPACE = re.compile(r"\s+")
_KEEP_PARENS_AFTER = ("λ", "operator")
# A close match must be at least this similar (difflib ratio of the keys) to be a match.
MIN_SIMILARITY = 0.8


def _strip(name: str, spaces: bool = False) -> str:
    text = _ANON.sub("", str(name))
    text = _LAMBDA_GNU.sub(r"λ(\1)#\2", text)
    text = _LAMBDA_EDG.sub(r"λ(\1)#\2", text)
    text = _VOID.sub("", text)
    while True:  # nested qualifiers (a::b::c) one level at a time
        shorter = _NAMESPACE.sub("", text)
        if shorter == text:
            break
        text = shorter
    text = _BOOL_RE.sub(lambda m: _BOOL[m.group(1)], text)
    text = _SPACE.sub(" " if spaces else "", text)
    return _INT_SUFFIX.sub(r"\1", text)


def _drop_parameter_lists(text: str) -> str:
    """``text`` without the parameter lists of functions (a ``(...)`` right after a name or
    a template's ``>``); a lambda's and ``operator()``'s parentheses stay."""
    out: list[str] = []
    i = 0
    while i < len(text):
        ch = text[i]
        prev = "".join(out)
        if ch == "(" and prev and (prev[-1].isalnum() or prev[-1] in "_>") \
                and not prev.endswith(_KEEP_PARENS_AFTER):
            depth, j = 0, i
            while j < len(text):
                depth += {"(": 1, ")": -1}.get(text[j], 0)
                if depth == 0:
                    break
                j += 1
            i = j + 1
            continue
        out.append(ch)
        i += 1
    return "".join(out)


def kernel_key(name: str) -> str:
    """The key two demanglings of one kernel share (see the module docstring)."""
    return _drop_parameter_lists(_strip(name))


def function_name(name: str) -> str:
    """The kernel's bare function name: no return type, namespace, template arguments or
    parameters (``vectorized_elementwise_kernel``, ``Kernel2``, ``nvjet_sm90_tst_...``)."""
    text = _VOID.sub("", _ANON.sub("", str(name))).strip()
    depth, end = 0, len(text)
    for i, ch in enumerate(text):
        if ch in "<(" and depth == 0:
            end = i
            break
    head = text[:end].strip()
    return head.rsplit("::", 1)[-1].strip() or head


def match_names(measured: Iterable[str], known: Iterable[str]) -> dict[str, str]:
    """{measured name: known name} for every measured name that one known name matches:
    the same :func:`kernel_key`, else, among the known kernels of the same function, the
    one whose key is most alike (at least :data:`MIN_SIMILARITY`). Names matching none are
    left out."""
    known = list(dict.fromkeys(str(k) for k in known))
    by_key: dict[str, list[str]] = {}
    by_function: dict[str, list[str]] = {}
    for k in known:
        by_key.setdefault(kernel_key(k), []).append(k)
        by_function.setdefault(function_name(k), []).append(k)
    out = {}
    for name in dict.fromkeys(str(m) for m in measured):
        key = kernel_key(name)
        same = by_key.get(key, [])
        if len(same) == 1:
            out[name] = same[0]
            continue
        pool = same or by_function.get(function_name(name), [])
        best = _closest(key, pool)
        if best is not None:
            out[name] = best
    return out


def _closest(key: str, pool: list[str]) -> str | None:
    scored = sorted(((difflib.SequenceMatcher(None, key, kernel_key(k), autojunk=False).ratio(),
                      k) for k in pool), reverse=True)
    if not scored or scored[0][0] < MIN_SIMILARITY:
        return None
    if len(scored) > 1 and scored[1][0] == scored[0][0]:
        return None  # two equally close: no way to tell which one ran
    return scored[0][1]


_IDENT = re.compile(r"[A-Za-z_]\w*")
MAX_TOKENS = 8  # of a kernel's pattern: enough to tell instantiations apart, little backtracking
# Words a mangled name spells otherwise (f, i, c, ..., cl for operator()): never in a pattern.
_NOT_SPELLED = {"void", "bool", "char", "wchar_t", "short", "int", "long", "unsigned", "signed",
                "float", "double", "const", "volatile", "operator", "auto"}


def name_pattern(name: str) -> str:
    """A regular expression that kernel ``name`` matches however it is written: demangled
    by CUPTI or by ncu, or mangled (``_ZN2at6native29vectorized_elementwise_kernelILi4E...``):
    the first occurrence of each identifier of its :func:`kernel_key` in order (function,
    template arguments, functors), anything between them. Built-in type names and
    ``operator`` are left out, as mangling abbreviates them, and so is every repeat, which
    mangling writes as a back-reference. Another instantiation holding the same identifiers
    may match as well (the join tells them apart by key)."""
    tokens: list[str] = []
    for t in _IDENT.findall(_drop_parameter_lists(_strip(name, spaces=True))):
        if t not in _NOT_SPELLED and t not in tokens:
            tokens.append(t)
    return ".*".join(re.escape(t) for t in tokens[:MAX_TOKENS])


def kernels_regex(names: Iterable[str]) -> str:
    """One regular expression for ncu's ``--kernel-name regex:`` (with
    ``--kernel-name-base mangled``) matching each of ``names`` (:func:`name_pattern`)."""
    patterns = dict.fromkeys(name_pattern(n) for n in names)
    return "|".join(f"({p})" for p in patterns if p)
