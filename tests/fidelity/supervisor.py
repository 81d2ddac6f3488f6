"""The planned run supervisor after a fidelity run: Google's `functions-framework` serving
the exact bundle the plan uploads, with the run's real bucket (the GCS emulator the nodes
wrote to) and fakes of the Compute Engine and GKE APIs holding the planned group or pool."""

from __future__ import annotations

import json
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.components.test_tpu_supervisor_function import Function
from tests.fakes.compute_server import ComputeFakeServer
from tests.fakes.container_server import ContainerFakeServer
from tests.fakes.metadata_fake import MetadataFake
from trainstack.infra.mocks import REPO_ROOT

SA = "supervisor@p.iam.gserviceaccount.com"


def planned_supervisor(plan: dict[str, Any], folder: Path) -> dict[str, Any]:
    """Extract the plan's supervisor bundle into `folder`; its config.json."""
    (source,) = [
        r["inputs"]["source"]["fileAsset"]
        for r in plan["resources"]
        if r["name"] == f"{plan['stack']}-supervisor-source"
    ]
    with zipfile.ZipFile(REPO_ROOT / source) as bundle:
        bundle.extractall(folder)
    config: dict[str, Any] = json.loads((folder / "config.json").read_text())
    return config


@dataclass
class Checked:
    answers: list[dict[str, Any]]
    compute: ComputeFakeServer
    container: ContainerFakeServer


def check_with_planned_supervisor(
    plan: dict[str, Any], folder: Path, storage: str, size: int, calls: int = 1
) -> Checked:
    """Serve the plan's supervisor with its group (or pool) at `size` nodes, as `pulumi up`
    left it, and call it `calls` times."""
    config = planned_supervisor(plan, folder)
    values = {"instance/service-accounts/default/": json.dumps({"email": SA, "scopes": []})}
    with (
        ComputeFakeServer() as compute,
        ContainerFakeServer() as container,
        MetadataFake(values) as metadata,
    ):
        if config["kind"] == "mig":
            parts = config["name"].split("/")
            compute.groups[f"{parts[1]}/{parts[3]}/{parts[5]}"] = {"targetSize": size}
        else:
            parts = config["name"].split("/")
            group = f"{parts[1]}/{parts[3]}/gke-{parts[5]}-{parts[7]}-grp"
            compute.groups[group] = {"targetSize": size}
            url = (
                "https://www.googleapis.com/compute/v1/projects/{}/zones/{}/"
                "instanceGroupManagers/{}".format(*group.split("/"))
            )
            container.pools[config["name"]] = {"instanceGroupUrls": [url]}

            def set_size(_: str, count: int) -> None:
                compute.groups[group]["targetSize"] = count

            container.on_set_size = set_size
        function = Function(
            folder,
            {
                "GCE_METADATA_HOST": metadata.host,
                "GCE_METADATA_IP": metadata.host,
                "STORAGE_EMULATOR_HOST": storage,
                "TRAINSTACK_COMPUTE_API_ENDPOINT": compute.endpoint,
                "TRAINSTACK_CONTAINER_API_ENDPOINT": container.endpoint,
            },
        )
        try:
            answers = [function.call() for _ in range(calls)]
        finally:
            function.stop()
    return Checked(answers, compute, container)


def read_object(storage: str, uri: str) -> Any:
    """A JSON object of the emulator, by gs:// URI."""
    import urllib.parse
    import urllib.request

    bucket, _, name = uri.removeprefix("gs://").partition("/")
    url = f"{storage}/storage/v1/b/{bucket}/o/{urllib.parse.quote(name, safe='')}?alt=media"
    with urllib.request.urlopen(url, timeout=10) as answer:
        return json.loads(answer.read())
