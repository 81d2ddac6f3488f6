"""`trainstack plan-diff` of two plans made in different folders: a file asset's local path
is not what reaches the cloud (its content is, by hash), so a moved folder with the same
code shows no replace and no relaunch."""

from __future__ import annotations

import copy

from tests.bundled import bundled_plan
from trainstack.infra.plan import plan_diff

STACK = "dev-tpu-v6e-gke"


def _moved(plan: dict) -> dict:
    head = copy.deepcopy(plan)
    for r in head["resources"]:
        source = r["inputs"].get("source")
        if isinstance(source, dict) and "fileAsset" in source:
            source["fileAsset"] = "head/" + source["fileAsset"]
    return head


def test_the_same_code_planned_from_another_folder_is_no_change() -> None:
    base = bundled_plan(STACK)
    assert plan_diff(base, _moved(base)).splitlines() == [
        "## trainstack plan diff",
        "",
        f"### Stack `{STACK}`: no changes",
    ]


def test_new_content_still_replaces_by_its_name_and_digest() -> None:
    base = bundled_plan(STACK)
    head = _moved(base)
    [sdist] = [r for r in head["resources"] if r["name"] == f"{STACK}-trainer-sdist"]
    sdist["inputs"]["name"] = "code/trainstack_code-0123456789abcdef.tar.gz"
    sdist["inputs"]["metadata"]["sha256"] = "0123456789abcdef" + "0" * 48
    lines = plan_diff(base, head).splitlines()
    assert lines[4] == (
        f"- **replace** `{STACK}-trainer-sdist` (gcp:storage/bucketObject:BucketObject): "
        "`metadata.sha256`, `name` changed, which forces a new resource (the Terraform provider "
        "schema); creates the new one first"
    )


def test_a_file_of_another_name_still_shows() -> None:
    base = bundled_plan(STACK)
    head = copy.deepcopy(base)
    [sdist] = [r for r in head["resources"] if r["name"] == f"{STACK}-trainer-sdist"]
    sdist["inputs"]["source"]["fileAsset"] = ".trainstack/build/other.tar.gz"
    assert plan_diff(base, head).splitlines()[4] == (
        f"- **replace** `{STACK}-trainer-sdist` (gcp:storage/bucketObject:BucketObject): "
        "`source.fileAsset` changed, which forces a new resource (the Terraform provider "
        "schema); deletes the old one first"
    )
