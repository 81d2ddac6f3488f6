"""`trainstack:trainer` with your own code: each bad input through `trainstack plan
--config-file` exits 2 with its exact message; a good one plans what will run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from trainstack.infra.cli import app
from trainstack.infra.plan_diff import plan_diff

runner = CliRunner()

LOCAL = {"trainstack:local": {"workers": 2}}
TPU = {
    "gcp:project": "p",
    "gcp:region": "us-central2",
    "trainstack:tpu": {
        "accelerator_type": "v4-32",
        "zone": "us-central2-b",
        "runtime_version": "tpu-vm-tf-2.16.0-pod-pjrt",
        "provisioning": "spot",
    },
}
GKE = {
    "gcp:project": "p",
    "gcp:region": "us-central1",
    "trainstack:gpu_cluster": {
        "backend": "gke",
        "machine_type": "a2-highgpu-8g",
        "node_count": 2,
        "zone": "us-central1-a",
    },
}
RUN = ["python", "train.py"]
LOCAL_NEEDS_SOURCE = (
    "trainer.source: required with trainer.entrypoint; valid: a folder with your code, or "
    "trainer.image on tpu, gpu_cluster, vertex"
)


@pytest.fixture
def code(tmp_path: Path) -> Path:
    folder = tmp_path / "code"
    folder.mkdir()
    (folder / "train.py").write_text("print('hi')\n")
    (folder / "requirements.txt").write_text("# pinned\nnumpy>=1.26  # arrays\n\n")
    return folder


def _errors(tmp_path: Path, config: dict[str, Any]) -> list[str]:
    path = tmp_path / "Pulumi.mine.yaml"
    path.write_text(yaml.safe_dump({"config": config}))
    result = runner.invoke(app, ["plan", "--config-file", str(path)])
    assert result.exit_code == 2, result.output
    # One `error:` line per problem, each naming the stack; the problems themselves are
    # compared exactly by the callers.
    lines = result.stderr.splitlines()
    errors = [line.removeprefix("error: stack 'mine': ") for line in lines]
    assert lines == [f"error: stack 'mine': {e}" for e in errors]
    return errors


CASES: list[tuple[str, dict[str, Any], dict[str, Any], list[str]]] = [
    (
        "source-missing",
        LOCAL,
        {"source": "/nonexistent/code", "entrypoint": RUN},
        [
            "trainer.source: '/nonexistent/code' is not a folder (/nonexistent/code); valid: a "
            "folder relative to the project root, or an absolute path"
        ],
    ),
    (
        "entrypoint-file-missing",
        LOCAL,
        {"source": "{code}", "entrypoint": ["python", "missing.py"]},
        [
            "trainer.entrypoint: 'missing.py' is not a file in trainer.source ({code}); valid: a "
            "path relative to the source folder"
        ],
    ),
    (
        "entrypoint-a-string",
        LOCAL,
        {"source": "{code}", "entrypoint": "python train.py"},
        ["trainer.entrypoint: 'python train.py' is not a list; valid: a list"],
    ),
    (
        "entrypoint-not-strings",
        LOCAL,
        {"source": "{code}", "entrypoint": ["python", 3]},
        ["trainer.entrypoint[1]: 3 is not a string; valid: a string"],
    ),
    (
        "entrypoint-empty",
        LOCAL,
        {"source": "{code}", "entrypoint": []},
        [
            "trainer.entrypoint: [] is empty; valid: a command as a list of strings, e.g. "
            "[python, train.py]"
        ],
    ),
    (
        "torchrun-on-tpu",
        TPU,
        {"source": "{code}", "entrypoint": RUN, "launcher": "torchrun"},
        ["trainer.launcher: 'torchrun' is not allowed on a tpu target; valid: node"],
    ),
    (
        "unknown-launcher",
        LOCAL,
        {"source": "{code}", "entrypoint": RUN, "launcher": "mpirun"},
        ["trainer.launcher: 'mpirun' is not allowed; valid: torchrun, node"],
    ),
    (
        "secret-not-a-resource",
        LOCAL,
        {"source": "{code}", "entrypoint": RUN, "secret_env": {"HF_TOKEN": "hf_abc123"}},
        [
            "trainer.secret_env.HF_TOKEN: 'hf_abc123' is not a Secret Manager resource name; "
            "valid: projects/P/secrets/NAME or projects/P/secrets/NAME/versions/V"
        ],
    ),
    (
        "bundled-keys-mixed",
        LOCAL,
        {"source": "{code}", "entrypoint": RUN, "model": "gpt", "steps": 5},
        [
            "trainer.model: a bundled-trainer key, not allowed with trainer.entrypoint; valid: "
            "remove trainer.model, or remove trainer.entrypoint to run the bundled trainer",
            "trainer.steps: a bundled-trainer key, not allowed with trainer.entrypoint; valid: "
            "remove trainer.steps, or remove trainer.entrypoint to run the bundled trainer",
        ],
    ),
    (
        "code-key-without-entrypoint",
        LOCAL,
        {"source": "{code}"},
        [
            "trainer.source: only with trainer.entrypoint (your own code); valid: add "
            "trainer.entrypoint, or remove trainer.source to run the bundled trainer"
        ],
    ),
    (
        "env-not-a-string",
        LOCAL,
        {"source": "{code}", "entrypoint": RUN, "env": {"EPOCHS": 3}},
        ["trainer.env.EPOCHS: 3 is not a string; valid: a string"],
    ),
    (
        # A local target refuses `secure:` values (its runs record their env): not offered.
        "env-looks-like-a-secret",
        LOCAL,
        {"source": "{code}", "entrypoint": RUN, "env": {"WANDB_API_KEY": "x"}},
        [
            "trainer.env.WANDB_API_KEY: looks like a secret, and env values are stored in plain "
            "text; valid: trainer.secret_env.WANDB_API_KEY: projects/P/secrets/NAME (a local "
            "run reads WANDB_API_KEY from this environment)"
        ],
    ),
    (
        "env-looks-like-a-secret-on-a-cloud-target",
        GKE,
        {"source": "{code}", "entrypoint": RUN, "env": {"WANDB_API_KEY": "x"}},
        [
            "trainer.env.WANDB_API_KEY: looks like a secret, and env values are stored in plain "
            "text; valid: trainer.secret_env.WANDB_API_KEY: projects/P/secrets/NAME, or a "
            "`secure:` value (pulumi config set --secret --path "
            "'trainstack:trainer.env.WANDB_API_KEY' VALUE)"
        ],
    ),
    (
        "env-overrides-the-contract",
        LOCAL,
        {"source": "{code}", "entrypoint": RUN, "env": {"RANK": "1", "TRAINSTACK_X": "1"}},
        [
            "trainer.env.RANK: set by the launcher (run contract); valid: any other name",
            "trainer.env.TRAINSTACK_X: set by the launcher (run contract); valid: any other name",
        ],
    ),
    (
        "image-on-local",
        LOCAL,
        {"image": "us-docker.pkg.dev/p/r/train:1", "entrypoint": RUN},
        [
            "trainer.image: not supported on a local target (it runs no container); valid: "
            "trainer.source, or a target of tpu, gpu_cluster, vertex"
        ],
    ),
    ("neither-source-nor-image", LOCAL, {"entrypoint": RUN}, [LOCAL_NEEDS_SOURCE]),
    (
        "requirements-outside-source",
        LOCAL,
        {"source": "{code}", "entrypoint": RUN, "requirements": "../reqs.txt"},
        [
            "trainer.requirements: '../reqs.txt' is not a file in trainer.source ({code}); "
            "valid: a path relative to the source folder"
        ],
    ),
]


@pytest.mark.parametrize(
    ("stack", "trainer", "messages"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_bad_input_exits_2_naming_the_key(
    tmp_path: Path, code: Path, stack: dict[str, Any], trainer: dict[str, Any], messages: list[str]
) -> None:
    filled = json.loads(json.dumps(trainer).replace("{code}", str(code)))
    config = {**stack, "trainstack:trainer": filled}
    assert _errors(tmp_path, config) == [m.format(code=code) for m in messages]


def test_requirements_with_pip_options_are_refused(tmp_path: Path, code: Path) -> None:
    (code / "requirements.txt").write_text("-r other.txt\ntorch\n")
    trainer = {"source": str(code), "entrypoint": RUN, "requirements": "requirements.txt"}
    assert _errors(tmp_path, {**LOCAL, "trainstack:trainer": trainer}) == [
        "trainer.requirements: line 1 '-r other.txt' is not a requirement (Expected package "
        "name at the start of dependency specifier); valid: PEP 508 requirements, one per line "
        "(e.g. 'numpy>=1.26'), no pip options"
    ]


def test_requirements_are_parsed_as_pep_508_each_bad_line_named(tmp_path: Path, code: Path) -> None:
    # `pkg --index-url URL` has no leading dash, so it used to reach the package's
    # dependencies and fail pip on every node. Line 4's marker (quoted) is PEP 508's own.
    (code / "requirements.txt").write_text(
        "numpy>=1.26  # pinned below 2 elsewhere\n"
        "pkg --index-url https://example.com/simple\n"
        "\n"
        "torch==2.1; python_version < '3.12'\n"
        "pkg @ https://example.com/pkg-1.0-py3-none-any.whl\n"
        "numpy>=\n"
    )
    trainer = {"source": str(code), "entrypoint": RUN, "requirements": "requirements.txt"}
    valid = "valid: PEP 508 requirements, one per line (e.g. 'numpy>=1.26'), no pip options"
    assert _errors(tmp_path, {**LOCAL, "trainstack:trainer": trainer}) == [
        "trainer.requirements: line 2 'pkg --index-url https://example.com/simple' is not a "
        "requirement (Expected semicolon (after name with no version specifier) or end); " + valid,
        "trainer.requirements: line 6 'numpy>=' is not a requirement (Expected semicolon "
        "(after name with no version specifier) or end); " + valid,
    ]


def test_a_requirements_file_not_utf8_or_with_an_overlong_line_is_one_line(
    tmp_path: Path, code: Path
) -> None:
    """Before: "'utf-8' codec can't decode byte 0xff in position 5" with no key, and a
    200,000-character line accepted and printed whole in the plan."""
    trainer = {"source": str(code), "entrypoint": RUN, "requirements": "requirements.txt"}
    (code / "requirements.txt").write_bytes(b"torch\xff\n")
    assert _errors(tmp_path, {**LOCAL, "trainstack:trainer": trainer}) == [
        "trainer.requirements: 'requirements.txt' is not UTF-8 text (byte 0xff at offset 5); "
        "valid: a UTF-8 text file of PEP 508 requirements, one per line"
    ]
    long = "pkg @ https://example.com/" + "a" * 200_000
    (code / "requirements.txt").write_text(f"numpy\n{long}\n")
    assert _errors(tmp_path, {**LOCAL, "trainstack:trainer": trainer}) == [
        f"trainer.requirements: line 2 {long[:60]!r}... is 200026 characters long; valid: at "
        "most 8190 characters a line (a longer URL no default server takes)"
    ]


def _plan(tmp_path: Path, config: dict[str, Any], name: str = "mine") -> dict[str, Any]:
    path = tmp_path / f"Pulumi.{name}.yaml"
    path.write_text(yaml.safe_dump({"config": config}))
    result = runner.invoke(app, ["plan", "--config-file", str(path), "--json"])
    assert result.exit_code == 0, result.output
    plan: dict[str, Any] = json.loads(result.stdout)
    return plan


def test_plan_shows_what_will_run_and_plan_diff_one_line_per_job(
    tmp_path: Path, code: Path
) -> None:
    trainer = {
        "source": str(code),
        "requirements": "requirements.txt",
        "entrypoint": RUN,
        "env": {"WANDB_MODE": "offline"},
        "secret_env": {"HF_TOKEN": "projects/p/secrets/hf"},
    }
    base = _plan(tmp_path, {**GKE, "trainstack:trainer": trainer})
    code_entry = dict(base["code"])
    digest = code_entry.pop("source_sha256")
    assert len(digest) == 64
    assert code_entry == {
        "source": str(code),
        "files": {
            "count": 2,
            "bytes": 44,
            "largest": [
                {"path": "requirements.txt", "bytes": 32},
                {"path": "train.py", "bytes": 12},
            ],
            "ignore_file": None,
            "ignored": {"count": 0, "first": []},
            "excluded": [],
        },
        "image": None,
        # No image given: GKE runs the bundled PyTorch image.
        "runs_on": "pytorch/pytorch@sha256:6acf597eeb8e376a96580dde4952f37cc017fef732bb40bfc73f28f25e3f64b4",
        "entrypoint": ["python", "train.py"],
        "launcher": "torchrun",
        "launcher_from": "the default on gpu_cluster",
        "launcher_env": [
            "TRAINSTACK_CHECKPOINT_DIR",
            "TRAINSTACK_DATA_DIR",
            "TRAINSTACK_OUTPUT_DIR",
            "TRAINSTACK_RUN_NAME",
            "TRAINSTACK_NODE_RANK",
            "TRAINSTACK_NUM_NODES",
            "TRAINSTACK_ACCELERATORS_PER_NODE",
            "TRAINSTACK_COORDINATOR",
            "RANK",
            "LOCAL_RANK",
            "WORLD_SIZE",
            "LOCAL_WORLD_SIZE",
            "MASTER_ADDR",
            "MASTER_PORT",
        ],
        "world_size": 16,  # 2 machines x 8 GPUs
        "requirements": ["numpy>=1.26"],
        "env": {"WANDB_MODE": "offline"},
        "secret_env": {"HF_TOKEN": "projects/p/secrets/hf"},
    }
    assert base["outputs"]["node_args"] == [
        "--launcher=torchrun",
        "--env=TRAINSTACK_CHECKPOINT_DIR=gs://p-mine-checkpoints/checkpoints/mine",
        "--env=TRAINSTACK_DATA_DIR=gs://p-mine-data",
        "--env=TRAINSTACK_OUTPUT_DIR=gs://p-mine-checkpoints/outputs/mine",
        "--env=TRAINSTACK_RUN_NAME=mine",
        "--env=WANDB_MODE=offline",
        "--secret-env=HF_TOKEN=projects/p/secrets/hf",
        "--",
        "python",
        "train.py",
    ]
    same = _plan(tmp_path, {**GKE, "trainstack:trainer": trainer})
    assert same["resources"] == base["resources"]  # unchanged code relaunches nothing
    # A stack file kept beside the code is configuration: editing it is no code change.
    (code / "Pulumi.gke.yaml").write_text("config: {}\n")
    (code / "Pulumi.yaml").write_text("name: mine\n")
    beside = _plan(tmp_path, {**GKE, "trainstack:trainer": trainer})
    assert beside["code"]["source_sha256"] == digest
    assert beside["resources"] == base["resources"]

    (code / "train.py").write_text("print('changed')\n")
    node = {**trainer, "launcher": "node"}
    head = _plan(tmp_path, {**GKE, "trainstack:trainer": node})
    new_digest = head["code"]["source_sha256"]
    assert new_digest != digest
    diff = plan_diff(base, head)
    code_lines = [line for line in diff.splitlines() if line.startswith("- **code**")]
    assert code_lines == [
        f"- **code** `mine`: source sha256 `{digest[:16]}` -> `{new_digest[:16]}`; launcher "
        "`torchrun` -> `node`; world_size `16` -> `2`"
    ]
    # The package's own object is a new object (a new name: Pulumi replaces it), counted in
    # the headline as a replace; the code line above says what changed in it.
    assert [line for line in diff.splitlines() if "mine-trainer-sdist" in line] == [
        "- **replace** `mine-trainer-sdist` (gcp:storage/bucketObject:BucketObject): "
        "`metadata.sha256`, `name`, `source.fileAsset` changed, which forces a new resource "
        "(the Terraform provider schema); creates the new one first"
    ]


REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("stack", "launcher", "world"),
    [
        ("own-trainer/Pulumi.local.yaml", "torchrun", 2),
        ("own-trainer/Pulumi.gke.yaml", "torchrun", 16),
        ("own-trainer/Pulumi.gce.yaml", "torchrun", 16),
        ("own-trainer/Pulumi.vertex.yaml", "torchrun", 16),
        ("own-jax/Pulumi.local.yaml", "node", 2),
        ("own-jax/Pulumi.tpu.yaml", "node", 4),  # a v4-32 has 4 hosts
    ],
)
def test_example_stacks_plan(stack: str, launcher: str, world: int) -> None:
    path = REPO / "examples" / stack
    result = runner.invoke(app, ["plan", "--config-file", str(path), "--json"])
    assert result.exit_code == 0, result.output
    code = json.loads(result.stdout)["code"]
    assert (code["launcher"], code["world_size"]) == (launcher, world)
    assert code["source"] == f"examples/{stack.split('/')[0]}"
