"""Where deployed compute stands and which log entries are its trainer's, from names alone.

`trainstack status|logs --stack NAME` (the targets in `trainstack.infra.targets`, from the
stack's config and outputs) and `trainstack status|logs --program DIR --stack NAME`
(`trainstack.infra.program_status`, from the components' `facts`) call these same functions,
so both read the same APIs and print the same lines:

- a TPU slice: its node (Cloud TPU `nodes.get`), or its queued resource's state while no
  node exists (`queuedResources.get`); its workers' entries by `worker_id` label;
- a GKE Indexed Job: the Job and its pods (Kubernetes API, with the cluster's kubeconfig);
  its pods' entries by name, `<job>-<completion index>-<suffix>`;
- a GKE TPU JobSet: the JobSet and its pods, likewise; its pods' entries by name,
  `<jobset>-slice-<slice>-<pod>-<suffix>`;
- a Compute Engine group's VMs (`instances.get`); their entries by instance name.

Each returns `state`, `hosts`, `started`, `ended` (`trainstack.infra.status`).
"""

from __future__ import annotations

import base64
import contextlib
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final

import yaml

from trainstack.components._google_api import build_client
from trainstack.infra.google_reads import get_or_none
from trainstack.infra.logs import LogsError, check_worker, log_query, parse_time

K8S_NAMESPACE = "default"
K8S_TIMEOUT_S = 30


# ------------------------------------------------------------------------------ TPU


def tpu_state(
    project: str,
    zone: str,
    node: str,
    queued_resource: str | None,
    endpoints: Mapping[str, str],
) -> dict[str, Any]:
    """A slice's node state and workers; while no node exists, its queued resource's state
    (`queued_resource`: its name, for a queued slice)."""
    parent = f"projects/{project}/locations/{zone}"
    api = build_client("tpu.v2", api_endpoint=endpoints.get("tpu"))
    locations = api.projects().locations()
    found = get_or_none(locations.nodes().get(name=f"{parent}/nodes/{node}"))
    if found is None:
        state = "NOT_FOUND"
        if queued_resource is not None:
            qr_name = f"{parent}/queuedResources/{queued_resource}"
            queued = get_or_none(locations.queuedResources().get(name=qr_name))
            if queued is not None:
                state = f"QUEUED {queued.get('state', {}).get('state', 'UNKNOWN')}"
        return {"state": state, "hosts": [], "started": None, "ended": None}
    state = str(found.get("state", "UNKNOWN"))
    hosts = [
        {"name": f"worker {i}", "state": state, "address": point.get("ipAddress")}
        for i, point in enumerate(found.get("networkEndpoints", []))
    ]
    return {"state": state, "hosts": hosts, "started": found.get("createTime"), "ended": None}


def tpu_log_filter(scope: str, hosts: int, worker: int | None, stack: str) -> str:
    """The slice's trainer entries (`scope`: its node's), one worker's with `worker`."""
    check_worker(worker, hosts, stack)
    if worker is not None:
        scope += f' AND resource.labels.worker_id="{worker}"'
    return log_query("tpu", scope)


# ------------------------------------------------------------------------------ GKE


SECRET_SHOWN: Final = "[secret]"
"""What `pulumi stack output --json` prints for a secret without `--show-secrets` (pulumi/pulumi
pkg/cmd/pulumi/stack/stack_output_test.go, case "default": `"password": "[secret]"`)."""
KUBECONFIG_VALID = (
    "valid: the cluster's kubeconfig output (A100Cluster.kubeconfig, a secret), saved with "
    "`pulumi stack output --json --show-secrets`"
)


def kubeconfig_cluster(text: str) -> dict[str, Any]:
    """The first cluster of a kubeconfig (its `server` and `certificate-authority-data`);
    LogsError, one line, for a secret saved hidden, text that is no kubeconfig, or one
    without a cluster."""
    if text.strip() == SECRET_SHOWN:
        raise LogsError(
            f'kubeconfig: the saved outputs hold "{SECRET_SHOWN}" in its place, as `pulumi stack '
            "output --json` writes a secret without --show-secrets; valid: save them again with "
            "`pulumi stack output --json --show-secrets`"
        )
    try:
        config = yaml.safe_load(text)
    except yaml.YAMLError:
        config = None
    clusters = config.get("clusters") if isinstance(config, dict) else None
    first = clusters[0] if isinstance(clusters, list) and clusters else None
    cluster = first.get("cluster") if isinstance(first, dict) else None
    if not isinstance(cluster, dict) or not cluster.get("server"):
        raise LogsError(f"kubeconfig: has no clusters[0].cluster.server; {KUBECONFIG_VALID}")
    return cluster


def kube_get(kubeconfig: Callable[[], str], ep: Mapping[str, str], path: str) -> dict[str, Any]:
    """GET `path` from the cluster's API server (the `kubeconfig`'s), authenticated with an
    access token from Application Default Credentials as gke-gcloud-auth-plugin would; an
    `http://` endpoint override is called without one (and `kubeconfig` is not read)."""
    import requests

    server, verify = ep.get("kubernetes"), None
    headers: dict[str, str] = {}
    with tempfile.TemporaryDirectory() as scratch:
        if server is None or not server.startswith("http://"):
            cluster = kubeconfig_cluster(kubeconfig())
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


def pod_hosts(pods: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Each pod of a pod list (`GET .../pods`) as status shows a host: name, phase, IP."""
    return [
        {
            "name": pod["metadata"]["name"],
            "state": pod.get("status", {}).get("phase"),
            "address": pod.get("status", {}).get("podIP"),
        }
        for pod in sorted(pods.get("items", []), key=lambda p: p["metadata"]["name"])
    ]


def gke_job_state(
    kubeconfig: Callable[[], str],
    job: str,
    endpoints: Mapping[str, str],
    namespace: str = K8S_NAMESPACE,
) -> dict[str, Any]:
    """An Indexed Job's state (`SUCCEEDED`, `FAILED`, `RUNNING` with active pods, else
    `PENDING`) and its pods."""
    base = f"/apis/batch/v1/namespaces/{namespace}/jobs/{job}"
    status = kube_get(kubeconfig, endpoints, base).get("status", {})
    pods = kube_get(
        kubeconfig,
        endpoints,
        f"/api/v1/namespaces/{namespace}/pods?labelSelector=job-name%3D{job}",
    )
    conditions = {c.get("type"): c.get("status") for c in status.get("conditions", [])}
    if conditions.get("Complete") == "True":
        state = "SUCCEEDED"
    elif conditions.get("Failed") == "True":
        state = "FAILED"
    else:
        state = "RUNNING" if status.get("active") else "PENDING"
    hosts = pod_hosts(pods)
    return {
        "state": state,
        "hosts": hosts,
        "started": status.get("startTime"),
        "ended": status.get("completionTime"),
    }


def gke_log_filter(scope: str, job: str, nodes: int, worker: int | None, stack: str) -> str:
    """The Job's pods' entries (`scope`: the cluster's), one node's with `worker`."""
    check_worker(worker, nodes, stack)
    # Indexed Job pods are `<job>-<completion index>-<suffix>`.
    pods = f"{job}-{worker}-" if worker is not None else f"{job}-"
    return log_query("gke", f'{scope} AND resource.labels.pod_name=~"^{pods}"')


def jobset_state(
    kubeconfig: Callable[[], str],
    name: str,
    endpoints: Mapping[str, str],
    namespace: str = K8S_NAMESPACE,
) -> dict[str, Any]:
    """A GKE TPU JobSet's state (`SUCCEEDED`, `FAILED`, `RUNNING` with pods, else `PENDING`)
    and its pods (JobSet labels each pod with `jobset.sigs.k8s.io/jobset-name`)."""
    path = f"/apis/jobset.x-k8s.io/v1alpha2/namespaces/{namespace}/jobsets/{name}"
    status = kube_get(kubeconfig, endpoints, path).get("status", {})
    pods = kube_get(
        kubeconfig,
        endpoints,
        f"/api/v1/namespaces/{namespace}/pods"
        f"?labelSelector=jobset.sigs.k8s.io%2Fjobset-name%3D{name}",
    )
    conditions = {c.get("type"): c.get("status") for c in status.get("conditions", [])}
    if conditions.get("Completed") == "True":
        state = "SUCCEEDED"
    elif conditions.get("Failed") == "True":
        state = "FAILED"
    else:
        state = "RUNNING" if pods.get("items") else "PENDING"
    return {"state": state, "hosts": pod_hosts(pods), "started": None, "ended": None}


def jobset_log_filter(
    scope: str, name: str, vms: int, slices: int, worker: int | None, stack: str
) -> str:
    """The JobSet's pods' entries (`scope`: the cluster's), one TPU VM's with `worker`
    (counted across slices, slice by slice: `vms` per slice)."""
    check_worker(worker, vms * slices, stack)
    # JobSet pods are `<jobset>-slice-<job index>-<pod index>-<suffix>`.
    pods = f"{name}-slice-"
    if worker is not None:
        pods += f"{worker // vms}-{worker % vms}-"
    return log_query("gke", f'{scope} AND resource.labels.pod_name=~"^{pods}"')


# ------------------------------------------------------------------------------ GCE


def gce_state(
    project: str, zone: str, names: Sequence[str], endpoints: Mapping[str, str]
) -> dict[str, Any]:
    """The group's VMs: their common status (else `MIXED`), addresses and earliest start."""
    instances = build_client("compute.v1", api_endpoint=endpoints.get("compute")).instances()
    hosts, starts = [], []
    for name in names:
        found = get_or_none(instances.get(project=project, zone=zone, instance=name))
        if found is None:
            hosts.append({"name": name, "state": "NOT_FOUND", "address": None})
            continue
        interfaces = found.get("networkInterfaces") or [{}]
        address = interfaces[0].get("networkIP")
        hosts.append({"name": name, "state": found.get("status"), "address": address})
        start = found.get("lastStartTimestamp") or found.get("creationTimestamp")
        if start:
            starts.append(start)
    states = {h["state"] for h in hosts}
    state = states.pop() if len(states) == 1 else "MIXED"
    started = min(starts, key=parse_time) if starts else None
    return {"state": state, "hosts": hosts, "started": started, "ended": None}


def gce_group_names(project: str, zone: str, group: str, endpoints: Mapping[str, str]) -> list[str]:
    """The VMs a managed instance group holds, by name (a flex-start group's resize request
    names them itself): `listManagedInstances` ("The name always exists even if the instance
    has not yet been created", compute.v1 discovery `ManagedInstance.name`); none when the
    group is gone."""
    groups = build_client("compute.v1", api_endpoint=endpoints.get("compute"))
    call = groups.instanceGroupManagers().listManagedInstances(
        project=project, zone=zone, instanceGroupManager=group
    )
    found = get_or_none(call) or {}
    return sorted(str(m["name"]) for m in found.get("managedInstances") or [] if m.get("name"))


def gce_log_filter(scope: str, names: Sequence[str], worker: int | None, stack: str) -> str:
    """The VMs' entries (`scope`: the pattern of exactly their names), one VM's with
    `worker`."""
    check_worker(worker, len(names), stack)
    if worker is not None:
        scope = f'labels."compute.googleapis.com/resource_name"="{names[worker]}"'
    return log_query("gce", scope)
