"""`trainer.checkpoint_dir` follows one rule on every target
(`trainstack.components.catalog.checkpoint_paths`): a cloud target takes `gs://BUCKET[/PATH]`
only (a machine's disk is lost with the machine), a local run any folder but the filesystem
root, and `gs://` without a bucket nowhere. Before, only the TPU startup script refused a
VM-local path, and GCE, GKE and Vertex stacks planned `/`, `gs://` or `/tmp/ckpt`."""

from __future__ import annotations

from typing import Any

import pytest

from trainstack.infra.config import ConfigError, load_stack_config
from trainstack.infra.plan import read_stack_file, stack_file

KEY = "trainer.checkpoint_dir"
ON_THE_MACHINE = (
    "is a path on the machine, whose disk a preemption, a recreated VM or a rescheduled pod "
    "loses with the checkpoints; valid: gs://BUCKET[/PATH], or unset for the stack's "
    "checkpoint bucket"
)
NO_BUCKET = (
    "names no valid Cloud Storage bucket; valid: gs://BUCKET[/PATH], BUCKET 3-222 of a-z, "
    "0-9, '.', '_', '-' starting and ending with a letter or digit"
)
CLOUD_STACKS = ("dev-tpu-v5e", "prod-a100-gce", "dev-a100-gke", "prod-vertex-rs")


def _with(stack: str, checkpoint_dir: str) -> dict[str, Any]:
    config = read_stack_file(stack_file(stack))[1]
    trainer = {**config["trainstack:trainer"], "checkpoint_dir": checkpoint_dir}
    return {**config, "trainstack:trainer": trainer}


def _errors(stack: str, checkpoint_dir: str) -> list[str]:
    with pytest.raises(ConfigError) as info:
        load_stack_config(_with(stack, checkpoint_dir))
    return info.value.errors


@pytest.mark.parametrize("stack", CLOUD_STACKS)
@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("/", ON_THE_MACHINE),
        ("/tmp/ckpt", ON_THE_MACHINE),
        ("ckpts", ON_THE_MACHINE),
        ("gs://", NO_BUCKET),
        ("gs:///ckpts", NO_BUCKET),
        ("s3://bucket/ckpts", NO_BUCKET),
    ],
)
def test_a_cloud_target_takes_only_a_bucket(stack: str, value: str, problem: str) -> None:
    assert _errors(stack, value) == [f"{KEY}: {value!r} {problem}"]


@pytest.mark.parametrize("stack", CLOUD_STACKS)
def test_a_bucket_folder_passes_on_every_cloud_target(stack: str) -> None:
    cfg = load_stack_config(_with(stack, "gs://acme-ckpt/runs"))
    assert cfg.trainer.checkpoint_dir == "gs://acme-ckpt/runs"


def test_a_local_run_takes_a_folder_but_not_the_root_or_a_bucketless_url() -> None:
    assert _errors("local", "/") == [
        f"{KEY}: '/' is the filesystem root; valid: a folder of the run's own (the trainer "
        "writes and prunes step-N folders in it)"
    ]
    assert _errors("local", "gs://") == [f"{KEY}: 'gs://' {NO_BUCKET}"]
    assert load_stack_config(_with("local", "ckpts/rel")).trainer.checkpoint_dir == "ckpts/rel"


@pytest.mark.parametrize("stack", [*CLOUD_STACKS, "local"])
@pytest.mark.parametrize(
    ("value", "bucket", "why"),
    [
        ("gs://goog-bucket/x", "goog-bucket", "starts with 'goog'"),
        ("gs://my-google-ckpts", "my-google-ckpts", "contains 'google'"),
    ],
)
def test_a_bucket_name_cloud_storage_reserves_is_refused(
    stack: str, value: str, bucket: str, why: str
) -> None:
    # https://cloud.google.com/storage/docs/buckets#naming: "Bucket names cannot begin with
    # the "goog" prefix."; "Bucket names cannot contain "google" or close misspellings".
    assert _errors(stack, value) == [
        f"{KEY}: {value!r} names bucket {bucket!r}, which {why}, so Cloud Storage has no such "
        "bucket; valid: gs://BUCKET[/PATH] with a bucket name not starting with 'goog' nor "
        "containing 'google'"
    ]


@pytest.mark.parametrize("stack", CLOUD_STACKS)
def test_a_gcs_fuse_path_is_refused_for_what_it_is(stack: str) -> None:
    """`/gcs/BUCKET/PATH` is the bucket on Vertex (its Cloud Storage FUSE mount), not a disk
    that a preemption loses, as the refusal said before."""
    assert _errors(stack, "/gcs/acme-ckpt/runs") == [
        f"{KEY}: '/gcs/acme-ckpt/runs' is Vertex's Cloud Storage FUSE path of "
        "gs://acme-ckpt/runs (Google mounts buckets under /gcs/ on Vertex only); the run "
        "contract gives the trainer its checkpoint folder as the bucket URL "
        "(TRAINSTACK_CHECKPOINT_DIR), and status and the supervisor read it there; valid: "
        "gs://acme-ckpt/runs"
    ]
