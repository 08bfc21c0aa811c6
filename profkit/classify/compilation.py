"""Compilation by name: the host ranges that torch.compile (Dynamo, AOTAutograd, Inductor) and
Triton autotuning record, each with its phase. One vocabulary, applied once per unique name.

Where the names come from (torch 2.11 in ``samples/runs/why/recompile``, torch 2.13's source):
``torch._dynamo.utils.dynamo_timed`` records every compile phase twice, as ``"<key>
(dynamo_timed)"`` and as its bare key or phase name (``dynamo``, ``entire_frame_compile``,
``_compile.compile_inner``, ``backend_compile``, ``create_aot_dispatcher_function``,
``entire_backward_compile``, ``inductor_compile``, ``compile_fx_inner``,
``fx_codegen_and_compile``, ``GraphLowering.*``, ``Scheduler.*``, ``async_compile.wait``, ...),
with zero-length ``"<key>_data: compile_id=0/3"`` annotations inside. Triton's runtime
autotuning of a freshly compiled kernel records ``CachingAutotuner.benchmark_all_configs``
(and ``coordinate_descent_tuning``, ``combo_sequential_autotune``) on its first call.

The names are listed one by one rather than taken from the ``(dynamo_timed)`` suffix: some
``dynamo_timed`` ranges run on every call of compiled code (``guard_collective``, the
distributed guard check), and the ranges of *running* compiled code are no compilation:
``Torch-Compiled Region: 0/3``, ``TorchDynamo Cache Lookup``, ``CompiledFunction``,
``CompiledFunctionBackward``, ``## Call CompiledFxGraph <key> ##``, ``AOTDispatcher Runtime
Wrapper Prologue``, the Triton kernels' own launch ranges (``triton_poi_fused_...``).
A compile phase not listed here runs inside one that is (``dynamo``, ``entire_backward_compile``,
``inductor_compile``), so the union of the listed ranges is the compile time.

TorchScript's profiling executor records no range of its own: its profiling runs and
optimisation passes run inside the scripted function's range, with no child that says so
(checked on torch 2.13), so it cannot be recognised by name.
"""

from __future__ import annotations

import re

import numpy as np

# Phases, innermost first: a range nested in another is charged to the inner phase.
COMPILE_PHASES = ("autotune", "inductor", "aot_autograd", "dynamo")
COMPILE_RULES = (
    ("autotune", r"^CachingAutotuner\.(?:benchmark_all_configs|coordinate_descent_tuning|"
                 r"combo_sequential_autotune|slow_precompile_config)|^autotune_select_algorithm|"
                 r"^AlgorithmSelectorCache\.|^inductor_do_bench_using_profiling$|"
                 r"^benchmark_codegened_module|^StaticAutotunerFuture\."),
    ("inductor", r"^inductor_compile$|^compile_fx(?:_inner|\.)|^fx_codegen_and_compile|"
                 r"^GraphLowering\.|^Scheduler\.|^async_compile\.wait|^PyCodeCache\.load|"
                 r"^code_gen$|^PythonWrapperCodegen\.|^CppWrapper(?:Cpu|Gpu)\.|^TritonBundler\.|"
                 r"^_recursive_(?:pre|post)_grad_passes|^pass\.(?:pre|post)_grad_passes\.|"
                 r"^additional_fake_tensor_prop|^compile_file"),
    ("aot_autograd", r"^backend_compile$|^OutputGraph\.call_user_compiler|"
                     r"^create_aot_dispatcher_function|^aot_(?:trace_joint_graph|collect_metadata)|"
                     r"^entire_backward_compile$|^backward\._backward_impl|"
                     r"^min_cut_rematerialization_partition|^_recursive_joint_graph_passes|"
                     r"^pass\.joint_graph_passes\.|^AOTAutogradCache\."),
    ("dynamo", r"^dynamo$|^entire_frame_compile$|^_compile\.(?:<locals>\.)?compile_inner|"
               r"^compile_attempt_\d+|^bytecode_tracing|^build_guards|^fullgraph_capture|"
               r"^compiled_autograd$"),
)
# A Dynamo frame compile (a compile or recompile of one frame), counted where outermost.
FRAME_COMPILE_RE = r"^(?:entire_frame_compile|_compile\.(?:<locals>\.)?compile_inner(?: \(dynamo_timed\))?)$"

# One match per name (every pattern is anchored at the name's start): the phase is the name of
# the alternative that matched.
_PHASE_RE = re.compile("|".join(f"(?P<{phase}>{rx})" for phase, rx in COMPILE_RULES))


def compile_phase(names: np.ndarray) -> np.ndarray:
    """The compile phase of each of ``names`` (unique host range names), '' where the name is
    no compilation: one of :data:`COMPILE_PHASES`."""
    out = np.full(len(names), "", dtype=object)
    for i, name in enumerate(names):
        match = _PHASE_RE.match(str(name))
        if match:
            out[i] = match.lastgroup
    return out
