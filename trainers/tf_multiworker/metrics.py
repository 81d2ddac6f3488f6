"""The TensorFlow side of the trainer telemetry (`trainstack.trainers.common.metrics`): tf.summary
scalars for TensorBoard, the device kind of the `start` line and the GPU fields of `train`."""

from __future__ import annotations

import tensorflow as tf

from trainstack.trainers.common.config import TrainConfig
from trainstack.trainers.common.metrics import gpu_peak_flops


class TFScalarWriter:
    """TensorBoard scalars through tf.summary (MetricsLogger's ScalarWriter)."""

    def __init__(self, directory: str) -> None:
        self._writer = tf.summary.create_file_writer(directory)

    def add_scalar(self, tag: str, scalar_value: float, global_step: int) -> None:
        with self._writer.as_default(step=global_step):
            tf.summary.scalar(tag, scalar_value)

    def close(self) -> None:
        self._writer.close()


def device_kind(cfg: TrainConfig) -> str:
    if cfg.strategy == "tpu":
        return "TPU"
    return "GPU" if tf.config.list_logical_devices("GPU") else "CPU"


def gpu_peak() -> float | None:
    gpus = tf.config.list_physical_devices("GPU")
    if not gpus:
        return None
    name = tf.config.experimental.get_device_details(gpus[0]).get("device_name", "")
    return gpu_peak_flops(str(name))


def gpu_memory() -> dict[str, float]:
    if not tf.config.list_logical_devices("GPU"):
        return {}
    info = tf.config.experimental.get_memory_info("GPU:0")
    return {
        "gpu_mem_alloc_gib": info["current"] / 2**30,
        "gpu_mem_peak_gib": info["peak"] / 2**30,
    }
