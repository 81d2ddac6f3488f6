"""The bundled models in Keras 2 (tf-keras on TF >= 2.16, the built-in Keras below; see
`keras_setup`), shaped like the torch trainer's: an MLP, a small ResNet-style CNN with
GroupNorm (so results do not depend on the per-replica batch split) and a nanoGPT-shaped
decoder with a tied embedding/head.

Layers carry fixed names, so variable names (and `params_sha256`) do not depend on how many
models a process built before. Build under the strategy's scope: the variables are created
by `build_model`.
"""

from __future__ import annotations

import math
from typing import Any

import tensorflow as tf

from trainstack.trainers.common.config import TrainConfig
from trainstack.trainers.tf_multiworker.keras_setup import check_keras

keras: Any = check_keras(tf)


def _init(std: float = 0.02) -> Any:
    return keras.initializers.RandomNormal(stddev=std)


def mlp(input_shape: tuple[int, ...], hidden: int, classes: int, depth: int = 3) -> Any:
    inputs = keras.Input(shape=input_shape, name="x")
    x = keras.layers.Flatten(name="flatten")(inputs)
    for i in range(depth - 1):
        x = keras.layers.Dense(hidden, activation="relu", name=f"hidden_{i}")(x)
    outputs = keras.layers.Dense(classes, name="head")(x)
    return keras.Model(inputs, outputs, name="mlp")


def _groups(channels: int) -> int:
    return 8 if channels % 8 == 0 else 1


def _res_block(x: Any, channels: int, name: str) -> Any:
    y = keras.layers.Conv2D(channels, 3, padding="same", use_bias=False, name=f"{name}_conv1")(x)
    y = keras.layers.GroupNormalization(_groups(channels), name=f"{name}_norm1")(y)
    y = keras.layers.ReLU(name=f"{name}_relu1")(y)
    y = keras.layers.Conv2D(channels, 3, padding="same", use_bias=False, name=f"{name}_conv2")(y)
    y = keras.layers.GroupNormalization(_groups(channels), name=f"{name}_norm2")(y)
    return keras.layers.ReLU(name=f"{name}_out")(keras.layers.Add(name=f"{name}_add")([x, y]))


def cnn(input_shape: tuple[int, ...], channels: int, classes: int) -> Any:
    """Stem, two residual blocks at full resolution, one after 2x2 pooling, global pooling.
    Input is channels-last (H, W, C): TensorFlow's CPU convolutions support only NHWC."""
    inputs = keras.Input(shape=input_shape, name="x")
    x = keras.layers.Conv2D(channels, 3, padding="same", activation="relu", name="stem")(inputs)
    x = _res_block(x, channels, "block0")
    x = _res_block(x, channels, "block1")
    x = keras.layers.AveragePooling2D(2, name="pool")(x)
    x = _res_block(x, channels, "block2")
    x = keras.layers.GlobalAveragePooling2D(name="gap")(x)
    outputs = keras.layers.Dense(classes, name="head")(x)
    return keras.Model(inputs, outputs, name="cnn")


class _TiedHead(keras.layers.Layer):
    """Logits from the token embedding matrix (weight tying, as in the torch GPT)."""

    def __init__(self, embedding: Any, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.embedding = embedding

    def call(self, x: Any) -> Any:
        # The table belongs to the embedding layer, so mixed precision does not cast it here.
        table = tf.cast(self.embedding.embeddings, x.dtype)
        return tf.matmul(x, table, transpose_b=True)


class _Positions(keras.layers.Layer):
    """Learned position embeddings added to the token embeddings."""

    def __init__(self, seq_len: int, dim: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.table = self.add_weight(
            name="embeddings", shape=(seq_len, dim), initializer=_init(), trainable=True
        )

    def call(self, x: Any) -> Any:
        return x + self.table[None, : tf.shape(x)[1], :]


def gpt(vocab: int, seq_len: int, dim: int, layers: int, heads: int) -> Any:
    """Pre-LayerNorm decoder with causal self-attention; residual projections start at
    0.02 / sqrt(2 * layers) like the torch model."""
    proj_init = _init(0.02 / math.sqrt(2 * layers))
    tokens = keras.Input(shape=(seq_len,), dtype="int64", name="tokens")
    embed = keras.layers.Embedding(vocab, dim, embeddings_initializer=_init(), name="tok")
    x = _Positions(seq_len, dim, name="pos")(embed(tokens))
    for i in range(layers):
        h = keras.layers.LayerNormalization(epsilon=1e-5, name=f"block{i}_ln1")(x)
        h = keras.layers.MultiHeadAttention(
            heads,
            dim // heads,
            kernel_initializer=_init(),
            output_shape=dim,
            name=f"block{i}_attn",
        )(h, h, use_causal_mask=True)
        x = keras.layers.Add(name=f"block{i}_add1")([x, h])
        h = keras.layers.LayerNormalization(epsilon=1e-5, name=f"block{i}_ln2")(x)
        h = keras.layers.Dense(4 * dim, kernel_initializer=_init(), name=f"block{i}_fc")(h)
        h = keras.layers.Activation("gelu", name=f"block{i}_gelu")(h)
        h = keras.layers.Dense(dim, kernel_initializer=proj_init, name=f"block{i}_proj")(h)
        x = keras.layers.Add(name=f"block{i}_add2")([x, h])
    x = keras.layers.LayerNormalization(epsilon=1e-5, name="ln_f")(x)
    logits = _TiedHead(embed, name="head")(x)
    return keras.Model(tokens, logits, name="gpt")


def build_model(cfg: TrainConfig, input_shape: tuple[int, ...], classes: int) -> Any:
    """The configured model; `input_shape` is one sample's shape (channels-last images)."""
    if cfg.model == "gpt":
        return gpt(cfg.vocab_size, cfg.seq_len, cfg.gpt_dim, cfg.gpt_layers, cfg.gpt_heads)
    if cfg.model == "cnn":
        if len(input_shape) != 3:
            raise ValueError(f"model 'cnn' needs image input (H, W, C), got shape {input_shape}")
        return cnn(input_shape, cfg.hidden_dim, classes)
    return mlp(input_shape, cfg.hidden_dim, classes)


def flops_per_sample(model: Any, cfg: TrainConfig) -> float | None:
    """Training FLOPs for one sample where known: 6 x parameters for the MLP; for the GPT,
    per token, 6 x the parameters of matrix products (all but the position table: the token
    table is also the tied output head) plus attention (PaLM appendix B), as the torch GPT's
    `flops_per_token`."""
    params = sum(math.prod(v.shape) for v in model.trainable_variables)
    if cfg.model == "mlp":
        return 6.0 * params
    if cfg.model == "gpt":
        positions = cfg.seq_len * cfg.gpt_dim
        per_token = 6.0 * (params - positions) + 12.0 * cfg.gpt_layers * cfg.gpt_dim * cfg.seq_len
        return per_token * cfg.seq_len
    return None
