"""The GPU-to-GPU network of A4 and A3 Ultra on plain Compute Engine (the gce backend), as
Google documents it and as Cluster Toolkit's VM blueprints render it, and the families whose
fabric the gce backend does not render (A3 High, A3 Mega), with why.

Sources (`CTK`: GoogleCloudPlatform/cluster-toolkit @1047080, v1.95.0):

- `examples/machine-learning/a4-highgpu-8g/a4high-vm.yaml` and
  `examples/machine-learning/a3-ultragpu-8g/a3ultra-vm.yaml`: module `*-net-1`
  (modules/network/vpc: network `$(vars.deployment_name)-net-1`, `mtu: 8896`, subnet
  `$(vars.deployment_name)-sub-1` in `net1_range: 192.168.64.0/18`, firewall rule
  `$(vars.deployment_name)-internal-1` allowing tcp, udp and icmp from that range); module
  `*-rdma-net` (modules/network/gpu-rdma-vpc: network `$(vars.deployment_name)-rdma-net`,
  `network_profile: .../global/networkProfiles/$(vars.zone)-vpc-roce`,
  `network_routing_mode: REGIONAL`, `subnetworks_template` {name_prefix
  `$(vars.deployment_name)-mrdma-sub`, count 8, ip_range `rdma_net_range: 192.168.128.0/18`});
  the VMs' `network_interfaces`: `concat([net-0, net-1], rdma-net.subnetwork_interfaces)`;
  `disk_type: hyperdisk-balanced`, `on_host_maintenance: TERMINATE`, `automatic_restart:
  true`, `provisioning_model: RESERVATION_BOUND` with `reservation_name`.
- `modules/network/gpu-rdma-vpc/main.tf`: subnets `"${local.subnet_prefix}-${i}"` in
  `cidrsubnet(ip_range, ceil(log(count, 2)), i)`; `output_subnets` (the VM NICs):
  `subnetwork = subnet.self_link`, `nic_type = var.nic_type` (variables.tf: default and only
  value "MRDMA"), `access_config = []`; `mtu` default 8896 (variables.tf); no firewall
  rules (variables.tf refuses them).
- `modules/network/vpc/main.tf` `output_subnets_gke` (`instance_additional_networks`, the
  net-1 NIC): `nic_type = var.nic_type` (variables.tf default "GVNIC").
- `modules/compute/vm-instance/main.tf` `google_compute_instance.compute_vm`: one
  `network_interface` per entry, in the order given.

Google: "MRDMA is the network interface implementation used on A4X Max, A4X, A4, and A3
Ultra machine types to provide GPUDirect RDMA capabilities"
(https://cloud.google.com/compute/docs/gpus/gpu-network-bandwidth); the RoCE VPC's profile
is `ZONE-vpc-roce`, it takes MRDMA NICs only, MTU 8896 (frontier.md 4.1, G-RDMA).
NCCL/gIB on Compute Engine instances, https://docs.cloud.google.com/ai-hypercomputer/docs/
nccl/test-vms (updated 2026-04-06; stored copy, find_string id 59796604732):
"echo 'deb https://packages.cloud.google.com/apt gpudirect-gib-apt main' | sudo tee
/etc/apt/sources.list.d/nccl-gib.list ... sudo apt install nccl-gib"; "All NCCL/gIB content
is installed to the /usr/local/gib directory"; "You don't need to install this [DOCA-OFED]
driver if you are using Google's accelerator optimized images, such as ... accelerator
optimized Ubuntu"; "/usr/local/gib/scripts/set_nccl_env.sh is sourced in your runtime
environment ... Google expects to update them in future NCCL/gIB releases" and "The
/usr/local/gib/lib64 directory is in your LD_LIBRARY_PATH"; the key step is for those "not
using an image from Google".
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Final, Literal

from trainstack.components.catalog.gpu_families import family_of
from trainstack.components.catalog.machines import MACHINES

CTK: Final = "GoogleCloudPlatform/cluster-toolkit @1047080"
CTK_A4_VM: Final = "examples/machine-learning/a4-highgpu-8g/a4high-vm.yaml"
CTK_A3U_VM: Final = "examples/machine-learning/a3-ultragpu-8g/a3ultra-vm.yaml"
NCCL_GIB_DOC: Final = "https://docs.cloud.google.com/ai-hypercomputer/docs/nccl/test-vms"

RDMA_MTU: Final = 8896
"""CTK a4high-vm.yaml / a3ultra-vm.yaml: `mtu: 8896` on net-1; gpu-rdma-vpc's default."""
NET1_RANGE: Final = "192.168.64.0/18"
"""CTK a4high-vm.yaml / a3ultra-vm.yaml `net1_range`."""
RDMA_RANGE: Final = "192.168.128.0/18"
"""CTK a4high-vm.yaml / a3ultra-vm.yaml `rdma_net_range`."""
RDMA_SUBNETS: Final = 8
"""CTK `subnetworks_template.count: 8`: one per MRDMA NIC, one per GPU."""
NETWORK_PROFILE_URL: Final = (
    "https://www.googleapis.com/compute/beta/projects/{project}/global/networkProfiles/{profile}"
)
"""CTK a4high-vm.yaml `a4high-rdma-net.network_profile` (and gke-a3-ultragpu.yaml
`rdma-net.network_profile`: the same URL serves the GKE fabric)."""

ACCELERATOR_IMAGE: Final = (
    "projects/ubuntu-os-accelerator-images/global/images/"
    "ubuntu-accelerator-2204-amd64-with-nvidia-570-v20260210"
)
"""Google's accelerator-optimized Ubuntu 22.04 image with the NVIDIA 570 driver: the image CTK
a3ultra-vm.yaml pins (`instance_image: {project: ubuntu-os-accelerator-images, name:
ubuntu-accelerator-2204-amd64-with-nvidia-570-v20260210}`); Google's NCCL/gIB page needs no
DOCA-OFED driver on it (`NCCL_GIB_DOC`). CTK a4high-vm.yaml boots `ubuntu-2204-lts` and
installs `nvidia-open-570` and `cuda-toolkit-12-8` itself: the same driver branch, here
preinstalled, for both families."""
ACCELERATOR_IMAGE_SOURCE: Final = f"{CTK} {CTK_A3U_VM} vars.instance_image; {NCCL_GIB_DOC}"
BOOT_DISK_TYPE: Final = "hyperdisk-balanced"
"""CTK a4high-vm.yaml and a3ultra-vm.yaml `disk_type: hyperdisk-balanced`."""

GIB_APT_KEY_URL: Final = "https://packages.cloud.google.com/apt/doc/apt-key.gpg"
GIB_APT_KEYRING: Final = "/etc/apt/keyrings/cloud.google.gpg"
"""The Google Cloud signing key `NCCL_GIB_DOC` trusts "If you're not using an image from
Google" (the accelerator image is Canonical's, `ubuntu-os-accelerator-images`), stored
binary by `node_helper.py apt-key` as the page's `gpg --dearmor` does, where
sources.list(5) keeps operator-managed keyrings ("/etc/apt/keyrings for keyrings managed by
the system operator") for the source's `signed-by`. Without it apt-get update refuses the
repository and exits 100 ("NO_PUBKEY ..."; "E: The repository '... InRelease' is not
signed. N: Updating from such a repository can't be done securely, and is therefore
disabled by default. N: See apt-secure(8)"). CTK a4high-vm.yaml adds the same key
(`ansible.builtin.apt_key: url: https://packages.cloud.google.com/apt/doc/apt-key.gpg`)."""
GIB_APT_SOURCE: Final = f"deb [signed-by={GIB_APT_KEYRING}] https://packages.cloud.google.com/apt gpudirect-gib-apt main"
GIB_APT_LIST: Final = "/etc/apt/sources.list.d/nccl-gib.list"
GIB_PACKAGE: Final = "nccl-gib"
GIB_DIR: Final = "/usr/local/gib"
NCCL_ENV_SCRIPT: Final = f"{GIB_DIR}/scripts/set_nccl_env.sh"
NCCL_LIB_DIR: Final = f"{GIB_DIR}/lib64"
"""Google's NCCL/gIB install and enablement on a VM, verbatim (`NCCL_GIB_DOC`)."""

TORCH_REQUIREMENT: Final = "torch==2.9.1"
"""What the launcher pip-installs where the accelerator image has no torchrun: the torch of
the Deep Learning VM family the A2 VMs boot (`pytorch-2-9-...`,
`catalog.images.DLVM_IMAGE`), whose PyPI wheel for Linux x86_64 requires
`nvidia-cuda-runtime-cu12==12.8.90` and `nvidia-nccl-cu12==2.27.5` (PyPI's metadata of
torch 2.9.1, read with `pip install --dry-run --report`, 2026): CUDA 12.8, Blackwell's
floor (`catalog.gpu_families`), on the image's 570 driver."""
TORCH_PIP_PACKAGE: Final = "python3-pip"
"""Ubuntu's pip for the image's python3, which has none."""

RESIZE_REQUEST_MIN_SECONDS: Final = 600
"""A resize request's `requested_run_duration.seconds`: "Must be from 600 to 604800
inclusive" (terraform-provider-google resource_compute_resize_request.go schema); Google:
"The run duration must be between 10 minutes and 7 days"
(https://cloud.google.com/compute/docs/instance-groups/about-resize-requests-mig)."""
GCE_FLEX_START_WAIT: Final = (
    "the group's resize request asks for all node_count VMs at once and waits ACCEPTED until "
    "Dynamic Workload Scheduler finds them ('If you lack quota for the requested resources or "
    "the resources are temporarily unavailable, then the DWS persists the request until you "
    "have sufficient quota and the resources become available'; 'You don't incur charges "
    "when you create, cancel, or delete resize requests', "
    "https://cloud.google.com/compute/docs/instance-groups/about-resize-requests-mig), with "
    "no bound on the wait: `pulumi up` returns once the request is accepted, nothing bills "
    "before the VMs exist, and the run starts when they boot; the VMs bill from their "
    "creation until the MIG deletes them at the end of the requested run duration"
)
"""What a gce flex-start run may wait, in the plan's words."""
GCE_FABRIC_MACHINES: Final = ("a3-ultragpu-8g", "a4-highgpu-8g")
"""The machine types whose GPUDirect fabric the gce backend renders (`gce_fabric`)."""

Role = Literal["gvnic", "rdma"]


@dataclass(frozen=True)
class GceNetwork:
    """One extra VPC of the fabric, its subnets and what its NICs are."""

    key: str
    """Its part of the Pulumi names (`net-1`, `rdma-net`)."""
    name: str
    subnets: tuple[tuple[str, str], ...]
    """(name, primary range) of each subnet: one NIC each, in NIC order."""
    role: Role
    routing_mode: str
    """RDMA: the blueprints' `network_routing_mode: REGIONAL`; net-1: modules/network/vpc's
    `network_routing_mode` default "GLOBAL" (variables.tf)."""
    network_profile: str | None = None
    """RDMA: the zonal RoCE network profile (`<zone>-vpc-roce`)."""
    firewall: str | None = None
    """gVNIC: CTK's `<deployment>-internal-1` rule (tcp, udp, icmp from the subnet)."""

    @property
    def nic_type(self) -> str:
        return "MRDMA" if self.role == "rdma" else "GVNIC"


@dataclass(frozen=True)
class GceFabric:
    """What the gce backend renders for one family's GPUDirect fabric."""

    machine_type: str
    family: str
    networks: tuple[GceNetwork, ...]
    blueprint: str
    """The CTK VM blueprint it follows."""

    @property
    def nic_count(self) -> int:
        """NICs of a VM: the primary (the stack's network) and one per fabric subnet."""
        return 1 + sum(len(n.subnets) for n in self.networks)

    def note(self) -> str:
        """The plan's line: the machines, the fabric, what NCCL sees."""
        rdma = self.networks[-1]
        return (
            f"gpu_cluster: {self.machine_type} ({self.family}) on Compute Engine uses "
            f"GPUDirect RDMA over RoCE as {CTK} {self.blueprint} renders it: "
            f"{self.nic_count} NICs per VM, in order the stack's network (gVNIC, eth0), "
            f"{self.networks[0].name} (gVNIC, MTU {RDMA_MTU}, eth1) and "
            f"{len(rdma.subnets)} MRDMA NICs on {rdma.name} (network profile "
            f"{rdma.network_profile}, MTU {RDMA_MTU}, one subnet per GPU); boot image "
            f"{ACCELERATOR_IMAGE} ({BOOT_DISK_TYPE}); at first boot the launcher installs "
            f"{GIB_PACKAGE} from Google's apt repository '{GIB_APT_SOURCE}' and, where the "
            f"image has no torchrun, {TORCH_REQUIREMENT} with pip; every rank's NCCL gets "
            f"`source {NCCL_ENV_SCRIPT}` and {NCCL_LIB_DIR} first on LD_LIBRARY_PATH, so NCCL "
            f"loads the gIB net plugin ({NCCL_GIB_DOC}); the values are the installed "
            f"package's, not pinned by trainstack"
        )


GCE_UNRENDERED: Final[dict[str, str]] = {
    "tcpx": (
        "Cluster Toolkit builds A3 High nodes only for Slurm, on a custom image with the "
        "TCPX-patched kernel from a private Canonical PPA and the receive-data-path-manager "
        "started by Slurm's prolog"
    ),
    "tcpxo": (
        "Cluster Toolkit builds A3 Mega nodes only for Slurm, on a custom image adding "
        "gpudirect-tcpxo-apt and the rxdm receive-datapath manager started by Slurm's prolog"
    ),
}
"""Why the gce backend does not render a family's fabric: CTK's only blueprints for them are
Slurm ones: `examples/machine-learning/a3-highgpu-8g/a3high-slurm-blueprint.yaml`
(`install_tcpx_kernel.yml`: `linux-gcp-tcpx` from
`private-ppa.launchpadcontent.net/canonical-kernel-gcp-tcpx` with `tcpx_kernel_login` /
`tcpx_kernel_password`; `receive-data-path-manager` linked as
`start-rxdm.prolog_slurmd`) and `examples/machine-learning/a3-megagpu-8g/
a3mega-slurm-blueprint.yaml` (a `modules/packer/custom-image` build adding `deb ...
gpudirect-tcpxo-apt main`; `rxdm` linked as `rxdm.prolog_slurmd` / `rxdm.epilog_slurmd`).
A plain VM's startup script has no prolog to start the receive-datapath manager per job,
and no source read here shows one starting it otherwise."""


def _split(cidr: str, count: int) -> list[str]:
    # Terraform's cidrsubnet(range, ceil(log2(count)), i): the first `count` equal parts.
    net = ipaddress.ip_network(cidr)
    bits = (count - 1).bit_length()
    return [str(s) for s in list(net.subnets(prefixlen_diff=bits))[:count]]


def fabric_kind(machine_type: str) -> str:
    """The fabric of a machine type's family (`none` for A2 and CPU machines)."""
    model = MACHINES[machine_type].gpu_model
    return "none" if model is None else family_of(model).fabric


def gce_fabric(machine_type: str, deployment: str, zone: str) -> GceFabric | None:
    """The fabric the gce backend renders for `machine_type`, named as CTK's VM blueprints
    name it for a deployment; None for families without one (A2) or whose fabric it does not
    render (`GCE_UNRENDERED`)."""
    model = MACHINES[machine_type].gpu_model
    if model is None or family_of(model).fabric != "rdma":
        return None
    family = family_of(model)
    gvnic = GceNetwork(
        "net-1",
        f"{deployment}-net-1",
        ((f"{deployment}-sub-1", NET1_RANGE),),
        "gvnic",
        routing_mode="GLOBAL",
        firewall=f"{deployment}-internal-1",
    )
    rdma = GceNetwork(
        "rdma-net",
        f"{deployment}-rdma-net",
        tuple(
            (f"{deployment}-mrdma-sub-{i}", cidr)
            for i, cidr in enumerate(_split(RDMA_RANGE, RDMA_SUBNETS))
        ),
        "rdma",
        network_profile=f"{zone}-vpc-roce",
        routing_mode="REGIONAL",
    )
    blueprint = CTK_A4_VM if family.name == "A4" else CTK_A3U_VM
    return GceFabric(machine_type, family.name, (gvnic, rdma), blueprint)
