"""Column names and vocabularies of the Run tables: the one place they are spelled.

Every timestamp is int64 nanoseconds since the Unix epoch on the run's aligned clock
(``ts_ns``); every duration is int64 nanoseconds (``dur_ns``). Text columns with few
distinct values are pandas categoricals.
"""

from __future__ import annotations

from dataclasses import dataclass

# Bumped whenever the ingested tables change shape or meaning; part of the cache key.
TABLES_VERSION = 15  # 15: fp16 apart from bf16 in flops_dtype; 14: 13 and the layout branch's 11 (merged)
# 13: both of 12's changes (merged)
# 12: the memory table keeps each event's thread and failed allocations; "convert" kernels
# are no convolutions (cudnn convert_dq_to_16bits)
# 11: an fp8 _scaled_mm's precision is its operands' (not its fp32 scales'); (layout
# branch) coalesced send/recv kernels carry their group, and a peer column
# 10: the allocator's [memory] events are cached as a fifth table
# 9: the trace's counter ('C') samples are cached as a fourth table
# 8: a missing name, category or Input Dims is "" (it read "nan")
# 7: the header keeps thread names (the timeline names CPU threads)

# --- events: one row per complete ('X') event of one rank ------------------------------
TS_NS = "ts_ns"  # start, epoch ns on the aligned clock
DUR_NS = "dur_ns"  # duration, ns
NAME = "name"  # event name (categorical)
CAT = "cat"  # raw Kineto category, as written (categorical)
KIND = "kind"  # normalised kind, see KINDS (categorical)
CLASS = "cls"  # GPU work class, see CLASSES (categorical; "" on CPU events)
SUBCLASS = "subcls"  # finer class: gemm / all_reduce / HtoD ... (categorical)
PID = "pid"  # process id as written (GPU events: device index)
TID = "tid"  # thread id, or the stream for GPU events
STREAM = "stream"  # CUDA/HIP stream, -1 on CPU events
DEVICE = "device"  # GPU index, -1 on CPU events
CORRELATION = "correlation"  # links a runtime launch to its GPU work, -1 if absent
EXTERNAL_ID = "external_id"  # links a GPU event / runtime call to its CPU op, -1 if absent
STEP = "step"  # ProfilerStep number the event belongs to, -1 if none
BLOCKS_PER_SM = "blocks_per_sm"  # kernels only, NaN otherwise
OCCUPANCY_PCT = "occupancy_pct"  # kernels: 'est. achieved occupancy %', NaN otherwise
FLOPS = "flops"  # CPU ops: the trace's count, else from input shapes (profkit.classify.flops); NaN otherwise
BYTES = "bytes"  # memcpy / memset bytes, NaN otherwise
FLOPS_DTYPE = "flops_dtype"  # CPU ops with a FLOP or cost formula: precision of their inputs
# (profkit.classify.flops.PRECISIONS), "" when unknown or not such an op (categorical)
INPUT_DIMS = "input_dims"  # CPU ops recorded with shapes: their ``Input Dims`` as JSON text,
# e.g. "[[8, 512, 1024], [3072, 1024], []]"; "" when absent (categorical)
# CPU ops with a cost formula (profkit.classify.traffic), from input shapes and dtypes; NaN
# otherwise (float32): the bytes their kernels read and write in device memory (compulsory
# traffic), and the FLOPs of ops outside the matmul / conv / attention formulas of ``flops``
# (elementwise, norms, reductions, optimizers: a few per element, on the vector units).
OP_READ_BYTES = "op_read_bytes"
OP_WRITE_BYTES = "op_write_bytes"
VECTOR_FLOPS = "vector_flops"

EVENT_COLUMNS = (
    TS_NS, DUR_NS, NAME, CAT, KIND, CLASS, SUBCLASS, PID, TID, STREAM, DEVICE,
    CORRELATION, EXTERNAL_ID, STEP, BLOCKS_PER_SM, OCCUPANCY_PCT, FLOPS, BYTES, FLOPS_DTYPE,
    INPUT_DIMS, OP_READ_BYTES, OP_WRITE_BYTES, VECTOR_FLOPS,
)
COST_COLUMNS = (OP_READ_BYTES, OP_WRITE_BYTES, VECTOR_FLOPS)

# Normalised event kinds.
KIND_KERNEL = "kernel"
KIND_MEMCPY = "memcpy"
KIND_MEMSET = "memset"
KIND_GPU_ANNOTATION = "gpu_annotation"
KIND_CPU_OP = "cpu_op"
KIND_ANNOTATION = "annotation"
KIND_RUNTIME = "runtime"
KIND_DRIVER = "driver"
KIND_PYTHON = "python"
KIND_SYNC = "sync"
KIND_OTHER = "other"
GPU_KINDS = (KIND_KERNEL, KIND_MEMCPY, KIND_MEMSET)
KINDS = GPU_KINDS + (
    KIND_GPU_ANNOTATION, KIND_CPU_OP, KIND_ANNOTATION, KIND_RUNTIME, KIND_DRIVER,
    KIND_PYTHON, KIND_SYNC, KIND_OTHER,
)

# GPU work classes (the CLASS column).
CLS_COMPUTE = "compute"
CLS_COMMUNICATION = "communication"
CLS_MEMCPY = "memcpy"
CLS_MEMSET = "memset"
CLASSES = (CLS_COMPUTE, CLS_COMMUNICATION, CLS_MEMCPY, CLS_MEMSET)

# --- collectives: one row per collective as seen by one rank -----------------------------
# ts_ns / dur_ns are the collective's time where it ran: the NCCL kernel on the GPU, or the
# CPU op for CPU backends (gloo).
COLL_NAME = "collective"  # normalised: all_reduce, all_gather, reduce_scatter, ...
PG_NAME = "pg_name"
PG_DESC = "pg_desc"
PG_RANKS = "pg_ranks"  # as written, e.g. "[0, 1]" (truncated by PyTorch above 30 ranks)
GROUP_SIZE = "group_size"
SEQ = "seq"  # per-process-group sequence number, -1 if the trace lacks it
COMMS_ID = "comms_id"  # identical on every rank for one collective, "" if absent
DTYPE = "dtype"
IN_NELEMS = "in_nelems"
OUT_NELEMS = "out_nelems"
MSG_BYTES = "bytes"  # full buffer bytes used for algbw/busbw (max of in/out)
CPU_TS_NS = "cpu_ts_ns"  # start of the CPU op that issued it, -1 if not found
PEER = "peer"  # a send's or recv's other rank, within its group; -1 for collectives
ON_GPU = "on_gpu"  # True when ts_ns/dur_ns are the device kernel's, False for CPU (gloo)

COLLECTIVE_COLUMNS = (
    TS_NS, DUR_NS, COLL_NAME, PG_NAME, PG_DESC, PG_RANKS, GROUP_SIZE, SEQ, COMMS_ID,
    DTYPE, IN_NELEMS, OUT_NELEMS, MSG_BYTES, STREAM, CORRELATION, EXTERNAL_ID,
    CPU_TS_NS, ON_GPU, STEP, PEER,
)

# --- counters: long format, one row per sample and metric --------------------------------
# Two sources share the table. NVML samples of a profkit run (profkit.run.counters) name the
# metric with its unit: sm_clock_mhz, power_w, gpm_tensor_active_pct; their DEVICE is the GPU
# index. The trace's own counter events ('C' phase: memory, AMD counters ...) are named
# TRACE_METRIC_PREFIX + "<counter name>/<series>" in the trace's own units (which it does
# not state); their DEVICE is the GPU whose events the trace writes under the same pid, else -1.
METRIC = "metric"
VALUE = "value"  # float64
COUNTER_COLUMNS = (TS_NS, DEVICE, METRIC, VALUE)
TRACE_METRIC_PREFIX = "trace:"

# --- memory: one row per allocation or free of PyTorch's caching allocator -----------------
# Kineto's "[memory]" instant events (profile_memory=True), as written: DEVICE is their
# Device Id (-1 on the CPU), BYTES is signed (negative on a free), the totals are the
# allocator's on that device after the event; STEP is the CPU ProfilerStep holding ts_ns;
# TID is the CPU thread that allocated or freed (its ops enclose the event).
DEVICE_TYPE = "device_type"  # c10::DeviceType as written: DEVICE_TYPE_CPU, DEVICE_TYPE_CUDA ...
DEVICE_TYPE_CPU = 0
DEVICE_TYPE_CUDA = 1  # ROCm builds of PyTorch write their GPUs as CUDA too
ALLOCATED_BYTES = "allocated_bytes"  # "Total Allocated": bytes in live tensors
RESERVED_BYTES = "reserved_bytes"  # "Total Reserved": bytes the allocator holds from the driver
ADDR = "addr"  # the block's address, -1 when the trace does not write it
OUT_OF_MEMORY = "out_of_memory"  # True: an allocation that failed ("[OutOfMemory]": BYTES is
# the size asked for, the totals are the allocator's then, no address), not an allocation
MEMORY_COLUMNS = (TS_NS, DEVICE, DEVICE_TYPE, BYTES, ALLOCATED_BYTES, RESERVED_BYTES, ADDR, STEP,
                  TID, OUT_OF_MEMORY)

# --- steps: one row per ProfilerStep of one rank ----------------------------------------
# ts_ns / dur_ns are the CPU ProfilerStep range. The GPU runs behind the CPU, so the GPU
# work launched in a step (by correlation) can end long after it: gpu_ts_ns / gpu_end_ns
# bound that work (-1 when the step launched none). A step's span is the union of both.
GPU_START_NS = "gpu_ts_ns"
GPU_END_NS = "gpu_end_ns"
STEP_COLUMNS = (STEP, TS_NS, DUR_NS, GPU_START_NS, GPU_END_NS)


# --- the rank tables: what every stage of loading does with each -------------------------
@dataclass(frozen=True)
class RankTable:
    """One per-rank table, declared once: ingest builds it, the cache stores it, the loader
    joins a rank's profiler cycles and moves it onto the run's clock by these facts alone.

    ``name`` is its key in the ingested tables, its cache file's part and its attribute on
    :class:`profkit.model.RankData`. ``time_columns`` hold epoch ns on the rank's own clock
    until ``align_clock`` shifts them; those also in ``optional_times`` are -1 where absent
    and a negative value there is left as is. ``step_column`` holds ProfilerStep numbers,
    renumbered where joined cycles repeat them (None: no such column). ``cached``: whether
    the ingest cache stores it (a table built after ingest is not)."""

    name: str
    columns: tuple[str, ...]
    time_columns: tuple[str, ...] = (TS_NS,)
    optional_times: tuple[str, ...] = ()
    step_column: str | None = STEP
    cached: bool = True


RANK_TABLES = (
    RankTable("events", EVENT_COLUMNS),
    RankTable("collectives", COLLECTIVE_COLUMNS, (TS_NS, CPU_TS_NS), (CPU_TS_NS,)),
    RankTable("steps", STEP_COLUMNS, (TS_NS, GPU_START_NS, GPU_END_NS),
              (GPU_START_NS, GPU_END_NS)),
    RankTable("counters", COUNTER_COLUMNS, step_column=None),
    RankTable("memory", MEMORY_COLUMNS),
)

DTYPE_BYTES = {
    "float": 4, "float32": 4, "double": 8, "float64": 8, "half": 2, "float16": 2,
    "bfloat16": 2, "c10::bfloat16": 2, "c10::half": 2, "int": 4, "int32": 4, "long": 8,
    "int64": 8, "char": 1, "byte": 1, "int8": 1, "uint8": 1, "bool": 1, "short": 2,
    "int16": 2, "float8_e4m3fn": 1, "float8_e5m2": 1, "complexfloat": 8, "complexdouble": 16,
}
