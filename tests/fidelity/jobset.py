"""A small imitation of JobSet's controller, the Kubernetes Job controller and GKE's TPU
webhook for the planned JobSet's pods run here (`tests.fidelity.nodes`): what each pod is
called, which labels, annotations and environment it gets, and what a failed pod does to
its slice's Job and to the set.

What it models, and from where (kubernetes-sigs/jobset at v0.12.0, the release the stack
installs, `catalog.tpu_gke.JOBSET_VERSION`; fetched as github:kubernetes-sigs/jobset):

- Child Jobs: one per replica of each replicated Job, named `<jobset>-<rjob>-<jobIndex>`
  (pkg/util/placement/placement.go `GenJobName`; pkg/controllers/jobset_controller.go
  `constructJob`, L938), the pod template's `subdomain` set to `spec.network.subdomain`,
  else the JobSet's name, when `enableDNSHostnames` (`constructJob` L954-956,
  `GetSubdomain` L1090).
- Pod labels and annotations: `labelAndAnnotateObject` (L1014-1084) stamps the same keys as
  labels and annotations on the pod template: jobset-name, jobset-uid, replicatedjob-name,
  restarts (the JobSet's `status.restarts`), replicatedjob-replicas, global-replicas,
  job-index, job-key (sha1 of `<namespace>/<job>`, `jobHashKey` L1118), job-global-index
  (`globalJobIndex` L1395), group-name (`default`, the API's kubebuilder default,
  api/jobset/v1alpha2/jobset_types.go L326), group-replicas, job-group-index and, with
  `spec.coordinator`, coordinator = `<jobset>-<rjob>-<jobIndex>-<podIndex>.<subdomain>`
  (`CoordinatorEndpoint` L1373); the JobSet's exclusive-topology annotation as an
  annotation only.
- The Job controller's part (https://kubernetes.io/docs/concepts/workloads/controllers/job/
  "Completion mode": the index is "the Pod annotation batch.kubernetes.io/job-completion-index",
  "the Pod label batch.kubernetes.io/job-completion-index", "part of the Pod hostname,
  following the pattern $(job-name)-$(index)" and "the environment variable
  JOB_COMPLETION_INDEX"). With `backoffLimit: 0` a failed pod fails its Job: reason
  `PodFailurePolicy` when a `FailJob` rule of its podFailurePolicy matches, else
  `BackoffLimitExceeded` (the same page, "Pod failure policy" and "Pod backoff failure
  policy"); `tests.fidelity.job_controller.policy_action` decides the rule.
- GKE's TPU webhook: "GKE automatically injects these environment variables by using a
  mutating webhook when a Job is created with the completionMode: Indexed, subdomain,
  parallelism > 1, and requesting google.com/tpu properties": `TPU_WORKER_ID`, "a unique
  integer for each Pod ... from zero to the number of Pods minus one", and
  `TPU_WORKER_HOSTNAMES`, "a comma-separated list of TPU VM hostnames ... ordered and zero
  indexed by the TPU_WORKER_ID" (GKE's how-to/tpus page as quoted by
  abatilo/gke-tpu-env-injector's README; reference/frontier.md 3.4 marks it ~: no current
  Google page in the corpus). The hostnames are each pod's DNS name in its subdomain,
  `<job>-<index>.<subdomain>` (no source gives the exact form: the individually addressable
  names the quote asks for).
- The set's failure policy: the first rule whose `onJobFailureReasons` holds the failed
  Job's reason decides (pkg/controllers/failure_policy.go `findFirstFailedPolicyRuleAndJob`
  L87, `RestartJobSet` when none matches, `executeFailurePolicy` L49). Simplified: JobSet
  tries each rule in order against every failed Job and takes the first rule any of them
  matches; here the first failed pod's Job alone is matched, the same while one Job fails at
  a time (a run that failed two Jobs at once with different reasons could differ). `FailJobSet`
  fails the set with reason `FailJobSetFailurePolicyAction` (`failJobSetActionApplier` L212,
  pkg/constants/constants.go L109 `FailJobSetActionReason`); `RestartJobSet` fails it once `status.restarts` reached `maxRestarts`
  (`restartJobSetActionApplier` L224-233), otherwise increments the restarts and recreates
  every child Job (`failurePolicyRecreateAll`): the Jobs of the old restart count are deleted
  (jobset_controller.go L179-180, its pods terminated) and new ones created with the new
  `restarts` label.

What it leaves out: the deletion's grace period (the old pods are killed: their run is over
either way), exclusive placement (every pod runs here), the Jobs' status objects and
events.
"""

from __future__ import annotations

import hashlib
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from tests.fidelity.job_controller import policy_action
from tests.fidelity.nodes import Node

JOBSET = "jobset.sigs.k8s.io/"
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
EXCLUSIVE_TOPOLOGY = "alpha.jobset.sigs.k8s.io/exclusive-topology"
TPU_RESOURCE = "google.com/tpu"
FIELD_PATH = re.compile(r"metadata\.(labels|annotations)\['([^']+)'\]")
FAIL_JOBSET_REASON = "FailJobSetFailurePolicyAction"
"""The JobSet's Failed condition's reason after a FailJobSet rule (constants.go L109)."""
UID = "0f5e1c9a-6b2d-4c1e-9a7f-3d2b1c0e9f8a"
"""The JobSet's uid, as the API server would have given it."""


@dataclass(frozen=True)
class Pod:
    """One pod as the controllers and the webhook create it."""

    job: str
    slice: int
    index: int
    hostname: str
    subdomain: str
    labels: dict[str, str]
    annotations: dict[str, str]
    env: dict[str, str]
    """The container's environment as the kubelet resolves it (webhook's included)."""

    @property
    def fqdn(self) -> str:
        return f"{self.hostname}.{self.subdomain}"


def _n(value: Any) -> int:
    return int(value)  # the plan's numbers come through the engine as floats


def subdomain(jobset: Mapping[str, Any]) -> str:
    network = jobset["spec"].get("network") or {}
    return str(network.get("subdomain") or jobset["metadata"]["name"])


def _stamps(
    jobset: Mapping[str, Any], rjob: Mapping[str, Any], job_index: int, restarts: int
) -> dict[str, str]:
    """labelAndAnnotateObject's keys and values (one replicated Job: global = local)."""
    name, namespace = jobset["metadata"]["name"], jobset["metadata"]["namespace"]
    job = f"{name}-{rjob['name']}-{job_index}"
    replicas = sum(_n(r["replicas"]) for r in jobset["spec"]["replicatedJobs"])
    stamps = {
        "jobset-name": name,
        "jobset-uid": UID,
        "replicatedjob-name": rjob["name"],
        "restarts": str(restarts),
        "replicatedjob-replicas": str(_n(rjob["replicas"])),
        "global-replicas": str(replicas),
        "job-index": str(job_index),
        "job-key": hashlib.sha1(f"{namespace}/{job}".encode()).hexdigest(),
        "job-global-index": str(job_index),
        "group-name": "default",
        "group-replicas": str(replicas),
        "job-group-index": str(job_index),
    }
    coordinator = jobset["spec"].get("coordinator")
    if coordinator:
        stamps["coordinator"] = (
            f"{name}-{coordinator['replicatedJob']}-{_n(coordinator['jobIndex'])}-"
            f"{_n(coordinator['podIndex'])}.{subdomain(jobset)}"
        )
    return {JOBSET + k: v for k, v in stamps.items()}


def _resolve(item: Mapping[str, Any], pod_meta: Mapping[str, Mapping[str, str]]) -> str:
    """An env entry as the kubelet resolves it: its value, or a label's or annotation's
    through the downward API, empty when the pod has none (kubernetes pkg/fieldpath
    `ExtractFieldPathAsString`)."""
    if "value" in item:
        return str(item["value"])
    match = FIELD_PATH.fullmatch(item["valueFrom"]["fieldRef"]["fieldPath"])
    assert match is not None, item
    return pod_meta[match.group(1)].get(match.group(2), "")


def _webhook_applies(job_spec: Mapping[str, Any], pod_spec: Mapping[str, Any]) -> bool:
    limits = pod_spec["containers"][0].get("resources", {}).get("limits", {})
    return (
        job_spec.get("completionMode") == "Indexed"
        and bool(pod_spec.get("subdomain"))
        and _n(job_spec["parallelism"]) > 1
        and TPU_RESOURCE in limits
    )


def pods(jobset: Mapping[str, Any], restarts: int = 0) -> list[Pod]:
    """Every pod of the set at its `restarts`-th (re)creation, slice by slice."""
    assert jobset["spec"]["network"]["enableDNSHostnames"] is True
    found = []
    for rjob in jobset["spec"]["replicatedJobs"]:
        job_spec = rjob["template"]["spec"]
        for j in range(_n(rjob["replicas"])):
            job = f"{jobset['metadata']['name']}-{rjob['name']}-{j}"
            stamps = _stamps(jobset, rjob, j, restarts)
            template = job_spec["template"]
            pod_spec = {**template["spec"], "subdomain": subdomain(jobset)}
            annotations = {**template.get("metadata", {}).get("annotations", {}), **stamps}
            exclusive = jobset["metadata"].get("annotations", {}).get(EXCLUSIVE_TOPOLOGY)
            if exclusive:
                annotations[EXCLUSIVE_TOPOLOGY] = exclusive
            parallelism = _n(job_spec["parallelism"])
            for i in range(parallelism):
                labels = {**template["metadata"]["labels"], **stamps, COMPLETION_INDEX: str(i)}
                notes = {**annotations, COMPLETION_INDEX: str(i)}
                meta = {"labels": labels, "annotations": notes}
                env = {"JOB_COMPLETION_INDEX": str(i)}
                if _webhook_applies(job_spec, pod_spec):
                    env["TPU_WORKER_ID"] = str(i)
                    env["TPU_WORKER_HOSTNAMES"] = ",".join(
                        f"{job}-{w}.{pod_spec['subdomain']}" for w in range(parallelism)
                    )
                for item in pod_spec["containers"][0]["env"]:
                    env[item["name"]] = _resolve(item, meta)
                hostname = f"{job}-{i}"
                found.append(Pod(job, j, i, hostname, pod_spec["subdomain"], labels, notes, env))
    return found


@dataclass
class JobSetOutcome:
    """How the set ended, each child Job failure on the way and every pod started."""

    state: Literal["Completed", "Failed", "Running"] = "Running"
    reason: str = ""
    restarts: int = 0
    job_failures: list[tuple[str, int, int, str]] = field(default_factory=list)
    """(job, pod index, exit code, the Job's failure reason) of each failed child Job."""
    pods: list[Node] = field(default_factory=list)


class JobSetController:
    """Runs the pods of the planned JobSet (`start(pod, restarts) -> Node`) to completion
    or failure, restarting the whole set as its failure policy says."""

    def __init__(self, jobset: Mapping[str, Any], start: Callable[[Pod, int], Node]) -> None:
        spec = jobset["spec"]
        [rjob] = spec["replicatedJobs"]
        job_spec = rjob["template"]["spec"]
        assert _n(job_spec["backoffLimit"]) == 0
        assert job_spec["template"]["spec"]["restartPolicy"] == "Never"
        self.jobset = jobset
        self.pod_policy = job_spec.get("podFailurePolicy", {"rules": []})
        self.policy = spec["failurePolicy"]
        self.start = start
        self.running: dict[str, tuple[Pod, Node]] = {}
        self.outcome = JobSetOutcome()

    def _create(self) -> None:
        for pod in pods(self.jobset, self.outcome.restarts):
            node = self.start(pod, self.outcome.restarts)
            self.running[pod.hostname] = (pod, node)
            self.outcome.pods.append(node)

    def _delete_all(self) -> None:
        for _, node in self.running.values():
            node.kill()
        self.running.clear()

    def _job_failed(self, pod: Pod, code: int) -> None:
        action = policy_action(self.pod_policy, code, frozenset())
        reason = "PodFailurePolicy" if action == "FailJob" else "BackoffLimitExceeded"
        self.outcome.job_failures.append((pod.job, pod.index, code, reason))
        rule = next(
            (r for r in self.policy.get("rules", []) if reason in r["onJobFailureReasons"]),
            {"action": "RestartJobSet"},
        )
        self._delete_all()
        if rule["action"] == "FailJobSet":
            self.outcome.state, self.outcome.reason = "Failed", FAIL_JOBSET_REASON
        elif self.outcome.restarts >= _n(self.policy["maxRestarts"]):
            self.outcome.state, self.outcome.reason = "Failed", "ReachedMaxRestarts"
        else:
            self.outcome.restarts += 1
            self._create()

    def run(
        self, timeout_s: float, tick: Callable[[JobSetController], None] | None = None
    ) -> JobSetOutcome:
        """Create every pod and drive the set until it completes, fails or `timeout_s`
        passes; `tick(controller)` runs while pods do (a test preempts a host from it)."""
        self._create()
        succeeded: set[str] = set()
        total = len(self.running)
        deadline = time.monotonic() + timeout_s
        try:
            while self.outcome.state == "Running" and time.monotonic() < deadline:
                for name, (pod, node) in list(self.running.items()):
                    code = node.proc.poll()
                    if code is None:
                        continue
                    node.log.close()
                    if code == 0:
                        del self.running[name]
                        succeeded.add(name)
                        continue
                    succeeded.clear()
                    self._job_failed(pod, code)
                    break
                if self.outcome.state == "Running" and len(succeeded) == total:
                    self.outcome.state = "Completed"
                elif self.outcome.state == "Running" and tick is not None:
                    tick(self)
                time.sleep(0.2)
        finally:
            self._delete_all()
        return self.outcome
