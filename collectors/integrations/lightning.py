"""profkit capture for a Lightning ``Trainer`` (package ``lightning``, or the standalone
``pytorch_lightning``)::

    from profkit.integrations.lightning import ProfkitCallback
    trainer = lightning.pytorch.Trainer(max_steps=100, callbacks=[ProfkitCallback("runs/pl")])

One profiler step per optimizer step (when ``trainer.global_step`` advances, so gradient
accumulation and manual optimization count optimizer steps too). ``pip install
'profkit[lightning]'`` installs lightning.
"""

from __future__ import annotations

import os
from typing import Any

from profkit.integrations.capture import TrainerCapture

try:
    from lightning.pytorch import Callback
except ImportError:
    try:
        from pytorch_lightning import Callback
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError("profkit.integrations.lightning needs lightning: "
                          "pip install 'profkit[lightning]'") from e


class ProfkitCallback(Callback):
    """Profile ``trainer.fit()`` into ``run_dir`` (default ``$PROFKIT_RUN_DIR``, else
    ``<default_root_dir>/profkit``). Keyword arguments go to :func:`profkit.profile`
    (``wait``, ``warmup``, ``active``, ``repeat``, ``schedule``, ``nvml``, ...)."""

    def __init__(self, run_dir: str | os.PathLike | None = None, **profile_kwargs: Any):
        self.capture = TrainerCapture(run_dir, profile_kwargs)
        self._global_step = 0

    def on_train_start(self, trainer, pl_module):
        self._global_step = trainer.global_step
        self.capture.start(trainer.default_root_dir)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if trainer.global_step != self._global_step:  # an optimizer step happened
            self._global_step = trainer.global_step
            self.capture.step()

    def on_train_end(self, trainer, pl_module):
        self.capture.stop()

    def on_exception(self, trainer, pl_module, exception):
        self.capture.stop(exception)

    @property
    def run_dir(self):
        """The run directory written (None before training starts)."""
        return self.capture.dir
