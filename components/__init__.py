"""Reusable trainstack ComponentResources, one per module.

Import the classes from here or from their modules; both are public:

    from trainstack.components import TrainingBuckets, TrainingIdentity
    from trainstack.components.training_network import TrainingNetwork

A component checks its arguments before it registers anything and raises `ArgsError`
(a `ValueError`), one line per problem, `<Component>.<key>: <what is wrong>; valid: ...`:

    from trainstack.components import ArgsError

The names below load their module on first use, so importing one module of the package
(`trainstack.components.catalog`, say) does not import every component and its provider SDK. Each
entry is added by hand when a component module lands.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from trainstack.components._args import ArgsError
    from trainstack.components.a100_cluster import A100Cluster, A100ClusterArgs
    from trainstack.components.env_secrets import EnvSecrets, EnvSecretsArgs
    from trainstack.components.image_mirror import ImageMirror, ImageMirrorArgs
    from trainstack.components.kubernetes_training_job import (
        KubernetesTrainingJob,
        KubernetesTrainingJobArgs,
    )
    from trainstack.components.local_training_job import LocalTrainingJob, LocalTrainingJobArgs
    from trainstack.components.project_services import ProjectServices, ProjectServicesArgs
    from trainstack.components.quota_guard import QuotaGuard, QuotaGuardArgs
    from trainstack.components.reduction_server_image import (
        ReductionServerImage,
        ReductionServerImageArgs,
    )
    from trainstack.components.run_supervisor import RunSupervisor, RunSupervisorArgs
    from trainstack.components.tpu_gke_slices import TpuGkeSlices, TpuGkeSlicesArgs
    from trainstack.components.tpu_pod_slice import TpuPodSlice, TpuPodSliceArgs
    from trainstack.components.trainer_package import TrainerPackage, TrainerPackageArgs
    from trainstack.components.training_buckets import TrainingBuckets, TrainingBucketsArgs
    from trainstack.components.training_dashboard import TrainingDashboard, TrainingDashboardArgs
    from trainstack.components.training_identity import TrainingIdentity, TrainingIdentityArgs
    from trainstack.components.training_network import TrainingNetwork, TrainingNetworkArgs
    from trainstack.components.user_code import UserCode
    from trainstack.components.vertex_training_job import VertexTrainingJob, VertexTrainingJobArgs

_MODULES: dict[str, str] = {
    "A100Cluster": "a100_cluster",
    "A100ClusterArgs": "a100_cluster",
    "ArgsError": "_args",
    "EnvSecrets": "env_secrets",
    "EnvSecretsArgs": "env_secrets",
    "ImageMirror": "image_mirror",
    "ImageMirrorArgs": "image_mirror",
    "KubernetesTrainingJob": "kubernetes_training_job",
    "KubernetesTrainingJobArgs": "kubernetes_training_job",
    "LocalTrainingJob": "local_training_job",
    "LocalTrainingJobArgs": "local_training_job",
    "ProjectServices": "project_services",
    "ProjectServicesArgs": "project_services",
    "QuotaGuard": "quota_guard",
    "QuotaGuardArgs": "quota_guard",
    "ReductionServerImage": "reduction_server_image",
    "ReductionServerImageArgs": "reduction_server_image",
    "TpuGkeSlices": "tpu_gke_slices",
    "TpuGkeSlicesArgs": "tpu_gke_slices",
    "TpuPodSlice": "tpu_pod_slice",
    "TpuPodSliceArgs": "tpu_pod_slice",
    "RunSupervisor": "run_supervisor",
    "RunSupervisorArgs": "run_supervisor",
    "TrainerPackage": "trainer_package",
    "TrainerPackageArgs": "trainer_package",
    "TrainingBuckets": "training_buckets",
    "TrainingBucketsArgs": "training_buckets",
    "TrainingDashboard": "training_dashboard",
    "TrainingDashboardArgs": "training_dashboard",
    "TrainingIdentity": "training_identity",
    "TrainingIdentityArgs": "training_identity",
    "TrainingNetwork": "training_network",
    "TrainingNetworkArgs": "training_network",
    "UserCode": "user_code",
    "VertexTrainingJob": "vertex_training_job",
    "VertexTrainingJobArgs": "vertex_training_job",
}

__all__ = [
    "A100Cluster",
    "A100ClusterArgs",
    "ArgsError",
    "EnvSecrets",
    "EnvSecretsArgs",
    "ImageMirror",
    "ImageMirrorArgs",
    "KubernetesTrainingJob",
    "KubernetesTrainingJobArgs",
    "LocalTrainingJob",
    "LocalTrainingJobArgs",
    "ProjectServices",
    "ProjectServicesArgs",
    "QuotaGuard",
    "QuotaGuardArgs",
    "ReductionServerImage",
    "ReductionServerImageArgs",
    "RunSupervisor",
    "RunSupervisorArgs",
    "TpuGkeSlices",
    "TpuGkeSlicesArgs",
    "TpuPodSlice",
    "TpuPodSliceArgs",
    "TrainerPackage",
    "TrainerPackageArgs",
    "TrainingBuckets",
    "TrainingBucketsArgs",
    "TrainingDashboard",
    "TrainingDashboardArgs",
    "TrainingIdentity",
    "TrainingIdentityArgs",
    "TrainingNetwork",
    "TrainingNetworkArgs",
    "UserCode",
    "VertexTrainingJob",
    "VertexTrainingJobArgs",
]


def __getattr__(name: str) -> Any:
    module = _MODULES.get(name)
    if module is None:
        # Not a component name: let `from components import <submodule>` import it.
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


if __name__ != "trainstack.components":  # one import name per module: two would copy every class
    raise ImportError(f"import trainstack.components, not {__name__}")


def _check_portions() -> None:
    # A second folder named trainstack on sys.path (trainstack/_portions.py).
    from pathlib import Path

    from trainstack import _portions

    _portions.check(Path(__file__).parent.parent)


_check_portions()
