"""Target `gke`: A100 nodes in a GKE cluster running the trainer as an Indexed Job
(`A100Cluster` with backend `gke`). Stack section `trainstack:gpu_cluster`, `backend: gke`."""

from __future__ import annotations

import base64
import contextlib
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pulumi
import yaml

from trainstack.components.a100_cluster._common import gke_spot_grace_note
from trainstack.components.catalog import billing
from trainstack.components.catalog.images import KUBERNETES_IMAGES, kubernetes_image
from trainstack.components.facts import gke_extra_hourly_usd
from trainstack.components.training_dashboard.targets import gke_filter_text
from trainstack.infra import catalog
from trainstack.infra.logs import LogsError, check_worker, log_query
from trainstack.infra.stack_outputs import require
from trainstack.infra.targets.base import RunResource, StillBilling
from trainstack.infra.targets.gpu_cluster import GpuCluster, GpuClusterConfig, gpu_section
from trainstack.trainers.common.contract import TORCH_MODULE

if TYPE_CHECKING:
    from trainstack.components.training_identity import TrainingIdentityArgs
    from trainstack.infra.config_sections import StackView
    from trainstack.trainers.common.user_code import UserCode

GKE_NODE_ROLE = "roles/container.defaultNodeServiceAccount"
"""What a GKE node's own service account needs (logging, monitoring, image pulls)."""
K8S_NAMESPACE = "default"
K8S_TIMEOUT_S = 30


def kube_get(
    outputs: dict[str, Any], stack: str, ep: Mapping[str, str], path: str
) -> dict[str, Any]:
    """GET `path` from the cluster's API server (the kubeconfig output's), authenticated
    with an access token from Application Default Credentials as gke-gcloud-auth-plugin
    would; an `http://` endpoint override is called without one."""
    import requests

    server, verify = ep.get("kubernetes"), None
    headers: dict[str, str] = {}
    with tempfile.TemporaryDirectory() as scratch:
        if server is None or not server.startswith("http://"):
            config = yaml.safe_load(str(require(outputs, stack, "kubeconfig")))
            cluster = config["clusters"][0]["cluster"]
            server = server or str(cluster["server"])
            ca = Path(scratch) / "ca.pem"
            ca.write_bytes(base64.b64decode(cluster.get("certificate-authority-data", "")))
            verify = str(ca)
            import google.auth
            import google.auth.transport.requests

            credentials, _ = google.auth.default(
                scopes=["https://www.googleapis.com/auth/cloud-platform"]
            )
            credentials.refresh(google.auth.transport.requests.Request())
            headers["Authorization"] = f"Bearer {credentials.token}"
        url = server.rstrip("/") + path
        try:
            answer = requests.get(
                url, headers=headers, verify=verify or True, timeout=K8S_TIMEOUT_S
            )
        except requests.RequestException as exc:
            raise LogsError(f"cannot reach the cluster's API server {server}: {exc}") from None
    if answer.status_code != 200:
        message = answer.text[:200]
        with contextlib.suppress(ValueError):
            message = str(answer.json().get("message", message))
        raise LogsError(
            f"cannot read {path} from the cluster: HTTP {answer.status_code}: {message}"
        )
    body: dict[str, Any] = answer.json()
    return body


class Gke(GpuCluster):
    name = "gke"
    run_resources = (RunResource("kubernetes:batch/v1:Job"),)

    def torch_image(self, section: GpuClusterConfig) -> tuple[str, str | None]:
        return KUBERNETES_IMAGES[TORCH_MODULE], None

    def still_billing_after_stop(self, cfg: StackView, stack: str) -> list[StillBilling]:
        # The supervisor empties the GPU pool only: the cluster and its system node bill
        # until the cluster is deleted (billing.GKE_CLUSTER_BILLS_UNTIL_DELETED).
        cluster = StillBilling(
            what="GKE cluster fee and system node",
            hourly_usd=round(gke_extra_hourly_usd(), 2),
            until=f"`pulumi destroy -s {stack}`",
            # The credit is the billing account's: the estimate does not subtract it.
            basis=(
                f"the GKE free tier's ${billing.GKE_FREE_TIER_USD_PER_MONTH:.2f} monthly credit "
                f"per billing account may cover one zonal cluster's "
                f"${catalog.GKE_CLUSTER_FEE_USD:.2f}/hour fee"
            ),
            verified=billing.GKE_CLUSTER_BILLS_UNTIL_DELETED_VERIFIED,
        )
        return [cluster, *super().still_billing_after_stop(cfg, stack)]

    def run_limit(self, cfg: StackView, seconds: int) -> tuple[bool, str]:
        return True, (
            f"GKE Job activeDeadlineSeconds {seconds}; then the supervisor sets the GPU "
            "node pool to 0 nodes"
        )

    def runs_on(self, cfg: StackView, code: UserCode) -> str:
        return code.image or kubernetes_image(TORCH_MODULE) or KUBERNETES_IMAGES[TORCH_MODULE]

    def plan_notes(self, cfg: StackView, deployment: str) -> list[str]:
        # The cluster's own notes before its supervisor's, as a program's plan lists
        # A100Cluster's facts before RunSupervisor's.
        notes = []
        if gpu_section(cfg).spot:
            notes.append(gke_spot_grace_note(cfg.trainer.preemption_grace_s))
        return notes + super().plan_notes(cfg, deployment)

    def before_identity(
        self,
        cfg: StackView,
        deployment: str,
        labels: Mapping[str, str],
        after_apis: pulumi.ResourceOptions,
        identity_args: TrainingIdentityArgs,
    ) -> dict[str, Any]:
        # The training account is also the GPU nodes' account.
        identity_args["extra_project_roles"] = [GKE_NODE_ROLE]
        return {}

    def status(
        self, cfg: StackView, stack: str, outputs: dict[str, Any], endpoints: Mapping[str, str]
    ) -> dict[str, Any]:
        job = str(require(outputs, stack, "job_name"))
        base = f"/apis/batch/v1/namespaces/{K8S_NAMESPACE}/jobs/{job}"
        status = kube_get(outputs, stack, endpoints, base).get("status", {})
        pods = kube_get(
            outputs,
            stack,
            endpoints,
            f"/api/v1/namespaces/{K8S_NAMESPACE}/pods?labelSelector=job-name%3D{job}",
        )
        conditions = {c.get("type"): c.get("status") for c in status.get("conditions", [])}
        if conditions.get("Complete") == "True":
            state = "SUCCEEDED"
        elif conditions.get("Failed") == "True":
            state = "FAILED"
        else:
            state = "RUNNING" if status.get("active") else "PENDING"
        hosts = [
            {
                "name": pod["metadata"]["name"],
                "state": pod.get("status", {}).get("phase"),
                "address": pod.get("status", {}).get("podIP"),
            }
            for pod in sorted(pods.get("items", []), key=lambda p: p["metadata"]["name"])
        ]
        return {
            "state": state,
            "hosts": hosts,
            "started": status.get("startTime"),
            "ended": status.get("completionTime"),
        }

    def log_filter(
        self, cfg: StackView, stack: str, outputs: dict[str, Any], worker: int | None
    ) -> str:
        check_worker(worker, gpu_section(cfg).node_count, stack)
        cluster = str(require(outputs, stack, "cluster_name"))
        job = str(require(outputs, stack, "job_name"))
        # Indexed Job pods are `<job>-<completion index>-<suffix>`.
        pods = f"{job}-{worker}-" if worker is not None else f"{job}-"
        scope = f'{gke_filter_text(cluster)[0]} AND resource.labels.pod_name=~"^{pods}"'
        return log_query("gke", scope)


TARGET = Gke()
