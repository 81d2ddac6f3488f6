"""Where a run may keep its checkpoints: one rule for every target.

A cloud machine's disk does not outlive the machine: a preempted TPU VM or Spot VM, a
recreated instance-group VM and a rescheduled GKE pod all start again on a fresh disk, so a
checkpoint written to a path on the machine is lost exactly when it is needed. Cloud targets
therefore take `gs://BUCKET[/PATH]` only (the TPU startup script always refused anything
else, `components/startup/tpu_worker.py`, which matches the same `GS_DIR`); a local run takes
a folder, but not the filesystem root, which the trainer would fill with `step-N` folders
and prune. `gs://` without a bucket is refused everywhere.
"""

from __future__ import annotations

import re
from typing import Final

from trainstack.components.catalog.problems import quote

GS_DIR: Final = re.compile(r"^gs://[a-z0-9][a-z0-9._-]{1,220}[a-z0-9](/\S*)?$")
"""`gs://BUCKET[/PATH]`: a bucket name is 3-222 of a-z, 0-9, '.', '_', '-', starting and
ending with a letter or digit (https://cloud.google.com/storage/docs/buckets#naming)."""


_GCS_FUSE: Final = re.compile(r"^/gcs/([a-z0-9][a-z0-9._-]{1,220}[a-z0-9])(/\S*)?$")
"""Vertex custom training's Cloud Storage FUSE mount: "Custom training jobs can access your
Cloud Storage buckets as subdirectories of the root /gcs directory ... gs://example-bucket/
data.csv ... open('/gcs/example-bucket/data.csv')"
(https://cloud.google.com/vertex-ai/docs/training/cloud-storage-file-system, "How it
works")."""


def _reserved_bucket(bucket: str) -> str | None:
    """Why Cloud Storage refuses `bucket` as a name, or None: "Bucket names cannot begin with
    the "goog" prefix." and "Bucket names cannot contain "google" or close misspellings, such
    as "g00gle"." (https://cloud.google.com/storage/docs/buckets#naming)."""
    if bucket.startswith("goog"):
        return "starts with 'goog'"
    if "google" in bucket:
        return "contains 'google'"
    return None


def checkpoint_place_problem(value: str, key: str, *, cloud: bool) -> str | None:
    """The problem with checkpoint folder `value` at `key` on a cloud target (`cloud`) or a
    local one, or None."""
    if value.startswith("gs://") or (cloud and "://" in value):
        bucket = value.removeprefix("gs://").split("/", 1)[0]
        if GS_DIR.match(value) and (reserved := _reserved_bucket(bucket)) is not None:
            return (
                f"{key}: {quote(value)} names bucket {quote(bucket)}, which {reserved}, so "
                "Cloud Storage has no such bucket; valid: gs://BUCKET[/PATH] with a bucket "
                "name not starting with 'goog' nor containing 'google'"
            )
        if GS_DIR.match(value):
            return None
        return (
            f"{key}: {quote(value)} names no valid Cloud Storage bucket; valid: "
            "gs://BUCKET[/PATH], BUCKET 3-222 of a-z, 0-9, '.', '_', '-' starting and ending "
            "with a letter or digit"
        )
    fuse = _GCS_FUSE.match(value)
    if cloud and fuse:
        url = f"gs://{fuse[1]}{fuse[2] or ''}"
        return (
            f"{key}: {quote(value)} is Vertex's Cloud Storage FUSE path of {url} (Google "
            "mounts buckets under /gcs/ on Vertex only); the run contract gives the "
            "trainer its checkpoint folder as the bucket URL (TRAINSTACK_CHECKPOINT_DIR), "
            f"and status and the supervisor read it there; valid: {url}"
        )
    if cloud:
        return (
            f"{key}: {quote(value)} is a path on the machine, whose disk a preemption, a "
            "recreated VM or a rescheduled pod loses with the checkpoints; valid: "
            "gs://BUCKET[/PATH], or unset for the stack's checkpoint bucket"
        )
    if value.strip() and value.strip("/") == "":
        return (
            f"{key}: {quote(value)} is the filesystem root; valid: a folder of the run's own "
            "(the trainer writes and prunes step-N folders in it)"
        )
    return None
