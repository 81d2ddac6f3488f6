"""KubernetesTrainingJob's docstring names every exit code its podFailurePolicy ignores."""

from __future__ import annotations

import re

from trainstack.components import kubernetes_training_job
from trainstack.components._kubernetes_job_manifests import pod_failure_policy


def test_docstring_lists_the_ignored_exit_codes() -> None:
    doc = " ".join((kubernetes_training_job.__doc__ or "").split())
    [sentence] = re.findall(r"the DisruptionTarget condition .*? are `Ignore`d", doc)
    ignored = [
        rule["onExitCodes"]["values"]
        for rule in pod_failure_policy()["rules"]
        if rule["action"] == "Ignore" and "onExitCodes" in rule
    ]
    assert ignored == [[4, 143, 6]]
    assert [int(code) for code in re.findall(r"exit (\d+)", sentence)] == [143, 4, 6]
