"""profkit: GPU profiling and bottleneck analysis for PyTorch training and inference."""

from __future__ import annotations

__version__ = "0.1.0"
