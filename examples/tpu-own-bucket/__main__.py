"""A Pulumi program of your own that composes trainstack's TpuPodSlice with its own bucket.

What it shows: trainstack components are plain Pulumi ComponentResources. This program
keeps its checkpoints in a bucket it owns (with its own retention rules) and runs the
trainer under its own service account, and takes only the network, the trainer package and
the TPU slice from trainstack. Everything is passed in; nothing is created behind its back.

    cd examples/tpu-own-bucket && pulumi stack init dev && pulumi up
"""

from __future__ import annotations

import pulumi
import pulumi_gcp as gcp

from trainstack.components import TpuPodSlice, TrainerPackage, TrainingNetwork


def program() -> None:
    config = pulumi.Config()
    gcp_config = pulumi.Config("gcp")
    project = gcp_config.require("project")
    region = gcp_config.require("region")
    zone = config.require("zone")
    name = f"{pulumi.get_project()}-{pulumi.get_stack()}"
    # `environment` and `stack`: the labels trainstack's policy pack requires on accelerators
    # (`accelerators-labelled`); TpuPodSlice takes them from `labels`.
    labels = {
        "team": "research",
        "stack": pulumi.get_stack(),
        "environment": config.get("environment") or "dev",
    }

    # The bucket is yours: its name, location and lifecycle are decided here.
    bucket = gcp.storage.Bucket(
        "checkpoints",
        name=f"{project}-{name}-ckpt",
        location=region.upper(),
        uniform_bucket_level_access=True,
        public_access_prevention="enforced",
        lifecycle_rules=[{"action": {"type": "Delete"}, "condition": {"age": 14}}],
        labels=labels,
    )
    account = gcp.serviceaccount.Account(
        "trainer", project=project, account_id=f"{name}-sa"[:30], display_name="TPU trainer"
    )
    member = account.email.apply(lambda email: f"serviceAccount:{email}")
    gcp.storage.BucketIAMMember(
        "trainer-writes-checkpoints",
        bucket=bucket.name,
        role="roles/storage.objectUser",
        member=member,
    )

    network = TrainingNetwork(
        f"{name}-net",
        {"project": project, "region": region, "deployment_name": name, "labels": labels},
    )
    # The trainer package is staged in the same bucket, under trainers/.
    package = TrainerPackage(f"{name}-trainer", {"staging_bucket": bucket.name, "labels": labels})
    tpu = TpuPodSlice(
        f"{name}-tpu",
        {
            "project": project,
            "zone": zone,
            "deployment_name": name,
            "accelerator_type": config.get("accelerator_type") or "v4-32",
            "runtime_version": "tpu-vm-tf-2.16.0-pod-pjrt",
            "provisioning": "spot",
            "network_self_link": network.network_self_link,
            "subnetwork_self_link": network.subnetwork_self_link,
            "network_tags": [network.node_tag],
            "service_account_email": account.email,
            "package_uri": package.uri,
            "checkpoint_dir": bucket.url.apply(lambda url: f"{url}/checkpoints"),
            "trainer_args": ["--framework=tensorflow", "--strategy=tpu", "--steps=2000"],
            "labels": labels,
        },
    )
    pulumi.export("slice", tpu.slice_name)
    pulumi.export("chips", tpu.chips)
    pulumi.export("console", tpu.console_url)
    pulumi.export("checkpoints", tpu.checkpoint_dir)


program()
