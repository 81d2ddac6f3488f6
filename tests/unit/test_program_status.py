"""`trainstack status|logs --program DIR --stack NAME`: a program of your own that composes the
compute and supervisor of the bundled stack `dev-a100-gke` (or `dev-tpu-v5e`) answers the
lines that stack's status and logs answer, over the same local fakes (Cloud Logging, the
Kubernetes API, Cloud TPU, the storage emulator), from the components' facts: exported and
saved with `pulumi stack output --json`, or read from a `pulumi stack export`."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from tests.fakes.gcs_emulator import running_gcs_emulator
from tests.fakes.kube_server import KubeFakeServer
from tests.fakes.logging_server import LoggingFakeServer
from tests.unit.test_logs import OUTPUTS, entry, gke_resource, tpu_resource, train
from tests.unit.test_program_facts import GKE_MAIN, TPU_MAIN, write_program
from tests.unit.test_status import NOW, P, checkpoints, put
from tests.unit.test_status_recoveries import _upload
from trainstack.infra.cli import app
from trainstack.infra.plan import load_stack
from trainstack.infra.program_plan import load_program, run_own_program

runner = CliRunner()
GKE = "dev-a100-gke"
TPU = "dev-tpu-v5e"
BUCKET = f"gs://{P}-{GKE}-checkpoints"
# The program's compute as the stack composes it: named from the stack, the run named as the
# stack (the bundled trainer's --run_name), checkpoints in the stack's bucket.
GKE_PROGRAM = (
    GKE_MAIN.replace('"deployment_name": "acme"', f'"deployment_name": "{GKE}"')
    .replace('"checkpoint_url": "gs://acme-checkpoints"', f'"checkpoint_url": "{BUCKET}"')
    .replace('"checkpoint_bucket": "acme-checkpoints"', f'"checkpoint_bucket": "{BUCKET[5:]}"')
    .replace('"--preemption_grace_s=12.0"', f'"--preemption_grace_s=12.0", "--run_name={GKE}"')
    + 'pulumi.export("supervisor", supervisor.facts)\n'
)
TPU_PROGRAM = (
    TPU_MAIN.replace('"deployment_name": "acme"', f'"deployment_name": "{TPU}"')
    .replace('TpuPodSlice("acme-tpu"', f'TpuPodSlice("{TPU}-tpu"')
    .replace(
        '"gs://acme-checkpoints/checkpoints/run"', f'"gs://{P}-{TPU}-checkpoints/checkpoints/{TPU}"'
    )
    # The supervisor reads the run records where the slice writes them, in the stack's bucket.
    .replace(
        '"checkpoint_bucket": "acme-checkpoints"', f'"checkpoint_bucket": "{P}-{TPU}-checkpoints"'
    )
)


@pytest.fixture(scope="module")
def gcs() -> Iterator[str]:
    with running_gcs_emulator() as url:
        yield url


def registered(tmp_path: Path, main: str, stack: str) -> tuple[Path, dict[str, Any], Any]:
    """The program's folder, its exported outputs and its run (registered outputs by URN),
    under the mocks, as `pulumi up` would leave them."""
    folder = write_program(tmp_path / "acme", main, stack)
    program, config = load_program(folder, stack)
    run = run_own_program(program, stack, config, folder)
    return folder, json.loads(json.dumps(run.shown_outputs)), run


def export_document(run: Any, kubeconfig: str) -> dict[str, Any]:
    """A `pulumi stack export --show-secrets` of the run: every resource with its registered
    outputs (apitype ResourceV3), the cluster's kubeconfig a secret shown in plaintext
    (apitype SecretV1: its signature and `plaintext`, the value as JSON)."""
    resources = []
    for urn, outputs in run.registered_outputs.items():
        outputs = json.loads(json.dumps(outputs))
        if "kubeconfig" in outputs:
            outputs["kubeconfig"] = {
                "4dabf18193072939515e22adb298388d": "1b47061264138c4ac30d75fd1eb44270",
                "plaintext": json.dumps(kubeconfig),
            }
        resources.append(
            {"urn": urn, "custom": False, "type": urn.split("::")[2], "outputs": outputs}
        )
    return {"version": 3, "deployment": {"manifest": {}, "resources": resources}}


def stopped_run(gcs: str, events_uri: str) -> None:
    """The supervisor's record of the run's end and its stop, and its spend count."""
    event = {
        "time": "2026-11-23T11:40:00Z",
        "resource": f"projects/{P}/locations/us-central1-a/clusters/{GKE}-a100/nodePools/a100",
        "seen": "RUNNING",
        "action": "stop",
        "result": "ok",
        "attempt": 0,
        "next_allowed": None,
        "reason": "done",
    }
    bucket, _, name = events_uri.removeprefix("gs://").partition("/")
    put(gcs, bucket)
    _upload(gcs, bucket, name, json.dumps(event).encode() + b"\n")
    _upload(
        gcs, bucket, name.replace("events.jsonl", "state.json"), b'{"run": {"spend_usd": 40.0}}'
    )


def invoke(*argv: str) -> tuple[int, str, str]:
    now = ["--now", NOW] if argv[0] == "status" else []
    result = runner.invoke(app, [*argv, *now])
    return result.exit_code, result.stdout, result.stderr


GKE_LINES = [
    f"stack: {GKE} (gpu_cluster)",
    "state: SUCCEEDED",
    "step: 60",
    f"checkpoint: step 50 ({BUCKET}/checkpoints/{GKE}/step-00000050)",
    "hosts: 0/0 up",
    "supervisor: 1 action(s) recorded (recoveries, stops, what it saw)",
    "  2026-11-23T11:40:00Z node pool RUNNING run ended (done) -> stop: ok",
    "finished (done); compute stopped at 2026-11-23T11:40:00Z",
    "spend counted by the supervisor: $40.00",
    "still billing after the stop: GKE cluster fee and system node $0.23/hour (the GKE free "
    "tier's $74.40 monthly credit per billing account may cover one zonal cluster's "
    f"$0.10/hour fee) until `pulumi destroy -s {GKE}`",
    "this compute: $11.87 at list price ($23.74/hour x 0.50 h since 2026-11-23T11:00:00Z); "
    "the run's spend is the supervisor's count above",
]


def test_a_programs_gke_status_is_the_stacks(tmp_path: Path, gcs: str) -> None:
    folder, outputs, run = registered(tmp_path, GKE_PROGRAM, GKE)
    events_uri = outputs["supervisor"]["status"]["events_uri"]
    stopped_run(gcs, events_uri)
    checkpoints(gcs, GKE, [50], [])
    saved = tmp_path / "outputs.json"
    saved.write_text(json.dumps(outputs))
    export = tmp_path / "export.json"
    export.write_text(json.dumps(export_document(run, "unused: an http:// override")))
    stack_outputs = tmp_path / "stack-outputs.json"
    stack_outputs.write_text(
        json.dumps({**OUTPUTS[GKE], "checkpoint_url": BUCKET, "supervisor_events_uri": events_uri})
    )
    _, config = load_stack(GKE, None)
    stack_file = tmp_path / f"Pulumi.{GKE}.yaml"
    stack_file.write_text(yaml.safe_dump({"config": config}))
    with ExitStack() as stack:
        logs = stack.enter_context(LoggingFakeServer())
        kube = stack.enter_context(KubeFakeServer())
        kube.jobs[f"default/{GKE}-train"] = {
            "status": {
                "startTime": "2026-11-23T11:00:00Z",
                "completionTime": "2026-11-23T11:30:00Z",
                "conditions": [{"type": "Complete", "status": "True"}],
            }
        }
        logs.add(entry(1, gke_resource(f"{GKE}-train-0-x0k2p"), train(60, 0, 0)))
        endpoints = [
            *("--endpoint", f"logging={logs.endpoint}"),
            *("--endpoint", f"kubernetes={kube.endpoint}"),
            *("--endpoint", f"storage={gcs}/storage/v1/"),
        ]
        program = ("status", "--program", str(folder), "--stack", GKE, *endpoints)
        from_outputs = invoke(*program, "--outputs", str(saved))
        from_export = invoke(*program, "--state", str(export))
        of_the_stack = invoke(
            "status", "--config-file", str(stack_file), "--outputs", str(stack_outputs), *endpoints
        )
    assert of_the_stack == (0, "\n".join(GKE_LINES) + "\n", "")
    # Before: "stack 'dev-a100-gke' ... is not a trainstack stack" (no --program).
    assert from_outputs == of_the_stack
    assert from_export == of_the_stack


def test_gke_status_without_the_kubeconfig_says_what_to_export(tmp_path: Path) -> None:
    folder, outputs, _ = registered(tmp_path, GKE_PROGRAM, GKE)
    saved = tmp_path / "outputs.json"
    saved.write_text(json.dumps(outputs))
    code, out, err = invoke(
        "status", "--program", str(folder), "--stack", GKE, "--outputs", str(saved)
    )
    assert (code, out) == (2, "")
    assert err == (
        f"error: stack '{GKE}': status of a GKE Job reads it from the cluster, and --outputs "
        'has no kubeconfig; export the cluster\'s kubeconfig, pulumi.export("kubeconfig", '
        "cluster.kubeconfig) (a secret: save the outputs with --show-secrets), or pass --state "
        "FILE with `pulumi stack export --show-secrets`\n"
    )


def test_a_programs_tpu_logs_are_the_stacks(tmp_path: Path) -> None:
    folder, outputs, _ = registered(tmp_path, TPU_PROGRAM, TPU)
    saved = tmp_path / "outputs.json"
    saved.write_text(json.dumps(outputs))
    stack_outputs = tmp_path / "stack-outputs.json"
    stack_outputs.write_text(json.dumps(OUTPUTS[TPU]))
    with LoggingFakeServer() as server:
        server.add(
            entry(1, tpu_resource(0), train(20, 0, 0)),
            entry(2, tpu_resource(1), train(20, 1, 1)),
        )
        endpoint = ("--endpoint", f"logging={server.endpoint}")
        program = invoke(
            "logs",
            "--program",
            str(folder),
            "--stack",
            TPU,
            "--outputs",
            str(saved),
            "--worker",
            "1",
            *endpoint,
        )
        program_query = server.requests[-1][2]["filter"]
        of_the_stack = invoke(
            "logs",
            "--stack",
            f"example:{TPU}",
            "--outputs",
            str(stack_outputs),
            "--worker",
            "1",
            *endpoint,
        )
        stack_query = server.requests[-1][2]["filter"]
    assert (
        program
        == of_the_stack
        == (
            0,
            "10:00:02 node 1 rank 1 train step 20 loss 2.3000 812.2 samples/s\n",
            "",
        )
    )
    assert (
        program_query
        == stack_query
        == (
            'resource.type="tpu_worker" AND resource.labels.node_id="dev-tpu-v5e-tpu" '
            'AND resource.labels.worker_id="1"'
        )
    )


def test_a_program_without_compute_facts_is_one_line(tmp_path: Path) -> None:
    folder = write_program(tmp_path / "acme", "import pulumi\npulumi.export('x', 1)\n")
    saved = tmp_path / "outputs.json"
    saved.write_text(json.dumps({"x": 1}))
    code, _, err = invoke(
        "status", "--program", str(folder), "--stack", "dev", "--outputs", str(saved)
    )
    assert (code, err) == (
        2,
        "error: stack 'dev' has no trainstack compute in --outputs: no component facts "
        '("trainstack_facts": 1) of a TpuPodSlice, TpuGkeSlices or A100Cluster; valid: '
        "`pulumi stack export --show-secrets --stack dev > FILE` as --state FILE, or an "
        "--outputs FILE of a program "
        'that exports them (pulumi.export("tpu", tpu.facts))\n',
    )


def test_a_program_with_two_slices_picks_one_with_component(tmp_path: Path) -> None:
    folder, outputs, _ = registered(tmp_path, TPU_PROGRAM, TPU)
    other = json.loads(json.dumps(outputs["tpu"]))
    other["name"] = other["status"]["node"] = "acme-other"
    other["logs"]["scope"] = 'resource.labels.node_id="acme-other"'
    saved = tmp_path / "outputs.json"
    saved.write_text(json.dumps({**outputs, "other": other}))
    program = ("--program", str(folder), "--stack", TPU, "--outputs", str(saved))
    # Before: the refusal named no component and no way to pick one.
    assert invoke("logs", *program) == (
        2,
        "",
        f"error: stack '{TPU}' has 2 compute components ({TPU}-tpu (TpuPodSlice), acme-other "
        "(TpuPodSlice)); status and logs read one; valid: --component NAME, one of them\n",
    )
    assert invoke("status", *program, "--component", "acme") == (
        2,
        "",
        f"error: --component: stack '{TPU}' has no compute component named 'acme'; valid: "
        f"{TPU}-tpu (TpuPodSlice), acme-other (TpuPodSlice)\n",
    )
    with LoggingFakeServer() as server:
        server.add(entry(1, tpu_resource(1), train(20, 1, 1)))
        picked = invoke(
            "logs",
            *program,
            *("--component", "acme-other", "--worker", "1"),
            *("--endpoint", f"logging={server.endpoint}"),
        )
        query = server.requests[-1][2]["filter"]
    assert picked == (0, "", "")
    assert query == (
        'resource.type="tpu_worker" AND resource.labels.node_id="acme-other" '
        'AND resource.labels.worker_id="1"'
    )


@pytest.mark.parametrize(
    ("kubeconfig", "error"),
    [
        (
            "[secret]",
            'error: kubeconfig: the saved outputs hold "[secret]" in its place, as `pulumi stack '
            "output --json` writes a secret without --show-secrets; valid: save them again with "
            "`pulumi stack output --json --show-secrets`\n",
        ),
        (
            "apiVersion: v1\nkind: Config\nclusters: []\n",
            "error: kubeconfig: has no clusters[0].cluster.server; valid: the cluster's "
            "kubeconfig output (A100Cluster.kubeconfig, a secret), saved with `pulumi stack "
            "output --json --show-secrets`\n",
        ),
    ],
)
def test_a_kubeconfig_that_is_not_one_is_one_line(
    tmp_path: Path, kubeconfig: str, error: str
) -> None:
    saved = tmp_path / "stack-outputs.json"
    saved.write_text(json.dumps({**OUTPUTS[GKE], "kubeconfig": kubeconfig}))
    # Before: a TypeError ("[secret]" is a YAML list) or an IndexError traceback.
    assert invoke("status", "--stack", f"example:{GKE}", "--outputs", str(saved)) == (2, "", error)
    folder, outputs, _ = registered(tmp_path, GKE_PROGRAM, GKE)
    program_saved = tmp_path / "outputs.json"
    program_saved.write_text(json.dumps({**outputs, "kubeconfig": kubeconfig}))
    program = ("--program", str(folder), "--stack", GKE, "--outputs", str(program_saved))
    assert invoke("status", *program) == (2, "", error)
