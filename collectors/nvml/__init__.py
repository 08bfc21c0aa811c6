"""GPU counters sampled beside the trace, written to the run directory's ``nvml/`` folder:
the background sampler thread and its chunk files (:mod:`.sampler`), one NVML reading of
one GPU (:mod:`.gpu_reader`, with the field values of :mod:`.field_reader`), and the
optional dcgm-exporter source whose rows land in the same chunks (:mod:`.dcgm`).

pynvml is imported only when a sampler starts; tests pass a fake module instead.
"""
