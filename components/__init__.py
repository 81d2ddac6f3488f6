"""Reusable trainstack ComponentResources, one per module.

Import the classes from here or from their modules; both are public:

    from components import TrainingBuckets, TrainingIdentity
    from components.training_network import TrainingNetwork

Each entry below is added by hand when a component module lands.
"""

from components.project_services import ProjectServices, ProjectServicesArgs
from components.trainer_package import TrainerPackage, TrainerPackageArgs
from components.training_buckets import TrainingBuckets, TrainingBucketsArgs
from components.training_identity import TrainingIdentity, TrainingIdentityArgs
from components.training_network import TrainingNetwork, TrainingNetworkArgs

__all__ = [
    "ProjectServices",
    "ProjectServicesArgs",
    "TrainerPackage",
    "TrainerPackageArgs",
    "TrainingBuckets",
    "TrainingBucketsArgs",
    "TrainingIdentity",
    "TrainingIdentityArgs",
    "TrainingNetwork",
    "TrainingNetworkArgs",
]
