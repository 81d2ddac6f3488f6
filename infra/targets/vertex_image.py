"""The image a Vertex stack's replicas run, what is wrong with it, and the plan's notes.

`vertex_image` is the one answer for the job, the plan's "runs on" row and the
end-of-availability check (all in `trainstack.infra.targets.vertex`). A default image (the
framework's own on Docker Hub) is pulled through the stack's Artifact Registry remote
repository of Docker Hub (`trainstack.components.image_mirror`), never anonymously from Docker Hub.
With Reduction Server the stack builds that image again with Google's plugin
(`builds_plugin_image`, `trainstack.components.reduction_server_image`).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import date
from typing import TYPE_CHECKING, cast

from trainstack.components.catalog.gpu_families import (
    VERTEX_FLEX_START_DEFAULT_WAIT_HOURS,
    cuda_floor_of,
    machine_family,
)
from trainstack.components.catalog.images import (
    REGISTRY_STORAGE_PRICE_SOURCE,
    VertexTrainingImage,
    image_availability_problem,
    reduction_server_image_problem,
    torch_image_note,
    vertex_training_image,
)
from trainstack.components.catalog.reduction_server import (
    INSTALL_SOURCE,
    NCCL_NET_PLUGIN_ENV,
    PACKAGE,
    PLUGIN_PATH,
)
from trainstack.components.facts import VERTEX_NO_TIMEOUT_NOTE, vertex_flex_start_note
from trainstack.components.image_mirror import repository_id
from trainstack.components.naming import account_id
from trainstack.components.reduction_server_image import ACCOUNT_ROLE
from trainstack.components.reduction_server_image import repository_id as plugin_repository_id
from trainstack.infra.targets.base import target_of
from trainstack.infra.targets.vertex_config import VertexConfig, vertex_timeout_s
from trainstack.trainers.common.contract import TF_MODULE, TORCH_MODULE, TRAINER_MODULES

if TYPE_CHECKING:
    from trainstack.infra.config_sections import StackView

USER_CODE_VERTEX_MODULES: Mapping[str, str] = {"torchrun": TORCH_MODULE, "node": TF_MODULE}
"""Launcher -> the bundled module whose Vertex image runs your code when you name none:
PyTorch's for torchrun, TensorFlow's (TF_CONFIG code) for node."""


def vertex_image(cfg: StackView) -> tuple[str, str, bool]:
    """The image every Vertex replica runs, the key that picks it, and whether that is the
    default: your `trainer.image`, else `vertex.image_uri`, else the image of the trainer's
    framework (for your code: of its launcher, `USER_CODE_VERTEX_MODULES`). One answer for
    the job, the plan's "runs on" row and the end-of-availability check."""
    vx = cast(VertexConfig, cfg.compute)
    code = cfg.trainer.user_code
    if code is not None and code.image:
        return code.image, "trainer.image", False
    if vx.image_uri:
        return vx.image_uri, "vertex.image_uri", False
    return default_image(cfg).uri, "vertex.image_uri", True


def default_image(cfg: StackView) -> VertexTrainingImage:
    """The image the replicas run when the stack names none: the default module's, for the
    machine's GPU family (B200: the CUDA 13 torch image, `catalog.images.TORCH_IMAGES`)."""
    vx = cast(VertexConfig, cfg.compute)
    return vertex_training_image(vertex_module(cfg), cuda_floor_of(vx.machine_type))


def vertex_module(cfg: StackView) -> str:
    """The bundled module whose image the Vertex replicas run by default."""
    code = cfg.trainer.user_code
    if code is not None:
        return USER_CODE_VERTEX_MODULES[code.launcher_for(target_of(cfg).default_launcher)]
    return TRAINER_MODULES[cfg.trainer.framework]


def uses_image_mirror(cfg: StackView) -> bool:
    """Whether the stack pulls a default (Docker Hub) image, through its Docker Hub mirror."""
    return vertex_image(cfg)[2]


def builds_plugin_image(cfg: StackView) -> bool:
    """Whether the stack builds the default image again with Google's Reduction Server
    plugin (`trainstack.components.reduction_server_image`): reducers on a default image."""
    return uses_image_mirror(cfg) and cast(VertexConfig, cfg.compute).reducer_count() > 0


VERTEX_FLEX_START_WAIT_S = VERTEX_FLEX_START_DEFAULT_WAIT_HOURS * 3600


def vertex_plan_notes(cfg: StackView, deployment: str) -> list[str]:
    """Plan notes for a Vertex stack: the Docker Hub mirror the default image comes through,
    and a GPU job left without a run limit (Vertex's 7-day default)."""
    vx = cast(VertexConfig, cfg.compute)
    notes = []
    if uses_image_mirror(cfg):
        region = vx.region or cfg.region
        image = default_image(cfg)
        pinned = f"by digest {image.digest}" if image.digest else "by tag (digest unverified)"
        notes.append(
            f"vertex: the default image {image.uri} is pulled {pinned} through the Artifact "
            f"Registry remote repository {repository_id(deployment)} in {region} (Docker Hub "
            "upstream), not anonymously from Docker Hub; its cached storage is not in "
            f"hourly_usd and is negligible ({REGISTRY_STORAGE_PRICE_SOURCE})"
        )
        floor = cuda_floor_of(vx.machine_type)
        if floor is not None and image.framework == "torch":
            gpu = str(machine_family(vx.machine_type).gpu_model)
            family = torch_image_note(gpu, floor, "the driver Vertex installs")
            notes += [f"vertex: {family}"] if family else []
    if builds_plugin_image(cfg):
        image = default_image(cfg)
        notes.append(
            f"vertex: Reduction Server needs Google's {PACKAGE} package in the chief's and "
            f"workers' image, so the stack builds {image.uri} again with it (Cloud Build, as "
            f"the account {account_id(deployment, ACCOUNT_ROLE)}, into the repository "
            f"{plugin_repository_id(deployment)}; {INSTALL_SOURCE.split(' (')[0]}) and runs "
            f"it by digest, where NCCL loads {PLUGIN_PATH} by its default name "
            f"({NCCL_NET_PLUGIN_ENV} unset); it is built again only when the base image or the "
            "build changes"
        )
    if vx.gpus_per_replica and vertex_timeout_s(vx, cfg.limits.max_run_seconds) is None:
        notes.append(VERTEX_NO_TIMEOUT_NOTE)
    if vx.flex_start:
        wait = vx.flex_start_max_wait_s
        notes.append(vertex_flex_start_note(VERTEX_FLEX_START_WAIT_S if wait is None else wait))
    return notes


def vertex_image_problems(cfg: StackView, today: date) -> tuple[list[str], list[str]]:
    """(errors, warnings) about the image the Vertex replicas run on `today`: a default past
    its end of availability is an error; an image you named gets that fact, and what
    Reduction Server needs of it, as warnings (a default image gets the plugin from the
    stack's build: `builds_plugin_image`)."""
    vx = cast(VertexConfig, cfg.compute)
    image, key, default = vertex_image(cfg)
    problems = [image_availability_problem(image, today, key, default)]
    if vx.reducer_count() and not default:
        problems.append(reduction_server_image_problem(image, key, default, "vertex."))
    found = [p for p in problems if p is not None]
    return (found, []) if default else ([], found)
