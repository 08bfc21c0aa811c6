"""Capture by rerunning a job under an external tool: ``profkit ncu`` reruns the command
under Nsight Compute, limited to the kernels an analysis named, and keeps what it measured
in the run directory's ``ncu/`` folder (:mod:`.ncu_capture`).
"""
