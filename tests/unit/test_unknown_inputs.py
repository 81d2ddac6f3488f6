"""Every dynamic provider's `check` accepts inputs Pulumi does not know yet.

In a first preview the dynamic-provider host hands `check` a `pulumi.output.Unknown` object
wherever the engine sent its unknown sentinel (components/_unknown.py cites the SDK lines);
code that calls a provider directly may hand it the sentinel string. Both are accepted,
anywhere, the whole `body` included, and a known wrong value beside them still fails.
The engine tier (tests/engine) drives the same through the real host over gRPC.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from pulumi.output import Unknown

from trainstack.components._local_provider import LocalRunProvider
from trainstack.components._tpu_queued_provider import QueuedResourceProvider
from trainstack.components._unknown import UNKNOWN_SENTINEL, contains_unknown, is_unknown
from trainstack.components._vertex_provider import VertexJobProvider
from trainstack.components.naming import merge_labels
from trainstack.components.tpu_pod_slice import node_body, queued_resource_body, validate_args
from trainstack.components.vertex_training_job import custom_job_body

UNKNOWNS = [
    pytest.param(Unknown, id="Unknown-object"),
    pytest.param(lambda: UNKNOWN_SENTINEL, id="sentinel"),
]


def _vertex() -> dict[str, Any]:
    body = custom_job_body(
        display_name="exp",
        region="us-central1",
        machine_type="n1-standard-4",
        replica_count=1,
        container_image_uri="gcr.io/p/t:1",
        trainer_args=["--steps=10"],
    )
    return {"project": "p", "region": "us-central1", "kind": "customJobs", "body": body}


def _tpu() -> dict[str, Any]:
    plan = validate_args(
        {
            "zone": "us-central2-b",
            "accelerator_type": "v4-32",
            "runtime_version": "tpu-vm-tf-2.16.0-pod-pjrt",
            "provisioning": "queued",
            "queued": {"tier": "spot"},
        }
    )
    node = node_body(
        plan=plan,
        runtime_version="tpu-vm-tf-2.16.0-pod-pjrt",
        description="trainstack TPU slice v4-32",
        network="https://www.googleapis.com/compute/v1/projects/p/global/networks/exp-net",
        subnetwork="projects/p/regions/us-central2/subnetworks/exp-subnet",
        service_account_email="exp-train@p.iam.gserviceaccount.com",
        startup_script="#!/bin/bash\n",
        labels=merge_labels({"team": "ml"}, "tpu-pod-slice"),
        network_tags=["exp-train-node"],
        data_disks=[],
    )
    body = queued_resource_body(
        project="p", zone="us-central2-b", node_id="exp-tpu", node=node, tier="spot",
        valid_until_s=7200,
    )  # fmt: skip
    return {
        "project": "p",
        "zone": "us-central2-b",
        "queued_resource_id": "exp-tpu-qr",
        "node_id": "exp-tpu",
        "body": body,
        "wait_timeout_s": 60,
    }


def _local() -> dict[str, Any]:
    return {
        "trainer": {"framework": "torch", "model": "mlp", "steps": 10},
        "workers": 2,
        "root": "local",
        "env": {"OMP_NUM_THREADS": "1"},
        "stop_grace_s": 30.0,
        "labels": {"team": "ml"},
    }


def _failures(provider: Any, news: dict[str, Any]) -> list[tuple[str, str]]:
    return [(f.property, f.reason) for f in provider.check({}, news).failures]


def test_is_unknown_and_contains_unknown() -> None:
    assert is_unknown(Unknown()) and is_unknown(UNKNOWN_SENTINEL)
    assert not is_unknown("04da6b54") and not is_unknown(None) and not is_unknown({})
    assert contains_unknown({"a": [1, {"b": Unknown()}]})
    assert not contains_unknown({"a": [1, {"b": "x"}]})


@pytest.mark.parametrize("unknown", UNKNOWNS)
def test_vertex_check_accepts_unknowns(unknown: Any) -> None:
    provider = VertexJobProvider()
    assert _failures(provider, {**_vertex(), "body": unknown()}) == []
    assert _failures(provider, dict.fromkeys(_vertex(), unknown())) == []
    nested = _vertex()
    pool = nested["body"]["jobSpec"]["workerPoolSpecs"][0]
    pool["containerSpec"]["imageUri"] = unknown()
    nested["body"]["jobSpec"]["baseOutputDirectory"] = unknown()
    nested["body"]["labels"] = unknown()
    assert _failures(provider, nested) == []
    # What is known is still checked.
    assert _failures(provider, {**_vertex(), "body": unknown(), "kind": "jobs"}) == [
        ("kind", "expected one of customJobs, hyperparameterTuningJobs, got 'jobs'")
    ]


@pytest.mark.parametrize("unknown", UNKNOWNS)
def test_tpu_check_accepts_unknowns(unknown: Any) -> None:
    provider = QueuedResourceProvider()
    assert _failures(provider, {**_tpu(), "body": unknown()}) == []
    assert _failures(provider, dict.fromkeys(_tpu(), unknown())) == []
    nested = _tpu()
    spec = nested["body"]["tpu"]["nodeSpec"][0]
    spec["parent"] = unknown()
    spec["node"]["serviceAccount"] = unknown()
    nested["node_id"] = unknown()
    assert _failures(provider, nested) == []
    whole_node = copy.deepcopy(_tpu())
    whole_node["body"]["tpu"]["nodeSpec"][0]["node"] = unknown()
    assert _failures(provider, whole_node) == []
    assert _failures(provider, {**_tpu(), "body": unknown(), "node_id": "Bad_"}) == [
        (
            "node_id",
            "'Bad_' is not a valid ID (a lowercase letter, then up to 62 of a-z, 0-9 and '-', "
            "not ending with '-')",
        )
    ]


@pytest.mark.parametrize("unknown", UNKNOWNS)
def test_local_check_accepts_unknowns(unknown: Any) -> None:
    provider = LocalRunProvider(base_dir="/")
    assert _failures(provider, _local()) == []
    assert _failures(provider, dict.fromkeys(_local(), unknown())) == []
    nested = {**_local(), "trainer": {**_local()["trainer"], "steps": unknown()}}
    nested["env"] = {"OMP_NUM_THREADS": unknown()}
    assert _failures(provider, nested) == []
    assert _failures(provider, {**_local(), "trainer": unknown(), "workers": 0}) == [
        ("workers", "expected an integer >= 1, got 0")
    ]
