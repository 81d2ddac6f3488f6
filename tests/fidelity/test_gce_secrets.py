"""A `secure:` trainer.env value on Compute Engine, end to end: the plan stores it in Secret
Manager and the VMs' startup script (the planned instance template's, run as
`tests.fidelity.test_gce` runs it, with the faked metadata server, Cloud Storage and Cloud
Logging) hands the node launcher only the secret version's name; the node launcher reads it
with the VM's token from Secret Manager (`tests.fakes.secret_manager`, which answers
`projects.secrets.versions.access` as secretmanager.v1 does) into your code's environment.
The value is in no line of the VM's console (the journal) and no Cloud Logging entry.

The offline plan cannot decrypt the stack file's ciphertext (its `secret_data` is
`[secret]`); the fake holds the value the engine would have stored in that version.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests import REPO_ROOT
from tests.fakes.gcs_emulator import running_gcs_emulator
from tests.fakes.logging_server import LoggingFakeServer
from tests.fakes.secret_manager import SecretManagerFake
from tests.fidelity.nodes import explain, inputs_by_type, require_unshare
from tests.fidelity.test_gce import Group, _planned
from trainstack.infra.plan import build_plan

STACK = "fidelity-sec"
VALUE = "hf_" + "Q7x" * 12
"""A Hugging Face token's shape: what a log line must never show."""
CIPHERTEXT = "v1:AAABAGUJcmFuZG9tY2lwaGVydGV4dA=="
VERSION = f"projects/my-ml-project/secrets/{STACK}-env-HF_TOKEN/versions/1"
SHOW = """import hashlib, json, os
token = os.environ["HF_TOKEN"]
print(json.dumps({"event": "secret", "sha256": hashlib.sha256(token.encode()).hexdigest()}))
"""


@pytest.fixture
def fakes() -> Iterator[tuple[str, LoggingFakeServer]]:
    """The GCS emulator and the Cloud Logging API, as `tests.fidelity.test_gce` has them."""
    require_unshare()
    with running_gcs_emulator() as storage, LoggingFakeServer() as logging_api:
        yield storage, logging_api


@pytest.fixture
def secret_manager() -> Iterator[SecretManagerFake]:
    with SecretManagerFake({VERSION: VALUE}) as fake:
        yield fake


def test_a_secure_value_reaches_your_code_through_secret_manager_and_no_log(
    tmp_path: Path, fakes: tuple[str, LoggingFakeServer], secret_manager: SecretManagerFake
) -> None:
    storage, logging_api = fakes
    source = tmp_path / "code"
    source.mkdir()
    (source / "show.py").write_text(SHOW)
    config = yaml.safe_load(
        (REPO_ROOT / "examples" / "own-trainer" / "Pulumi.gce.yaml").read_text()
    )["config"]
    config["trainstack:trainer"] = {
        "source": str(source),
        "entrypoint": ["python", "show.py"],
        "launcher": "node",
        "env": {"HF_TOKEN": {"secure": CIPHERTEXT}, "MODE": "a"},
    }
    plan = build_plan(STACK, config)
    [version] = inputs_by_type(plan)["gcp:secretmanager/secretVersion:SecretVersion"]
    assert version == {"secret": VERSION.rsplit("/versions/", 1)[0], "secretData": "[secret]"}
    planned = _planned(plan)
    assert planned.script.count(f"--secret-env=HF_TOKEN={VERSION}") == 1
    assert "--env=HF_TOKEN" not in planned.script
    group = Group(tmp_path / "vms", planned, storage, logging_api.endpoint)
    endpoint = {"TRAINSTACK_SECRETMANAGER_ENDPOINT": secret_manager.base_url}
    try:
        vms = [group.boot(rank, extra_env=endpoint) for rank in range(2)]
        codes = [vm.wait(300) for vm in vms]
    finally:
        group.close()
    assert codes == [0, 0], explain(vms)
    digest = hashlib.sha256(VALUE.encode()).hexdigest()
    shown = [[r for r in vm.records() if r.get("event") == "secret"] for vm in vms]
    assert shown == [[{"event": "secret", "sha256": digest}]] * 2, explain(vms)
    # Each VM read the version once, as its own account (the metadata server's token).
    reads = [path for path, _ in secret_manager.requests if path.endswith(":access")]
    assert reads == [f"/v1/{VERSION}:access"] * 2
    # The launch logged its command line with the version's name, never the value.
    for rank, vm in enumerate(vms):
        output = vm.output()
        assert f"--secret-env=HF_TOKEN={VERSION}" in output, explain(vms)
        assert "--env=MODE=*** " in output
        assert "trainstack-node: secret_env: read HF_TOKEN" in output, rank
    everything = [vm.output() for vm in vms] + [json.dumps(logging_api.entries)]
    assert [VALUE in text for text in everything] == [False, False, False]
    assert VALUE not in json.dumps(plan)
