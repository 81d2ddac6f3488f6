"""A4 and A3 Ultra on the gce backend: the GPUDirect RDMA fabric, the instance template and
the flex-start resize request, compared field by field with what Cluster Toolkit renders
(GoogleCloudPlatform/cluster-toolkit @1047080: the values below are copied from its files,
named next to each) and with what Google's pages say; the refused families' one line each.

Deliberate differences from CTK's VM blueprints (`DIFFERENCES`), each asserted below."""

from __future__ import annotations

import stat
from pathlib import Path
from typing import Any, Final

import pytest

from tests.components.test_a100_cluster import (
    CLUSTER,
    GSA,
    NET,
    POLICY,
    POLICY_LINK,
    SUBNET,
    _args,
    _cluster_outputs,
    _policy_outputs,
)
from trainstack.components.a100_cluster import A100Cluster
from trainstack.components.a100_cluster.validate import a100_cluster_problems
from trainstack.components.catalog.gpu_fabric_gce import gce_fabric
from trainstack.components.gpu_startup import node_helper
from trainstack.infra.mocks import ProgramRun, run_program

TEMPLATE = "gcp:compute/instanceTemplate:InstanceTemplate"
GROUP = "gcp:compute/instanceGroupManager:InstanceGroupManager"
NODE_CONFIG = "gcp:compute/perInstanceConfig:PerInstanceConfig"
NETWORK = "gcp:compute/network:Network"
SUBNETWORK = "gcp:compute/subnetwork:Subnetwork"
FIREWALL = "gcp:compute/firewall:Firewall"
RESIZE = "gcp:compute/resizeRequest:ResizeRequest"
ZONE = "us-central1-b"
LINKS = "https://www.googleapis.com/compute/v1/projects/acme-ml"

DIFFERENCES: Final = {
    "primary network": (
        "the first NIC is on the stack's TrainingNetwork (its subnet, Cloud NAT, node-tag and "
        "IAP firewall rules; MTU 8896 as CTK's net-0), not a `<deployment>-net-0` VPC of "
        "192.168.0.0/19"
    ),
    "no external IPs": (
        "CTK gives net-0 and net-1 an `access_config` (an external IP each); the nodes here "
        "have none: egress goes through the stack network's Cloud NAT"
    ),
    "net-1 extras": (
        "modules/network/vpc adds by default a Cloud Router and NAT, an internal-traffic rule "
        "for 10.0.0.0/9 and an IAP SSH rule to net-1; only the blueprint's own "
        "`<deployment>-internal-1` rule is rendered (SSH and egress use the primary NIC)"
    ),
    "image and software": (
        "A4: CTK boots ubuntu-2204-lts and installs nvidia-open-570, CUDA 12.8, DCGM, Open MPI, "
        "docker and its NCCL settings in /etc/environment; here both families boot the "
        "accelerator image CTK's A3 Ultra blueprint pins (driver 570 preinstalled) and the "
        "launcher installs nccl-gib and sources its set_nccl_env.sh, as Google's NCCL/gIB "
        "page says, plus torch 2.9.1 where the image has no torchrun"
    ),
    "group, not VMs": (
        "CTK creates `instance_count` google_compute_instance VMs; here a zonal managed "
        "instance group with one per-instance config per node (rank metadata, repair)"
    ),
    "placement": (
        "CTK's VM blueprints set no placement policy; here the group gets a HIGH_THROUGHPUT "
        "workload policy, Google's placement for MIGs of these families"
    ),
    "storage": "no Filestore /home and no local SSD mount (checkpoints go to Cloud Storage)",
}


def _run(**overrides: Any) -> ProgramRun:
    args = _args(machine_type="a4-highgpu-8g", zone=ZONE, node_count=2, spot=False)
    args |= {"backend": "gce", **overrides}

    def program() -> dict[str, Any]:
        cluster = A100Cluster("gpu", args)  # type: ignore[arg-type]
        return {"instance_names": cluster.instance_names, "facts": cluster.facts}

    return run_program(program, outputs={CLUSTER: _cluster_outputs, POLICY: _policy_outputs})


def _ctk_networks(deployment: str) -> list[dict[str, Any]]:
    """The networks CTK's VM blueprints render for `deployment` in project acme-ml, zone
    us-central1-b (a4high-vm.yaml / a3ultra-vm.yaml modules `*-net-1`, `*-rdma-net`)."""
    return [
        # modules/network/vpc: network_name $(vars.deployment_name)-net-1, mtu 8896,
        # network_routing_mode default "GLOBAL" (variables.tf).
        {"name": f"{deployment}-net-1", "mtu": 8896, "routingMode": "GLOBAL"},
        # modules/network/gpu-rdma-vpc: network_name $(vars.deployment_name)-rdma-net, mtu
        # default 8896, network_routing_mode REGIONAL, network_profile
        # https://www.googleapis.com/compute/beta/projects/$(vars.project_id)/global/
        # networkProfiles/$(vars.zone)-vpc-roce.
        {
            "name": f"{deployment}-rdma-net",
            "mtu": 8896,
            "routingMode": "REGIONAL",
            "networkProfile": "https://www.googleapis.com/compute/beta/projects/acme-ml/"
            "global/networkProfiles/us-central1-b-vpc-roce",
        },
    ]


def _ctk_subnets(deployment: str) -> list[tuple[str, str]]:
    # net-1: subnet_name $(vars.deployment_name)-sub-1, subnet_ip net1_range 192.168.64.0/18;
    # rdma-net: "${name_prefix}-${i}" with name_prefix $(vars.deployment_name)-mrdma-sub,
    # cidrsubnet(rdma_net_range 192.168.128.0/18, ceil(log(8, 2)), i).
    return [
        (f"{deployment}-sub-1", "192.168.64.0/18"),
        *((f"{deployment}-mrdma-sub-{i}", f"192.168.{128 + 8 * i}.0/21") for i in range(8)),
    ]


@pytest.mark.parametrize("machine", ["a4-highgpu-8g", "a3-ultragpu-8g"])
def test_networks_are_cluster_toolkits(machine: str) -> None:
    run = _run(machine_type=machine)
    networks = [
        {k: v for k, v in r.inputs.items() if k in ("name", "mtu", "routingMode", "networkProfile")}
        for r in run.of_type(NETWORK)
    ]
    # The mocks list registrations in the order the engine's event loop completes them.
    assert sorted(networks, key=lambda n: n["name"]) == _ctk_networks("exp-42")
    subnets = [(r.inputs["name"], r.inputs["ipCidrRange"]) for r in run.of_type(SUBNETWORK)]
    assert sorted(subnets) == sorted(_ctk_subnets("exp-42"))
    assert {r.inputs["region"] for r in run.of_type(SUBNETWORK)} == {"us-central1"}
    # a4high-vm.yaml firewall_rules of a4high-net-1: name $(vars.deployment_name)-internal-1,
    # ranges [net1_range], allow tcp, udp, icmp; gpu-rdma-vpc takes no firewall rule.
    [firewall] = run.of_type(FIREWALL)
    assert {k: firewall.inputs[k] for k in ("name", "network", "sourceRanges", "allows")} == {
        "name": "exp-42-internal-1",
        "network": f"{LINKS}/global/networks/exp-42-net-1",
        "sourceRanges": ["192.168.64.0/18"],
        "allows": [{"protocol": "tcp"}, {"protocol": "udp"}, {"protocol": "icmp"}],
    }


@pytest.mark.parametrize("machine", ["a4-highgpu-8g", "a3-ultragpu-8g"])
def test_template_is_cluster_toolkits_vm(machine: str) -> None:
    run = _run(machine_type=machine, reservation="blocks-1")
    [template] = run.of_type(TEMPLATE)
    nics = template.inputs["networkInterfaces"]
    # vm-instance main.tf: one network_interface per entry of concat([net-0, net-1],
    # rdma-net.subnetwork_interfaces), in that order; vpc's nic_type default GVNIC,
    # gpu-rdma-vpc's output_subnets {subnetwork = self_link, nic_type = "MRDMA", network null}.
    assert nics == [
        {"network": NET, "subnetwork": SUBNET, "nicType": "GVNIC"},
        {
            "network": f"{LINKS}/global/networks/exp-42-net-1",
            "subnetwork": f"{LINKS}/regions/us-central1/subnetworks/exp-42-sub-1",
            "nicType": "GVNIC",
        },
        *(
            {
                "subnetwork": f"{LINKS}/regions/us-central1/subnetworks/exp-42-mrdma-sub-{i}",
                "nicType": "MRDMA",
            }
            for i in range(8)
        ),
    ]
    # DIFFERENCES["no external IPs"]: CTK merges an access_config into net-0 and net-1.
    assert [nic.get("accessConfigs") for nic in nics] == [None] * 10
    [disk] = template.inputs["disks"]
    # a4high-vm.yaml / a3ultra-vm.yaml disk_type: hyperdisk-balanced; a3ultra-vm.yaml
    # instance_image {project: ubuntu-os-accelerator-images, name:
    # ubuntu-accelerator-2204-amd64-with-nvidia-570-v20260210}.
    assert (disk["diskType"], disk["sourceImage"]) == (
        "hyperdisk-balanced",
        "projects/ubuntu-os-accelerator-images/global/images/"
        "ubuntu-accelerator-2204-amd64-with-nvidia-570-v20260210",
    )
    # automatic_restart: true, on_host_maintenance: TERMINATE, provisioning_model:
    # RESERVATION_BOUND; vm-instance main.tf reservation_affinity SPECIFIC_RESERVATION with
    # key compute.googleapis.com/reservation-name and values [reservation_name].
    assert template.inputs["scheduling"] == {
        "provisioningModel": "RESERVATION_BOUND",
        "automaticRestart": True,
        "onHostMaintenance": "TERMINATE",
    }
    assert template.inputs["reservationAffinity"] == {
        "type": "SPECIFIC_RESERVATION",
        "specificReservation": {
            "key": "compute.googleapis.com/reservation-name",
            "values": ["blocks-1"],
        },
    }
    assert template.inputs["machineType"] == machine
    assert template.inputs["serviceAccount"]["email"] == GSA
    # DIFFERENCES["group, not VMs"] and ["placement"].
    assert len(run.of_type(NODE_CONFIG)) == 2
    # DIFFERENCES["placement"]: none on the template; the group's workload policy.
    assert "resourcePolicies" not in template.inputs
    [group] = run.of_type(GROUP)
    assert group.inputs["resourcePolicies"] == {"workloadPolicy": POLICY_LINK}


@pytest.mark.parametrize("flex", [False, True])
def test_a4_and_a3_ultra_groups_take_a_workload_policy(flex: bool) -> None:
    # https://cloud.google.com/ai-hypercomputer/docs/placement-policy-and-workload-policy:
    # "compact placement policies to compute instances or workload policies to MIGs";
    # terraform-provider-google resource_compute_instance_group_manager_test.go
    # testAccInstanceGroupManager_resourcePoliciesWorkloadPolicy (a4-highgpu-8g):
    # `workload_policy { type = "HIGH_THROUGHPUT" }`, the group's
    # `resource_policies { workload_policy = google_compute_resource_policy...self_link }`.
    run = _run(flex_start=True, max_run_seconds=7200) if flex else _run()
    [policy] = run.of_type(POLICY)
    assert policy.inputs == {
        "project": "acme-ml",
        "region": "us-central1",
        "name": "exp-42-a100-placement",
        "description": "trainstack: A4 nodes of one training cluster, collocated",
        "workloadPolicy": {"type": "HIGH_THROUGHPUT"},
    }
    [group] = run.of_type(GROUP)
    assert group.inputs["resourcePolicies"] == {"workloadPolicy": POLICY_LINK}
    assert "resourcePolicies" not in run.of_type(TEMPLATE)[0].inputs


def test_the_launcher_installs_gib_and_sources_its_settings() -> None:
    script = _run().of_type(TEMPLATE)[0].inputs["metadataStartupScript"]
    lines = [
        line for line in script.splitlines() if line.startswith(("FABRIC_", "NCCL_", "TORCH_"))
    ]
    # https://docs.cloud.google.com/ai-hypercomputer/docs/nccl/test-vms: the Google Cloud
    # signing key ("If you're not using an image from Google": the image is Canonical's), the
    # apt source (here signed by that key alone) and list file, `apt install nccl-gib`,
    # /usr/local/gib/scripts/set_nccl_env.sh sourced and /usr/local/gib/lib64 on
    # LD_LIBRARY_PATH.
    assert lines == [
        "FABRIC_APT_KEY_URL=https://packages.cloud.google.com/apt/doc/apt-key.gpg",
        "FABRIC_APT_KEYRING=/etc/apt/keyrings/cloud.google.gpg",
        "FABRIC_APT_SOURCE='deb [signed-by=/etc/apt/keyrings/cloud.google.gpg] "
        "https://packages.cloud.google.com/apt gpudirect-gib-apt main'",
        "FABRIC_APT_LIST=/etc/apt/sources.list.d/nccl-gib.list",
        "FABRIC_PACKAGE=nccl-gib",
        "TORCH_REQUIREMENT=torch==2.9.1",
        "TORCH_PIP_PACKAGE=python3-pip",
        "NCCL_ENV_SCRIPT=/usr/local/gib/scripts/set_nccl_env.sh",
        "NCCL_LIB_DIR=/usr/local/gib/lib64",
    ]


ARMORED_KEY: Final = (
    b"-----BEGIN PGP PUBLIC KEY BLOCK-----\n\nmQENdHJhaW5zdGFjayB0ZXN0IGtleQ==\n=JXeJ\n"
    b"-----END PGP PUBLIC KEY BLOCK-----\n"
)
"""A key block in ASCII armor; `gpg --dearmor` of it gives `BINARY_KEY` (run here, gpg 2)."""
BINARY_KEY: Final = b"\x99\x01\x0dtrainstack test key"


@pytest.mark.parametrize("served", [ARMORED_KEY, BINARY_KEY])
def test_the_helper_stores_googles_apt_key_unarmored_and_readable_by_apt(
    served: bytes, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Google's page pipes the key through `gpg --dearmor` into a .gpg file; apt reads a .gpg
    # keyring in binary form only (apt-key(8)) and as its _apt user (sources.list(5)).
    urls: list[tuple[str, dict[str, str]]] = []

    def get(url: str, headers: dict[str, str]) -> bytes:
        urls.append((url, headers))
        return served

    monkeypatch.setattr(node_helper, "_get", get)
    monkeypatch.delenv("TRAINSTACK_APT_KEY_URL", raising=False)
    dest = tmp_path / "etc-apt-keyrings" / "cloud.google.gpg"
    url = "https://packages.cloud.google.com/apt/doc/apt-key.gpg"
    assert node_helper.main(["apt-key", url, str(dest)]) == 0
    assert urls == [(url, {})]
    assert dest.read_bytes() == BINARY_KEY
    assert stat.S_IMODE(dest.stat().st_mode) == 0o644
    assert sorted(p.name for p in dest.parent.iterdir()) == ["cloud.google.gpg"]


def test_the_helper_refuses_a_broken_armored_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    broken = ARMORED_KEY.replace(b"mQEN", b"mQ!N")
    monkeypatch.setattr(node_helper, "_get", lambda url, headers: broken)
    dest = tmp_path / "cloud.google.gpg"
    assert node_helper.main(["apt-key", "https://example.invalid/key", str(dest)]) == 1
    assert not dest.exists()
    assert capsys.readouterr().err == (
        "trainstack-helper: armored key with a bad body: Only base64 data is allowed\n"
    )


def test_a2_has_no_fabric_on_gce() -> None:
    run = _run(machine_type="a2-highgpu-8g", zone="us-central1-a")
    assert run.of_type(NETWORK) + run.of_type(SUBNETWORK) + run.of_type(FIREWALL) == []
    [template] = run.of_type(TEMPLATE)
    assert template.inputs["networkInterfaces"] == [
        {"network": NET, "subnetwork": SUBNET, "nicType": "GVNIC"}
    ]
    script = template.inputs["metadataStartupScript"]
    assert "\nFABRIC_PACKAGE=''\n" in script
    assert "\nFABRIC_APT_KEY_URL=''\n" in script
    assert "\nNCCL_ENV_SCRIPT=''\n" in script


def test_plan_note_names_the_fabric_and_what_nccl_sees() -> None:
    [note] = _run().outputs["facts"]["notes"]
    fabric = gce_fabric("a4-highgpu-8g", "exp-42", ZONE)
    assert fabric is not None
    assert note == fabric.note()
    assert note.startswith(
        "gpu_cluster: a4-highgpu-8g (A4) on Compute Engine uses GPUDirect RDMA over RoCE as "
        "GoogleCloudPlatform/cluster-toolkit @1047080 examples/machine-learning/a4-highgpu-8g/"
        "a4high-vm.yaml renders it: 10 NICs per VM, in order the stack's network (gVNIC, "
        "eth0), exp-42-net-1 (gVNIC, MTU 8896, eth1) and 8 MRDMA NICs on exp-42-rdma-net "
        "(network profile us-central1-b-vpc-roce, MTU 8896, one subnet per GPU)"
    )


# --------------------------------------------------------------------------------------
# Flex-start: a resize request
# --------------------------------------------------------------------------------------


def test_flex_start_is_one_resize_request_of_node_count_vms() -> None:
    run = _run(flex_start=True, max_run_seconds=7200)
    assert run.of_type(NODE_CONFIG) == []
    [group] = run.of_type(GROUP)
    # The provider's example (website/docs/r/compute_resize_request.html.markdown): the group
    # with default_action_on_failure DO_NOTHING, no target size; CTK mig_flex.py likewise.
    assert group.inputs["instanceLifecyclePolicy"] == {"defaultActionOnFailure": "DO_NOTHING"}
    assert "targetSize" not in group.inputs
    assert group.inputs["updatePolicy"]["type"] == "OPPORTUNISTIC"
    [request] = run.of_type(RESIZE)
    assert request.inputs == {
        "project": "acme-ml",
        "zone": ZONE,
        "instanceGroupManager": "exp-42-a100",
        "name": "exp-42-a100-run",
        "description": "trainstack: 2 flex-start A4 nodes for the run",
        "resizeBy": 2,
        "requestedRunDuration": {"seconds": "7200"},
    }
    [template] = run.of_type(TEMPLATE)
    assert template.inputs["scheduling"] == {
        "provisioningModel": "FLEX_START",
        "automaticRestart": False,
        "onHostMaintenance": "TERMINATE",
        "instanceTerminationAction": "DELETE",
        "maxRunDuration": {"seconds": 7200},
    }
    assert template.inputs["reservationAffinity"] == {"type": "NO_RESERVATION"}
    script = template.inputs["metadataStartupScript"]
    # The request names its VMs: each claims a rank; node 0 is whoever claims rank 0.
    assert "\nRANK_CLAIMS=1\n" in script
    assert "\nCOORDINATOR=exp-42-a100\n" in script
    assert "\nTF_WORKERS=''\n" in script
    assert run.outputs["instance_names"] == []


def test_a100_without_flex_start_claims_no_rank() -> None:
    script = _run(machine_type="a2-highgpu-8g", zone="us-central1-a").of_type(TEMPLATE)[0]
    assert "\nRANK_CLAIMS=0\n" in script.inputs["metadataStartupScript"]


def test_flex_start_run_shorter_than_a_resize_request_allows() -> None:
    args = _args(machine_type="a4-highgpu-8g", zone=ZONE, spot=False)
    args |= {"backend": "gce", "flex_start": True, "max_run_seconds": 300}
    assert a100_cluster_problems(args, prefix="") == [
        "max_run_seconds: 0.0833333 hours is shorter than a flex-start resize request's run "
        "allows; valid: 10 minutes to 168 hours (7 days)"
    ]


# --------------------------------------------------------------------------------------
# What the gce backend refuses
# --------------------------------------------------------------------------------------

REFUSED: Final = {
    "a3-highgpu-8g": (
        "gpu_cluster.backend: gce does not render the GPUDirect-TCPX fabric a3-highgpu-8g "
        "needs (Cluster Toolkit builds A3 High nodes only for Slurm, on a custom image with "
        "the TCPX-patched kernel from a private Canonical PPA and the "
        "receive-data-path-manager started by Slurm's prolog); valid: backend: gke, or on gce "
        "a machine whose fabric it renders: a3-ultragpu-8g, a4-highgpu-8g"
    ),
    "a3-megagpu-8g": (
        "gpu_cluster.backend: gce does not render the GPUDirect-TCPXO fabric a3-megagpu-8g "
        "needs (Cluster Toolkit builds A3 Mega nodes only for Slurm, on a custom image adding "
        "gpudirect-tcpxo-apt and the rxdm receive-datapath manager started by Slurm's "
        "prolog); valid: backend: gke, or on gce a machine whose fabric it renders: "
        "a3-ultragpu-8g, a4-highgpu-8g"
    ),
}


@pytest.mark.parametrize("machine", sorted(REFUSED))
def test_gce_refuses_the_fabrics_it_does_not_render(machine: str) -> None:
    section = {"backend": "gce", "machine_type": machine, "node_count": 2, "zone": "us-central1-a"}
    assert a100_cluster_problems(section, prefix="gpu_cluster.", shape_only=True) == [
        REFUSED[machine]
    ]


@pytest.mark.parametrize("machine", ["a4-highgpu-8g", "a3-ultragpu-8g"])
def test_gce_takes_the_rdma_families(machine: str) -> None:
    section = {"backend": "gce", "machine_type": machine, "node_count": 2, "zone": ZONE}
    assert a100_cluster_problems(section, prefix="gpu_cluster.", shape_only=True) == []
