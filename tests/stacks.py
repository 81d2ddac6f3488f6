"""Stack configs shared by tests (the `config:` mapping of a stack file)."""

from __future__ import annotations

from typing import Any

GPU_STACK: dict[str, Any] = {
    "gcp:project": "acme-ml",
    "gcp:region": "us-central1",
    "trainstack:environment": "dev",
    "trainstack:gpu_cluster": {
        "backend": "gke",
        "machine_type": "a2-highgpu-8g",
        "node_count": 2,
        "zone": "us-central1-a",
        "spot": True,
    },
}
"""2 x a2-highgpu-8g spot on GKE: 16 preemptible A100 40GB in us-central1."""
