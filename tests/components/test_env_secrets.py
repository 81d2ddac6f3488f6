"""EnvSecrets under Pulumi mocks: one Secret Manager secret and version per value, the value
only in the version's `secret_data`, registered as a Pulumi secret."""

from __future__ import annotations

from typing import Any

import pytest

from trainstack.components.env_secrets import TOKEN, EnvSecrets
from trainstack.infra.mocks import SECRET, ProgramRun, run_program

SECRET_TYPE = "gcp:secretmanager/secret:Secret"
VERSION_TYPE = "gcp:secretmanager/secretVersion:SecretVersion"


def _run(values: Any, deployment: Any = "exp-42") -> ProgramRun:
    def program() -> dict[str, Any]:
        secrets = EnvSecrets(
            "exp-42-env",
            {
                "project": "p",
                "deployment_name": deployment,
                "values": values,
                "labels": {"team": "ml"},
            },
        )
        return {"names": secrets.secret_names, "versions": secrets.versions}

    return run_program(program)


def test_a_secret_and_a_version_per_value_the_value_only_as_a_secret() -> None:
    run = _run({"HF_TOKEN": "hf_value", "hf_token": "other"})
    assert sorted((r.type, r.name, r.parent) for r in run.resources) == [
        (SECRET_TYPE, "exp-42-env-HF_TOKEN", "exp-42-env"),
        (SECRET_TYPE, "exp-42-env-hf_token", "exp-42-env"),
        (VERSION_TYPE, "exp-42-env-HF_TOKEN-version", "exp-42-env"),
        (VERSION_TYPE, "exp-42-env-hf_token-version", "exp-42-env"),
        (TOKEN, "exp-42-env", None),
    ]
    assert run.named("exp-42-env-HF_TOKEN").inputs == {
        "project": "p",
        "secretId": "exp-42-env-HF_TOKEN",
        "replication": {"auto": {}},
        "labels": {"component": "env-secrets", "managed-by": "trainstack", "team": "ml"},
    }
    version = run.named("exp-42-env-HF_TOKEN-version")
    assert version.inputs == {
        "secret": "projects/p/secrets/exp-42-env-HF_TOKEN",
        "secretData": SECRET,
    }
    assert version.values["secretData"] == "hf_value"
    assert run.outputs == {
        "names": [
            "projects/p/secrets/exp-42-env-HF_TOKEN",
            "projects/p/secrets/exp-42-env-hf_token",
        ],
        "versions": {
            "HF_TOKEN": "projects/p/secrets/exp-42-env-HF_TOKEN/versions/1",
            "hf_token": "projects/p/secrets/exp-42-env-hf_token/versions/1",
        },
    }


@pytest.mark.parametrize(
    ("values", "deployment", "message"),
    [
        (
            {"1BAD": "x"},
            "exp-42",
            "EnvSecrets.values: '1BAD' is not an environment variable name; valid: letters, "
            "digits and '_', not starting with a digit",
        ),
        (
            {},
            "exp-42",
            "EnvSecrets.values: {} is not a mapping of names to values; valid: at least one "
            "NAME: value",
        ),
        (
            {"X": "x"},
            "Exp_42",
            "EnvSecrets.deployment_name: 'Exp_42' is not a deployment name; valid: lowercase "
            "letters, digits and '-', starting with a letter",
        ),
    ],
)
def test_bad_arguments_are_one_line_and_register_nothing(
    values: Any, deployment: str, message: str
) -> None:
    with pytest.raises(ValueError, match=".*") as info:
        _run(values, deployment)
    assert str(info.value).splitlines()[-1] == message
