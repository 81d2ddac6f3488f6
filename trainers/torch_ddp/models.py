"""The bundled models: an MLP, a small ResNet-style CNN for 8x8 digits, a GPT-style decoder.

Each model lists its `shard_units()`: the submodules FSDP2 wraps one by one before the root,
so parameters are gathered per block rather than all at once.
"""

from __future__ import annotations

import math
from itertools import pairwise

import torch
import torch.nn.functional as F
from torch import nn

from trainstack.trainers.common.config import TrainConfig


class MLP(nn.Module):
    def __init__(self, in_features: int, hidden: int, classes: int, depth: int = 3) -> None:
        super().__init__()
        dims = [in_features] + [hidden] * (depth - 1)
        self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in pairwise(dims))
        self.head = nn.Linear(hidden, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.flatten(1)
        for layer in self.layers:
            x = F.relu(layer(x))
        return self.head(x)

    def shard_units(self) -> list[nn.Module]:
        return [*self.layers, self.head]


class ResBlock(nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.norm1 = nn.GroupNorm(8 if channels % 8 == 0 else 1, channels)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.norm2 = nn.GroupNorm(8 if channels % 8 == 0 else 1, channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.relu(self.norm1(self.conv1(x)))
        return F.relu(x + self.norm2(self.conv2(y)))


class SmallResNet(nn.Module):
    """Stem, two residual blocks at 8x8, one at 4x4, global pooling; GroupNorm rather than
    BatchNorm so the result does not depend on the per-rank batch split."""

    def __init__(self, in_channels: int, channels: int, classes: int) -> None:
        super().__init__()
        self.stem = nn.Conv2d(in_channels, channels, 3, padding=1)
        self.blocks = nn.ModuleList([ResBlock(channels), ResBlock(channels), ResBlock(channels)])
        self.head = nn.Linear(channels, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.stem(x))
        x = self.blocks[0](x)
        x = self.blocks[1](x)
        x = F.avg_pool2d(x, 2)
        x = self.blocks[2](x)
        return self.head(x.mean(dim=(2, 3)))

    def shard_units(self) -> list[nn.Module]:
        return [*self.blocks]


class CausalSelfAttention(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(x).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(b, t, c))


class Block(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(dim)
        self.attn = CausalSelfAttention(dim, heads)
        self.ln2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    """nanoGPT-shaped decoder (pre-LayerNorm, learned positions, tied embedding/head)."""

    def __init__(self, vocab: int, seq_len: int, dim: int, layers: int, heads: int) -> None:
        super().__init__()
        self.seq_len = seq_len
        self.dim = dim
        self.layers = layers
        self.tok = nn.Embedding(vocab, dim)
        self.pos = nn.Embedding(seq_len, dim)
        self.blocks = nn.ModuleList(Block(dim, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)
        self.head.weight = self.tok.weight
        for name, p in self.named_parameters():
            if p.dim() >= 2:
                std = 0.02 / math.sqrt(2 * layers) if name.endswith("proj.weight") else 0.02
                nn.init.normal_(p, mean=0.0, std=std)
            elif name.endswith("bias"):
                nn.init.zeros_(p)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(idx.shape[1], device=idx.device)
        x = self.tok(idx) + self.pos(positions)
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))

    def shard_units(self) -> list[nn.Module]:
        return [*self.blocks]

    def flops_per_token(self) -> float:
        """Training FLOPs per token (forward and backward): 6 x the parameters of every matrix
        product plus the attention scores, 12 * layers * dim * seq_len (PaLM, appendix B).

        The matrix products' parameters are all parameters but the two embedding tables, with
        the tied output head (dim x vocab) counted back in: a lookup does no arithmetic, the
        head is the largest matrix product of a small model. LayerNorm weights and biases count
        too (13 * dim per block, under 0.2% for GPT-2 small), as in nanoGPT's MFU estimate.
        The attention term counts every (query, key) pair, as PaLM does, although causal
        flash attention skips about half of them.
        """
        params = sum(p.numel() for p in self.parameters())  # the tied head/table counted once
        matmul_params = params - self.pos.weight.numel()
        return 6.0 * matmul_params + 12.0 * self.layers * self.dim * self.seq_len


def build_model(cfg: TrainConfig, input_shape: tuple[int, ...], classes: int) -> nn.Module:
    if cfg.model == "gpt":
        return GPT(cfg.vocab_size, cfg.seq_len, cfg.gpt_dim, cfg.gpt_layers, cfg.gpt_heads)
    if cfg.model == "cnn":
        if len(input_shape) != 3:
            raise ValueError(f"model 'cnn' needs image input (C, H, W), got shape {input_shape}")
        return SmallResNet(input_shape[0], cfg.hidden_dim, classes)
    return MLP(math.prod(input_shape), cfg.hidden_dim, classes)


def flops_per_sample(model: nn.Module, cfg: TrainConfig) -> float | None:
    """Training FLOPs for one sample where known (GPT: per token times sequence length)."""
    if isinstance(model, GPT):
        return model.flops_per_token() * cfg.seq_len
    if isinstance(model, MLP):
        return 6.0 * sum(p.numel() for p in model.parameters())
    return None
