"""Every threshold the analyzers use, in one place, with where it comes from.

Numbers are fractions of step time unless the name says otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True, kw_only=True)
class Thresholds:
    data_loading_frac: float = 0.05
    """DataLoader time above this share of the step: more workers, pinned memory (TensorBoard plugin)."""
    communication_frac: float = 0.10
    """Exposed communication above this share: overlap, bucket sizes (TensorBoard plugin)."""
    host_sync_frac: float = 0.05
    """Idle time after blocking host synchronisations above this share: remove per-step syncs."""
    cpu_launch_frac: float = 0.15
    """GPU idle waiting for launches above this share: CUDA graphs / torch.compile
    (TensorRT-LLM host analysis uses GPU idle > 30%, 15% under CUDA graphs)."""
    host_work_frac: float = 0.15
    """GPU idle while the host works without launching (a CPU optimizer, preprocessing,
    Python between launches) above this share: move that work off the critical path (as
    cpu_launch_frac)."""
    transfer_frac: float = 0.10
    """GPU time in memory copies (not hidden under compute) above this share: move fewer
    bytes, overlap copies (the TensorBoard plugin's 10% for exposed communication)."""
    held_work_frac: float = 0.15
    """GPU idle while launched work waits (on a stream, an event) above this share: look at
    the dependencies (as cpu_launch_frac, the GPU waits on something other than compute)."""
    pipeline_bubble_frac: float = 0.10
    """A pipeline stage waiting for its neighbours (the pipeline bubble) above this share of
    the step: more microbatches, 1F1B / interleaved schedules, balanced stages (as
    communication_frac: time the GPU does not compute because of the parallel layout)."""
    gpu_util_low_frac: float = 0.50
    """GPU busy below this share of the step: larger batch (TensorBoard plugin)."""
    short_kernel_ns: int = 10_000
    """Kernels shorter than this are 'short' (peers flag < 10 us)."""
    launch_delay_ns: int = 100_000
    """Launch delay above this is flagged (peers: > 100 us)."""
    slow_runtime_call_ns: int = 50_000
    """CUDA runtime calls above this are flagged (peers: > 50 us)."""
    kernel_wait_gap_ns: int = 30_000
    """Idle gaps shorter than this between back-to-back kernels count as launch latency (HTA)."""
    peak_memory_frac: float = 0.90
    """Peak memory above this share of capacity: activation checkpointing / AMP."""
    memory_headroom_min_x: float = 2.0
    """The batch could grow at least this many times before out-of-memory (the allocator's
    transient memory per step scaled against the device's): said as headroom (info)."""
    fragmentation_ratio: float = 1.30
    """The allocator's reserved peak at least this many times its allocated peak (and
    fragmentation_min_bytes above it): fragmentation (expandable_segments)."""
    fragmentation_min_bytes: float = 1e9
    """Reserved beyond allocated below this is no fragmentation finding, whatever the ratio."""
    allocator_churn_min_calls: float = 2.0
    """cudaMalloc / cudaFree calls per used step from this many: allocator churn."""
    short_kernel_count_frac: float = 0.50
    """Short kernels at least this share of a rank's kernels, while kernels fill less than
    gpu_util_low_frac of the step: launch-bound (CUDA graphs / torch.compile)."""
    launch_api_frac: float = 0.10
    """Launch API calls (cudaLaunchKernel ...) above this share of the step: launch overhead
    (TensorRT-LLM host analysis: launch API time > 10% of the window)."""
    fusion_min_count: int = 10
    """A sequence of short kernels repeated at least this many times is a fusion candidate."""
    recompute_frac: float = 0.05
    """Activation recompute taking at least this share of the GPU time is a finding: what
    turning checkpointing off (or checkpointing selectively) would save, and whether the
    activations would fit (analyzers/measure/recompute.py)."""
    fp8_whatif_gemm_frac: float = 0.30
    """On Hopper and later, bf16 GEMMs taking at least this share of the step get an fp8
    what-if (an estimate at an achievable share of the fp8 peak)."""
    phase_busy_frac: float = 0.60
    """An inference phase whose GPU is busy at least this share of its time is judged against
    its roof (decode: HBM bandwidth; prefill: the math peak); below it the host bounds it and
    the part findings speak (analyzers/findings/inference.py)."""
    decode_hbm_low_frac: float = 0.50
    """A GPU-busy decode moving its bytes below this share of the HBM bandwidth, the weights
    most of them, is a small batch: batch more (memory-bound decode reaches 0.6-0.8 of the
    bandwidth in tuned engines)."""
    phase_min_share: float = 0.20
    """A prefill taking less than this share of the step is not worth a finding of its own."""
    low_mfu_frac: float = 0.20
    """MFU below this is flagged (well-tuned bf16 LLM training reaches ~0.35-0.55)."""
    min_flop_coverage_frac: float = 0.50
    """MFU is judged only when ops with known FLOPs launched at least this share of the
    compute-kernel time that may carry FLOPs (analyzers/measure/flopcount.py); below it the counted
    FLOP/s are only a lower bound. Seen: 0.7-1.0 on eager training and inference traces
    recorded with shapes (samples/runs, ResNets, Qwen, BERT), 0.3-0.4 with fbgemm custom
    ops, 0-0.1 on CUDA-graph replays and custom-op MoE models."""
    roofline_latency_ns: int = 5_000
    """A kernel whose work takes less than this at the device's roofs (FLOPs at the compute
    peak, bytes at the HBM peak) is latency-bound: launch and ramp-up, 2-5 us per kernel on
    current GPUs, dominate (docs/roofline.md)."""
    memory_bound_frac: float = 0.25
    """Memory-bound kernels (roofline) taking at least this share of the step: say so, with
    the ops and the fix (fusion, fused optimizers, channels_last, a better implementation)."""
    precision_min_gemm_frac: float = 0.20
    """fp32 GEMMs off the tensor cores are worth a finding only when GEMMs take at least this
    share of the step: a GNN whose GEMMs are 7% of it gains little from tensor cores."""
    flops_per_step: float | None = None
    """Model FLOPs of one step on one rank (e.g. 6 x parameters x tokens for a dense
    transformer), used instead of the FLOPs counted from the trace; MFU is then judged
    whatever the coverage."""
    peak_tflops: float | None = None
    """Dense peak TFLOP/s of one device to judge MFU against, instead of the device table's
    peak for the precisions the GEMMs ran in (analyzers/measure/devices.py)."""
    straggler_max_p_value: float = 0.01
    """A rank is a straggler when it arrives last so often that chance (each of a collective's
    n ranks last with probability 1/n) explains it with probability below this..."""
    straggler_min_wait_frac: float = 0.05
    """...and the others' exposed wait for it (GPU doing nothing but the collective) is at
    least this share of their step time. Raw wait would flag zoo/balanced (11% of the step,
    hidden behind DDP's backward) next to zoo/straggler (exposed 14%; balanced: 0.7%)."""
    straggler_min_collectives: int = 5
    """...judged only over at least this many matched collectives (fewer: no evidence)."""
    straggler_critical_wait_frac: float = 0.10
    """A straggler costing the others this share of their step or more is critical (as the
    TensorBoard plugin's 10% for communication)."""
    low_link_util_frac: float = 0.25
    """Large collectives whose bus bandwidth is below this share of the link's peak are flagged."""
    slow_group_factor: float = 1.5
    """A process group whose collectives take at least this many times as long as the same
    collectives (name, size, group size) in its peer groups has a slow link: NCCL's own
    collectives on a healthy fabric vary by far less between identical groups."""
    slow_group_min_collectives: int = 5
    """...judged on at least this many of its matched collectives."""
    step_outlier_frac: float = 0.25
    """A recorded step whose time is more than this share above (or below 1/(1+x) of) the
    median of the others is left out of verdicts: the first and last recorded steps carry
    profiler start-up and the final drain (a public ResNet-50 trace: +32% and +53%), and a
    step in the middle that far out is a one-off (checkpoint, evaluation). Steady steps of
    the labelled runs vary by a few percent."""
    compile_step_frac: float = 0.05
    """A recorded step at least this share of which is compilation (torch.compile's Dynamo,
    AOTAutograd, Inductor ranges, Triton autotuning) is left out of verdicts: its time is the
    compiler's, not the workload's (when every step compiles, the rank gets no verdict).
    samples/runs/why/recompile compiles for 99% of each profiled step (2.6-3.0 s of 2.6-3.1 s
    steps, 22-34 ms left); its mark_dynamic twin and every other bundled capture and public
    trace record no compile range at all."""
    ncu_roof_frac: float = 0.60
    """Nsight Compute: a kernel whose busiest unit (DRAM or memory pipes vs SM pipes) runs
    below this share of its peak is latency-bound, not memory- or math-bound (the share
    Nsight Compute's own speed-of-light rule calls a good use of the hardware)."""
    ncu_hbm_roof_frac: float = 0.65
    """A memory-bound kernel moving DRAM bytes at this share of the HBM peak or more is at
    the roof: only moving fewer bytes (fusion) helps. Seen: PyTorch's eager elementwise
    kernels on an H100 at 0.70-0.91 (samples/runs/why/ncu)."""
    ncu_hbm_far_frac: float = 0.40
    """A memory-bound kernel (by its counters or by the shape-based estimate) below this
    share of the HBM peak is far below the roof: its access pattern or layout holds it back.
    Seen: a fused Triton reduction at 0.33, cuBLAS fp32 GEMMs at 0.05-0.07 (math-bound)."""
    ncu_tensor_idle_frac: float = 0.05
    """A math-bound kernel whose tensor pipes are busy less than this share of the time does
    its math without tensor cores. Seen: fp32 GEMMs 0.00, bf16 nvjet GEMMs 0.96-0.97."""
    ncu_bytes_factor: float = 2.0
    """Measured DRAM bytes per launch more than this factor above or below the shape-based
    estimate: the estimate and the kernel disagree (L2 reuse, broadcasts, extra passes, or
    shapes the estimate misread)."""
    ncu_min_share_frac: float = 0.02
    """Kernels below this share of all kernel time are measured but not judged."""
    diff_min_change_frac: float = 0.02
    """profkit diff: a step-time change smaller than this is 'unchanged' however quiet the runs."""
    diff_confidence: float = 0.95
    """profkit diff: confidence of the interval of the step-time change (Hodges-Lehmann shift
    with its Mann-Whitney interval over the steady steps of each side); a change is called
    only when the interval excludes zero."""
    diff_untested_min_change_frac: float = 0.25
    """profkit diff: with too few steady steps for that interval (3 and 3, say), a change is
    called only when the step is at least 1 + this times slower (or faster) and the two
    sides' steps do not overlap: as large as the step-to-step spread the step selection
    accepts as steady (step_outlier_frac, measured the same way), so spread alone cannot
    explain it."""
    diff_spread_x: float = 3.0
    """profkit diff: with too few steps for the interval, a change at least this many times
    the steps' own spread (each side's (max - min) / median, the larger of the sides with two
    or more steps), beyond diff_min_change_frac and with no step of one side reaching the
    other's, is called (as 'likely', not tested) below diff_untested_min_change_frac: two
    runs whose steps each agree within 2% that differ by 18% are not 'unchanged'."""
    diff_min_mix_overlap_frac: float = 0.20
    """profkit diff: two runs are different workloads (no verdict) when both the share of
    kernel time in kernels both ran and the overlap of their CPU op calls per step are below
    this. Seen: 0.8-1.0 between captures of one workload (0.33 of op calls after removing
    50 .item() syncs per step, kernels 0.83), 0.43-0.53 for one model on A100 vs V100,
    0.5-0.7 for DDP vs FSDP; 0.00-0.13 between different samples (inference vs training,
    matmuls vs a copy loop)."""

DEFAULT = Thresholds()


def with_mfu_options(thresholds: Thresholds | None, flops_per_step: float | None = None,
                     peak_tflops: float | None = None) -> Thresholds:
    """``thresholds`` (default: DEFAULT) with the MFU options that are given replaced."""
    options = {k: v for k, v in (("flops_per_step", flops_per_step),
                                 ("peak_tflops", peak_tflops)) if v is not None}
    return replace(thresholds or DEFAULT, **options)
