"""`trainstack plan-diff` with a `secure:` trainer.env value: the inputs that carry it show
as `[secret]`, and a change beside the secret (an entrypoint argument, a plain env value) or
to its ciphertext still shows the replacement and the relaunch, never the value
(`trainstack.infra.plan_secrets`). The plans are the own-trainer GKE example's, as
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


def test_a_change_beside_a_secret_shows_the_replacement_and_the_relaunch() -> None:
    base, head = _plan(CIPHERTEXT), _plan(CIPHERTEXT, "b", "--lr=0.1")
    assert (_job(base)["inputs"]["spec"], _job(head)["inputs"]["spec"]) == (SECRET, SECRET)
    assert _job(base)["secure_inputs"] == ["spec"]
    old, new = (_job(fold_secrets(p))["inputs"]["spec"] for p in (base, head))
    assert old != new
    diff = plan_diff(base, head)
    # As the same change without the secret (2 to replace), the Job and the supervisor's
    # bundle, whose inputs are secrets too.
    assert _lines(diff, "### Stack") == [
        "### Stack `gke`: 0 to add, 1 to change, 2 to replace, 0 to delete"
    ]
    assert _lines(diff, f"- **replace** `{JOB}`") == [
        f"- **replace** `{JOB}` (kubernetes:batch/v1:Job): `spec` changed, which forces a new "
        "resource (pulumi-kubernetes' force-new table); creates the new one first"
    ]
    assert _lines(diff, "  - **relaunches") == [
        "  - **relaunches training; the plan does not say where its checkpoints are**"
    ]
    assert _lines(diff, "  - `spec`") == [
        f"  - `spec`: a secret input changed (its value is not shown; sha256 {old[16:32]} -> "
        f"{new[16:32]})"
    ]
    assert CIPHERTEXT not in diff and CIPHERTEXT not in json.dumps(head)


def test_a_new_ciphertext_alone_says_a_secret_input_changed_and_relaunches() -> None:
    base, head = _plan(CIPHERTEXT), _plan(OTHER_CIPHERTEXT)
    # What is not secret is the same, so is its digest; the ciphertexts' digests differ.
    assert _job(base)["secret_digests"] == _job(head)["secret_digests"]
    assert (base["code"]["secure_sha256"], head["code"]["secure_sha256"]) == (
        {"DATABASE_URL": hashlib.sha256(CIPHERTEXT.encode()).hexdigest()},
        {"DATABASE_URL": hashlib.sha256(OTHER_CIPHERTEXT.encode()).hexdigest()},
    )
    diff = plan_diff(base, head)
    assert _lines(diff, "### Stack") == [
        "### Stack `gke`: 0 to add, 0 to change, 1 to replace, 0 to delete"
    ]
    assert _lines(diff, "- **code**") == [
        "- **code** `gke`: a secret input changed: trainer.env.DATABASE_URL (its value is not "
        "shown)"
    ]
    assert _lines(diff, "- **replace**") == [
        f"- **replace** `{JOB}` (kubernetes:batch/v1:Job): `spec` changed, which forces a new "
        "resource (pulumi-kubernetes' force-new table); creates the new one first"
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
