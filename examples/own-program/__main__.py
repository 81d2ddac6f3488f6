"""A Pulumi program of your own that trains your own code with trainstack's components.

Only public names from `trainstack.components`: buckets, network, identity and the package of
your code, then one compute given the same `UserCode`: a GKE A100 cluster that runs it as a
Kubernetes Job (stack gke) or a spot TPU slice (stack tpu). The compute's `facts` output is
what `trainstack plan|quota|status|logs --program . --stack <name>` read.

    cd examples/own-program
    trainstack plan --program . --stack gke     # offline: resources, $/hour, quota, notes
    pulumi stack init gke && pulumi up
"""

from __future__ import annotations

from typing import Literal, cast, get_args

import pulumi

from trainstack.components import (
    A100Cluster,
    TpuPodSlice,
    TrainerPackage,
    TrainingBuckets,
    TrainingIdentity,
    TrainingNetwork,
    UserCode,
)

Environment = Literal["dev", "staging", "prod"]

# Your code per compute: PyTorch on the A100s (torchrun, one process per GPU), JAX on the
# TPU slice (one process per TPU host, the slice's only launcher).
CODE = {
    "gke": UserCode(source="torch_train", entrypoint=["python", "train.py"]),
    "tpu": UserCode(
        source="jax_train",
        entrypoint=["python", "train.py"],
        requirements="requirements.txt",
        env={"JAX_PLATFORMS": "tpu"},
    ),
}


def program() -> None:
    config = pulumi.Config()
    project = pulumi.Config("gcp").require("project")
    region = pulumi.Config("gcp").require("region")
    compute = config.require("compute")
    zone = config.require("zone")
    environment = cast(Environment, config.get("environment") or "dev")
    if environment not in get_args(Environment):
        raise ValueError(f"own-program:environment: {environment!r}; valid: dev, staging, prod")
    name = f"{pulumi.get_project()}-{pulumi.get_stack()}"
    labels = {"team": "research", "stack": pulumi.get_stack()}
    code = CODE[compute]

    # `environment` adds the `environment` label the policy pack requires on accelerators.
    buckets = TrainingBuckets(
        f"{name}-buckets",
        {
            "project": project,
            "location": region.upper(),
            "deployment_name": name,
            "environment": environment,
            "labels": labels,
        },
    )
    network = TrainingNetwork(
        f"{name}-net",
        {"project": project, "region": region, "deployment_name": name, "labels": labels},
    )
    identity = TrainingIdentity(
        f"{name}-identity",
        {
            "project": project,
            "deployment_name": name,
            "data_bucket": buckets.data_bucket,
            "checkpoint_bucket": buckets.checkpoint_bucket,
            "staging_bucket": buckets.staging_bucket,
        },
    )
    package = TrainerPackage(
        f"{name}-code", {"staging_bucket": buckets.staging_bucket, "code": code, "labels": labels}
    )
    shared = {
        "project": project,
        "zone": zone,
        "deployment_name": name,
        "network_self_link": network.network_self_link,
        "subnetwork_self_link": network.subnetwork_self_link,
        "service_account_email": identity.service_account_email,
    }
    if compute == "gke":
        gpu = A100Cluster(
            f"{name}-gpu",
            {
                **shared,  # type: ignore[typeddict-item]
                "backend": "gke",
                "machine_type": "a2-highgpu-8g",
                "node_count": 2,
                "spot": True,
                "node_tag": network.node_tag,
                "environment": environment,
                "labels": labels,
                "training": {
                    "package_uri": package.uri,
                    "package": package,  # checked to hold `code`
                    "code": code,
                    "checkpoint_url": buckets.checkpoint_url,
                    "data_url": buckets.data_url,
                },
            },
        )
        pulumi.export("compute", gpu.facts)
        pulumi.export("job", gpu.job_name)
    else:
        tpu = TpuPodSlice(
            f"{name}-tpu",
            {
                **shared,  # type: ignore[typeddict-item]
                "accelerator_type": "v4-32",
                "runtime_version": "tpu-ubuntu2204-base",
                "provisioning": "spot",
                "network_tags": [network.node_tag],
                "package_uri": package.uri,
                "package": package,  # checked to hold `code`
                "code": code,
                "checkpoint_url": buckets.checkpoint_url,
                "data_url": buckets.data_url,
                # TpuPodSlice takes no `environment`: the label the policy requires, directly.
                "labels": {**labels, "environment": environment},
            },
        )
        pulumi.export("compute", tpu.facts)
        pulumi.export("slice", tpu.slice_name)
    pulumi.export("checkpoints", buckets.checkpoint_url)


program()
