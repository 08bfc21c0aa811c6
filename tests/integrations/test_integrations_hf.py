"""ProfkitCallback for transformers.Trainer, for real on CPU: the hf_trainer sample in one
process and under torchrun (2 ranks, gloo), and a Trainer whose training raises."""

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

pytestmark = [needs("transformers"), needs("accelerate")]

FAILING = textwrap.dedent("""
    import sys, torch
    from transformers import (GPT2Config, GPT2LMHeadModel, Trainer, TrainerCallback,
                              TrainingArguments)
    from profkit.integrations.hf import ProfkitCallback

    class Data(torch.utils.data.Dataset):
        def __len__(self):
            return 64
        def __getitem__(self, i):
            ids = torch.randint(64, (9,), generator=torch.Generator().manual_seed(i))
            return {"input_ids": ids[:-1], "labels": ids[1:]}

    class Boom(TrainerCallback):  # the training loop raises after 6 optimizer steps
        def on_step_begin(self, args, state, control, **kwargs):
            if state.global_step == 6:
                raise ValueError("boom at step %d" % state.global_step)

    model = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=16, n_head=2, n_positions=8,
                                       vocab_size=64, bos_token_id=0, eos_token_id=0))
    args = TrainingArguments(output_dir=sys.argv[1], max_steps=10, use_cpu=True,
                             per_device_train_batch_size=2, report_to=[], save_strategy="no",
                             logging_strategy="no", disable_tqdm=True)
    Trainer(model=model, args=args, train_dataset=Data(),
            callbacks=[ProfkitCallback(wait=0, warmup=1, active=2, nvml=False), Boom()]).train()
""")


def test_trainer_one_process(tmp_path):
    run = tmp_path / "run"
    r = run_job([sys.executable, *sample("hf_trainer.py", run)], tmp_path)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "PROFKIT_SAMPLE" in r.stdout
    check_run(run, world_size=1)


def test_trainer_that_raises_leaves_a_failed_run(tmp_path):
    script = tmp_path / "job.py"
    script.write_text(FAILING)
    r = run_job([sys.executable, str(script), str(tmp_path / "out")], tmp_path)
    assert r.returncode == 1 and "boom at step 6" in r.stderr
    status = rank_status(tmp_path / "out" / "profkit", 0)  # default: <output_dir>/profkit
    assert status["status"] == "failed" and status["error"]["type"] == "ValueError"
    assert "boom at step 6" in status["error"]["message"] and status["steps"] == 6
    assert status["traces"] == ["rank0.pt.trace.json.gz"]  # the cycle done before it failed


@pytest.mark.slow
def test_trainer_two_ranks_gloo(tmp_path):
    run = tmp_path / "run"
    r = run_job([*TORCHRUN, *sample("hf_trainer.py", run)], tmp_path, timeout=400)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    check_run(run, world_size=2)
