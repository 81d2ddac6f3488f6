"""Checks that need TensorFlow, run in their own process by the TensorFlow trainer tests
(`python -m tests.trainers.tf_probe compare A B` / `tpu`); prints one JSON object.

- `compare A B`: every variable of two TensorFlow checkpoints (step directories), with the
  largest absolute and relative differences per variable.
- `tpu`: the TPU strategy path as far as a CPU allows: the trainer's exit code and message
  with no TPU; TPUClusterResolver over a fake multi-host slice; strategy selection; every
  bundled model and its optimizer built by the trainer's scope function with the TPU's
  bf16 policy; the learning-rate schedule in TensorFlow ops at a few steps.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
from typing import Any

import trainstack.trainers.tf_multiworker  # noqa: F401  (selects tf-keras before TensorFlow loads)


def compare(a: str, b: str) -> dict[str, Any]:
    import numpy as np
    import tensorflow as tf

    ra, rb = tf.train.load_checkpoint(f"{a}/ckpt"), tf.train.load_checkpoint(f"{b}/ckpt")
    names_a = set(ra.get_variable_to_shape_map())
    names_b = set(rb.get_variable_to_shape_map())
    diffs: dict[str, dict[str, Any]] = {}
    for name in sorted(names_a & names_b):
        x, y = ra.get_tensor(name), rb.get_tensor(name)
        if not np.issubdtype(np.asarray(x).dtype, np.floating):
            diffs[name] = {"equal": bool(np.array_equal(x, y))}
            continue
        abs_diff = np.abs(x - y)
        diffs[name] = {
            "max_abs": float(abs_diff.max(initial=0.0)),
            "max_rel": float((abs_diff / np.maximum(np.abs(y), 1e-12)).max(initial=0.0)),
            "ok": bool(np.allclose(x, y, rtol=1e-4, atol=1e-5)),
        }
    return {
        "only_a": sorted(names_a - names_b),
        "only_b": sorted(names_b - names_a),
        "variables": diffs,
    }


def tpu() -> dict[str, Any]:
    out: dict[str, Any] = {}
    # 1. The trainer itself on this CPU machine, as the TPU VM startup script starts it.
    os.environ.update({"TPU_WORKER_ID": "0"})
    os.environ.pop("TPU_WORKER_HOSTNAMES", None)
    from trainstack.trainers.tf_multiworker.launch import main

    stderr = io.StringIO()
    with contextlib.redirect_stderr(stderr):
        out["exit_code"] = main(["--framework=tensorflow", "--strategy=tpu", "--steps=2"])
    out["stderr"] = stderr.getvalue()

    import tensorflow as tf

    from trainstack.trainers.common.config import TrainConfig
    from trainstack.trainers.tf_multiworker import loop, train
    from trainstack.trainers.tf_multiworker.cluster import tpu_target
    from trainstack.trainers.tf_multiworker.data import load

    # 2. Resolver over a fake 4-host slice (a v4-32 has 4 TPU VM workers).
    hosts = "t1-w-0,t1-w-1,t1-w-2,t1-w-3"
    fake = {"TPU_WORKER_ID": "0", "TPU_WORKER_HOSTNAMES": hosts}
    target = tpu_target(fake)
    resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=target)
    out["target"] = target
    out["cluster_spec"] = resolver.cluster_spec().as_dict()
    out["master"] = resolver.master()
    out["coordination_leader"] = resolver.get_coordination_service_leader()

    # 3. Strategy selection under that environment reaches TPUStrategy's constructor path.
    chosen: list[str] = []

    def record(target: str) -> Any:
        chosen.append(target)
        return tf.distribute.get_strategy()

    os.environ.update(fake)
    real, train.tpu_strategy = train.tpu_strategy, record
    try:
        train.make_strategy(TrainConfig(framework="tensorflow", strategy="tpu"))
    finally:
        train.tpu_strategy = real
    out["selected_target"] = chosen

    # 4. Every model builds under a strategy scope through the trainer's own function.
    built = {}
    for model, dataset in (("mlp", "digits"), ("cnn", "digits"), ("gpt", "synthetic")):
        cfg = TrainConfig.model_validate(
            {
                "framework": "tensorflow",
                "strategy": "tpu",
                "model": model,
                "dataset": dataset,
                "precision": "bf16",
                "hidden_dim": 16,
                "synthetic_samples": 64,
                "seq_len": 16,
                "vocab_size": 32,
                "gpt_dim": 32,
            }
        )
        ds = load(cfg, pipeline=0, pipelines=1)
        net, optimizer = loop.build_in_scope(tf.distribute.get_strategy(), cfg, ds)
        logits = net(ds.test.x[:2], training=False)
        built[model] = {
            "variables": len(net.trainable_variables),
            "optimizer_variables": len(optimizer.variables),
            "policy": net.dtype_policy.name,
            "logits": list(logits.shape),
        }
    out["built"] = built

    # 5. The optimizer's schedule follows trainstack.trainers.common.schedule step by step.
    cfg = TrainConfig(framework="tensorflow", steps=50, warmup_steps=10, learning_rate=0.02)
    schedule = loop.WarmupCosine(cfg.learning_rate, cfg.warmup_steps, cfg.steps)
    out["schedule"] = {step: float(schedule(step)) for step in (0, 5, 9, 10, 30, 49, 60)}
    return out


if __name__ == "__main__":
    command, *rest = sys.argv[1:]
    result = compare(*rest) if command == "compare" else tpu()
    print(json.dumps(result))
