"""`trainstack policy` and the CrossGuard pack: one violating fixture per rule, the bundled
stacks clean, and the same rules served through pulumi_policy (in process and over gRPC)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
import yaml
from google.protobuf import empty_pb2, json_format, struct_pb2
from pulumi.runtime.proto import analyzer_pb2, analyzer_pb2_grpc
from pulumi_policy import (
    EnforcementLevel,
    PolicyCustomTimeouts,
    PolicyResource,
    PolicyResourceOptions,
    ResourceValidationArgs,
    ResourceValidationPolicy,
    Secret,
    StackValidationArgs,
    StackValidationPolicy,
)
from pulumi_policy.proxy import UNKNOWN_BOOLEAN_VALUE, unknown_checking_proxy
from typer.testing import CliRunner

from tests.bundled import bundled_run
from trainstack.infra.cli import app
from trainstack.infra.plan import bundled_stacks, load_stack
from trainstack.infra.policy import check_plan, check_stack
from trainstack.policies import rules
from trainstack.policies.rules import RULES, Context, Resource, evaluate, secret_like

runner = CliRunner()
# `check_stack` of a bundled stack reads the session's run of it (tests/bundled.py).
pytestmark = pytest.mark.usefixtures("shared_bundled_runs")
FIXTURES = Path(__file__).parent / "policy_fixtures"
REPO = Path(__file__).resolve().parents[2]

BUCKET = "gcp:storage/bucket:Bucket"
TPU_VM = "gcp:tpu/v2Vm:V2Vm"
TPU_QR = "pulumi-python:dynamic/tpu:QueuedResource"
STATIC_QR = "gcp:tpu/v2QueuedResource:V2QueuedResource"
INSTANCE = "gcp:compute/instance:Instance"
TEMPLATE = "gcp:compute/instanceTemplate:InstanceTemplate"
CLUSTER = "gcp:container/cluster:Cluster"
NODE_POOL = "gcp:container/nodePool:NodePool"
K8S_JOB = "kubernetes:batch/v1:Job"
VERTEX = "pulumi-python:dynamic/vertex:CustomJob"
PROJECT_MEMBER = "gcp:projects/iAMMember:IAMMember"
BUCKET_MEMBER = "gcp:storage/bucketIAMMember:BucketIAMMember"
ACCOUNT_MEMBER = "gcp:serviceaccount/iAMMember:IAMMember"

# (rule, resource type, resource name) of every violation each fixture holds, in order.
EXPECTED: dict[str, list[tuple[str, str, str]]] = {
    "no-public-ips": [
        ("no-public-ips", TPU_VM, "exp-tpu-vm"),
        ("no-public-ips", TPU_QR, "exp-tpu-queued"),
        ("no-public-ips", INSTANCE, "exp-gpu-0"),
        ("no-public-ips", TEMPLATE, "exp-gpu-template"),
        ("no-public-ips", CLUSTER, "exp-gke"),
        ("no-public-ips", NODE_POOL, "exp-gke-a100"),
    ],
    "bucket-uniform-access-public-prevention": [
        ("bucket-uniform-access-public-prevention", BUCKET, "exp-buckets-data"),
        ("bucket-uniform-access-public-prevention", BUCKET, "exp-buckets-checkpoints"),
        ("bucket-uniform-access-public-prevention", BUCKET, "exp-scratch"),
        ("bucket-uniform-access-public-prevention", BUCKET, "exp-scratch"),
    ],
    "no-default-service-account": [
        ("no-default-service-account", INSTANCE, "exp-gpu-0"),
        ("no-default-service-account", TEMPLATE, "exp-gpu-template"),
        ("no-default-service-account", TPU_VM, "exp-tpu-vm"),
        ("no-default-service-account", STATIC_QR, "exp-tpu-qr"),
        ("no-default-service-account", TPU_QR, "exp-tpu-queued"),
        ("no-default-service-account", CLUSTER, "exp-gke"),
        ("no-default-service-account", NODE_POOL, "exp-gke-a100"),
        ("no-default-service-account", VERTEX, "exp-job-job"),
        # pulumi-gcp's queued resource cannot label its nodes either.
        ("accelerators-labelled", STATIC_QR, "exp-tpu-qr"),
    ],
    "no-project-owner-editor": [
        ("no-project-owner-editor", "gcp:projects/iAMMember:IAMMember", "exp-identity-owner"),
        ("no-project-owner-editor", "gcp:projects/iAMBinding:IAMBinding", "exp-editors"),
        ("no-project-owner-editor", "gcp:projects/iAMPolicy:IAMPolicy", "exp-policy"),
    ],
    "accelerators-labelled": [
        ("accelerators-labelled", TPU_VM, "exp-tpu-vm"),
        ("accelerators-labelled", TPU_QR, "exp-tpu-queued"),
        ("accelerators-labelled", INSTANCE, "exp-gpu-0"),
        ("accelerators-labelled", INSTANCE, "exp-t4-0"),
        ("accelerators-labelled", NODE_POOL, "exp-gke-tpu"),
        ("accelerators-labelled", CLUSTER, "exp-gke"),
        ("accelerators-labelled", K8S_JOB, "exp-train-job"),
        ("accelerators-labelled", VERTEX, "exp-job-job"),
    ],
    "prod-data-protected": [
        ("prod-data-protected", BUCKET, "exp-buckets-data"),
        ("prod-data-protected", BUCKET, "exp-buckets-checkpoints"),
        ("prod-data-protected", BUCKET, "exp-results"),
    ],
    "secrets-as-secrets": [
        ("secrets-as-secrets", INSTANCE, "exp-gpu-0"),
        ("secrets-as-secrets", INSTANCE, "exp-gpu-0"),
        ("secrets-as-secrets", TPU_VM, "exp-tpu-vm"),
        ("secrets-as-secrets", K8S_JOB, "exp-train-job"),
        ("secrets-as-secrets", VERTEX, "exp-job-job"),
    ],
    "supervisor-least-privilege": [
        ("supervisor-least-privilege", PROJECT_MEMBER, "exp-supervisor-tpu"),
        ("supervisor-least-privilege", PROJECT_MEMBER, "exp-supervisor-admin"),
        # objectAdmin on the whole checkpoint bucket: checkpoints and final models too.
        ("supervisor-least-privilege", BUCKET_MEMBER, "exp-supervisor-records"),
        ("supervisor-least-privilege", BUCKET_MEMBER, "exp-supervisor-other"),
        ("supervisor-least-privilege", ACCOUNT_MEMBER, "exp-supervisor-act-as-ci"),
    ],
}

# One exact output line per fixture: the rule, the resource and what to fix.
EXAMPLE_LINES = {
    "no-public-ips": (
        "  [mandatory] [no-public-ips] exp-gpu-0 (gcp:compute/instance:Instance): "
        "networkInterfaces[0].accessConfigs gives the machine an external IPv4 address; "
        "remove it and reach the internet through Cloud NAT"
    ),
    "bucket-uniform-access-public-prevention": (
        "  [mandatory] [bucket-uniform-access-public-prevention] exp-buckets-checkpoints "
        '(gcp:storage/bucket:Bucket): publicAccessPrevention is "inherited", not "enforced": '
        "an IAM grant to allUsers could make the bucket public"
    ),
    "no-default-service-account": (
        "  [mandatory] [no-default-service-account] exp-tpu-vm (gcp:tpu/v2Vm:V2Vm): "
        'serviceAccount.email is "123456789012-compute@developer.gserviceaccount.com", the '
        "default compute service account: TPU VMs then run as the default compute service "
        "account; use the stack's dedicated training service account (the default one holds "
        "project Editor)"
    ),
    "no-project-owner-editor": (
        "  [mandatory] [no-project-owner-editor] exp-policy (gcp:projects/iAMPolicy:IAMPolicy): "
        "policyData.bindings[1] grants roles/editor on project p to "
        "serviceAccount:ci@p.iam.gserviceaccount.com: basic roles can change everything in "
        "the project"
    ),
    "accelerators-labelled": (
        "  [mandatory] [accelerators-labelled] exp-train-job (kubernetes:batch/v1:Job): "
        "Kubernetes Job requesting nvidia.com/gpu without the label(s) environment, stack in "
        "metadata.labels: accelerator spend is attributed by environment, stack"
    ),
    "prod-data-protected": (
        "  [mandatory] [prod-data-protected] exp-buckets-data (gcp:storage/bucket:Bucket): "
        "prod data bucket is not protected from destroy: register it with protect=True (or "
        'deletionPolicy "PREVENT") so `pulumi destroy` cannot delete it'
    ),
    "secrets-as-secrets": (
        "  [mandatory] [secrets-as-secrets] exp-train-job (kubernetes:batch/v1:Job): "
        "spec.template.spec.containers[0].env[1].value sets HF_TOKEN in plaintext; "
        + rules.FIX_SECRET
    ),
    "supervisor-least-privilege": (
        "  [mandatory] [supervisor-least-privilege] exp-supervisor-admin "
        "(gcp:projects/iAMMember:IAMMember): grants roles/tpu.admin on the project to the "
        "supervisor: only a custom role of this stack limited to tpu.nodes.create, "
        "tpu.nodes.delete, tpu.nodes.get is allowed"
    ),
}


def test_every_rule_has_a_violating_fixture() -> None:
    assert [rule.name for rule in RULES] == list(EXPECTED)
    assert sorted(p.stem for p in FIXTURES.glob("*.json")) == sorted([*EXPECTED, "clean"])


@pytest.mark.parametrize("rule", list(EXPECTED))
def test_violating_fixture_exits_1_naming_rule_and_resource(rule: str) -> None:
    fixture = str(FIXTURES / f"{rule}.json")
    result = runner.invoke(app, ["policy", "--plan", fixture])
    assert result.exit_code == 1, result.output
    lines = result.stdout.splitlines()
    expected = EXPECTED[rule]
    assert lines[0].endswith(f": {len(expected)} violation(s)")
    assert EXAMPLE_LINES[rule] in lines
    assert lines[-1] == (
        f"{len(expected)} policy violation(s) in 1 of 1 stack(s); mandatory rules block "
        "`pulumi up --policy-pack policies/`"
    )

    as_json = runner.invoke(app, ["policy", "--plan", fixture, "--json"])
    assert as_json.exit_code == 1
    [report] = json.loads(as_json.stdout)
    found = [(v["rule"], v["type"], v["name"]) for v in report["violations"]]
    assert found == expected
    assert {v["enforcement"] for v in report["violations"]} == {"mandatory"}
    for v in report["violations"]:
        line = f"  [mandatory] [{v['rule']}] {v['name']} ({v['type']}): {v['message']}"
        assert line in lines


def test_clean_fixture_covers_every_target_type_and_passes() -> None:
    plan = json.loads((FIXTURES / "clean.json").read_text())
    types = {r["type"] for r in plan["resources"]}
    assert {TPU_VM, TPU_QR, INSTANCE, TEMPLATE, CLUSTER, NODE_POOL, K8S_JOB, BUCKET} <= types
    result = runner.invoke(app, ["policy", "--plan", str(FIXTURES / "clean.json")])
    assert result.exit_code == 0, result.output
    assert result.stdout == "stack fixture-clean: clean (13 resources, 8 rules)\n"


def test_all_bundled_stacks_pass() -> None:
    result = runner.invoke(app, ["policy", "--all"])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert [line.split(":")[0] for line in lines] == [f"stack {s}" for s in bundled_stacks()]
    for line in lines:
        assert re.fullmatch(r"stack [\w-]+: clean \(\d+ resources, 8 rules\)", line), line


def test_stack_and_config_file_modes(tmp_path: Path) -> None:
    result = runner.invoke(app, ["policy", "--stack", "prod-vertex-rs", "--json"])
    assert result.exit_code == 0, result.output
    [report] = json.loads(result.stdout)
    assert report["stack"] == "prod-vertex-rs"
    assert report["violations"] == []
    assert report["rules"] == [rule.name for rule in RULES]

    path = tmp_path / "Pulumi.mine.yaml"
    path.write_text((REPO / "stacks" / "Pulumi.prod-tpu-v4-32.yaml").read_text())
    result = runner.invoke(app, ["policy", "--config-file", str(path)])
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("stack mine: clean (")


def test_prod_buckets_pass_because_the_program_protects_them() -> None:
    """The rule reads the recorded `protect` option: unprotect the same registrations and
    exactly the prod data and checkpoint buckets fail (staging is rebuildable)."""
    name, config = load_stack("prod-vertex-rs", None)
    assert check_stack(name, config).clean
    run = bundled_run(name)
    protected = sorted(r.name for r in run.resources if r.protect)
    assert protected == ["prod-vertex-rs-buckets-checkpoints", "prod-vertex-rs-buckets-data"]
    unprotected = [Resource(r.type, r.name, r.inputs, protect=False) for r in run.resources]
    violations = evaluate(unprotected, Context(environment="prod"))
    assert sorted((v.rule, v.resource_name) for v in violations) == [
        ("prod-data-protected", "prod-vertex-rs-buckets-checkpoints"),
        ("prod-data-protected", "prod-vertex-rs-buckets-data"),
    ]
    # The buckets' own `environment: prod` labels make them prod data in any stack.
    assert len(evaluate(unprotected, Context(environment="dev"))) == 2


def test_invalid_config_exits_2_naming_the_key(tmp_path: Path) -> None:
    path = tmp_path / "Pulumi.broken.yaml"
    path.write_text(
        yaml.safe_dump(
            {"config": {"trainstack:environment": "qa", "trainstack:local": {"workers": 2}}}
        )
    )
    result = runner.invoke(app, ["policy", "--config-file", str(path)])
    assert result.exit_code == 2
    assert result.stderr == (
        "error: stack 'broken': environment: 'qa' is not allowed; valid: dev, staging, prod\n"
    )


@pytest.mark.parametrize(
    "args",
    [[], ["--stack", "local", "--all"], ["--plan", "x.json", "--config-file", "y.yaml"]],
    ids=["none", "stack+all", "plan+config"],
)
def test_exactly_one_source(args: list[str]) -> None:
    result = runner.invoke(app, ["policy", *args])
    assert result.exit_code == 2
    assert (
        "give exactly one of --stack NAME, --config-file PATH, --plan PATH or --all"
        in result.stderr
    )


def test_unreadable_plans_exit_2(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    result = runner.invoke(app, ["policy", "--plan", str(bad)])
    assert result.exit_code == 2
    assert f"--plan: {bad} is not a readable JSON plan" in result.stderr

    bad.write_text(json.dumps({"resources": []}))
    result = runner.invoke(app, ["policy", "--plan", str(bad)])
    assert result.exit_code == 2
    assert "plan 0: expected a JSON plan with a `stack` name and a `resources` list" in (
        result.stderr.replace("\n", " ")
    )

    bad.write_text(
        json.dumps(
            {"stack": "s", "resources": [{"type": BUCKET, "name": "b", "inputs": {}, "protect": 1}]}
        )
    )
    result = runner.invoke(app, ["policy", "--plan", str(bad)])
    assert result.exit_code == 2
    assert (
        "plan 's': resources[0].protect must be true or false, got 1; valid: true, false"
        in result.stderr
    )


def test_a_list_of_plans_reports_each_stack() -> None:
    plans = [json.loads((FIXTURES / f"{n}.json").read_text()) for n in ("clean", "no-public-ips")]
    reports = check_plan(plans)
    assert [(r.stack, r.clean, len(r.violations)) for r in reports] == [
        ("fixture-clean", True, 0),
        ("fixture-no-public-ips", False, 6),
    ]


# --------------------------------------------------------------------------- rule details


@pytest.mark.parametrize(
    ("key", "expected"),
    [
        ("HF_TOKEN", True),
        ("WANDB_API_KEY", True),
        ("apiKey", True),
        ("client_secret", True),
        ("AWS_SECRET_ACCESS_KEY", True),
        ("db_password", True),
        ("secret", False),  # `gcloud secrets ... --secret=NAME` names a secret
        ("secretName", False),
        ("passwordSecretRef", False),
        ("tokenFile", False),
        ("pad_token", False),
        ("max_tokens", False),
        ("TYPE_TOKEN", False),
        ("ssh-keys", False),
    ],
)
def test_secret_like_names(key: str, expected: bool) -> None:
    assert secret_like(key) is expected


def test_values_unknown_or_secret_are_not_judged() -> None:
    bucket = Resource(
        BUCKET,
        "b",
        {"uniformBucketLevelAccess": rules.UNKNOWN, "publicAccessPrevention": rules.UNKNOWN},
    )
    vm = Resource(
        TPU_VM,
        "vm",
        {
            "serviceAccount": {"email": rules.UNKNOWN},
            "labels": {"environment": "dev", "stack": "s"},
            "metadata": {"startup-script": rules.SECRET, "hf-token": rules.SECRET},
        },
    )
    assert evaluate([bucket, vm], Context(environment="dev")) == []


def test_required_labels_come_from_the_context() -> None:
    vm = Resource(
        TPU_VM,
        "vm",
        {"serviceAccount": {"email": "t@p.iam.gserviceaccount.com"}, "labels": {"stack": "s"}},
    )
    context = rules.context_from_config({"required_labels": ["stack", "team"]})
    assert context == Context(environment=None, required_labels=("stack", "team"))
    [violation] = evaluate([vm], context)
    assert violation.message == (
        "TPU VM without the label(s) team in labels: accelerator spend is attributed by stack, team"
    )


# --------------------------------------------------------------------------- the pack


@pytest.fixture(scope="module")
def pack() -> Any:
    import trainstack.policies.__main__ as pack_main

    return pack_main


def _options(protect: bool = False) -> PolicyResourceOptions:
    return PolicyResourceOptions(protect, [], None, [], PolicyCustomTimeouts(0, 0, 0), [])


def test_pack_registers_every_rule_as_mandatory(pack: Any) -> None:
    assert [p.name for p in pack.POLICIES] == [rule.name for rule in RULES]
    for policy, rule in zip(pack.POLICIES, RULES, strict=True):
        kind = ResourceValidationPolicy if rule.scope == "resource" else StackValidationPolicy
        assert isinstance(policy, kind)
        assert policy.enforcement_level == EnforcementLevel.MANDATORY
        assert policy.description == rule.description
    by_name = {p.name: p for p in pack.POLICIES}
    assert isinstance(by_name["prod-data-protected"], StackValidationPolicy)
    labels = by_name["accelerators-labelled"].config_schema
    assert labels is not None
    assert labels.properties == {
        "required_labels": {
            "type": "array",
            "items": {"type": "string"},
            "default": ["environment", "stack"],
        }
    }


def test_resource_policy_validates_through_pulumi_policy_args(pack: Any) -> None:
    policy = {p.name: p for p in pack.POLICIES}["secrets-as-secrets"]
    props = {
        "networkConfig": {"enableExternalIps": UNKNOWN_BOOLEAN_VALUE},
        "metadata": {
            "startup-script": Secret("export HF_TOKEN=hf_" + "a" * 34),
            "hf-token": "plaintext-value",
        },
    }
    reported: list[tuple[str, str | None]] = []
    args = ResourceValidationArgs(
        TPU_VM, unknown_checking_proxy(props), "urn:vm", "exp-tpu-vm", _options(), None, {}
    )
    policy.validate(args, lambda message, urn=None: reported.append((message, urn)))
    assert reported == [
        (
            f"metadata.hf-token holds a plaintext credential; {rules.FIX_SECRET}",
            None,
        )
    ]
    assert pack.plain(unknown_checking_proxy(props)) == {
        "networkConfig": {"enableExternalIps": rules.UNKNOWN},
        "metadata": {"startup-script": rules.SECRET, "hf-token": "plaintext-value"},
    }


def test_stack_policy_reports_by_urn_and_reads_config(pack: Any) -> None:
    policy = {p.name: p for p in pack.POLICIES}["prod-data-protected"]
    data = PolicyResource(
        BUCKET,
        unknown_checking_proxy({"uniformBucketLevelAccess": True}),
        "urn:data",
        "exp-buckets-data",
        _options(protect=False),
        None,
        None,
        [],
        {},
    )
    staging = PolicyResource(
        BUCKET, {}, "urn:staging", "exp-buckets-staging", _options(), None, None, [], {}
    )
    reported: list[tuple[str, str | None]] = []
    policy.validate(
        StackValidationArgs([data, staging], {"environment": "prod"}),
        lambda message, urn=None: reported.append((message, urn)),
    )
    assert [urn for _, urn in reported] == ["urn:data"]
    reported.clear()
    policy.validate(
        StackValidationArgs([data, staging], {}), lambda m, urn=None: reported.append((m, urn))
    )
    assert reported == []  # no resource says prod and no config does


SECRET_SIG = {"4dabf18193072939515e22adb298388d": "1b47061264138c4ac30d75fd1eb44270"}


@pytest.fixture(scope="module")
def analyzer() -> Iterator[analyzer_pb2_grpc.AnalyzerStub]:
    """The pack served exactly as the Pulumi CLI runs a Python pack (`python -m
    pulumi.policy <engine> <pack dir>`), in its own process."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "pulumi.policy", "127.0.0.1:0", "policies"],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        port = proc.stdout.readline().strip()
        assert port.isdigit(), proc.stderr.read() if proc.stderr else port
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            yield analyzer_pb2_grpc.AnalyzerStub(channel)
    finally:
        proc.kill()
        proc.wait(timeout=10)


def _struct(value: dict[str, Any]) -> struct_pb2.Struct:
    struct = struct_pb2.Struct()
    json_format.ParseDict(value, struct)
    return struct


def test_pack_over_grpc(analyzer: analyzer_pb2_grpc.AnalyzerStub) -> None:
    info = analyzer.GetAnalyzerInfo(empty_pb2.Empty(), timeout=20)
    assert info.name == "trainstack-security"
    assert [p.name for p in info.policies] == [rule.name for rule in RULES]
    assert {p.enforcementLevel for p in info.policies} == {analyzer_pb2.MANDATORY}

    script = "export HF_TOKEN=hf_" + "a" * 34
    base = {
        "networkConfig": {"enableExternalIps": True},
        "serviceAccount": {"email": "exp-train@p.iam.gserviceaccount.com"},
        "labels": {"environment": "dev", "stack": "exp"},
    }
    plaintext = analyzer.Analyze(
        analyzer_pb2.AnalyzeRequest(
            type=TPU_VM,
            name="exp-tpu-vm",
            urn="urn:vm",
            properties=_struct({**base, "metadata": {"startup-script": script}}),
            options=analyzer_pb2.AnalyzerResourceOptions(),
        ),
        timeout=20,
    )
    assert sorted((d.policyName, d.enforcementLevel) for d in plaintext.diagnostics) == [
        ("no-public-ips", analyzer_pb2.MANDATORY),
        ("secrets-as-secrets", analyzer_pb2.MANDATORY),
    ]
    # The engine sends secrets marked; the pack keeps the mark, so a secret script passes.
    secret = {**SECRET_SIG, "value": script}
    marked = analyzer.Analyze(
        analyzer_pb2.AnalyzeRequest(
            type=TPU_VM,
            name="exp-tpu-vm",
            urn="urn:vm",
            properties=_struct({**base, "metadata": {"startup-script": secret}}),
            options=analyzer_pb2.AnalyzerResourceOptions(),
        ),
        timeout=20,
    )
    assert [d.policyName for d in marked.diagnostics] == ["no-public-ips"]
    # A secret top-level property keeps its mark too.
    vm = analyzer.Analyze(
        analyzer_pb2.AnalyzeRequest(
            type=INSTANCE,
            name="exp-gpu-0",
            urn="urn:gpu",
            properties=_struct(
                {
                    "machineType": "a2-highgpu-8g",
                    "networkInterfaces": [{"subnetwork": "exp-subnet"}],
                    "serviceAccount": {"email": "exp-train@p.iam.gserviceaccount.com"},
                    "labels": {"environment": "dev", "stack": "exp"},
                    "metadataStartupScript": secret,
                }
            ),
            options=analyzer_pb2.AnalyzerResourceOptions(),
        ),
        timeout=20,
    )
    assert list(vm.diagnostics) == []

    stack = analyzer.AnalyzeStack(
        analyzer_pb2.AnalyzeStackRequest(
            resources=[
                analyzer_pb2.AnalyzerResource(
                    type=BUCKET,
                    name=name,
                    urn=f"urn:{name}",
                    properties=_struct({"labels": {"environment": "prod"}}),
                    options=analyzer_pb2.AnalyzerResourceOptions(protect=protect),
                )
                for name, protect in (
                    ("exp-buckets-data", False),
                    ("exp-buckets-checkpoints", True),
                )
            ]
        ),
        timeout=20,
    )
    assert [(d.policyName, d.urn) for d in stack.diagnostics] == [
        ("prod-data-protected", "urn:exp-buckets-data")
    ]
