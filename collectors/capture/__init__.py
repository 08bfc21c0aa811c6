"""One capture into one run directory, the parts behind :func:`profkit.profile`: its
settings (:mod:`.profile_config`), the session that runs the torch profiler and the NVML
sampler and writes the status files (:mod:`.session`), saving a cycle's trace
(:mod:`.saved_trace`), what a failed write lost (:mod:`.losses`), SIGTERM handling
(:mod:`.signals`) and the on-demand triggers (:mod:`.trigger`).
"""
