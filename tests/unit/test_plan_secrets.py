"""`trainstack plan-diff` with a `secure:` trainer.env value: the value goes to a Secret
Manager version (its `secretData` shows as `[secret]`) and the Job's args carry only the
version's name, so a change beside the secret (an entrypoint argument, a plain env value)
reads as any change, and a change to its ciphertext replaces the version, never showing the
value (`trainstack.infra.plan_secrets`, `trainstack.components.env_secrets`). The plans are the own-trainer GKE example's, as
`trainstack plan --json` writes them."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from tests import REPO_ROOT
from trainstack.infra.compose import main_program
from trainstack.infra.mocks import SECRET, run_program
from trainstack.infra.plan import build_plan, read_stack_file
from trainstack.infra.plan_diff import plan_diff
from trainstack.infra.plan_secrets import fold_secrets

CIPHERTEXT = "v1:AAABAGUJcmFuZG9tY2lwaGVydGV4dA=="
OTHER_CIPHERTEXT = "v1:AAABAHNlY29uZGNpcGhlcnRleHQ="
JOB = "gke-gpu-training-job"


def _plan(secure: str | None, mode: str = "a", *extra_args: str) -> dict[str, Any]:
    name, config = read_stack_file(REPO_ROOT / "examples" / "own-trainer" / "Pulumi.gke.yaml")
    section = dict(config["trainstack:trainer"])
    env: dict[str, Any] = {"MODE": mode}
    if secure is not None:
        env["DATABASE_URL"] = {"secure": secure}
    section.update(
        source=str(REPO_ROOT / section["source"]),
        entrypoint=[*section["entrypoint"], *extra_args],
        env=env,
    )
    return build_plan(name, {**config, "trainstack:trainer": section})


def _job(plan: Any) -> dict[str, Any]:
    (job,) = [r for r in plan["resources"] if r["name"] == JOB]
    return dict(job)


def _lines(diff: str, start: str) -> list[str]:
    return [line for line in diff.splitlines() if line.startswith(start)]


VERSION = "gke-env-secrets-DATABASE_URL-version"
REFERENCE = "projects/my-ml-project/secrets/gke-env-DATABASE_URL/versions/1"


def _args(plan: Any) -> list[str]:
    [container] = _job(plan)["inputs"]["spec"]["template"]["spec"]["containers"]
    return list(container["args"])


def test_a_secure_value_reaches_the_job_as_a_secret_manager_version_name() -> None:
    plan = _plan(CIPHERTEXT)
    # The Job's args name the version; no input of the Job is secret any more.
    assert [a for a in _args(plan) if "DATABASE_URL" in a] == [
        f"--secret-env=DATABASE_URL={REFERENCE}"
    ]
    assert SECRET not in json.dumps(_job(plan)) and CIPHERTEXT not in json.dumps(plan)
    secret_data = [
        (r["name"], r["inputs"]["secretData"], r["secure_inputs"])
        for r in plan["resources"]
        if r["type"] == "gcp:secretmanager/secretVersion:SecretVersion"
    ]
    assert secret_data == [(VERSION, SECRET, ["secretData"])]


def test_a_change_beside_a_secret_shows_the_replacement_and_the_relaunch() -> None:
    base, head = _plan(CIPHERTEXT), _plan(CIPHERTEXT, "b", "--lr=0.1")
    diff = plan_diff(base, head)
    # As the same change without the secret: the Job and the supervisor's bundle.
    assert _lines(diff, "### Stack") == [
        "### Stack `gke`: 0 to add, 1 to change, 2 to replace, 0 to delete"
    ]
    assert _lines(diff, "  - **relaunches") == [
        "  - **relaunches training; resumes from the newest checkpoint in "
        "`gs://my-ml-project-gke-checkpoints/checkpoints/gke`**"
    ]
    assert _lines(diff, f"- **replace** `{VERSION}`") == []
    assert CIPHERTEXT not in diff and CIPHERTEXT not in json.dumps(head)


def test_a_new_ciphertext_alone_replaces_the_version_and_says_it_relaunches() -> None:
    base, head = _plan(CIPHERTEXT), _plan(OTHER_CIPHERTEXT)
    # What is not secret is the same, so is its digest; the ciphertexts' digests differ.
    [version] = [r for r in base["resources"] if r["name"] == VERSION]
    [version_head] = [r for r in head["resources"] if r["name"] == VERSION]
    assert version["secret_digests"] == version_head["secret_digests"]
    assert (base["code"]["secure_sha256"], head["code"]["secure_sha256"]) == (
        {"DATABASE_URL": hashlib.sha256(CIPHERTEXT.encode()).hexdigest()},
        {"DATABASE_URL": hashlib.sha256(OTHER_CIPHERTEXT.encode()).hexdigest()},
    )
    old, new = (
        next(r for r in fold_secrets(p)["resources"] if r["name"] == VERSION)["inputs"][
            "secretData"
        ]
        for p in (base, head)
    )
    diff = plan_diff(base, head)
    assert _lines(diff, "### Stack") == [
        "### Stack `gke`: 0 to add, 0 to change, 1 to replace, 0 to delete"
    ]
    assert _lines(diff, "- **code**") == [
        "- **code** `gke`: a secret input changed: trainer.env.DATABASE_URL (its value is not "
        "shown); a new Secret Manager version, whose new name relaunches the training"
    ]
    assert _lines(diff, "- **replace**") == [
        f"- **replace** `{VERSION}` (gcp:secretmanager/secretVersion:SecretVersion): "
        "`secretData` changed, which forces a new resource (the Terraform provider schema); "
        "creates the new one first"
    ]
    assert _lines(diff, "  - `secretData`") == [
        f"  - `secretData`: a secret input changed (its value is not shown; sha256 "
        f"{old[16:32]} -> {new[16:32]})"
    ]
    assert plan_diff(base, _plan(CIPHERTEXT)) == (
        "## trainstack plan diff\n\n### Stack `gke`: no changes\n"
    )


def test_no_digest_without_a_secure_value_or_of_decrypted_values() -> None:
    # A stack without `secure:` values plans as before: its kubeconfig is a secret, with no
    # digest (the bundled stacks' pinned plans stay as they were).
    plain = _plan(None)
    assert [r["name"] for r in plain["resources"] if "secret_digests" in r] == []
    assert "secure_sha256" not in plain["code"]
    # Under the engine the secrets hold their decrypted values: nothing is digested.
    name, config = read_stack_file(REPO_ROOT / "examples" / "own-trainer" / "Pulumi.gke.yaml")
    section = {**config["trainstack:trainer"], "env": {"DB": "decrypted-value"}}
    section["source"] = str(REPO_ROOT / section["source"])
    run = run_program(
        main_program,
        config={**config, "trainstack:trainer": section},
        stack=name,
        secret_keys=["trainstack:trainer"],
        digest_secrets=True,
    )
    assert [r.name for r in run.resources if r.secret_digests or r.secure_inputs] == []
