"""Target `gke`: A100 nodes in a GKE cluster running the trainer as an Indexed Job
(`A100Cluster` with backend `gke`). Stack section `trainstack:gpu_cluster`, `backend: gke`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import pulumi

from trainstack.components.a100_cluster import (
    STACK_GRACE_KEY,
    gke_spot_grace_note,
    gpu_code_runs_on,
)
from trainstack.components.a100_cluster.gke_fabric import fabric_for, fabric_note
from trainstack.components.a100_cluster.validate import bundled_image_problems
from trainstack.components.catalog.gpu_families import cuda_floor_of, machine_family
from trainstack.components.catalog.image_pull import image_pull_note, image_repository
from trainstack.components.catalog.images import (
    torch_image_note,
    vertex_training_image,
)
from trainstack.components.facts import gke_cluster_after_stop, run_limit_text
from trainstack.components.naming import account_id
from trainstack.components.training_dashboard.targets import gke_filter_text
from trainstack.infra.compute_status import gke_job_state, gke_log_filter
from trainstack.infra.logs import check_worker
from trainstack.infra.plan_inputs import number
from trainstack.infra.stack_outputs import require
from trainstack.infra.targets.base import RunResource, StillBilling
from trainstack.infra.targets.gpu_cluster import GpuCluster, GpuClusterConfig, gpu_section
from trainstack.trainers.common.config import TrainConfig
from trainstack.trainers.common.contract import TORCH_MODULE, TRAINER_MODULES

if TYPE_CHECKING:
    from trainstack.components.training_identity import TrainingIdentityArgs
    from trainstack.infra.config_sections import StackView
    from trainstack.trainers.common.user_code import UserCode

GKE_NODE_ROLE = "roles/container.defaultNodeServiceAccount"
"""What a GKE node's own service account needs (logging, monitoring, image pulls)."""


def exit_codes(job: Mapping[str, Any], action: str) -> list[str]:
    """The container exit codes a Job's pod failure policy answers with `action` (`FailJob`,
    `Ignore`), as the plan writes them."""
    rules = (job.get("podFailurePolicy") or {}).get("rules") or []
    return [
        number(code)
        for rule in rules
        if isinstance(rule, Mapping) and rule.get("action") == action
        for code in (rule.get("onExitCodes") or {}).get("values") or []
    ]


def pod_limits_line(pod: Mapping[str, Any]) -> str:
    """What each pod of a Job asks for: its first container's resource limits."""
    container = (pod.get("containers") or [{}])[0]
    limits = (container.get("resources") or {}).get("limits") or {}
    if not limits:
        return "each pod: no resource limits"
    return "each pod: " + ", ".join(f"{key} {number(value)}" for key, value in limits.items())


def job_lines(inputs: Mapping[str, Any]) -> list[str]:
    """The text plan's lines for a planned GPU Job (`A100Cluster`'s Indexed Job): its pods,
    what each asks for, its failure policy and deadline, as a TPU JobSet's are shown."""
    spec = inputs.get("spec")
    if not isinstance(spec, Mapping):
        return [f"Job spec {spec}"]
    pod = (spec.get("template") or {}).get("spec") or {}
    image = (pod.get("containers") or [{}])[0].get("image")
    pods = number(spec.get("parallelism"))
    head = (
        f"{pods} pods (parallelism {pods}, completions {number(spec.get('completions'))}, "
        f"{spec.get('completionMode')}), image {image}"
    )
    lines = [head, pod_limits_line(pod)]
    policy = [f"fail on exits {', '.join(codes)}"] if (codes := exit_codes(spec, "FailJob")) else []
    if "backoffLimitPerIndex" in spec:
        policy.append(
            f"retry other failures up to {number(spec['backoffLimitPerIndex'])} times per pod"
        )
    if ignored := exit_codes(spec, "Ignore"):
        policy.append(f"exits {', '.join(ignored)} and disruptions not counted")
    lines.append("failure policy: " + "; ".join(policy or ["the Job's defaults"]))
    if "activeDeadlineSeconds" in spec:
        lines.append(f"deadline: {number(spec['activeDeadlineSeconds'])}s (activeDeadlineSeconds)")
    return lines


def node_identity(cfg: StackView, identity_args: TrainingIdentityArgs) -> None:
    """The training account as a GKE node's account (the GPU nodes', and the TPU slices' of
    target tpu_gke): the node role, and reading the Artifact Registry repository of your
    `trainer.image`, which the nodes pull as this account
    (`trainstack.components.catalog.image_pull`); an image elsewhere (Docker Hub, the bundled
    trainer's) gets no grant, nor does one in another project (`image_pull_note` says what to
    grant there)."""
    identity_args["extra_project_roles"] = [GKE_NODE_ROLE]
    code = cfg.trainer.user_code
    repo = image_repository(code.image if code is not None else None)
    if repo is not None and repo.project == cfg.project:
        identity_args["image_repository"] = {
            "project": repo.project,
            "location": repo.location,
            "repository_id": repo.repository,
        }


def node_image_note(cfg: StackView, deployment: str) -> list[str]:
    """The plan's note on a `trainer.image` in another project's Artifact Registry, which
    `node_identity` grants nothing on (`catalog.image_pull.image_pull_note`)."""
    code = cfg.trainer.user_code
    account = (
        f"serviceAccount:{account_id(deployment, 'train')}@{cfg.project}.iam.gserviceaccount.com"
    )
    note = image_pull_note(code.image if code is not None else None, cfg.project, account)
    return [] if note is None else [note]


class Gke(GpuCluster):
    name = "gke"
    run_resources = (RunResource("kubernetes:batch/v1:Job", describe=job_lines),)

    def torch_image(self, section: GpuClusterConfig) -> tuple[str, str | None]:
        # The family's image (B200: CUDA 13, catalog.images.TORCH_IMAGES), by tag.
        return vertex_training_image(TORCH_MODULE, cuda_floor_of(section.machine_type)).uri, None

    def trainer_problems(self, section: GpuClusterConfig | None, trainer: TrainConfig) -> list[str]:
        problems = super().trainer_problems(section, trainer)
        if section is None:  # the section did not parse: its own errors say why
            return problems
        module = TRAINER_MODULES[trainer.framework]
        return problems + bundled_image_problems(module, section.machine_type, "trainer.framework")

    def still_billing_after_stop(self, cfg: StackView, stack: str) -> list[StillBilling]:
        # The supervisor empties the GPU pool only: the cluster and its system node bill
        # until the cluster is deleted (billing.GKE_CLUSTER_BILLS_UNTIL_DELETED).
        cluster = StillBilling(**gke_cluster_after_stop(stack))
        return [cluster, *super().still_billing_after_stop(cfg, stack)]

    def run_limit(self, cfg: StackView, seconds: int) -> tuple[bool, str]:
        return True, run_limit_text("gke", seconds, gpu_section(cfg).flex_start)

    def runs_on(self, cfg: StackView, code: UserCode) -> str:
        gpu = gpu_section(cfg)
        return gpu_code_runs_on(self.name, gpu.machine_type, gpu.zone, code.image)

    def spot_note(self, cfg: StackView) -> str:
        """The plan's note on spot GKE nodes: whether `trainer.preemption_grace_s` fits GKE's
        notice; for your code, what the code must do in it: `trainer.preemption_grace_s`
        reaches your code only in `local-run` (`trainstack.trainers.local_code`), and on GKE
        the node launcher passes SIGTERM on (`trainstack.trainers.node`)."""
        return gke_spot_grace_note(
            cfg.trainer.preemption_grace_s,
            spot_key=f"{self.section}.spot",
            grace_key=STACK_GRACE_KEY,
            own_code=cfg.trainer.user_code is not None,
        )

    def plan_notes(self, cfg: StackView, deployment: str) -> list[str]:
        # The cluster's own notes before its supervisor's, as a program's plan lists
        # A100Cluster's facts before RunSupervisor's.
        notes = []
        section = gpu_section(cfg)
        if section.spot:
            notes.append(self.spot_note(cfg))
        fabric = fabric_for(section.machine_type, deployment, section.zone)
        if fabric is not None:
            notes.append(fabric_note(fabric, section.machine_type))
        family = machine_family(section.machine_type)
        image = torch_image_note(
            family.gpu_model, family.cuda_floor, "GKE installs gpu_driver_version LATEST"
        )
        code = cfg.trainer.user_code
        if image is not None and (code is None or not code.image):
            notes.append(f"gpu_cluster: {image}")
        return notes + node_image_note(cfg, deployment) + super().plan_notes(cfg, deployment)

    def before_identity(
        self,
        cfg: StackView,
        deployment: str,
        labels: Mapping[str, str],
        after_apis: pulumi.ResourceOptions,
        identity_args: TrainingIdentityArgs,
    ) -> dict[str, Any]:
        node_identity(cfg, identity_args)
        return {}

    def status(
        self, cfg: StackView, stack: str, outputs: dict[str, Any], endpoints: Mapping[str, str]
    ) -> dict[str, Any]:
        job = str(require(outputs, stack, "job_name"))
        return gke_job_state(lambda: str(require(outputs, stack, "kubeconfig")), job, endpoints)

    def log_filter(
        self, cfg: StackView, stack: str, outputs: dict[str, Any], worker: int | None
    ) -> str:
        check_worker(worker, gpu_section(cfg).node_count, stack)
        cluster = str(require(outputs, stack, "cluster_name"))
        job = str(require(outputs, stack, "job_name"))
        scope = gke_filter_text(cluster)[0]
        return gke_log_filter(scope, job, gpu_section(cfg).node_count, worker, stack)


TARGET = Gke()
