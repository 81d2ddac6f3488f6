"""Adding a target is one module: a target defined and registered here (plain Compute Engine
CPU VMs, stack section `trainstack:cpu_vms`) is validated, planned, estimated and shown by
`trainstack status` with no change to the generic code (config, compose, plan, estimate,
status, CLI), which only asks the registry (`trainstack.infra.targets`)."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import pytest
import yaml
from pulumi_gcp import compute
from pydantic import Field
from typer.testing import CliRunner

from tests.fakes.compute_server import ComputeFakeServer
from tests.fakes.gcs_emulator import running_gcs_emulator
from tests.fakes.logging_server import LoggingFakeServer
from tests.unit.test_logs import entry, train
from tests.unit.test_status import checkpoints
from trainstack.components._google_api import build_client
from trainstack.components.catalog.batch import WorldSize
from trainstack.components.catalog.machines import MACHINES
from trainstack.components.catalog.names import zone_in_region_problems
from trainstack.components.training_dashboard.targets import (
    PLATFORMS,
    BuiltinMetric,
    Platform,
    TargetMetrics,
    gce_filters,
    register_platform,
    unregister_platform,
)
from trainstack.infra import catalog
from trainstack.infra.cli import app
from trainstack.infra.config import ConfigError, load_stack_config
from trainstack.infra.estimate import limits_plan, quota_needs, summarize
from trainstack.infra.google_reads import get_or_none
from trainstack.infra.logs import check_worker, log_query
from trainstack.infra.plan import build_plan
from trainstack.infra.stack_outputs import require
from trainstack.infra.targets import (
    CloudTarget,
    ComposeContext,
    Section,
    register,
    registered,
    unregister,
)

if TYPE_CHECKING:
    from trainstack.components.training_dashboard.targets import DashboardScope
    from trainstack.infra.config import StackConfig
    from trainstack.trainers.common.config import TrainConfig
    from trainstack.trainers.common.user_code import StackTrainer, UserCode

P = "my-ml-project"
STACK = "demo-cpu"
MACHINE = "n1-highcpu-16"


# Its monitoring platform: plain VMs log and report as Compute Engine instances; the chart
# that GPU platforms give GPU utilization shows CPU utilization (Compute Engine metrics list,
# https://cloud.google.com/monitoring/api/metrics_gcp_c, compute instance/cpu/utilization).
CPU_PLATFORM = Platform(
    "cpu_vms",
    TargetMetrics(
        accelerator=BuiltinMetric(
            "compute.googleapis.com/instance/cpu/utilization",
            "gce_instance",
            "resource.label.instance_id",
            verified=False,
            source="https://cloud.google.com/monitoring/api/metrics_gcp_c",
        ),
        accelerator_unit="CPU utilization",
        received_bytes=PLATFORMS["gce"].metrics.received_bytes,
        sent_bytes=PLATFORMS["gce"].metrics.sent_bytes,
    ),
    "gce_instance",
    gpu=False,
)


class CpuVmsConfig(Section):
    """`trainstack:cpu_vms`: CPU VMs that each run one trainer process."""

    machine_type: str = MACHINE
    node_count: int = Field(default=2, ge=1)
    zone: str


def _section(cfg: StackConfig) -> CpuVmsConfig:
    return cast(CpuVmsConfig, cfg.compute)


class CpuVms(CloudTarget):
    name = "cpu_vms"
    section = "cpu_vms"
    model = CpuVmsConfig
    own_network = True
    # One process per VM: what your code may use here reaches the config checks as data.
    launchers = ("node",)
    default_launcher = "node"

    def section_problems(
        self, section: CpuVmsConfig, region: str | None, trainer: StackTrainer | None
    ) -> list[str]:
        return zone_in_region_problems(section.zone, region, "cpu_vms.zone")

    def world_size(self, section: CpuVmsConfig, trainer: TrainConfig) -> WorldSize:
        return WorldSize(section.node_count, f"{section.node_count} machines x 1 process")

    def summary(self, cfg: StackConfig) -> dict[str, Any]:
        vms = _section(cfg)
        hourly = vms.node_count * catalog.MACHINE_PRICES[vms.machine_type].hourly(False)
        return {"tpu_chips": 0, "gpus": 0, "machines": vms.node_count, "hourly_usd": hourly}

    def quota(self, cfg: StackConfig) -> list[dict[str, Any]]:
        vms = _section(cfg)
        assert cfg.region is not None
        vcpus = vms.node_count * MACHINES[vms.machine_type].vcpus
        return [catalog.quota_need(catalog.CPUS_QUOTA, {"region": cfg.region}, vcpus)]

    def run_limit(self, cfg: StackConfig, seconds: int) -> tuple[bool, str]:
        return False, "not enforced: the demo VMs run until `pulumi destroy`"

    def runs_on(self, cfg: StackConfig, code: UserCode) -> str:
        return "Debian 12"

    def code_world_size(self, cfg: StackConfig, code: UserCode) -> int:
        return _section(cfg).node_count

    def services(self, cfg: StackConfig) -> list[str]:
        return ["oslogin.googleapis.com"]

    def compose(self, ctx: ComposeContext) -> tuple[dict[str, Any], DashboardScope]:
        vms = _section(ctx.cfg)
        assert ctx.network is not None
        names = [f"{ctx.deployment}-cpu-{i}" for i in range(vms.node_count)]
        for name in names:
            compute.Instance(
                name,
                name=name,
                project=ctx.cfg.project,
                zone=vms.zone,
                machine_type=vms.machine_type,
                boot_disk={"initialize_params": {"image": "debian-cloud/debian-12"}},
                network_interfaces=[{"subnetwork": ctx.network.subnetwork_self_link}],
                service_account={
                    "email": ctx.identity.service_account_email,
                    "scopes": ["cloud-platform"],
                },
                labels=dict(ctx.labels),
                metadata=None
                if ctx.node_args is None
                else {"node-args": ctx.node_args.apply(json.dumps)},
                opts=ctx.after_grants,
            )
        log_filter, resource_filter = gce_filters(ctx.deployment, f"^{ctx.deployment}-cpu-")
        scope: DashboardScope = {
            "target": "cpu_vms",  # its own platform, `CPU_PLATFORM`
            "worker_count": vms.node_count,
            "log_filter": log_filter,
            "resource_filter": resource_filter,
        }
        return {"instance_names": names}, scope

    def status(
        self, cfg: StackConfig, stack: str, outputs: dict[str, Any], endpoints: Mapping[str, str]
    ) -> dict[str, Any]:
        zone = _section(cfg).zone
        instances = build_client("compute.v1", api_endpoint=endpoints.get("compute")).instances()
        hosts = []
        for name in require(outputs, stack, "instance_names"):
            found = get_or_none(instances.get(project=cfg.project, zone=zone, instance=name))
            state = "NOT_FOUND" if found is None else found["status"]
            hosts.append({"name": name, "state": state, "address": None})
        states = {h["state"] for h in hosts}
        return {
            "state": states.pop() if len(states) == 1 else "MIXED",
            "hosts": hosts,
            "started": None,
            "ended": None,
        }

    def log_filter(
        self, cfg: StackConfig, stack: str, outputs: dict[str, Any], worker: int | None
    ) -> str:
        names = [str(n) for n in require(outputs, stack, "instance_names")]
        check_worker(worker, len(names), stack)
        return log_query("cpu_vms", gce_filters(stack, f"^{stack}-cpu-")[0])


CONFIG: dict[str, Any] = {
    "gcp:project": P,
    "gcp:region": "us-central1",
    "trainstack:cpu_vms": {"node_count": 2, "zone": "us-central1-a"},
    "trainstack:trainer": {"steps": 100, "global_batch_size": 64},
}


@pytest.fixture
def cpu_vms() -> Iterator[CpuVms]:
    register_platform("cpu_vms", CPU_PLATFORM)
    target = register(CpuVms())
    yield target
    unregister(target.name)
    unregister_platform("cpu_vms")
    assert [t.name for t in registered()] == ["tpu", "tpu_gke", "gke", "gce", "vertex", "local"]
    assert list(PLATFORMS) == ["tpu", "tpu_gke", "gke", "gce", "vertex"]


def test_the_stack_config_takes_and_checks_the_new_section(cpu_vms: CpuVms) -> None:
    cfg = load_stack_config(CONFIG)
    assert (cfg.target, cfg.cpu_vms, cfg.tpu) == (
        "cpu_vms",
        CpuVmsConfig(node_count=2, zone="us-central1-a"),
        None,
    )
    bad = {**CONFIG, "trainstack:cpu_vms": {"nodes": 2, "zone": "europe-west4-a"}}
    with pytest.raises(ConfigError) as info:
        load_stack_config(bad)
    assert info.value.errors == [
        "cpu_vms.nodes: unknown key; did you mean `node_count`? valid: machine_type, node_count, "
        "zone"
    ]
    with pytest.raises(ConfigError) as info:
        load_stack_config({**CONFIG, "trainstack:cpu_vms": {"zone": "europe-west4-a"}})
    assert info.value.errors == [
        "cpu_vms.zone: 'europe-west4-a' is not in gcp:region 'us-central1'; valid: a zone "
        "named us-central1-<zone>"
    ]
    with pytest.raises(ConfigError) as info:
        load_stack_config({"gcp:project": P, "trainstack:environment": "dev"})
    assert info.value.errors == [
        "trainstack: no compute target given; valid: exactly one of tpu, gpu_cluster, "
        "vertex, local, cpu_vms"
    ]
    # The global batch splits over the target's world size, as on every target.
    with pytest.raises(ConfigError) as info:
        load_stack_config({**CONFIG, "trainstack:trainer": {"global_batch_size": 63}})
    assert info.value.errors == [
        "trainer.global_batch_size: 63 is not divisible by the world size 2 (2 machines x 1 "
        "process); valid: 62 or 64"
    ]


def test_it_plans_and_estimates(cpu_vms: CpuVms) -> None:
    cfg = load_stack_config({**CONFIG, "trainstack:limits": {"max_run_hours": 2}})
    assert summarize(cfg) == {"tpu_chips": 0, "gpus": 0, "machines": 2, "hourly_usd": 1.13}
    assert [(q["quota_id"], q["dimensions"], q["needed"]) for q in quota_needs(cfg)] == [
        (catalog.CPUS_QUOTA.quota_id, {"region": "us-central1"}, 32)
    ]
    assert limits_plan(cfg) == {
        "max_hourly_usd": None,
        "max_run_hours": 2,
        "max_run_seconds": 7200,
        "run_limit_enforced": False,
        "run_limit": "not enforced: the demo VMs run until `pulumi destroy`",
    }
    plan = build_plan(STACK, CONFIG)
    assert plan["target"] == "cpu_vms"
    assert plan["summary"] == {"tpu_chips": 0, "gpus": 0, "machines": 2, "hourly_usd": 1.13}
    by_name = {r["name"]: r for r in plan["resources"]}
    vm = by_name[f"{STACK}-cpu-1"]
    assert (vm["type"], vm["inputs"]["machineType"], vm["inputs"]["zone"]) == (
        "gcp:compute/instance:Instance",
        MACHINE,
        "us-central1-a",
    )
    # What the generic program registers for every cloud target is there too.
    top = sorted((r["type"], r["name"]) for r in plan["resources"] if r["parent"] is None)
    assert top == [
        ("gcp:compute/instance:Instance", f"{STACK}-cpu-0"),
        ("gcp:compute/instance:Instance", f"{STACK}-cpu-1"),
        ("trainstack:iam:TrainingIdentity", f"{STACK}-identity"),
        ("trainstack:monitoring:TrainingDashboard", f"{STACK}-monitoring"),
        ("trainstack:network:TrainingNetwork", f"{STACK}-network"),
        ("trainstack:project:ProjectServices", f"{STACK}-apis"),
        ("trainstack:quota:QuotaGuard", f"{STACK}-quota"),
        ("trainstack:storage:TrainerPackage", f"{STACK}-trainer"),
        ("trainstack:storage:TrainingBuckets", f"{STACK}-buckets"),
    ]
    # The base APIs, then the target's own.
    apis = [r["inputs"]["service"] for r in plan["resources"] if r["parent"] == f"{STACK}-apis"]
    assert apis == [
        "cloudquotas.googleapis.com",
        "compute.googleapis.com",
        "iam.googleapis.com",
        "logging.googleapis.com",
        "monitoring.googleapis.com",
        "oslogin.googleapis.com",
        "storage.googleapis.com",
    ]
    assert plan["outputs"]["instance_names"] == [f"{STACK}-cpu-0", f"{STACK}-cpu-1"]
    # The dashboard charts its own platform's metrics, and no GPU-only log metric.
    charted = json.dumps([r["inputs"] for r in plan["resources"]])
    assert "compute.googleapis.com/instance/cpu/utilization" in charted
    assert "agent.googleapis.com/gpu/utilization" not in charted
    assert "GPU utilization reported by the trainer" not in charted


def test_it_runs_your_own_code(cpu_vms: CpuVms, tmp_path: Path) -> None:
    code = tmp_path / "code"
    code.mkdir()
    (code / "train.py").write_text("print('hi')\n")
    trainer = {"source": str(code), "entrypoint": ["python", "train.py"]}
    config = {**CONFIG, "trainstack:trainer": trainer}
    plan = build_plan(STACK, config)
    entry = plan["code"]
    assert (entry["launcher"], entry["launcher_from"], entry["world_size"], entry["runs_on"]) == (
        "node",
        "the default on cpu_vms",
        2,
        "Debian 12",
    )
    vm = next(r for r in plan["resources"] if r["name"] == f"{STACK}-cpu-0")
    args = json.loads(vm["inputs"]["metadata"]["node-args"])
    assert (args[0], args[-3:]) == ("--launcher=node", ["--", "python", "train.py"])
    # The target's own rules, with the messages' list of targets that run a container.
    bad = {**trainer, "launcher": "torchrun", "image": "img:1"}
    with pytest.raises(ConfigError) as info:
        load_stack_config({**config, "trainstack:trainer": bad})
    assert info.value.errors == [
        "trainer.launcher: 'torchrun' is not allowed on a cpu_vms target; valid: node",
        "trainer.image: not supported on a cpu_vms target (it runs no container); valid: "
        "trainer.source, or a target of tpu, gpu_cluster, vertex",
    ]


def test_status_reads_it(cpu_vms: CpuVms, tmp_path: Path) -> None:
    stack_file = tmp_path / f"Pulumi.{STACK}.yaml"
    stack_file.write_text(yaml.safe_dump({"config": CONFIG}))
    names = [f"{STACK}-cpu-0", f"{STACK}-cpu-1"]
    with ExitStack() as stack:
        gcs = stack.enter_context(running_gcs_emulator())
        logs = stack.enter_context(LoggingFakeServer())
        vms = stack.enter_context(ComputeFakeServer())
        url = checkpoints(gcs, STACK, [40], [60])
        vms.instances[f"{P}/us-central1-a/{names[0]}"] = {"status": "RUNNING"}
        vms.instances[f"{P}/us-central1-a/{names[1]}"] = {"status": "RUNNING"}
        resource = {"type": "gce_instance", "labels": {"instance_id": "901", "zone": "z"}}
        logs.add(
            entry(
                1,
                resource,
                train(55, 0, 0),
                labels={"compute.googleapis.com/resource_name": names[0]},
            )
        )
        outputs = tmp_path / "outputs.json"
        outputs.write_text(json.dumps({"checkpoint_url": url, "instance_names": names}))
        argv = ["status", "--config-file", str(stack_file), "--outputs", str(outputs)]
        argv += ["--now", "2026-11-23T12:00:00Z", "--endpoint", f"logging={logs.endpoint}"]
        argv += ["--endpoint", f"compute={vms.endpoint}"]
        argv += ["--endpoint", f"storage={gcs}/storage/v1/"]
        result = CliRunner().invoke(app, argv)
    assert (result.exit_code, result.stdout, result.stderr) == (
        0,
        f"stack: {STACK} (cpu_vms)\n"
        "state: RUNNING\n"
        "step: 55\n"
        f"checkpoint: step 40 ({url}/checkpoints/{STACK}/step-00000040)\n"
        "hosts: 2/2 up\n"
        f"  {names[0]}: RUNNING -\n"
        f"  {names[1]}: RUNNING -\n"
        "cost so far: - (not started; $1.13/hour at list price)\n",
        "",
    )
