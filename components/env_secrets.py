"""Environment values that are credentials, kept in Secret Manager and read on the node.

    from trainstack.components.env_secrets import EnvSecrets

    secrets = EnvSecrets(
        "exp-42-env-secrets",
        {
            "project": "my-project",
            "deployment_name": "exp-42",
            "values": {"HF_TOKEN": config.require_secret("hf_token")},
        },
    )
    # secrets.secret_names -> TrainingIdentity's `secrets` (read access to these only)
    # secrets.versions["HF_TOKEN"] -> the node launcher's --secret-env=HF_TOKEN=<version>

A credential given to the program as a Pulumi secret must not reach the nodes as a value:
a command line shows in every process listing, in the startup script's log and, at Google,
in the instance template's metadata, a pod spec or a Vertex job's body. Here each value
becomes one Secret Manager secret (`<deployment>-env-<NAME>`) with one version holding it;
what travels is the version's resource name, which the node launcher reads with the node's
own account (`trainstack.trainers.user_code.read_secrets`).

The value stays a secret in Pulumi's state too: `secret_data` is a sensitive field of the
provider's `google_secret_manager_secret_version` (hashicorp/terraform-provider-google
google/services/secretmanager/resource_secret_manager_secret_version.go, schema
`"secret_data": {... ForceNew: true, ... Sensitive: true}`) and the value is passed as
`pulumi.Output.secret`, which the engine encrypts in state and shows as `[secret]`. Being
`ForceNew`, a new value is a new version with a new resource name (Secret Manager's
`SecretVersion.name`: "SecretVersion IDs in a Secret start at 1 and are incremented for each
subsequent version of the secret", secretmanager.v1 discovery), so whatever runs with the
name relaunches with the new value.

Naming: `<name>-<NAME>` for the secret, `<name>-<NAME>-version` for its version; the
Secret Manager id keeps the variable's case (`HF_TOKEN` and `hf_token` are two variables).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import NotRequired, TypedDict

import pulumi
from pulumi_gcp import secretmanager

from trainstack.components._args import check_args, component_check
from trainstack.components.naming import labels_input

TOKEN = "trainstack:secrets:EnvSecrets"
COMPONENT_LABEL = "env-secrets"
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_DEPLOYMENT = re.compile(r"[a-z][a-z0-9-]*")
# A secret id: "at most 255 characters ... letters, numerals, and the hyphen (-) and
# underscore (_) characters" (secretmanager.v1 discovery, `projects.secrets.create`
# parameter `secretId`).
_MAX_ID = 255


class EnvSecretsArgs(TypedDict):
    """Arguments for `EnvSecrets`."""

    project: str
    """Project id the secrets live in (the training account reads them there)."""
    deployment_name: str
    """Deployment (stack) name: the secrets are `<deployment_name>-env-<NAME>`."""
    values: Mapping[str, pulumi.Input[str]]
    """Environment variable name -> its value, registered as a Pulumi secret."""
    labels: NotRequired[pulumi.Input[dict[str, str]]]
    """Extra labels for every secret."""


def secret_id(deployment: str, env_name: str) -> str:
    """The Secret Manager secret id that holds `env_name`'s value for `deployment`."""
    return f"{deployment}-env-{env_name}"


def _validate(args: EnvSecretsArgs) -> list[str]:
    deployment, values = args["deployment_name"], args["values"]
    if not isinstance(deployment, str) or not _DEPLOYMENT.fullmatch(deployment):
        raise ValueError(
            f"deployment_name: {deployment!r} is not a deployment name; valid: lowercase "
            "letters, digits and '-', starting with a letter"
        )
    if not isinstance(values, Mapping) or not values:
        raise ValueError(
            f"values: {values!r} is not a mapping of names to values; valid: at least one "
            "NAME: value"
        )
    for env_name in values:
        if not isinstance(env_name, str) or not _ENV_NAME.fullmatch(env_name):
            raise ValueError(
                f"values: {env_name!r} is not an environment variable name; valid: letters, "
                "digits and '_', not starting with a digit"
            )
        if len(secret_id(deployment, env_name)) > _MAX_ID:
            raise ValueError(
                f"values.{env_name}: the secret id {secret_id(deployment, env_name)!r} is "
                f"longer than {_MAX_ID} characters; valid: a shorter name"
            )
    return sorted(values)


class EnvSecrets(pulumi.ComponentResource):
    """One Secret Manager secret and version per environment value."""

    secret_names: list[str]
    """`projects/P/secrets/ID` of each secret, in the order of the sorted names: what the
    training account is granted `roles/secretmanager.secretAccessor` on."""
    versions: dict[str, pulumi.Output[str]]
    """Environment name -> the resource name of the version holding its value
    (`projects/*/secrets/*/versions/*`), what the node launcher's `--secret-env` reads."""
    secrets: dict[str, secretmanager.Secret]
    """The `secretmanager.Secret` of each name."""

    def __init__(
        self, name: str, args: EnvSecretsArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        check_args("EnvSecrets", EnvSecretsArgs, args)
        names = component_check("EnvSecrets", _validate, args)
        labels = component_check("EnvSecrets", labels_input, args.get("labels"), COMPONENT_LABEL)
        super().__init__(TOKEN, name, None, opts)
        project, deployment = args["project"], args["deployment_name"]
        child = pulumi.ResourceOptions(parent=self)
        self.secrets, self.versions = {}, {}
        for env_name in names:
            secret = secretmanager.Secret(
                f"{name}-{env_name}",
                project=project,
                secret_id=secret_id(deployment, env_name),
                # Google picks the locations (`Replication.automatic`, secretmanager.v1).
                replication={"auto": {}},
                labels=labels,
                opts=child,
            )
            version = secretmanager.SecretVersion(
                f"{name}-{env_name}-version",
                secret=secret.id,
                secret_data=pulumi.Output.secret(args["values"][env_name]),
                opts=child,
            )
            self.secrets[env_name] = secret
            self.versions[env_name] = version.name
        self.secret_names = [
            f"projects/{project}/secrets/{secret_id(deployment, n)}" for n in names
        ]
        self.register_outputs({"secret_names": self.secret_names, "versions": self.versions})
