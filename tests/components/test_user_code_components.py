"""Your own code through the components (`trainstack.components.UserCode`): a compute
component given `code` runs it with the run contract's folders, and the cross-checks a stack
config makes fire in a program under the mocks with the same line (the key named as the
program gives it: `code.` / `A100Cluster.zone` for `trainer.` / `gpu_cluster.zone`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from trainstack.components import A100Cluster, TpuPodSlice, TrainingNetwork, UserCode
from trainstack.components._args import ArgsError
from trainstack.infra.config import ConfigError, load_stack_config
from trainstack.infra.mocks import run_program

TORCH_SCRIPT = "import os\n\nimport torch\n"
STACK_TPU = {"accelerator_type": "v4-32", "zone": "us-central2-b", "provisioning": "spot"}


def _source(tmp_path: Path, script: str = TORCH_SCRIPT) -> Path:
    (tmp_path / "train.py").write_text(script)
    return tmp_path


def _slice_args(code: UserCode, **overrides: Any) -> dict[str, Any]:
    return {
        "project": "p",
        "zone": "us-central2-b",
        "deployment_name": "exp",
        "accelerator_type": "v4-32",
        "runtime_version": "tpu-ubuntu2204-base",
        "provisioning": "spot",
        "network_self_link": "projects/p/global/networks/n",
        "subnetwork_self_link": "projects/p/regions/us-central2/subnetworks/s",
        "service_account_email": "sa@p.iam.gserviceaccount.com",
        "package_uri": "gs://staging/code/pkg.tar.gz",
        "code": code,
        "checkpoint_url": "gs://ckpt",
        "data_url": "gs://data",
        **overrides,
    }


def _stack_errors(config: dict[str, Any]) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        load_stack_config(config)
    return caught.value.errors


def _program_errors(build: Any) -> list[str]:
    with pytest.raises(ArgsError) as caught:
        run_program(build)
    return caught.value.errors


def test_a_slice_runs_your_code_with_the_run_contract(tmp_path: Path) -> None:
    source = _source(tmp_path, "import jax\n")
    (source / "requirements.txt").write_text("jax[tpu]\n")
    code = UserCode(
        source=str(source),
        entrypoint=["python", "train.py"],
        requirements="requirements.txt",
        env={"WANDB_MODE": "offline"},
    )

    def program() -> dict[str, Any]:
        tpu = TpuPodSlice("exp-tpu", _slice_args(code))  # type: ignore[arg-type]
        return {"script": tpu.startup_script, "ckpt": tpu.checkpoint_dir}

    run = run_program(program)
    # The node launcher's arguments, as a stack's own code gets them (compose.user_code_node_args).
    node_args = [
        "--launcher=node",
        "--env=TRAINSTACK_CHECKPOINT_DIR=gs://ckpt/checkpoints/exp",
        "--env=TRAINSTACK_DATA_DIR=gs://data",
        "--env=TRAINSTACK_OUTPUT_DIR=gs://ckpt/outputs/exp",
        "--env=TRAINSTACK_RUN_NAME=exp",
        "--env=WANDB_MODE=offline",
        "--",
        "python",
        "train.py",
    ]
    plain = {k: v for k, v in _slice_args(code).items() if k not in ("code", "data_url")}

    def by_hand() -> dict[str, Any]:
        args = {**plain, "node_args": node_args, "checkpoint_dir": "gs://ckpt/checkpoints"}
        tpu = TpuPodSlice("exp-tpu", args)  # type: ignore[arg-type]
        return {"script": tpu.startup_script, "ckpt": tpu.checkpoint_dir}

    assert run.outputs == run_program(by_hand).outputs
    # The folder your code is given (its TRAINSTACK_CHECKPOINT_DIR), which status reads.
    assert run.outputs["ckpt"] == "gs://ckpt/checkpoints/exp"


def test_torch_code_on_a_base_runtime_is_refused_as_in_a_stack(tmp_path: Path) -> None:
    source = _source(tmp_path)
    stack = _stack_errors(
        {
            "gcp:project": "p",
            "gcp:region": "us-central2",
            "trainstack:tpu": STACK_TPU,
            "trainstack:trainer": {"source": str(source), "entrypoint": ["python", "train.py"]},
        }
    )
    code = UserCode(source=str(source), entrypoint=["python", "train.py"])
    program = _program_errors(lambda: TpuPodSlice("exp-tpu", _slice_args(code)))  # type: ignore[arg-type]
    line = (
        "{k}requirements: your code imports torch (train.py:3), which TPU runtime "
        "'tpu-ubuntu2204-base' does not ship and there is no {k}requirements, so it cannot "
        "start; valid: {k}requirements naming torch and torch_xla[tpu] at the same version "
        "(e.g. torch~=2.5.0, torch_xla[tpu]~=2.5.0)"
    )
    assert stack == [line.format(k="trainer.")]
    assert program == ["TpuPodSlice." + line.format(k="code.")]


def test_a_launcher_the_slice_does_not_run_is_refused_as_in_a_stack(tmp_path: Path) -> None:
    source = _source(tmp_path, "import jax\n")
    trainer = {"source": str(source), "entrypoint": ["python", "train.py"], "launcher": "torchrun"}
    stack = _stack_errors(
        {
            "gcp:project": "p",
            "gcp:region": "us-central2",
            "trainstack:tpu": STACK_TPU,
            "trainstack:trainer": trainer,
        }
    )
    code = UserCode(**trainer)
    program = _program_errors(lambda: TpuPodSlice("exp-tpu", _slice_args(code)))  # type: ignore[arg-type]
    line = "{k}launcher: 'torchrun' is not allowed on a tpu target; valid: node"
    assert stack == [line.format(k="trainer.")]
    assert program == ["TpuPodSlice." + line.format(k="code.")]


def _cluster(zone: str, network: Any, code: UserCode | None = None) -> dict[str, Any]:
    training: dict[str, Any] = {
        "package_uri": "gs://staging/pkg.tar.gz",
        "checkpoint_url": "gs://ckpt",
    }
    if code is not None:
        training |= {"code": code, "data_url": "gs://data"}
    return {
        "project": "p",
        "zone": zone,
        "deployment_name": "exp",
        "backend": "gke",
        "machine_type": "a2-highgpu-1g",
        "node_count": 1,
        "network_self_link": network.network_self_link,
        "subnetwork_self_link": network.subnetwork_self_link,
        "node_tag": network.node_tag,
        "service_account_email": "sa@p.iam.gserviceaccount.com",
        "training": training,
    }


def test_a_zone_outside_the_subnets_region_is_refused_as_in_a_stack() -> None:
    stack = _stack_errors(
        {
            "gcp:project": "p",
            "gcp:region": "us-central1",
            "trainstack:gpu_cluster": {
                "backend": "gke",
                "machine_type": "a2-highgpu-1g",
                "node_count": 1,
                "zone": "europe-west4-a",
            },
        }
    )

    def program() -> None:
        net = TrainingNetwork(
            "net", {"project": "p", "region": "us-central1", "deployment_name": "exp"}
        )
        A100Cluster("exp-gpu", _cluster("europe-west4-a", net))  # type: ignore[arg-type]

    line = "'europe-west4-a' is not in {r} 'us-central1'; valid: a zone named us-central1-<zone>"
    assert stack == ["gpu_cluster.zone: " + line.format(r="gcp:region")]
    assert _program_errors(program) == [
        "A100Cluster.zone: " + line.format(r="the region of subnetwork_self_link")
    ]


def test_a_gke_cluster_runs_your_code_in_your_image(tmp_path: Path) -> None:
    code = UserCode(image="us-docker.pkg.dev/p/r/train:1", entrypoint=["python", "train.py"])

    def program() -> dict[str, Any]:
        net = TrainingNetwork(
            "net", {"project": "p", "region": "us-central1", "deployment_name": "exp"}
        )
        A100Cluster("exp-gpu", _cluster("us-central1-a", net, code))  # type: ignore[arg-type]
        return {}

    run = run_program(program)
    jobs = [r for r in run.resources if r.type == "kubernetes:batch/v1:Job"]
    assert len(jobs) == 1
    container = jobs[0].inputs["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == "us-docker.pkg.dev/p/r/train:1"
    args = " ".join(container.get("args", []) + container.get("command", []))
    assert args.count("--env=TRAINSTACK_DATA_DIR=gs://data") == 1
    assert args.count("--launcher=torchrun") == 1


def test_a_slice_zone_outside_the_subnets_region_is_refused_as_in_a_stack(tmp_path: Path) -> None:
    source = _source(tmp_path, "import jax\n")
    (source / "requirements.txt").write_text("jax[tpu]\n")
    trainer = {
        "source": str(source),
        "entrypoint": ["python", "train.py"],
        "requirements": "requirements.txt",
    }
    stack = _stack_errors(
        {
            "gcp:project": "p",
            "gcp:region": "us-central1",
            "trainstack:tpu": {"accelerator_type": "v5litepod-16", "zone": "europe-west4-b"},
            "trainstack:trainer": trainer,
        }
    )

    def program() -> None:
        net = TrainingNetwork(
            "net", {"project": "p", "region": "us-central1", "deployment_name": "exp"}
        )
        args = _slice_args(
            UserCode(**trainer),
            zone="europe-west4-b",
            accelerator_type="v5litepod-16",
            runtime_version="v2-alpha-tpuv5-lite",
            subnetwork_self_link=net.subnetwork_self_link,
        )
        TpuPodSlice("exp-tpu", args)  # type: ignore[arg-type]

    line = "'europe-west4-b' is not in {r} 'us-central1'; valid: a zone named us-central1-<zone>"
    assert stack == ["tpu.zone: " + line.format(r="gcp:region")]
    assert _program_errors(program) == [
        "TpuPodSlice.zone: " + line.format(r="the region of subnetwork_self_link")
    ]


def test_a_slice_given_the_package_of_other_code_is_one_line(tmp_path: Path) -> None:
    from trainstack.components import TrainerPackage

    jax_code, torch_code = tmp_path / "jax", tmp_path / "torch"
    for folder, script in ((jax_code, "import jax\n"), (torch_code, "import torch\n")):
        folder.mkdir()
        _source(folder, script)
        (folder / "requirements.txt").write_text("jax[tpu]\n")
    code = UserCode(
        source=str(jax_code), entrypoint=["python", "train.py"], requirements="requirements.txt"
    )
    other = code.model_copy(update={"source": str(torch_code)})

    def program(package_code: UserCode) -> None:
        build = str(tmp_path / "build")
        package = TrainerPackage(
            "pkg", {"staging_bucket": "staging", "code": package_code, "build_dir": build}
        )
        args = _slice_args(code, package_uri=package.uri, package=package)
        TpuPodSlice("exp-tpu", args)  # type: ignore[arg-type]

    run_program(lambda: program(code))
    assert _program_errors(lambda: program(other)) == [
        f"TpuPodSlice.package: built from {torch_code}, not code.source {str(jax_code)!r}; "
        "valid: the TrainerPackage given the same code"
    ]


def test_torch_without_torch_xla_on_a_slice_is_refused_as_in_a_stack(tmp_path: Path) -> None:
    source = _source(tmp_path)
    (source / "requirements.txt").write_text("torch~=2.5.0\n")
    trainer = {
        "source": str(source),
        "entrypoint": ["python", "train.py"],
        "requirements": "requirements.txt",
    }
    stack = _stack_errors(
        {
            "gcp:project": "p",
            "gcp:region": "us-central2",
            "trainstack:tpu": STACK_TPU,
            "trainstack:trainer": trainer,
        }
    )
    code = UserCode(**trainer)
    program = _program_errors(lambda: TpuPodSlice("exp-tpu", _slice_args(code)))  # type: ignore[arg-type]
    line = (
        "{k}requirements: your code imports torch (train.py:3), and requirements.txt names "
        "torch but not torch_xla, without which it does not use the TPU of runtime "
        "'tpu-ubuntu2204-base'; valid: {k}requirements naming torch and torch_xla[tpu] at the "
        "same version (e.g. torch~=2.5.0, torch_xla[tpu]~=2.5.0)"
    )
    assert stack == [line.format(k="trainer.")]
    assert program == ["TpuPodSlice." + line.format(k="code.")]


def test_a_missing_source_folder_is_one_line_before_any_file_is_read(tmp_path: Path) -> None:
    from trainstack.components import TrainerPackage

    missing = tmp_path / "train"
    code = UserCode(
        source=str(missing), entrypoint=["python", "train.py"], requirements="requirements.txt"
    )

    def program() -> None:
        TrainerPackage("pkg", {"staging_bucket": "staging", "code": code})

    assert _program_errors(program) == [
        f"TrainerPackage.code.source: {str(missing)!r} is not a folder ({missing}); valid: a "
        "folder relative to the project root, or an absolute path"
    ]


def test_a_global_batch_the_nodes_cannot_split_is_refused_as_in_a_stack() -> None:
    gke = {"backend": "gke", "machine_type": "a2-highgpu-8g", "node_count": 2}
    stack = _stack_errors(
        {
            "gcp:project": "p",
            "gcp:region": "us-central1",
            "trainstack:gpu_cluster": {**gke, "zone": "us-central1-a"},
            "trainstack:trainer": {"global_batch_size": 250},
        }
    )

    def program() -> None:
        net = TrainingNetwork(
            "net", {"project": "p", "region": "us-central1", "deployment_name": "exp"}
        )
        args = {**_cluster("us-central1-a", net), **gke}
        args["training"]["trainer_args"] = ["--steps=10", "--global_batch_size=250"]
        A100Cluster("exp-gpu", args)  # type: ignore[arg-type]

    line = (
        "{k}global_batch_size: 250 is not divisible by the world size 16 (2 machines x 8 GPUs); "
        "valid: 240 or 256"
    )
    assert stack == [line.format(k="trainer.")]
    assert _program_errors(program) == ["A100Cluster." + line.format(k="training.trainer_args --")]


def test_a_global_batch_the_slice_cannot_split_is_refused_as_in_a_stack() -> None:
    trainer = {"framework": "tensorflow", "strategy": "tpu", "global_batch_size": 100}
    stack = _stack_errors(
        {
            "gcp:project": "p",
            "gcp:region": "us-central2",
            "trainstack:tpu": {**STACK_TPU, "runtime_version": "tpu-vm-tf-2.16.0-pod-pjrt"},
            "trainstack:trainer": {**trainer, "grad_accum_steps": 2},
        }
    )
    flags = [f"--{k}={v}" for k, v in trainer.items()] + ["--grad_accum_steps=2"]
    args = {
        k: v
        for k, v in _slice_args(None, runtime_version="tpu-vm-tf-2.16.0-pod-pjrt").items()  # type: ignore[arg-type]
        if k not in ("code", "checkpoint_url", "data_url")
    }
    args |= {"checkpoint_dir": "gs://ckpt/checkpoints", "trainer_args": flags}

    def build() -> None:
        TpuPodSlice("exp-tpu", args)  # type: ignore[arg-type]

    program = _program_errors(build)
    line = (
        "{k}global_batch_size: 100 is not divisible by the world size 16 (TPUStrategy on "
        "worker 0 drives the 16 chips of v4-32) x {k}grad_accum_steps 2 = 32; valid: 96 or 128"
    )
    assert stack == [line.format(k="trainer.")]
    assert program == ["TpuPodSlice." + line.format(k="trainer_args --")]


def test_an_image_on_the_gce_backend_names_the_backend_and_gke(tmp_path: Path) -> None:
    # gpu_cluster runs images on gke: the line names the backend that runs none, and gke.
    code = UserCode(image="us-docker.pkg.dev/p/r/train:1", entrypoint=["python", "train.py"])

    def program() -> None:
        net = TrainingNetwork(
            "net", {"project": "p", "region": "us-central1", "deployment_name": "exp"}
        )
        args = _cluster("us-central1-a", net, code) | {"backend": "gce"}
        A100Cluster("exp-gpu", args)  # type: ignore[arg-type]

    assert _program_errors(program) == [
        "A100Cluster.training.code.image: not supported on backend gce (it runs no container); "
        "valid: training.code.source, or backend gke"
    ]


def test_a_secret_looking_env_in_a_program_offers_secret_env_not_stack_config(
    tmp_path: Path,
) -> None:
    from trainstack.components import TrainerPackage

    code = UserCode(
        source=str(_source(tmp_path)), entrypoint=["python", "train.py"], env={"HF_TOKEN": "hf"}
    )

    def program() -> None:
        TrainerPackage("pkg", {"staging_bucket": "staging", "code": code})

    # A program reads no `trainstack:trainer.env` config: UserCode's secret_env is the way.
    assert _program_errors(program) == [
        "TrainerPackage.code.env.HF_TOKEN: looks like a secret, and env values are stored in "
        "plain text; valid: code.secret_env.HF_TOKEN: projects/P/secrets/NAME "
        "(UserCode(secret_env={'HF_TOKEN': 'projects/P/secrets/NAME'}))"
    ]


def test_a_link_outside_code_source_names_code_source(tmp_path: Path) -> None:
    from trainstack.components import TrainerPackage

    (tmp_path / "train").mkdir()
    source = _source(tmp_path / "train")
    outside = tmp_path / "secrets.txt"
    outside.write_text("token\n")
    (source / "leak.txt").symlink_to(outside)
    code = UserCode(source=str(source), entrypoint=["python", "train.py"])

    def program() -> None:
        TrainerPackage("pkg", {"staging_bucket": "staging", "code": code})

    assert _program_errors(program) == [
        f"TrainerPackage.code.source: link 'leak.txt' points to '{outside}', outside the "
        f"folder ({source}); valid: a link to a file inside the folder, a copy of it, or "
        f"'leak.txt' in {source}/.gcloudignore to leave it out"
    ]


def test_an_unknown_user_code_key_lists_the_keys_as_a_component_does() -> None:
    with pytest.raises(ArgsError) as caught:
        UserCode(entrypnt=["python", "train.py"], foo=1)  # type: ignore[call-arg]
    assert caught.value.errors == [
        "UserCode.entrypoint: field required; valid: a command as a list of strings, e.g. "
        "['python', 'train.py']",
        "UserCode.entrypnt: unknown key; did you mean `entrypoint`? valid: source, image, "
        "requirements, entrypoint, launcher, env, secret_env",
        "UserCode.foo: unknown key; valid: source, image, requirements, entrypoint, launcher, "
        "env, secret_env",
    ]
