"""What is measured, per rank and across ranks: the charged-time model (every instant of a step
has one cause), steps, kernels, communication and stragglers, transfers, efficiency, device
peaks. Tables only: turning them into findings is :mod:`profkit.analyzers.findings`'s job."""
