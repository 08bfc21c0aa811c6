"""Train a small GPT-2 (random weights from a config, random tokens) with the Hugging Face
``Trainer``, profiled by the one added line ``callbacks=[ProfkitCallback(run_dir)]``.

    python samples/hf_trainer.py --out RUN                                  # one GPU
    torchrun --standalone --nproc_per_node 2 samples/hf_trainer.py --out RUN   # DDP
    python samples/hf_trainer.py --tiny --device cpu --out RUN              # CPU smoke run

bf16 on CUDA. Needs transformers and accelerate; no hub access (HF_HUB_OFFLINE=1 is set).
"""

from __future__ import annotations

import os
import tempfile

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the model comes from a config, never the hub

import common  # noqa: E402
import frameworks  # noqa: E402
from transformers import (  # noqa: E402
    GPT2Config,
    GPT2LMHeadModel,
    Trainer,
    TrainerCallback,
    TrainingArguments,
)


class _Clock(TrainerCallback):
    def __init__(self, clock: common.StepClock):
        self.clock = clock

    def on_train_begin(self, args, state, control, **kwargs):
        self.clock.tick()

    def on_step_end(self, args, state, control, **kwargs):
        self.clock.tick()


def build_model(args) -> GPT2LMHeadModel:
    cfg = GPT2Config(n_layer=args.layers, n_embd=args.dim, n_head=args.heads,
                     n_positions=args.seq, vocab_size=args.vocab, bos_token_id=0,
                     eos_token_id=0, use_cache=False)
    return GPT2LMHeadModel(cfg)


def training_args(args, env, output_dir: str) -> TrainingArguments:
    cuda = env.is_cuda
    return TrainingArguments(
        output_dir=output_dir, max_steps=args.steps, per_device_train_batch_size=args.batch,
        learning_rate=3e-4, bf16=cuda, use_cpu=not cuda, seed=0, report_to=[],
        save_strategy="no", logging_strategy="no", disable_tqdm=True,
        dataloader_num_workers=0, ddp_backend="gloo" if env.distributed and not cuda else None)


def main(argv: list[str] | None = None) -> None:
    # batch 16: 24 ms per step unprofiled, 29 ms profiled on one H100
    args = frameworks.parse_args(__doc__.split("\n")[0], "hf_trainer", argv, batch=16)
    device = frameworks.device_of(args)
    env = frameworks.env_of(device)
    clock = common.StepClock(device)
    profiler = frameworks.profkit_callback("hf", args, device)
    data = frameworks.RandomTokens(args.steps * args.batch * env.world_size, args.seq,
                                   args.vocab)
    with tempfile.TemporaryDirectory() as scratch:  # Trainer output: nothing is saved
        trainer = Trainer(model=build_model(args), args=training_args(args, env, scratch),
                          train_dataset=data,
                          callbacks=[_Clock(clock)] + ([profiler] if profiler else []))
        result = trainer.train()
    common.report(args, env, "hf_trainer", clock.step_ms(), framework="transformers",
                  batch=args.batch, seq=args.seq, layers=args.layers, dim=args.dim,
                  final_loss=round(float(result.training_loss), 4))


if __name__ == "__main__":
    main()
