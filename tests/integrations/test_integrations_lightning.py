"""ProfkitCallback for a Lightning Trainer, for real on CPU: the lightning_train sample in
one process and under torchrun (2 ranks, gloo), and a fit() with gradient accumulation
that raises."""

from __future__ import annotations

import sys
import textwrap

import pytest

from tests.integrations.conftest import (
    TORCHRUN,
    check_run,
    needs,
    rank_status,
    run_job,
    sample,
)

pytestmark = needs("lightning")

JOB = textwrap.dedent("""
    import sys, torch
    import lightning.pytorch as pl
    from profkit.integrations.lightning import ProfkitCallback

    FAIL_AT = int(sys.argv[2])

    class Lit(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(8, 1)
        def training_step(self, batch, i):
            if i == FAIL_AT:
                raise ValueError("bad batch %d" % i)
            return self.layer(batch[0]).pow(2).mean()
        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(64, 8)),
                                       batch_size=2)
    cb = ProfkitCallback(sys.argv[1], wait=0, warmup=1, active=2, nvml=False)
    trainer = pl.Trainer(accelerator="cpu", devices=1, max_steps=6, logger=False,
                         enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, accumulate_grad_batches=2,
                         callbacks=[cb])
    trainer.fit(Lit(), data)
""")


def test_fit_one_process(tmp_path):
    run = tmp_path / "run"
    r = run_job([sys.executable, *sample("lightning_train.py", run)], tmp_path)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "PROFKIT_SAMPLE" in r.stdout
    check_run(run, world_size=1)


def test_a_fit_that_raises_counts_optimizer_steps(tmp_path):
    """With accumulate_grad_batches=2, batches 0-8 run before batch 9 raises: 4 optimizer
    steps (after batches 1, 3, 5, 7), not 9 batches; on_exception leaves a failed run."""
    script = tmp_path / "job.py"
    script.write_text(JOB)
    bad = run_job([sys.executable, str(script), str(tmp_path / "bad"), "9"], tmp_path)
    assert bad.returncode == 1 and "bad batch 9" in bad.stderr
    status = rank_status(tmp_path / "bad", 0)
    assert status["status"] == "failed" and status["error"]["type"] == "ValueError"
    assert status["steps"] == 4 and status["traces"] == ["rank0.pt.trace.json.gz"]


@pytest.mark.slow
def test_fit_two_ranks_gloo(tmp_path):
    run = tmp_path / "run"
    r = run_job([*TORCHRUN, *sample("lightning_train.py", run)], tmp_path, timeout=400)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    check_run(run, world_size=2)
