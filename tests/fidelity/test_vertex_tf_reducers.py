"""Vertex AI fidelity: a TensorFlow MultiWorkerMirrored job with Reduction Server.

Vertex puts the reducers in workerpool2 and lists that pool as `ps` in every replica's
`TF_CONFIG` (gcp-facts 3.2; `tests.fidelity.vertex.vertex_env` sets it so). The reducers run
Google's image (`containerSpec`), not the package, so only the chief and worker replicas
start here; they must train as one world of two workers with the reducers outside the
TensorFlow cluster. Reduction Server is supported for "TensorFlow or PyTorch ...
multi-host data-parallel training with GPUs using NCCL all-reduce" on prebuilt TF images
>= 2.3 (https://cloud.google.com/vertex-ai/docs/training/distributed-training#reduction-server,
gcp-facts section 4), so the right answer is to train, not to refuse.

Differences from Vertex are those of `tests.fidelity.vertex` (simulated GPUs on CPU, where
TensorFlow cannot use NCCL: the NCCL choice itself is covered by
tests/trainers/test_tf_reduction_server.py).
"""

from __future__ import annotations

import json
import tarfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from components.catalog.images import VERTEX_TRAINING_IMAGES
from infra.plan import build_plan
from tests.fidelity.vertex import (
    ReplicaRun,
    image_environment,
    pip_install,
    planned_job,
    replicas,
    run_replicas,
    stack_config,
    vertex_env,
)
from trainers.common.accelerators import SIMULATED_ACCELERATORS_ENV

VERTEX = {
    "machine_type": "a2-highgpu-2g",
    "replica_count": 2,
    "reduction_server": {"enabled": True, "replica_count": 2},
}
TRAINER = {
    "framework": "tensorflow",
    "strategy": "multi_worker_mirrored",
    "model": "mlp",
    "dataset": "digits",
    "steps": 4,
    "global_batch_size": 32,
}


def _requires(sdist: Path) -> list[str]:
    with tarfile.open(sdist, mode="r:gz") as tar:
        name = next(n for n in tar.getnames() if n.endswith("/PKG-INFO"))
        extracted = tar.extractfile(name)
        assert extracted is not None
        lines = extracted.read().decode().splitlines()
    return [line.removeprefix("Requires-Dist: ") for line in lines if "Requires-Dist" in line]


def _records(runs: list[ReplicaRun], event: str) -> list[dict[str, Any]]:
    return [rec for run in runs for rec in run.records() if rec.get("event") == event]


@pytest.mark.trainer
def test_tensorflow_with_reducers_trains_as_two_workers(
    tmp_path: Path, gcs_emulator: str, make_bucket: Callable[[str], None]
) -> None:
    job = planned_job(build_plan("fidelity-tf-rs", stack_config(VERTEX, TRAINER)))
    pools = job.job_spec["workerPoolSpecs"]
    assert [p["replicaCount"] for p in pools] == ["1", "1", "2"]
    assert pools[2]["containerSpec"]["imageUri"] == (
        "us-docker.pkg.dev/vertex-ai-restricted/training/reductionserver:latest"
    )
    make_bucket(job.base_output.removeprefix("gs://"))
    module = pools[0]["pythonPackageSpec"]["args"][0]
    image = VERTEX_TRAINING_IMAGES[module]
    # TensorFlow is installed with --no-deps, as tests/fidelity/test_vertex.py explains (the
    # image's tf-keras pin names its TensorFlow minor, not the one on this machine).
    python = image_environment(
        tmp_path / "image", [*image.packages, *_requires(job.sdist), "setuptools"]
    )
    pip_install(python, job.sdist, no_deps=True)
    work = tmp_path / "work"
    work.mkdir()
    env = {
        SIMULATED_ACCELERATORS_ENV: "2",
        "STORAGE_EMULATOR_HOST": gcs_emulator,
        "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "false",
    }
    runs = run_replicas(python, job, cwd=work, extra_env=env, timeout_s=300)
    explain = "\n".join(f"--- {r.replica.pool}/{r.replica.index}\n{r.output[-3000:]}" for r in runs)
    # What each trainer replica was given: Vertex's TF_CONFIG with the two reducers as ps.
    hosts = {
        p: [f"h{p}-{i}:2222" for i in range(int(s["replicaCount"]))] for p, s in enumerate(pools)
    }
    chief_env = vertex_env(job, replicas(job.job_spec)[0], hosts)
    assert json.loads(chief_env["TF_CONFIG"])["cluster"]["ps"] == ["h2-0:2222", "h2-1:2222"]
    assert [(r.replica.pool, r.code) for r in runs] == [(0, 0), (1, 0)], explain
    starts = _records(runs, "start")
    assert sorted((s["workers"], s["strategy"]) for s in starts) == [
        (2, "multi_worker_mirrored"),
        (2, "multi_worker_mirrored"),
    ]
    [done] = _records(runs, "done")
    assert (done["world_size"], done["workers"], done["step"]) == (2, 2, 4)
