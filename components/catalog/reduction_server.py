"""What the chief and workers of a Reduction Server job need in their image, and how
trainstack builds it from a framework image.

Google's Reduction Server prerequisite for a custom container is "NCCL 2.7 or later and the
`google-reduction-server` package installed", and the one way Google shows to get the
package into an image is a Dockerfile line (`INSTALL_SOURCE`); Google's samples build such
images with Cloud Build (`CLOUD_BUILD_SAMPLE_SOURCE`). Google publishes no version of the
package, so what pins the plugin is the digest of the image it was built into: trainstack
builds one image per (base image digest, build text) with Cloud Build
(`trainstack.components.reduction_server_image`) and the job runs it by that digest.

The package is the NCCL network plugin `libnccl-net.so` (the file NCCL loads by default,
`NCCL_DEFAULT_PLUGIN_SOURCE`). Where it lands is not published for `google-reduction-server`
itself: its sibling from the same apt repository, `google-fast-socket`, installs
`/usr/lib/libnccl-net.so`, and Google says the two cannot be installed together
(`PLUGIN_PATH_SOURCE`), so the path is inferred (U). The build checks it: a build whose
package did not put the file there fails, listing the package's files, rather than
producing an image whose workers would all-reduce without the reducers.

The job leaves `NCCL_NET_PLUGIN` unset: unset, every NCCL from 2.18 to 2.30 dlopens
`libnccl-net.so` through the dynamic loader's search path, which holds `/usr/lib`
(`LOADER_SOURCE`); a path in it is taken as given only by some versions, and others look for
`libnccl-net-<path>.so` and run without the plugin, silently (`NCCL_NET_PLUGIN_SOURCE`).
Google's Reduction Server page and its PyTorch sample set no such variable
(`INSTALL_SOURCE`, `SAMPLE_ENV_SOURCE`).
"""

from __future__ import annotations

import hashlib
from typing import Final

APT_REPOSITORY: Final = "deb https://packages.cloud.google.com/apt google-fast-socket main"
APT_KEY_URL: Final = "https://packages.cloud.google.com/apt/doc/apt-key.gpg"
PACKAGE: Final = "google-reduction-server"
INSTALL_SOURCE: Final = (
    "https://cloud.google.com/vertex-ai/docs/training/distributed-training#reduction-server "
    "(stored copy docs.cloud.google.com/gemini-enterprise-agent-platform/machine-learning/"
    "training/distributed-training, Prerequisites): 'A custom container with NCCL 2.7 or "
    "later and the google-reduction-server package installed. You can install this "
    "package on a custom container image by adding the following line to your Dockerfile: "
    'RUN echo "deb https://packages.cloud.google.com/apt google-fast-socket main" | tee '
    "/etc/apt/sources.list.d/google-fast-socket.list && curl -s -L "
    "https://packages.cloud.google.com/apt/doc/apt-key.gpg | apt-key add - && apt update && "
    "apt install -y google-reduction-server'. The same lines in Google's own images: "
    "GoogleCloudPlatform/vertex-ai-samples community-content/vertex_model_garden/model_oss/"
    "tfvision/dockerfile/base.Dockerfile ('# Installs Reduction Server NCCL plugin.')"
)
CLOUD_BUILD_SAMPLE_SOURCE: Final = (
    "GoogleCloudPlatform/vertex-ai-samples notebooks/official/training/"
    "sdk_pytorch_torchrun_custom_container_training_imagenet.ipynb: a Dockerfile installing "
    "google-reduction-server on a PyTorch image, built with `gcloud builds submit --tag`, "
    "then run with a Reduction Server pool (commit cc0d791e, 2026-08-19)"
)
SAMPLE_ENV_SOURCE: Final = (
    "GoogleCloudPlatform/vertex-ai-samples notebooks/official/reduction_server/"
    "pytorch_distributed_training_reduction_server.ipynb (commit cc0d791e): the job with "
    "reduction_server_replica_count runs with ENVIRONMENT_VARIABLES = {'NCCL_DEBUG': 'INFO'} "
    "only; no file of the repository names NCCL_NET_PLUGIN"
)
FRAMEWORK_IMAGE_TOOLS: Final = ("ca-certificates", "curl", "gnupg")
"""What Google's install line uses that the framework images lack: `curl` for the key and
`gnupg` for `apt-key add` (the pytorch/pytorch image's own apt installs are ca-certificates,
libjpeg-dev and libpng-dev: pytorch/pytorch Dockerfile, stage official, stored version)."""

PLUGIN_PATH: Final = "/usr/lib/libnccl-net.so"
"""Where `google-reduction-server` puts the plugin (inferred, checked by every build): in a
folder the loader searches, so NCCL finds it by its default name (`LOADER_SOURCE`)."""
PLUGIN_PATH_SOURCE: Final = (
    "google/nccl-fastsocket BUILD (commit b3ff1c6f, 2023-11-15): pkg_deb google-fast-socket "
    "from pkg_tar 'lib' with srcs ':libnccl-net.so' and package_dir '/usr/lib/', plus an "
    "'activate-noawait ldconfig' trigger; GoogleCloudPlatform/vertex-ai-samples notebooks/"
    "official/training/sdk_pytorch_torchrun_custom_container_training_imagenet.ipynb: "
    "'google-fast-socket is previously installed in GPU dlenv containers only and it is not "
    "compatible with google-reduction-server' (it removes one before installing the other). "
    "That google-reduction-server's plugin is that same file is inferred (U); the build "
    "checks it"
)
NCCL_NET_PLUGIN_ENV: Final = "NCCL_NET_PLUGIN"
"""Left unset on the chief and workers (module docstring)."""
NCCL_DEFAULT_PLUGIN_SOURCE: Final = (
    "NVIDIA/nccl plugins/net/README.md: 'NCCL network plugins come as a shared library "
    "called libnccl-net.so ... When NCCL is initialized, it will look for a libnccl-net.so "
    "library and dynamically load it'"
)
NCCL_NET_PLUGIN_SOURCE: Final = (
    "NVIDIA/nccl at each tag: unset, NCCL dlopens 'libnccl-net.so' (v2.18.3-1 to v2.20.5-1 "
    "src/net.cc ncclNetPluginInit; v2.21.5-1 to v2.25.1-1 src/net.cc openNetPluginLib; "
    "v2.26.2-1 on src/plugin/plugin_open.cc openPluginLib, '%s.so' of 'libnccl-net', and "
    "from v2.27.3-1 src/plugin/net.cc initPluginLibsOnceFunc's defaultNetPlugin "
    "'libnccl-net.so'). Set, v2.18 to v2.20 dlopen only 'libnccl-net-<value>.so'; v2.21.5 to "
    "v2.26 the value as given, then that; v2.27.3 the value as given only when it starts "
    "with 'lib' and ends with '.so' (a path does not), else 'libnccl-net-<value>.so'; "
    "v2.27.5 on the value as given first again. A name not found is logged at INFO and NCCL "
    "goes on with its internal transports"
)
LOADER_SOURCE: Final = (
    "dlopen(3): a filename with no slash is searched for as ld.so(8) says: LD_LIBRARY_PATH, "
    "/etc/ld.so.cache, then 'In the default path /lib, and then /usr/lib'; Debian's and "
    "Ubuntu's multiarch loader lists /lib/x86_64-linux-gnu, /usr/lib/x86_64-linux-gnu, /lib "
    "and /usr/lib as its system search path (`ld.so --help`, Debian GLIBC 2.36); the "
    "framework images are Ubuntu-based and the package is a .deb. A libnccl-net.so in a "
    "folder on LD_LIBRARY_PATH would be found first: the pod setup script puts a mounted "
    "/usr/local/nvidia/lib64 there (components/kubernetes_pod.sh); that the host Vertex "
    "mounts there holds none is not checked (U)"
)

BUILDER_IMAGE: Final = "gcr.io/cloud-builders/docker"
"""The Cloud Build step that runs `docker build` (https://cloud.google.com/build/docs/
building/build-containers: `name: 'gcr.io/cloud-builders/docker'`)."""
BUILD_TIMEOUT_S: Final = 3600
"""Cloud Build's own default (`Build.timeout`: 'Default time is 60 minutes', cloudbuild.v1
discovery); sent explicitly so the provider's wait is bounded by the same number."""


def plugin_dockerfile(base_image: str) -> str:
    """The Dockerfile of the plugin image: `base_image` (by digest), Google's install line
    with `apt-get` for `apt` (the scripting interface; same repository and package) after
    the tools it needs, then the check that the plugin is where NCCL finds it by default
    (`PLUGIN_PATH`). No `$` anywhere: Cloud Build substitutes `$NAME` in a build's
    arguments."""
    tools = " ".join(FRAMEWORK_IMAGE_TOOLS)
    return (
        f"FROM {base_image}\n"
        f"RUN apt-get update && apt-get install -y --no-install-recommends {tools} && \\\n"
        f'    echo "{APT_REPOSITORY}" | tee /etc/apt/sources.list.d/google-fast-socket.list '
        "&& \\\n"
        f"    curl -s -L {APT_KEY_URL} | apt-key add - && \\\n"
        f"    apt-get update && apt-get install -y {PACKAGE} && \\\n"
        "    rm -rf /var/lib/apt/lists/*\n"
        f"RUN test -f {PLUGIN_PATH} || {{ echo '{PACKAGE} did not install {PLUGIN_PATH}, "
        f"where NCCL finds libnccl-net.so by default; its files:'; dpkg -L {PACKAGE}; "
        "exit 1; }\n"
    )


def plugin_image_tag(dockerfile: str) -> str:
    """The image's tag: a hash of its Dockerfile, which names the base image by digest, so a
    new base or a new build text is a new tag (and a new build), the same ones the same."""
    return "rs-" + hashlib.sha256(dockerfile.encode()).hexdigest()[:16]


def plugin_image_name(base_image: str) -> str:
    """The built image's name in the stack's repository: the base's last path part with
    `-reduction-server` (`pytorch-reduction-server` for `.../pytorch/pytorch@sha256:...`)."""
    name = base_image.split("@", 1)[0].rsplit("/", 1)[-1].split(":", 1)[0]
    return f"{name}-reduction-server"
