"""The planned run supervisor after a fidelity run: Google's `functions-framework` serving
the exact bundle the plan uploads, with the run's real bucket (the GCS emulator the nodes
wrote to), its own state bucket there as `pulumi up` leaves it, and fakes of the Compute
Engine, GKE and Cloud TPU APIs holding the planned group, pool or slice."""

from __future__ import annotations

import contextlib
import json
import urllib.parse
import urllib.request
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import fsspec
import yaml
from typer.testing import CliRunner

from tests import REPO_ROOT
from tests.components.test_tpu_supervisor_function import Function, state_bucket
from tests.fakes.compute_server import ComputeFakeServer
from tests.fakes.container_server import ContainerFakeServer
from tests.fakes.metadata_fake import MetadataFake
from tests.fakes.tpu_server import TpuFakeServer
from trainstack.infra.cli import app
from trainstack.infra.mocks import SECRET, UNKNOWN

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
class Served:
    function: Function
    compute: ComputeFakeServer
    container: ContainerFakeServer
    config: dict[str, Any]
    tpu: TpuFakeServer


@contextlib.contextmanager
def serve_planned_supervisor(
    plan: dict[str, Any],
    folder: Path,
    storage: str,
    size: int,
    deployed: ComputeFakeServer | None = None,
) -> Iterator[Served]:
    """The plan's supervisor served as Cloud Functions runs it, its group (its `size`
    planned VMs) or pool at `size` nodes as `pulumi up` left it (`deployed`: a Compute Engine
    fake already holding the group, as `tests.fidelity.gce_deploy` deployed it; `size` is
    then unused), or its slice READY (`size` unused)."""
    config = planned_supervisor(plan, folder)
    fs = fsspec.filesystem("gcs", endpoint_url=storage, token="anon")
    state_bucket(fs, config["state_uri"].removeprefix("gs://"))
    values = {"instance/service-accounts/default/": json.dumps({"email": SA, "scopes": []})}
    with (
        contextlib.nullcontext(deployed) if deployed else ComputeFakeServer() as compute,
        ContainerFakeServer() as container,
        TpuFakeServer() as tpu,
        MetadataFake(values) as metadata,
    ):
        parts = config["name"].split("/")
        if config["kind"] == "mig" and deployed is None:
            # As `pulumi up` leaves it: one VM per per-instance config, the names planned.
            assert len(config["instances"]) == size, config["instances"]
            compute.create_instances(f"{parts[1]}/{parts[3]}/{parts[5]}", config["instances"])
        elif config["kind"] == "node":
            tpu.nodes[config["name"]] = {"name": config["name"], "state": "READY"}
        elif config["kind"] != "mig":
            group = f"{parts[1]}/{parts[3]}/gke-{parts[5]}-{parts[7]}-grp"
            compute.groups[group] = {"targetSize": size}
            project, zone, name = group.split("/")
            url = "https://www.googleapis.com/compute/v1/projects/"
            url += f"{project}/zones/{zone}/instanceGroupManagers/{name}"
            container.pools[config["name"]] = {"instanceGroupUrls": [url]}

            def set_size(_: str, count: int) -> None:
                compute.scale(group, count)  # GKE resizes the pool's group

            container.on_set_size = set_size
        function = Function(
            folder,
            {
                "GCE_METADATA_HOST": metadata.host,
                "GCE_METADATA_IP": metadata.host,
                "STORAGE_EMULATOR_HOST": storage,
                "TRAINSTACK_COMPUTE_API_ENDPOINT": compute.endpoint,
                "TRAINSTACK_CONTAINER_API_ENDPOINT": container.endpoint,
                "TRAINSTACK_TPU_API_ENDPOINT": tpu.endpoint,
            },
        )
        try:
            yield Served(function, compute, container, config, tpu)
        finally:
            function.stop()


@dataclass
class Checked:
    answers: list[dict[str, Any]]
    compute: ComputeFakeServer
    container: ContainerFakeServer
    tpu: TpuFakeServer


def check_with_planned_supervisor(
    plan: dict[str, Any], folder: Path, storage: str, size: int, calls: int = 1
) -> Checked:
    """`serve_planned_supervisor`, called `calls` times in a row."""
    with serve_planned_supervisor(plan, folder, storage, size) as served:
        answers = [served.function.call() for _ in range(calls)]
    return Checked(answers, served.compute, served.container, served.tpu)


def stack_status(
    plan: dict[str, Any], config: dict[str, Any], folder: Path, endpoints: dict[str, str]
) -> tuple[int, list[str]]:
    """`trainstack status` of the plan's stack as `pulumi up` leaves it: its stack file
    (`config`, the stack file's `config:`), the outputs `pulumi up` exports (the plan's, less
    those known only after deploy and the secrets), and the fakes' `endpoints` (API=URL);
    its exit code and lines."""
    folder.mkdir(parents=True, exist_ok=True)
    stack_file = folder / f"Pulumi.{plan['stack']}.yaml"
    stack_file.write_text(yaml.safe_dump({"config": config}))
    hidden = (UNKNOWN, SECRET)
    outputs = {k: v for k, v in plan["outputs"].items() if v not in hidden}
    (folder / "outputs.json").write_text(json.dumps(outputs))
    argv = ["status", "--config-file", str(stack_file), "--outputs", str(folder / "outputs.json")]
    for api, url in endpoints.items():
        argv += ["--endpoint", f"{api}={url}"]
    result = CliRunner().invoke(app, argv)
    return result.exit_code, (result.stdout + result.stderr).splitlines()


def read_object(storage: str, uri: str) -> Any:
    """A JSON object of the emulator, by gs:// URI."""
    bucket, _, name = uri.removeprefix("gs://").partition("/")
    url = f"{storage}/storage/v1/b/{bucket}/o/{urllib.parse.quote(name, safe='')}?alt=media"
    with urllib.request.urlopen(url, timeout=10) as answer:
        return json.loads(answer.read())
