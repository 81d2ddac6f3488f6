"""Pulumi dynamic provider for one Cloud Build build of a Dockerfile, pushed to Artifact
Registry and known by its digest.

pulumi-gcp has no resource that runs a build (its `cloudbuild` module has triggers and
worker pools: pulumi_gcp 10.2.0 cloudbuild/__init__.py), so trainstack calls
`projects.locations.builds` itself with the bundled `cloudbuild.v1` discovery document.

    from trainstack.components._cloud_build_provider import ImageBuild, ImageBuildProvider

    build = ImageBuild("exp-42-rs-build", project="p", location="us-central1",
                       image="us-central1-docker.pkg.dev/p/exp-42-built/pytorch-reduction-server:rs-0123",
                       dockerfile=text, service_account="exp-42-build@p.iam.gserviceaccount.com",
                       provider=ImageBuildProvider())
    # build.image_uri == "us-central1-docker.pkg.dev/p/exp-42-built/pytorch-reduction-server@sha256:..."

Behaviour (fields: cloudbuild.v1 discovery `Build`, revision 20261029):
- create: POST `builds.create` with one step, `gcr.io/cloud-builders/docker` running
  `docker build --tag IMAGE -` on the Dockerfile (a build from stdin needs no source
  upload), `images: [IMAGE]` (Cloud Build pushes it after the steps with the build's account
  and records each pushed image's digest in `results.images`), `serviceAccount`, logs in
  Cloud Logging only (a user-specified account cannot write to the default logs bucket:
  https://cloud.google.com/build/docs/securing-builds/configure-user-specified-service-accounts,
  "If you specify your own service account, you must store build logs in Cloud Logging or
  in a user-created Cloud Storage bucket") and `timeout`. Then GET the build every
  `poll_interval_s` until a terminal status. SUCCESS: the outputs are the build id and
  `image_uri` = `<image without tag>@<digest>`, what the job runs. The build account and its
  grants are created just before, and a new grant can take up to 7 minutes to reach
  Artifact Registry (https://cloud.google.com/iam/docs/access-change-propagation), so an end
  that a late grant explains, and only such an end, is built again (`attempts`,
  `retry_delay_s` apart; `retry_reason`): the base image's pull failed (the reader grant;
  a step of its own, `docker pull`, before `docker build`), the push failed
  (`failureInfo.type` PUSH_NOT_AUTHORIZED or PUSH_FAILED: the writer grant), logging failed
  (LOGGING_FAILURE, "Backend logging failures. Should retry."), or INTERNAL_ERROR ("failed
  due to an internal cause"; cloudbuild.v1 discovery `FailureInfo.type` and `Build.status`
  enumDescriptions). A failed `docker build` (the Dockerfile: USER_BUILD_STEP), TIMEOUT,
  CANCELLED, EXPIRED and a FAILURE with no `failureInfo` fail at once. The error names the
  status, its detail, the failure type and the build's log page.
- diff: the image (its tag is a hash of the Dockerfile), the Dockerfile, project, location
  or account changed: a new build (replace, created before the old one is dropped);
  `api_endpoint` updates in place.
- delete: no call. A build cannot be deleted (cloudbuild.v1 has no builds.delete); the image
  it pushed lives in the stack's repository, whose deletion removes it (artifactregistry.v1
  `repositories.delete`: "Deletes a repository and all of its contents").
- read: the build; gone (404) means gone.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any, Final

import pulumi
import pulumi.dynamic as dyn

from trainstack.components._google_api import NotFoundError, RetryPolicy, build_client, execute
from trainstack.components._unknown import is_unknown
from trainstack.components.catalog.reduction_server import BUILD_TIMEOUT_S, BUILDER_IMAGE

API: Final = "cloudbuild.v1"
TERMINAL: Final = frozenset(
    {"SUCCESS", "FAILURE", "INTERNAL_ERROR", "TIMEOUT", "CANCELLED", "EXPIRED"}
)
"""`Build.status` values after which a build does nothing more (cloudbuild.v1 discovery)."""
RETRIED_FAILURES: Final = {
    "PUSH_NOT_AUTHORIZED": "the push was refused",
    "PUSH_FAILED": "the push failed",
    "LOGGING_FAILURE": "logging failed",
}
"""`failureInfo.type`s a grant still on its way (or Cloud Build itself: LOGGING_FAILURE,
"Should retry.") explains (cloudbuild.v1 discovery `FailureInfo`)."""
PULL_STEP: Final = 0
"""The step that pulls the base image: a failure there is the reader grant's, not the
Dockerfile's (`BuildStep.status`: "At this time, build step status is only updated on
build completion")."""
REPLACE_KEYS: Final = ("project", "location", "image", "dockerfile", "service_account")
BUILD_TAG: Final = "trainstack"
"""`Build.tags` entry (not a docker tag) that marks trainstack's builds in the console."""


class ImageBuildError(Exception):
    """The build did not succeed after its last attempt."""


def _log(message: str) -> None:
    pulumi.log.info(message)


def build_script(image: str, dockerfile: str) -> str:
    """The step's bash script: `docker build` of `dockerfile` from stdin, tagged `image`."""
    return f"docker build --tag {image} - <<'TRAINSTACK_DOCKERFILE'\n{dockerfile}TRAINSTACK_DOCKERFILE\n"


def base_image(dockerfile: str) -> str | None:
    """The image of the Dockerfile's first `FROM`."""
    for line in dockerfile.splitlines():
        words = line.split()
        if len(words) >= 2 and words[0].upper() == "FROM":
            return words[1]
    return None


def build_steps(props: Mapping[str, Any]) -> list[dict[str, Any]]:
    """`docker pull` of the base image (`PULL_STEP`), then `docker build`."""
    build = {
        "name": BUILDER_IMAGE,
        "entrypoint": "bash",
        "args": ["-c", build_script(props["image"], props["dockerfile"])],
    }
    base = base_image(props["dockerfile"])
    return [build] if base is None else [{"name": BUILDER_IMAGE, "args": ["pull", base]}, build]


def build_body(props: Mapping[str, Any], timeout_s: int = BUILD_TIMEOUT_S) -> dict[str, Any]:
    """The `Build` the provider submits for its inputs."""
    return {
        "steps": build_steps(props),
        "images": [props["image"]],
        "serviceAccount": f"projects/{props['project']}/serviceAccounts/{props['service_account']}",
        "options": {"logging": "CLOUD_LOGGING_ONLY"},
        "timeout": f"{timeout_s}s",
        "tags": [BUILD_TAG],
    }


def pinned_uri(image: str, digest: str) -> str:
    """`image` (`host/path/name:tag`) by digest: `host/path/name@sha256:...`."""
    name = image.rsplit(":", 1)[0] if ":" in image.rsplit("/", 1)[-1] else image
    return f"{name}@{digest}"


def retry_reason(build: Mapping[str, Any]) -> str | None:
    """Why a build that did not succeed may pass when built again (module docstring), or
    None: it would fail again."""
    status = build.get("status")
    if status == "INTERNAL_ERROR":
        return "Cloud Build failed internally"
    if status != "FAILURE":
        return None
    kind = (build.get("failureInfo") or {}).get("type")
    if kind in RETRIED_FAILURES:
        return RETRIED_FAILURES[kind]
    steps = build.get("steps") or []
    pulled = len(steps) > 1 and steps[PULL_STEP].get("args", [None])[0] == "pull"
    if kind == "USER_BUILD_STEP" and pulled and steps[PULL_STEP].get("status") == "FAILURE":
        return "the base image's pull failed"
    return None


class ImageBuildProvider(dyn.ResourceProvider):
    """Run a Cloud Build build and wait for its pushed digest; see the module docstring."""

    def __init__(
        self,
        *,
        retry: RetryPolicy | None = None,
        poll_interval_s: float = 15.0,
        attempts: int = 3,
        retry_delay_s: float = 120.0,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.retry = retry or RetryPolicy()
        self.poll_interval_s = poll_interval_s
        self.attempts = attempts
        self.retry_delay_s = retry_delay_s
        self.sleep = sleep

    def _builds(self, props: Mapping[str, Any]) -> Any:
        client = build_client(API, api_endpoint=props.get("api_endpoint"))
        return client.projects().locations().builds()

    def check(self, _olds: dict[str, Any], news: dict[str, Any]) -> dyn.CheckResult:
        failures = []
        for key in ("project", "location", "image", "dockerfile", "service_account"):
            value = news.get(key)
            if not is_unknown(value) and (not isinstance(value, str) or not value):
                failures.append(dyn.CheckFailure(key, "expected a non-empty string"))
        image = news.get("image")
        if isinstance(image, str) and ":" not in image.rsplit("/", 1)[-1]:
            failures.append(
                dyn.CheckFailure("image", f"{image!r} has no tag; valid: HOST/PATH:TAG")
            )
        dockerfile = news.get("dockerfile")
        if isinstance(dockerfile, str) and "$" in dockerfile:
            failures.append(
                dyn.CheckFailure("dockerfile", "contains '$', which Cloud Build substitutes")
            )
        return dyn.CheckResult(news, failures)

    def create(self, props: dict[str, Any]) -> dyn.CreateResult:
        builds = self._builds(props)
        parent = f"projects/{props['project']}/locations/{props['location']}"
        body = build_body(props)
        for attempt in range(1, self.attempts + 1):
            operation = execute(builds.create(parent=parent, body=body), self.retry)
            build_id = str(operation["metadata"]["build"]["id"])
            build = self._wait(builds, f"{parent}/builds/{build_id}")
            if build.get("status") == "SUCCESS":
                outs = self._outs(props, build)
                return dyn.CreateResult(outs["build_name"], outs)
            kind = (build.get("failureInfo") or {}).get("type")
            failure = (
                f"Cloud Build {build_id} ended {build.get('status')}"
                f"{f' ({kind})' if kind else ''}: {build.get('statusDetail', '')} (logs: "
                f"{build.get('logUrl', 'none')})"
            )
            reason = retry_reason(build)
            if reason is None:
                raise ImageBuildError(f"{failure}; not retried: no late grant explains it")
            if attempt == self.attempts:
                raise ImageBuildError(f"{failure}; gave up after {attempt} attempts")
            _log(
                f"{failure}; {reason}: retrying in {self.retry_delay_s:.0f}s (attempt "
                f"{attempt} of {self.attempts}): a new grant of the build account can take up "
                "to 7 minutes to reach Artifact Registry"
            )
            self.sleep(self.retry_delay_s)
        raise AssertionError("unreachable")  # pragma: no cover

    def _wait(self, builds: Any, name: str) -> dict[str, Any]:
        last = ""
        while True:
            build: dict[str, Any] = execute(builds.get(name=name), self.retry)
            status = str(build.get("status", ""))
            if status in TERMINAL:
                return build
            if status != last:
                _log(f"Cloud Build {name.rsplit('/', 1)[-1]}: {status}")
                last = status
            # Cloud Build ends the build itself at its timeout (TIMEOUT), which bounds this.
            self.sleep(self.poll_interval_s)

    @staticmethod
    def _outs(props: Mapping[str, Any], build: Mapping[str, Any]) -> dict[str, Any]:
        images = (build.get("results") or {}).get("images") or []
        digests = [i["digest"] for i in images if i.get("name") == props["image"]]
        if len(digests) != 1:
            raise ImageBuildError(
                f"Cloud Build {build.get('id')} succeeded but reported {len(digests)} pushed "
                f"digests for {props['image']} (results.images: {images})"
            )
        parent = f"projects/{props['project']}/locations/{props['location']}"
        return {
            **props,
            "build_name": f"{parent}/builds/{build['id']}",
            "digest": digests[0],
            "image_uri": pinned_uri(props["image"], digests[0]),
            "log_url": build.get("logUrl"),
        }

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> dyn.DiffResult:
        replaces = [key for key in REPLACE_KEYS if olds.get(key) != news.get(key)]
        changed = bool(replaces) or olds.get("api_endpoint") != news.get("api_endpoint")
        return dyn.DiffResult(changes=changed, replaces=replaces, stables=[])

    def update(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> dyn.UpdateResult:
        # Only api_endpoint reaches here (everything else replaces): no API call.
        keep: dict[str, Any] = {
            k: olds[k] for k in ("build_name", "digest", "image_uri", "log_url") if k in olds
        }
        return dyn.UpdateResult({**news, **keep})

    def delete(self, id_: str, props: dict[str, Any]) -> None:
        _log(f"{id_}: nothing to delete (its image goes with the stack's repository)")

    def read(self, id_: str, props: dict[str, Any]) -> dyn.ReadResult:
        try:
            build = execute(self._builds(props).get(name=props.get("build_name") or id_))
        except NotFoundError:
            return dyn.ReadResult(None, {})
        return dyn.ReadResult(id_, self._outs(props, build))


class ImageBuild(dyn.Resource, module="cloudbuild", name="ImageBuild"):
    """One Cloud Build build of a Dockerfile (`pulumi-python:dynamic/cloudbuild:ImageBuild`)."""

    build_name: pulumi.Output[str]
    digest: pulumi.Output[str]
    image_uri: pulumi.Output[str]
    """`<image without tag>@sha256:...`: the pushed image, pinned."""
    log_url: pulumi.Output[str]

    def __init__(
        self,
        name: str,
        *,
        project: pulumi.Input[str],
        location: pulumi.Input[str],
        image: pulumi.Input[str],
        dockerfile: pulumi.Input[str],
        service_account: pulumi.Input[str],
        api_endpoint: pulumi.Input[str] | None = None,
        provider: ImageBuildProvider | None = None,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        props = {
            "project": project,
            "location": location,
            "image": image,
            "dockerfile": dockerfile,
            "service_account": service_account,
            "api_endpoint": api_endpoint,
            "build_name": None,
            "digest": None,
            "image_uri": None,
            "log_url": None,
        }
        super().__init__(provider or ImageBuildProvider(), name, props, opts)
