"""Offline plan wall time against stack size; prints one JSON object.

    python benchmarks/plan_scaling.py

Each point plans a stack of growing size (TPU hosts, GPU nodes) through the same path as
`trainstack plan` (config validation, the program under recording mocks, estimate and
quota). `large_plan_s` is the largest stack (64 TPU hosts / 32 GPU nodes); the target is
under 5 s here. `growth` is the exponent k in plan time ~ machines^k between the smallest
and the largest stack of each kind: k <= 1 means no worse than linear.
"""

from __future__ import annotations

import json
import math
import statistics
import time
from typing import Any

from trainstack.infra.plan import build_plan

REPEATS = 3
TPU_SIZES = ["v4-8", "v4-32", "v4-128", "v4-512"]  # 1, 4, 16, 64 hosts
GPU_NODES = [1, 4, 16, 32]


def _tpu(accelerator_type: str) -> dict[str, Any]:
    return {
        "gcp:project": "bench-project",
        "gcp:region": "us-central2",
        "trainstack:environment": "dev",
        "trainstack:tpu": {
            "accelerator_type": accelerator_type,
            "zone": "us-central2-b",
            # v4-8 is one host; larger v4 slices need the multi-host (-pod) runtime.
            "runtime_version": "tpu-vm-tf-2.14.1" + ("" if accelerator_type == "v4-8" else "-pod"),
            "provisioning": "spot",
        },
        "trainstack:trainer": {"framework": "tensorflow", "strategy": "tpu"},
    }


def _gpu(nodes: int) -> dict[str, Any]:
    return {
        "gcp:project": "bench-project",
        "gcp:region": "us-central1",
        "trainstack:environment": "dev",
        "trainstack:gpu_cluster": {
            "backend": "gke",
            "machine_type": "a2-highgpu-8g",
            "node_count": nodes,
            "zone": "us-central1-a",
            "spot": True,
        },
    }


def _time(stack: str, config: dict[str, Any]) -> dict[str, Any]:
    times = []
    plan: dict[str, Any] = {}
    for _ in range(REPEATS):
        start = time.perf_counter()
        plan = build_plan(stack, config)
        times.append(time.perf_counter() - start)
    return {
        "stack": stack,
        "machines": plan["summary"]["machines"],
        "resources": len(plan["resources"]),
        "plan_s": round(statistics.median(times), 4),
    }


def main() -> None:
    build_plan("warmup", _gpu(1))  # imports and the trainer package build, once per process
    points = [_time(f"tpu-{t}", _tpu(t)) for t in TPU_SIZES]
    points += [_time(f"gpu-{n}", _gpu(n)) for n in GPU_NODES]
    largest = [p for p in points if p["stack"] in ("tpu-v4-512", "gpu-32")]
    growth = {}
    for prefix in ("tpu", "gpu"):
        series = [p for p in points if p["stack"].startswith(prefix)]
        small, large = series[0], series[-1]
        # Empirical exponent k in time ~ machines^k between the smallest and largest
        # stack: k <= 1 means plan time grows no worse than linearly.
        growth[prefix] = round(
            math.log(large["plan_s"] / small["plan_s"])
            / math.log(large["machines"] / small["machines"]),
            3,
        )
    print(
        json.dumps(
            {
                "benchmark": "plan_scaling",
                "repeats": REPEATS,
                "points": points,
                "large_plan_s": max(p["plan_s"] for p in largest),
                "large_plan_target_s": 5.0,
                "growth_exponent": growth,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
