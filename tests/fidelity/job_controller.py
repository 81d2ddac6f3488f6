"""A small imitation of the Kubernetes Job controller for an Indexed Job's pods run here
(`tests.fidelity.nodes`), applying the rendered Job's podFailurePolicy,
backoffLimitPerIndex, maxFailedIndexes and podReplacementPolicy to each pod's exit.

The rules it imitates, from https://kubernetes.io/docs/concepts/workloads/controllers/job/
(sections "Pod failure policy", "Backoff limit per index", "Delayed creation of
replacement pods") and the batch/v1 JobSpec reference:

- A pod that exits 0 completes its index; the Job is complete when every index is.
- A failed pod is checked against `podFailurePolicy.rules` in order and the first rule
  that matches decides. `onExitCodes` with `operator: In` matches when the named
  container's exit code is in `values` (an exit code of 0 never matches);
  `onPodConditions` matches when the pod has that condition with that status.
- `FailJob`: the Job fails (reason PodFailurePolicy) and its running pods are terminated.
  `Ignore`: "the counter towards the .backoffLimit is not incremented and a replacement Pod
  is created" (the per-index counter likewise). `FailIndex`: the index fails at once.
  `Count`, or no rule matching: the failure counts against the index.
- An index whose counted failures exceed `backoffLimitPerIndex` fails; once the failed
  indexes exceed `maxFailedIndexes`, "the Job controller triggers termination of all
  remaining running Pods for that Job" and the Job fails (reason
  MaxFailedIndexesExceeded). Otherwise the index gets a replacement pod.
- `podReplacementPolicy: Failed`: a replacement is created only once the old pod is
  terminal (here: its process has exited), so two pods never share an index.
- A pod whose node disappears is failed by Kubernetes with the `DisruptionTarget`
  condition (the pod garbage collector, reason DeletionByPodGC, or the taint manager); the
  test calls `lose_node` for that.
- Every pod it creates carries the annotation `batch.kubernetes.io/job-index-failure-count`
  (and `batch.kubernetes.io/job-index-ignored-failure-count` once non-zero): the counted
  (ignored) failures of its index so far, as kubernetes pkg/controller/job/
  indexed_job_utils.go `addIndexFailureCountAnnotation` / `getNewIndexFailureCounts` set them
  (0 on an index's first pod, the replaced pod's counts plus its own failure on a
  replacement); `start(index, annotations)` gets them, and the index fails with a counted
  failure of a pod whose count was already `backoffLimitPerIndex` (`isIndexFailed`), which is
  the same rule as "counted failures exceed the limit".

What it leaves out: backoff delays between retries (exponential from 10 s: they only slow
a real Job down), `activeDeadlineSeconds`, the Job's status object, and a graceful
termination of the pods of a Job that failed (they are killed: the run is over either way).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from tests.fidelity.nodes import Node

DISRUPTION_TARGET = "DisruptionTarget"
FAILURE_COUNT = "batch.kubernetes.io/job-index-failure-count"
IGNORED_FAILURE_COUNT = "batch.kubernetes.io/job-index-ignored-failure-count"
Action = Literal["FailJob", "FailIndex", "Ignore", "Count"]


@dataclass(frozen=True)
class PodExit:
    """One pod that ended, and what the controller did about it."""

    index: int
    exit_code: int
    conditions: frozenset[str]
    action: Action | Literal["Succeeded"]


@dataclass
class JobOutcome:
    """How the Job ended and every pod exit on the way."""

    state: Literal["Complete", "Failed", "Running"] = "Running"
    reason: str = ""
    exits: list[PodExit] = field(default_factory=list)
    counted_failures: dict[int, int] = field(default_factory=dict)
    ignored_failures: dict[int, int] = field(default_factory=dict)
    failed_indexes: set[int] = field(default_factory=set)
    pods: list[Node] = field(default_factory=list)
    """Every pod started, in order."""

    def by_action(self, action: str) -> list[PodExit]:
        return [e for e in self.exits if e.action == action]


def _rule_matches(rule: Mapping[str, Any], exit_code: int, conditions: frozenset[str]) -> bool:
    codes = rule.get("onExitCodes")
    if codes is not None:
        # One container per pod here: the rule's containerName is the trainer's.
        values = set(codes["values"])
        inside = exit_code in values
        if exit_code == 0:
            return False
        return inside if codes["operator"] == "In" else not inside
    return any(
        c["type"] in conditions and c.get("status", "True") == "True"
        for c in rule.get("onPodConditions", [])
    )


def policy_action(policy: Mapping[str, Any], exit_code: int, conditions: frozenset[str]) -> Action:
    """The action of the first matching rule; `Count` when none matches."""
    for rule in policy.get("rules", []):
        if _rule_matches(rule, exit_code, conditions):
            return rule["action"]  # type: ignore[no-any-return]
    return "Count"


class IndexedJobController:
    """Runs the pods of one Indexed Job (`start(index, annotations) -> Node`) to completion
    or failure."""

    def __init__(
        self, job: Mapping[str, Any], start: Callable[[int, Mapping[str, str]], Node]
    ) -> None:
        spec = job["spec"]
        assert spec["completionMode"] == "Indexed"
        assert spec["podReplacementPolicy"] == "Failed"
        assert spec["template"]["spec"]["restartPolicy"] == "Never"
        self.completions = int(spec["completions"])
        self.backoff_limit_per_index = int(spec["backoffLimitPerIndex"])
        self.max_failed_indexes = int(spec.get("maxFailedIndexes", self.completions))
        self.policy = spec.get("podFailurePolicy", {"rules": []})
        self.start = start
        self.running: dict[int, Node] = {}
        self.lost: set[int] = set()
        self.outcome = JobOutcome()

    def _launch(self, index: int) -> None:
        annotations = {FAILURE_COUNT: str(self.outcome.counted_failures.get(index, 0))}
        ignored = self.outcome.ignored_failures.get(index, 0)
        if ignored:
            annotations[IGNORED_FAILURE_COUNT] = str(ignored)
        node = self.start(index, annotations)
        self.running[index] = node
        self.outcome.pods.append(node)

    def lose_node(self, index: int) -> None:
        """The node of `index`'s pod disappears: every process of the pod dies at once and
        Kubernetes fails the pod with the DisruptionTarget condition."""
        node = self.running[index]
        node.kill()
        self.lost.add(index)

    def _terminate_all(self) -> None:
        for node in self.running.values():
            node.kill()
        self.running.clear()

    def _handle(self, index: int, node: Node) -> None:
        code = node.proc.returncode
        conditions = frozenset({DISRUPTION_TARGET}) if index in self.lost else frozenset()
        self.lost.discard(index)
        del self.running[index]
        node.log.close()
        outcome = self.outcome
        if code == 0 and not conditions:
            outcome.exits.append(PodExit(index, code, conditions, "Succeeded"))
            return
        action = policy_action(self.policy, code, conditions)
        outcome.exits.append(PodExit(index, code, conditions, action))
        if action == "FailJob":
            outcome.state, outcome.reason = "Failed", "PodFailurePolicy"
            return
        if action == "Ignore":
            outcome.ignored_failures[index] = outcome.ignored_failures.get(index, 0) + 1
            self._launch(index)
            return
        if action == "Count":
            outcome.counted_failures[index] = outcome.counted_failures.get(index, 0) + 1
        if action == "FailIndex" or (
            outcome.counted_failures[index] > self.backoff_limit_per_index
        ):
            outcome.failed_indexes.add(index)
            if len(outcome.failed_indexes) > self.max_failed_indexes:
                outcome.state, outcome.reason = "Failed", "MaxFailedIndexesExceeded"
            return
        self._launch(index)

    def run(
        self, timeout_s: float, tick: Callable[[IndexedJobController], None] | None = None
    ) -> JobOutcome:
        """Start every index and drive the Job until it completes, fails or `timeout_s`
        passes (then the pods are terminated and the state stays Running). `tick` is called
        with the controller while pods run (the test loses nodes from it)."""
        for index in range(self.completions):
            self._launch(index)
        succeeded: set[int] = set()
        deadline = time.monotonic() + timeout_s
        try:
            while self.outcome.state == "Running" and time.monotonic() < deadline:
                for index, node in list(self.running.items()):
                    if node.proc.poll() is not None:
                        self._handle(index, node)
                        if self.outcome.exits[-1].action == "Succeeded":
                            succeeded.add(index)
                        if self.outcome.state != "Running":
                            break
                if self.outcome.state == "Running" and len(succeeded) == self.completions:
                    self.outcome.state = "Complete"
                elif self.outcome.state == "Running" and tick is not None:
                    tick(self)
                time.sleep(0.2)
        finally:
            self._terminate_all()
        return self.outcome
