"""Enable the Google Cloud APIs a training deployment needs.

    from trainstack.components.project_services import ProjectServices

    apis = ProjectServices(
        "exp-42-apis",
        {"project": "my-project", "services": ["compute.googleapis.com", "tpu.googleapis.com"]},
    )
    # pass depends_on=[apis] to components that call these APIs

Naming: each `projects.Service` is named `<name>-<api>` where `<api>` is the service name
without `.googleapis.com` (`exp-42-apis-compute`), so adding or removing an API never renames
the others. APIs are left enabled on destroy: other workloads in the project may use them.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import NotRequired, TypedDict

import pulumi
from pulumi_gcp import projects

from trainstack.components._args import check_args, component_check
from trainstack.components.naming import labels_input

TOKEN = "trainstack:project:ProjectServices"

_SERVICE = re.compile(r"^[a-z][a-z0-9-]*(\.[a-z0-9-]+)*\.(googleapis\.com|goog)$")


class ProjectServicesArgs(TypedDict):
    """Arguments for `ProjectServices`."""

    project: pulumi.Input[str]
    """Project id the APIs are enabled in."""
    services: Sequence[str]
    """Service names to enable, e.g. `compute.googleapis.com`. Plain strings: each one becomes
    its own resource, so the list must be known when the program runs."""
    labels: NotRequired[pulumi.Input[dict[str, str]]]
    """Accepted for the shared vocabulary; `projects.Service` has no labels to put them on."""


def _validate_services(services: Sequence[str]) -> list[str]:
    if isinstance(services, str) or not services:
        raise ValueError(
            f"services: {services!r} is not a non-empty list; valid: a non-empty list of "
            "service names, e.g. [compute.googleapis.com]"
        )
    seen: set[str] = set()
    for service in services:
        if not isinstance(service, str) or not _SERVICE.match(service):
            raise ValueError(
                f"services: {service!r} is not a service name; valid: a name like "
                "compute.googleapis.com"
            )
        if service in seen:
            raise ValueError(f"services: {service!r} is listed twice; valid: once")
        seen.add(service)
    return sorted(seen)


def _role_of(service: str) -> str:
    return service.removesuffix(".googleapis.com").replace(".", "-")


class ProjectServices(pulumi.ComponentResource):
    """The given APIs enabled in one project."""

    services: pulumi.Output[list[str]]
    """Names of the enabled services, sorted (resolves once every API is enabled)."""
    enabled: dict[str, projects.Service]
    """The `projects.Service` resource of each service name."""

    def __init__(
        self, name: str, args: ProjectServicesArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        check_args("ProjectServices", ProjectServicesArgs, args)
        services = component_check("ProjectServices", _validate_services, args["services"])
        component_check(
            "ProjectServices", labels_input, args.get("labels"), "project-services"
        )  # validation only
        super().__init__(TOKEN, name, None, opts)

        self.enabled = {
            service: projects.Service(
                f"{name}-{_role_of(service)}",
                project=args["project"],
                service=service,
                # Keep APIs on after destroy: turning them off breaks anything else in the
                # project that uses them, and dependents would be disabled with them.
                disable_on_destroy=False,
                disable_dependent_services=False,
                opts=pulumi.ResourceOptions(parent=self),
            )
            for service in services
        }
        self.services = pulumi.Output.all(*(s.service for s in self.enabled.values())).apply(list)
        self.register_outputs({"services": self.services})
