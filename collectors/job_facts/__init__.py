"""What the capture side knows of the job it runs in: this process's rank and the few
control collectives over the ranks (:mod:`.dist`), the ``run.json`` document (versions,
GPUs, environment knobs, process groups, status values: :mod:`.run_document`), and the
dump of PyTorch's NCCL flight recorder (:mod:`.flight_dump`).

torch is imported only inside functions, when a capture needs it.
"""
