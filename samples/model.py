"""The one small GPT-style decoder-only transformer shared by the samples.

Token and learned position embeddings, N pre-LayerNorm blocks (causal self-attention through
``F.scaled_dot_product_attention`` and a GELU MLP), a final LayerNorm and a head tied to the
token embedding. ``forward`` takes an optional KV cache for incremental decoding.
"""

from __future__ import annotations

import dataclasses

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclasses.dataclass(frozen=True, kw_only=True)
class GPTConfig:
    vocab_size: int = 8192
    """Number of token ids."""
    max_seq: int = 1024
    """Longest sequence (prompt + generated tokens) the position table covers."""
    n_layer: int = 4
    dim: int = 512
    """Model width; must be a multiple of n_head."""
    n_head: int = 8
    mlp_ratio: int = 4
    """MLP hidden width = mlp_ratio * dim."""


class KVCache:
    """Preallocated keys and values of every layer: (n_layer, batch, n_head, max_seq, head_dim)."""

    def __init__(self, cfg: GPTConfig, batch: int, max_seq: int, *,
                 device: torch.device, dtype: torch.dtype) -> None:
        shape = (cfg.n_layer, batch, cfg.n_head, max_seq, cfg.dim // cfg.n_head)
        self.k = torch.zeros(shape, device=device, dtype=dtype)
        self.v = torch.zeros(shape, device=device, dtype=dtype)


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg: GPTConfig, layer: int) -> None:
        super().__init__()
        self.n_head = cfg.n_head
        self.layer = layer
        self.qkv = nn.Linear(cfg.dim, 3 * cfg.dim, bias=False)
        self.proj = nn.Linear(cfg.dim, cfg.dim, bias=False)

    def forward(self, x: torch.Tensor, cache: KVCache | None = None, pos: int = 0
                ) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(x).split(c, dim=2)
        q, k, v = (z.view(b, t, self.n_head, c // self.n_head).transpose(1, 2)
                   for z in (q, k, v))
        if cache is None:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            # Prefill (pos 0, t tokens) is causal over itself; a decode step (t == 1)
            # attends to every cached position, so no mask is needed.
            if t > 1 and pos != 0:
                raise ValueError("multi-token forward with a cache must start at pos 0")
            cache.k[self.layer, :, :, pos:pos + t] = k
            cache.v[self.layer, :, :, pos:pos + t] = v
            k = cache.k[self.layer, :, :, :pos + t]
            v = cache.v[self.layer, :, :, :pos + t]
            y = F.scaled_dot_product_attention(q, k, v, is_causal=t > 1)
        return self.proj(y.transpose(1, 2).reshape(b, t, c))


class MLP(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.fc = nn.Linear(cfg.dim, cfg.mlp_ratio * cfg.dim, bias=False)
        self.proj = nn.Linear(cfg.mlp_ratio * cfg.dim, cfg.dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(F.gelu(self.fc(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, cfg: GPTConfig, layer: int) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(cfg.dim)
        self.attn = CausalSelfAttention(cfg, layer)
        self.ln2 = nn.LayerNorm(cfg.dim)
        self.mlp = MLP(cfg)

    def forward(self, x: torch.Tensor, cache: KVCache | None = None, pos: int = 0
                ) -> torch.Tensor:
        x = x + self.attn(self.ln1(x), cache, pos)
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        if cfg.dim % cfg.n_head:
            raise ValueError(f"dim {cfg.dim} is not a multiple of n_head {cfg.n_head}")
        self.cfg = cfg
        self.tok_emb = nn.Embedding(cfg.vocab_size, cfg.dim)
        self.pos_emb = nn.Embedding(cfg.max_seq, cfg.dim)
        self.blocks = nn.ModuleList(Block(cfg, i) for i in range(cfg.n_layer))
        self.ln_f = nn.LayerNorm(cfg.dim)
        self.head = nn.Linear(cfg.dim, cfg.vocab_size, bias=False)
        self.head.weight = self.tok_emb.weight  # tied
        self.apply(_init_weights)

    def forward(self, idx: torch.Tensor, cache: KVCache | None = None, pos: int = 0
                ) -> torch.Tensor:
        """Logits (batch, tokens, vocab) for token ids idx (batch, tokens) at positions pos..."""
        t = idx.shape[1]
        positions = torch.arange(pos, pos + t, device=idx.device)
        x = self.tok_emb(idx) + self.pos_emb(positions)
        for block in self.blocks:
            x = block(x, cache, pos)
        return self.head(self.ln_f(x))


def _init_weights(module: nn.Module) -> None:
    if isinstance(module, (nn.Linear, nn.Embedding)):
        nn.init.normal_(module.weight, std=0.02)


def mlp(dim: int, layers: int) -> nn.Sequential:
    """``layers`` bias-free dim x dim Linear layers, each followed by a tanh GELU (the zoo's
    GEMM-bound MLP), on the CPU in fp32: the caller moves it."""
    blocks: list[nn.Module] = []
    for _ in range(layers):
        blocks += [nn.Linear(dim, dim, bias=False), nn.GELU("tanh")]
    return nn.Sequential(*blocks)
