"""The in-job summary of ``profile(summarize=True)``: each rank reduces its own trace and
hands the result to rank 0 through the job's key-value store (:mod:`.store`), and rank 0
writes the run's analysis into the run directory when the capture ends
(:mod:`.summarize`). The only part of the capture side that uses the analyzers (and with
them pandas), imported inside functions only.
"""
