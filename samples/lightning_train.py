"""Train the samples' small GPT (model.py) on random tokens with a Lightning ``Trainer``,
profiled by the one added line ``callbacks=[ProfkitCallback(run_dir)]``.

    python samples/lightning_train.py --out RUN                                  # one GPU
    torchrun --standalone --nproc_per_node 2 samples/lightning_train.py --out RUN   # DDP
    python samples/lightning_train.py --tiny --device cpu --out RUN              # CPU smoke run

bf16-mixed on CUDA, fp32 on CPU. Uses the ``lightning`` package, else ``pytorch_lightning``.
"""

from __future__ import annotations

import common
import frameworks
import torch
import torch.nn.functional as F
from model import GPT, GPTConfig

try:
    import lightning.pytorch as pl
except ImportError:
    import pytorch_lightning as pl


class LitGPT(pl.LightningModule):
    def __init__(self, cfg: GPTConfig, clock: common.StepClock):
        super().__init__()
        self.model, self.clock, self.vocab = GPT(cfg), clock, cfg.vocab_size
        self.last_loss = float("nan")

    def training_step(self, batch, batch_idx):
        logits = self.model(batch["input_ids"])
        return F.cross_entropy(logits.float().view(-1, self.vocab), batch["labels"].reshape(-1))

    def on_train_start(self):
        self.clock.tick()

    def on_train_batch_end(self, outputs, batch, batch_idx):
        self.clock.tick()
        self.last_loss = outputs["loss"].detach()

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=3e-4)


def trainer_for(args, env: common.Env, callbacks: list) -> pl.Trainer:
    cuda = env.is_cuda
    return pl.Trainer(
        accelerator="gpu" if cuda else "cpu", devices=frameworks.local_world_size(),
        num_nodes=env.world_size // frameworks.local_world_size(),
        strategy="ddp" if env.distributed else "auto", max_steps=args.steps,
        precision="bf16-mixed" if cuda else "32-true", logger=False,
        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
        num_sanity_val_steps=0, callbacks=callbacks)


def main(argv: list[str] | None = None) -> None:
    # batch 48: three times the 11 ms that batch 16 took per step on one H100
    args = frameworks.parse_args(__doc__.split("\n")[0], "lightning_train", argv, batch=48)
    device = frameworks.device_of(args)
    env = frameworks.env_of(device)
    clock = common.StepClock(device)
    profiler = frameworks.profkit_callback("lightning", args, device)
    cfg = GPTConfig(vocab_size=args.vocab, max_seq=args.seq, n_layer=args.layers,
                    dim=args.dim, n_head=args.heads)
    torch.manual_seed(0)
    module = LitGPT(cfg, clock)
    data = torch.utils.data.DataLoader(
        frameworks.RandomTokens(args.steps * args.batch * env.world_size, args.seq,
                                args.vocab), batch_size=args.batch)
    trainer = trainer_for(args, env, [profiler] if profiler else [])
    trainer.fit(module, data)
    common.report(args, env, "lightning_train", clock.step_ms(), framework="lightning",
                  batch=args.batch, seq=args.seq, layers=args.layers, dim=args.dim,
                  final_loss=round(float(module.last_loss), 4))


if __name__ == "__main__":
    main()
