"""Your own code on a TPU slice: a framework it imports that neither the runtime ships nor the
requirements name is refused before anything is created (it could not start), and the plan
names the launcher it chose and the variables that launcher gives the code."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from trainstack.components.code_frameworks import imported_modules
from trainstack.infra.code_plan import code_rows, code_summary
from trainstack.infra.config import ConfigError, load_stack_config

TPU = {
    "gcp:project": "p",
    "gcp:region": "us-central2",
    "trainstack:tpu": {
        "accelerator_type": "v4-32",
        "zone": "us-central2-b",
        "provisioning": "spot",
    },
}
TORCH_VALID = (
    "valid: trainer.requirements naming torch and torch_xla[tpu] at the same version "
    "(e.g. torch~=2.5.0, torch_xla[tpu]~=2.5.0)"
)
RUN_CONTRACT = [
    "TRAINSTACK_CHECKPOINT_DIR",
    "TRAINSTACK_DATA_DIR",
    "TRAINSTACK_OUTPUT_DIR",
    "TRAINSTACK_RUN_NAME",
    "TRAINSTACK_NODE_RANK",
    "TRAINSTACK_NUM_NODES",
    "TRAINSTACK_ACCELERATORS_PER_NODE",
    "TRAINSTACK_COORDINATOR",
]


def _code(folder: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return folder


def _config(source: Path, tpu: dict[str, Any] | None = None, **trainer: Any) -> dict[str, Any]:
    section = {**TPU["trainstack:tpu"], **(tpu or {})}
    return {
        **TPU,
        "trainstack:tpu": section,
        "trainstack:trainer": {
            "source": str(source),
            "entrypoint": ["python", "train.py"],
            **trainer,
        },
    }


def _errors(config: dict[str, Any]) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        load_stack_config(config)
    return caught.value.errors


TORCH_SCRIPT = "import os\n\nimport torch\nfrom torch import nn\n"


def test_torch_code_without_requirements_cannot_start_on_the_base_runtime(tmp_path: Path) -> None:
    code = _code(tmp_path, {"train.py": TORCH_SCRIPT})
    assert _errors(_config(code)) == [
        "trainer.requirements: your code imports torch (train.py:3), which TPU runtime "
        "'tpu-ubuntu2204-base' does not ship and there is no trainer.requirements, so it "
        f"cannot start; {TORCH_VALID}"
    ]


def test_requirements_that_do_not_name_the_framework_are_refused(tmp_path: Path) -> None:
    code = _code(tmp_path, {"train.py": TORCH_SCRIPT, "req.txt": "fsspec>=2024.6\ntorchvision\n"})
    assert _errors(_config(code, requirements="req.txt")) == [
        "trainer.requirements: your code imports torch (train.py:3), which TPU runtime "
        "'tpu-ubuntu2204-base' does not ship and req.txt does not name it, so it cannot "
        f"start; {TORCH_VALID}"
    ]


def test_torch_xla_needs_torch_named_too(tmp_path: Path) -> None:
    # torch-xla does not depend on torch (PyPI requires_dist), so naming it alone is not enough.
    code = _code(
        tmp_path,
        {"train.py": "import torch_xla\nimport torch\n", "req.txt": "torch_xla[tpu]~=2.5.0\n"},
    )
    assert _errors(_config(code, requirements="req.txt")) == [
        "trainer.requirements: your code imports torch (train.py:2), which TPU runtime "
        "'tpu-ubuntu2204-base' does not ship and req.txt does not name it, so it cannot "
        f"start; {TORCH_VALID}"
    ]


def test_two_missing_frameworks_are_named_as_them_and_advised_once(tmp_path: Path) -> None:
    code = _code(tmp_path, {"train.py": "import torch_xla\nimport torch\n", "req.txt": "fsspec\n"})
    assert _errors(_config(code, requirements="req.txt")) == [
        "trainer.requirements: your code imports torch (train.py:2), torch_xla (train.py:1), "
        "which TPU runtime 'tpu-ubuntu2204-base' does not ship and req.txt does not name them, "
        f"so it cannot start; {TORCH_VALID}"
    ]


@pytest.mark.parametrize(
    "requirements",
    # torch alone is refused (test_user_code_components: torch without torch_xla).
    ["torch~=2.5.0\nTorch_XLA[tpu]~=2.5.0\n", "torch >= 2.1  # a comment\ntorch-xla[tpu]>=2.1\n"],
)
def test_torch_named_in_the_requirements_plans(tmp_path: Path, requirements: str) -> None:
    code = _code(tmp_path, {"train.py": TORCH_SCRIPT, "req.txt": requirements})
    cfg = load_stack_config(_config(code, requirements="req.txt"))
    assert cfg.trainer.requirements == "req.txt"


def test_a_module_of_the_source_that_imports_the_framework_is_followed(tmp_path: Path) -> None:
    code = _code(
        tmp_path,
        {
            "train.py": "from lib.model import Net\nimport helpers\n",
            "lib/__init__.py": "",
            "lib/model.py": "from . import layers\n",
            "lib/layers.py": "import json\n\nimport jax.numpy as jnp\n",
            "helpers.py": "import numpy\n",
            "tools/convert.py": "import tensorflow\n",  # not imported by the entrypoint
        },
    )
    assert imported_modules(code, ["python", "train.py"]) == {
        "jax": "lib/layers.py:3",
        "json": "lib/layers.py:1",
        "numpy": "helpers.py:1",
    }
    assert _errors(_config(code)) == [
        "trainer.requirements: your code imports jax (lib/layers.py:3), which TPU runtime "
        "'tpu-ubuntu2204-base' does not ship and there is no trainer.requirements, so it "
        "cannot start; valid: trainer.requirements naming jax[tpu]"
    ]


def test_optional_imports_and_type_checking_imports_are_not_needed(tmp_path: Path) -> None:
    script = (
        "from typing import TYPE_CHECKING\n"
        "try:\n    import torch_xla\nexcept ImportError:\n    torch_xla = None\n"
        "if TYPE_CHECKING:\n    import torch\n"
        "import jax\n"
    )
    code = _code(tmp_path, {"train.py": script, "req.txt": "jax[tpu]>=0.4.30\n"})
    assert imported_modules(code, ["python", "train.py"]) == {
        "typing": "train.py:1",
        "jax": "train.py:8",
    }
    assert load_stack_config(_config(code, requirements="req.txt")).tpu is not None


def test_tensorflow_is_shipped_by_a_tensorflow_runtime_only(tmp_path: Path) -> None:
    code = _code(tmp_path, {"train.py": "import tensorflow as tf\n"})
    tf_runtime = {"runtime_version": "tpu-vm-tf-2.16.0-pod-pjrt"}
    assert load_stack_config(_config(code, tf_runtime)).tpu is not None
    assert _errors(_config(code)) == [
        "trainer.requirements: your code imports tensorflow (train.py:1), which TPU runtime "
        "'tpu-ubuntu2204-base' does not ship and there is no trainer.requirements, so it "
        "cannot start; valid: trainer.requirements naming tensorflow-tpu, or "
        "tpu.runtime_version: a tpu-vm-tf-X.Y.Z runtime, which ships it"
    ]


def test_an_entrypoint_that_is_no_python_file_is_not_read(tmp_path: Path) -> None:
    code = _code(tmp_path, {"run.sh": "#!/bin/sh\npython -c 'import torch'\n"})
    config = _config(code)
    config["trainstack:trainer"]["entrypoint"] = ["./run.sh"]
    assert imported_modules(code, ["./run.sh"]) == {}
    assert load_stack_config(config).tpu is not None


def test_python_dash_m_entrypoint_is_read(tmp_path: Path) -> None:
    code = _code(tmp_path, {"pkg/__init__.py": "", "pkg/train.py": "import torch\n"})
    assert imported_modules(code, ["python", "-m", "pkg.train"]) == {"torch": "pkg/train.py:1"}


def test_the_plan_names_the_launcher_and_what_it_gives_the_code(tmp_path: Path) -> None:
    code = _code(tmp_path, {"train.py": "import jax\n", "req.txt": "jax[tpu]\n"})
    summary = code_summary(load_stack_config(_config(code, requirements="req.txt")))
    assert summary is not None
    assert (summary["launcher"], summary["launcher_from"], summary["launcher_env"]) == (
        "node",
        "the default on tpu",
        [*RUN_CONTRACT, "TPU_WORKER_ID", "TPU_WORKER_HOSTNAMES"],
    )
    rows = dict(code_rows(summary))
    assert rows["launcher"] == "node (the default on tpu)"
    assert rows["launcher env"] == ", ".join(
        [*RUN_CONTRACT, "TPU_WORKER_ID", "TPU_WORKER_HOSTNAMES"]
    )


def test_launcher_node_off_a_tpu_gives_jax_and_tf_their_variables(tmp_path: Path) -> None:
    code = _code(tmp_path, {"train.py": "import jax\n"})
    config = {
        "trainstack:local": {"workers": 2},
        "trainstack:trainer": {
            "source": str(code),
            "entrypoint": ["python", "train.py"],
            "launcher": "node",
        },
    }
    summary = code_summary(load_stack_config(config))
    assert summary is not None
    assert (summary["launcher_from"], summary["launcher_env"]) == (
        "trainer.launcher",
        [
            *RUN_CONTRACT,
            "JAX_COORDINATOR_ADDRESS",
            "OMPI_MCA_orte_hnp_uri",
            "OMPI_COMM_WORLD_SIZE",
            "OMPI_COMM_WORLD_RANK",
            "OMPI_COMM_WORLD_LOCAL_RANK",
            "TF_CONFIG",
        ],
    )


def test_a_long_requirement_is_cut_in_the_text_plan_and_whole_in_json(tmp_path: Path) -> None:
    """A direct URL of thousands of characters was printed whole in the plan's table."""
    url = "pkg @ https://example.com/" + "a" * 5000 + ".whl"
    code = _code(tmp_path, {"train.py": "import jax\n", "req.txt": f"jax[tpu]\n{url}\n"})
    summary = code_summary(load_stack_config(_config(code, requirements="req.txt")))
    assert summary is not None
    assert summary["requirements"] == ["jax[tpu]", url]
    assert dict(code_rows(summary))["requirements"] == (
        f"jax[tpu], {url[:80]}... (5030 characters)"
    )
