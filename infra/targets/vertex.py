"""Target `vertex`: a Vertex AI CustomJob (or HyperparameterTuningJob), optionally with
Reduction Server (`VertexTrainingJob`). Stack section `trainstack:vertex`
(`trainstack.infra.targets.vertex_config`); the image its replicas run is
`trainstack.infra.targets.vertex_image`."""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import date
from typing import TYPE_CHECKING, Any, cast

import pulumi

from trainstack.components._google_api import ApiError
from trainstack.components.catalog.batch import WorldSize, gpu_world_size
from trainstack.components.catalog.gpu_families import cuda_floor_of
from trainstack.components.catalog.images import (
    availability_date,
    cuda_floor_problem,
    mirrored_image_uri,
    vertex_training_image,
)
from trainstack.components.code_summary import GPU_NODE_ENV, NODE_ENV, launcher_world_size
from trainstack.components.facts import vertex_quota, vertex_summary
from trainstack.components.image_mirror import ImageMirror
from trainstack.components.reduction_server_image import SERVICES as PLUGIN_IMAGE_SERVICES
from trainstack.components.reduction_server_image import ReductionServerImage
from trainstack.components.training_dashboard.targets import vertex_filter_text
from trainstack.components.user_code import vertex_run_contract
from trainstack.components.vertex_training_job import (
    VertexTrainingJob,
    VertexTrainingJobArgs,
    vertex_job_spec_problems,
)
from trainstack.infra.logs import LogsError, check_worker, log_query
from trainstack.infra.outputs import (
    OUTPUT_CONSOLE_URL,
    OUTPUT_JOB_NAME,
    OUTPUT_JOB_STATE,
    OUTPUT_REDUCERS,
)
from trainstack.infra.run_args import trainer_args
from trainstack.infra.stack_outputs import require
from trainstack.infra.targets.base import CloudTarget, ComposeContext
from trainstack.infra.targets.vertex_config import (
    VertexConfig,
    tuned_batch_problems,
    vertex_timeout_s,
)
from trainstack.infra.targets.vertex_image import (
    builds_plugin_image,
    default_image,
    uses_image_mirror,
    vertex_image,
    vertex_image_problems,
    vertex_plan_notes,
)
from trainstack.infra.targets.vertex_runs import RUN_RESOURCES
from trainstack.trainers.common.config import TrainConfig
from trainstack.trainers.common.contract import TORCH_MODULE, TRAINER_MODULES

if TYPE_CHECKING:
    from trainstack.components.training_dashboard.targets import DashboardScope
    from trainstack.components.training_identity import TrainingIdentityArgs
    from trainstack.infra.config_sections import StackView
    from trainstack.trainers.common.user_code import StackTrainer, UserCode

MIRROR_SERVICE = "artifactregistry.googleapis.com"
"""Enabled when a Vertex stack's default image is pulled through its Docker Hub mirror."""
_VERTEX_JOB = re.compile(
    r"projects/(?P<project>[^/]+)/locations/(?P<region>[^/]+)/"
    r"(?:customJobs|hyperparameterTuningJobs)/[^/]+"
)
_VERTEX_FORMS = (
    "projects/PROJECT/locations/REGION/customJobs/ID or "
    "projects/PROJECT/locations/REGION/hyperparameterTuningJobs/ID"
)


def _vx(cfg: StackView) -> VertexConfig:
    return cast(VertexConfig, cfg.compute)


def _sizing(vx: VertexConfig) -> tuple[str, int, int, str]:
    """Machine type, replicas, reducers and the reducers' machine type, as
    `VertexTrainingJob` sizes itself (`components.facts.vertex_summary`)."""
    return vx.machine_type, vx.replica_count, vx.reducer_count(), vx.reduction_server.machine_type


def _trials(vx: VertexConfig) -> int:
    hp = vx.hyperparameter_tuning
    return 1 if hp is None else hp.parallel_trial_count


class Vertex(CloudTarget):
    name = "vertex"
    section = "vertex"
    model = VertexConfig
    managed_hosts = "managed by Vertex AI"
    runs_image = True
    reads_jobs = True
    run_resources = RUN_RESOURCES

    # ------------------------------------------------------------------ config

    def section_problems(
        self, section: VertexConfig, region: str | None, trainer: StackTrainer | None
    ) -> list[str]:
        # Tuning your own code may search any of its flags, not only the bundled trainer's.
        bundled = trainer is None or trainer.user_code is None
        return vertex_job_spec_problems(section.job_args(), "vertex.", bundled)

    def torch_image(self, section: VertexConfig) -> tuple[str, str | None]:
        floor = cuda_floor_of(section.machine_type)
        default = vertex_training_image(TORCH_MODULE, floor).uri
        return section.image_uri or default, "vertex.image_uri"

    def trainer_problems(self, section: VertexConfig | None, trainer: TrainConfig) -> list[str]:
        # The bundled image against the GPU family's CUDA floor (catalog.gpu_families); an
        # image the stack names cannot be looked into offline.
        problems = super().trainer_problems(section, trainer)
        if section is None:  # the section did not parse: its own errors say why
            return problems
        floor = cuda_floor_of(section.machine_type)
        if section.image_uri or floor is None:
            return problems
        image = vertex_training_image(TRAINER_MODULES[trainer.framework], floor)
        gpu = str(section.machine.gpu_model)
        problem = cuda_floor_problem(image, gpu, floor, "trainer.framework")
        return problems + ([problem] if problem else [])

    def world_size(self, section: VertexConfig, trainer: TrainConfig) -> WorldSize:
        return gpu_world_size(
            trainer.framework,
            trainer.strategy,
            machines=section.replica_count,
            gpus_per_machine=section.gpus_per_replica,
        )

    def batch_problems(
        self, section: VertexConfig, trainer: TrainConfig, world: WorldSize
    ) -> list[str]:
        if section.hyperparameter_tuning is None:
            return []
        return tuned_batch_problems(section, trainer, world)

    # ------------------------------------------------------------------ estimate and plan

    def summary(self, cfg: StackView) -> dict[str, Any]:
        vx = _vx(cfg)
        return vertex_summary(*_sizing(vx), vx.spot, _trials(vx))

    def quota(self, cfg: StackView) -> list[dict[str, Any]]:
        vx = _vx(cfg)
        assert cfg.region is not None
        # Flex-start counts on preemptible quota (catalog.gpu_families.VERTEX_FLEX_START_QUOTA_NOTE).
        spot = vx.spot or vx.flex_start
        return vertex_quota(*_sizing(vx), spot, vx.region or cfg.region, _trials(vx))

    def run_limit(self, cfg: StackView, seconds: int) -> tuple[bool, str]:
        timeout = vertex_timeout_s(_vx(cfg), seconds)
        return True, (
            f"Vertex job scheduling.timeout {timeout}s (the smaller of vertex.timeout_s and "
            "limits.max_run_hours)"
        )

    def runs_on(self, cfg: StackView, code: UserCode) -> str:
        return vertex_image(cfg)[0]

    def code_world_size(self, cfg: StackView, code: UserCode) -> int:
        vx = _vx(cfg)
        launcher = code.launcher_for(self.default_launcher)
        return launcher_world_size(launcher, vx.replica_count, vx.gpus_per_replica)

    def node_launcher_env(self, cfg: StackView) -> list[str]:
        return list(GPU_NODE_ENV if _vx(cfg).gpus_per_replica > 0 else NODE_ENV)

    def plan_notes(self, cfg: StackView, deployment: str) -> list[str]:
        return vertex_plan_notes(cfg, deployment)

    def image_problems(self, cfg: StackView, today: date) -> tuple[list[str], list[str]]:
        return vertex_image_problems(cfg, today)

    def run_contract(self, cfg: StackView, contract: dict[str, str]) -> dict[str, str]:
        # Vertex names the job's folders (AIP_CHECKPOINT_DIR, AIP_MODEL_DIR; per trial when
        # tuning), which the node gives your code unless the stack names a folder itself
        # (the checkpoint folder with the run's name below it, `trainstack.trainers.user_code`).
        return vertex_run_contract(contract, bool(cfg.trainer.checkpoint_dir))

    def package_requirements(self, cfg: StackView) -> list[str]:
        """What the torch trainer imports on Vertex that a CUDA image lacks (tensorboard, for
        AIP_TENSORBOARD_LOG_DIR); the TF trainer's tf-keras comes from the setup script."""
        return list(vertex_training_image(TRAINER_MODULES[cfg.trainer.framework]).requirements)

    # ------------------------------------------------------------------ compose

    def services(self, cfg: StackView) -> list[str]:
        return ["aiplatform.googleapis.com"]

    def extra_services(self, cfg: StackView) -> list[str]:
        if builds_plugin_image(cfg):
            return list(PLUGIN_IMAGE_SERVICES)
        return [MIRROR_SERVICE] if uses_image_mirror(cfg) else []

    def before_identity(
        self,
        cfg: StackView,
        deployment: str,
        labels: Mapping[str, str],
        after_apis: pulumi.ResourceOptions,
        identity_args: TrainingIdentityArgs,
    ) -> dict[str, Any]:
        if not uses_image_mirror(cfg):
            return {}
        assert cfg.project is not None and cfg.region is not None
        mirror = ImageMirror(
            f"{deployment}-images",
            {
                "project": cfg.project,
                "location": _vx(cfg).region or cfg.region,
                "deployment_name": deployment,
                "labels": labels,
            },
            opts=after_apis,
        )
        # The repository's own Output, so the grant (and the job after it) waits for it.
        identity_args["image_repository"] = {
            "location": mirror.location,
            "repository_id": mirror.repository.repository_id,
        }
        if not builds_plugin_image(cfg):
            return {"mirror": mirror}
        # Reduction Server: the default image again, with Google's NCCL plugin, by digest.
        plugin_image = ReductionServerImage(
            f"{deployment}-rs-image",
            {
                "project": cfg.project,
                "location": mirror.location,
                "deployment_name": deployment,
                "base_image": mirrored_image_uri(default_image(cfg), mirror.registry),
                "base_repository": {
                    "location": mirror.location,
                    "repository_id": mirror.repository.repository_id,
                },
                "labels": labels,
            },
            opts=after_apis,
        )
        return {"mirror": mirror, "plugin_image": plugin_image}

    def compose(self, ctx: ComposeContext) -> tuple[dict[str, Any], DashboardScope]:
        cfg, deployment = ctx.cfg, ctx.deployment
        vx = _vx(cfg)
        mirror: ImageMirror | None = ctx.extras.get("mirror")
        plugin_image: ReductionServerImage | None = ctx.extras.get("plugin_image")
        assert cfg.project is not None and cfg.region is not None
        # The section's job keys are the component's (machine, accelerators, replicas,
        # reduction_server, spot, flex_start, timeout_s, hyperparameter_tuning): passed on as they are.
        args = cast(
            VertexTrainingJobArgs,
            {
                **vx.job_args(),
                "project": cfg.project,
                "region": vx.region or cfg.region,
                "display_name": deployment,
                "service_account": ctx.identity.service_account_email,
                "base_output_dir": ctx.buckets.checkpoint_url,
                "labels": ctx.labels,
            },
        )
        timeout_s = vertex_timeout_s(vx, cfg.limits.max_run_seconds)
        if timeout_s is not None:
            args["timeout_s"] = timeout_s
        errors, _ = vertex_image_problems(cfg, availability_date())
        if errors:
            # The program refuses what the plan refuses: `pulumi preview` fails here.
            raise ValueError("\n".join(errors))
        image, _, default = vertex_image(cfg)
        # Every replica runs the pod setup script, which installs the package into the image's
        # python3 and then runs the node launcher (trainstack.components._vertex_body).
        args["package_uri"] = ctx.package.uri
        code = cfg.trainer.user_code
        if plugin_image is not None:
            args["plugin_image_uri"] = plugin_image.image_uri
        if code is not None and ctx.node_args is not None:
            args["node_args"] = ctx.node_args
            if ctx.secret_env_names:
                args["secret_env_names"] = list(ctx.secret_env_names)
            if plugin_image is None:
                args["container_image_uri"] = (
                    mirrored_image_uri(default_image(cfg), mirror.registry)
                    if default and mirror is not None
                    else image
                )
        else:
            args["python_module"] = TRAINER_MODULES[cfg.trainer.framework]
            args["trainer_args"] = trainer_args(cfg, deployment)
            if not default:
                args["container_image_uri"] = image
            elif mirror is not None:
                args["image_mirror"] = mirror.registry
        job = VertexTrainingJob(f"{deployment}-job", args, opts=ctx.after_grants)
        outputs = {
            OUTPUT_JOB_NAME: job.job_name,
            OUTPUT_JOB_STATE: job.state,
            OUTPUT_CONSOLE_URL: job.console_url,
            OUTPUT_REDUCERS: job.reducer_count,
        }
        return outputs, job.dashboard_scope

    # ------------------------------------------------------------------ status and logs

    def status(
        self, cfg: StackView, stack: str, outputs: dict[str, Any], endpoints: Mapping[str, str]
    ) -> dict[str, Any]:
        from trainstack.components._vertex_provider import job_status

        job = str(require(outputs, stack, "job_name"))
        match = _VERTEX_JOB.fullmatch(job)
        if match is None:
            raise LogsError(
                f"stack {stack!r} output job_name: {job!r} is not a Vertex AI job resource "
                f"name; valid: {_VERTEX_FORMS}"
            )
        try:
            info = job_status(
                match["project"], match["region"], job, api_endpoint=endpoints.get("aiplatform")
            )
        except ApiError as exc:
            raise LogsError(f"cannot read {job}: {exc.message}") from None
        return {
            "state": info["state"],
            "hosts": [],
            "started": info.get("start_time"),
            "ended": info.get("end_time"),
        }

    def log_filter(
        self, cfg: StackView, stack: str, outputs: dict[str, Any], worker: int | None
    ) -> str:
        check_worker(worker, _vx(cfg).replica_count, stack)
        job_id = str(require(outputs, stack, "job_name")).rsplit("/", 1)[-1]
        scope = vertex_filter_text(job_id)[0]
        if worker is not None:
            task = "workerpool0-0" if worker == 0 else f"workerpool1-{worker - 1}"
            scope += f' AND resource.labels.task_name="{task}"'
        return log_query("vertex", scope)


TARGET = Vertex()
