"""`bucket-uniform-access-public-prevention` and `prod-data-protected`: buckets closed to
the public and, in prod, safe from `pulumi destroy`."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from ._inputs import _hidden, _labels, _show
from .model import BUCKET, PROD, REBUILDABLE_BUCKET_SUFFIXES, Context, Resource


def check_bucket_access(resource: Resource, _: Context) -> Iterator[str]:
    """Uniform bucket-level access on, public access prevention enforced."""
    if resource.type != BUCKET:
        return
    ubla = resource.inputs.get("uniformBucketLevelAccess")
    if ubla is not True and not _hidden(ubla):
        yield (
            f"uniformBucketLevelAccess is {_show(ubla)}, not true: object ACLs could grant "
            "access around the bucket's IAM policy"
        )
    pap = resource.inputs.get("publicAccessPrevention")
    if pap != "enforced" and not _hidden(pap):
        yield (
            f'publicAccessPrevention is {_show(pap)}, not "enforced": an IAM grant to '
            "allUsers could make the bucket public"
        )


def stack_environment(resources: Sequence[Resource], context: Context) -> str | None:
    """The stack's environment: the declared one, else "prod" when any resource says so."""
    if context.environment is not None:
        return context.environment
    labelled = {_labels(r).get("environment") for r in resources}
    return PROD if PROD in labelled else None


def check_prod_data(
    resources: Sequence[Resource], context: Context
) -> Iterator[tuple[Resource, str]]:
    """In prod, data buckets are protected from `pulumi destroy` and never force-destroyed."""
    prod_stack = stack_environment(resources, context) == PROD
    for resource in resources:
        if resource.type != BUCKET or resource.name.endswith(REBUILDABLE_BUCKET_SUFFIXES):
            continue
        if not (prod_stack or _labels(resource).get("environment") == PROD):
            continue
        inputs = resource.inputs
        if not (resource.protect or inputs.get("deletionPolicy") == "PREVENT"):
            yield (
                resource,
                (
                    "prod data bucket is not protected from destroy: register it with "
                    'protect=True (or deletionPolicy "PREVENT") so `pulumi destroy` cannot '
                    "delete it"
                ),
            )
        if inputs.get("forceDestroy") is True:
            yield (
                resource,
                (
                    "prod data bucket has forceDestroy=true: deleting the bucket would "
                    "delete every object in it"
                ),
            )
