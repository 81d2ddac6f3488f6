"""Reusable trainstack ComponentResources, one per module.

Import the classes from here or from their modules; both are public:

    from components import TrainingBuckets, TrainingIdentity
    from components.training_network import TrainingNetwork

Each entry below is added by hand when a component module lands.
"""

from components.a100_cluster import A100Cluster, A100ClusterArgs
from components.kubernetes_training_job import KubernetesTrainingJob, KubernetesTrainingJobArgs
from components.local_training_job import LocalTrainingJob, LocalTrainingJobArgs
from components.project_services import ProjectServices, ProjectServicesArgs
from components.tpu_pod_slice import TpuPodSlice, TpuPodSliceArgs
from components.trainer_package import TrainerPackage, TrainerPackageArgs
from components.training_buckets import TrainingBuckets, TrainingBucketsArgs
from components.training_dashboard import TrainingDashboard, TrainingDashboardArgs
from components.training_identity import TrainingIdentity, TrainingIdentityArgs
from components.training_network import TrainingNetwork, TrainingNetworkArgs

__all__ = [
    "A100Cluster",
    "A100ClusterArgs",
    "KubernetesTrainingJob",
    "KubernetesTrainingJobArgs",
    "LocalTrainingJob",
    "LocalTrainingJobArgs",
    "ProjectServices",
    "ProjectServicesArgs",
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
]
