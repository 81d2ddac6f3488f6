"""The container command that installs trainstack's code package into an image's own Python
and then execs its args (`kubernetes_pod.sh`): every GKE training pod, and every Vertex
replica that runs your code in your image (`containerSpec`), so your image needs no
trainstack inside and a change to `trainer.source` reaches the job as a new package."""

from __future__ import annotations

from pathlib import Path
from typing import Final

POD_SCRIPT: Final = (Path(__file__).parent / "kubernetes_pod.sh").read_text()
"""The container command's script (`bash -c POD_SCRIPT trainstack-pod ARGS...`)."""
POD_PYTHON: Final = "python3"
"""The image's interpreter the package goes into: `python3`, which Python images and
Debian/Ubuntu-based ones all have (`python` is not always there)."""
PACKAGE_URI_ENV: Final = "TRAINSTACK_PACKAGE_URI"
"""The gs:// URI of the code package the script installs."""


def pod_command() -> list[str]:
    """The container's command: `POD_SCRIPT` under bash, which execs the args."""
    return ["bash", "-c", POD_SCRIPT, "trainstack-pod"]
