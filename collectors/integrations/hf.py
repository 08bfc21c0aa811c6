"""profkit capture for the Hugging Face ``transformers.Trainer`` (also when the Trainer runs
under ``accelerate launch`` or ``torchrun``)::

    from profkit.integrations.hf import ProfkitCallback
    trainer = Trainer(model, args, train_dataset=ds, callbacks=[ProfkitCallback("runs/hf")])

One profiler step per optimizer step (``on_step_end``: after gradient accumulation).
``pip install 'profkit[hf]'`` installs transformers and accelerate.
"""

from __future__ import annotations

import os
from typing import Any

from profkit.integrations.capture import TrainerCapture

try:
    from transformers import TrainerCallback
except ImportError as e:  # pragma: no cover - depends on the environment
    raise ImportError("profkit.integrations.hf needs transformers: "
                      "pip install 'profkit[hf]'") from e


class ProfkitCallback(TrainerCallback):
    """Profile a ``Trainer.train()`` into ``run_dir`` (default ``$PROFKIT_RUN_DIR``, else
    ``<output_dir>/profkit``). Keyword arguments go to :func:`profkit.profile`
    (``wait``, ``warmup``, ``active``, ``repeat``, ``schedule``, ``nvml``, ...)."""

    def __init__(self, run_dir: str | os.PathLike | None = None, **profile_kwargs: Any):
        self.capture = TrainerCapture(run_dir, profile_kwargs)

    def on_train_begin(self, args, state, control, **kwargs):
        self.capture.start(args.output_dir)

    def on_step_end(self, args, state, control, **kwargs):
        self.capture.step()

    def on_train_end(self, args, state, control, **kwargs):
        self.capture.stop()

    @property
    def run_dir(self):
        """The run directory written (None before training starts)."""
        return self.capture.dir
