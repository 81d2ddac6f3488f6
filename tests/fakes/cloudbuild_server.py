"""A local HTTP server implementing Cloud Build's regional builds endpoints.

    with CloudBuildFakeServer() as server:
        provider.create({..., "api_endpoint": server.endpoint})
        server.outcomes = ["FAILURE", "SUCCESS"]  # the next builds end so, then SUCCESS
        server.requests                           # [(method, path, json body or None), ...]

Modelled on the cloudbuild.v1 discovery document (revision 20261029, bundled with
google-api-python-client): `projects.locations.builds.create` (POST
`v1/{parent}/builds`) answers an `Operation` whose `metadata` is a `BuildOperationMetadata`
carrying the new `Build` (its `id`, status QUEUED); `projects.locations.builds.get` (GET
`v1/{name}`) answers the `Build`. Each GET moves a build on QUEUED -> WORKING -> its outcome.
A SUCCESS records what Cloud Build records for `images` ("The digests of the pushed images
will be stored in the Build resource's results field", `Build.images`): one `BuiltImage`
{name, digest} per image, the digest here a hash of the build's steps, so the same build
gives the same digest. A build with an image whose name has no tag, or with no steps, is
refused 400 (`Build.steps`: "Required"). Unknown builds answer 404 in Google's error shape.

An outcome is a `Build.status`, or a `Failure`: status FAILURE with `failureInfo.type`
("Contains information about the build when status=FAILURE", `Build.failureInfo`) and, for
a failed step, each step's `status` ("build step status is only updated on build
completion", `BuildStep.status`): the steps before it SUCCESS, it FAILURE, the rest
QUEUED, which is what the steps not run show (U: no source here says so).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import re
import threading
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from tests.fakes import LocalServer, google_error, json_handler


@dataclass(frozen=True)
class Failure:
    """A FAILURE outcome: its `failureInfo.type`, and the step that failed (None: none did,
    as for a failed push)."""

    type: str
    step: int | None = None


_COLLECTION = re.compile(r"^/v1/(projects/[^/]+/locations/[^/]+)/builds$")
_BUILD = re.compile(r"^/v1/(projects/[^/]+/locations/[^/]+)/builds/([^/:]+)$")


class CloudBuildFakeServer(LocalServer):
    """Fake Cloud Build API on 127.0.0.1 (free port) in a background thread."""

    def __init__(self) -> None:
        self.builds: dict[str, dict[str, Any]] = {}
        self.requests: list[tuple[str, str, Any]] = []
        self.outcomes: list[str | Failure] = []
        """How the next builds end, in order; SUCCESS once the list is used up."""
        self.working_reads = 1
        """GETs that answer WORKING before a build ends (0: it ends at its first GET)."""
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        super().__init__(json_handler(self))

    @property
    def endpoint(self) -> str:
        return self.base_url + "/"

    def calls(self, method: str, suffix: str = "") -> list[tuple[str, str, Any]]:
        return [r for r in self.requests if r[0] == method and r[1].endswith(suffix)]

    def handle(self, method: str, raw_path: str, body: Any) -> tuple[int, Any] | None:
        path = urlsplit(raw_path).path
        with self._lock:
            self.requests.append((method, path, body))
            collection = _COLLECTION.match(path)
            if collection and method == "POST":
                return self._create(collection.group(1), body)
            match = _BUILD.match(path)
            if match is None or method != "GET":
                return 404, google_error(404, f"no route {method} {path}")
            build = self.builds.get(match.group(2))
            if build is None:
                return 404, google_error(404, f"build {match.group(2)} not found")
            self._advance(build)
            return 200, self._public(build)

    def _create(self, parent: str, body: Any) -> tuple[int, Any]:
        if not isinstance(body, dict) or not body.get("steps"):
            return 400, google_error(400, "steps: required")
        for image in body.get("images", []):
            if ":" not in image.rsplit("/", 1)[-1]:
                return 400, google_error(400, f"image {image!r} has no tag")
        build_id = f"b{next(self._ids):04d}"
        build = {
            **json.loads(json.dumps(body)),  # its own copy: the steps get a status
            "id": build_id,
            "projectId": parent.split("/")[1],
            "status": "QUEUED",
            "logUrl": f"https://console.cloud.google.com/cloud-build/builds/{build_id}",
            "_outcome": self.outcomes.pop(0) if self.outcomes else "SUCCESS",
        }
        self.builds[build_id] = build
        metadata = {
            "@type": "type.googleapis.com/google.devtools.cloudbuild.v1.BuildOperationMetadata",
            "build": self._public(build),
        }
        return 200, {"name": f"{parent}/operations/op-{build_id}", "metadata": metadata}

    def _advance(self, build: dict[str, Any]) -> None:
        if build["status"] == "QUEUED":
            build["status"] = "WORKING"
            build["_working"] = self.working_reads
        if build["status"] != "WORKING":
            return
        if build["_working"] > 0:
            build["_working"] -= 1
            return
        outcome = build["_outcome"]
        if isinstance(outcome, Failure):
            build["status"] = "FAILURE"
            build["failureInfo"] = {"type": outcome.type, "detail": f"{outcome.type} (injected)"}
            if outcome.step is not None:
                for index, step in enumerate(build["steps"]):
                    step["status"] = (
                        "SUCCESS"
                        if index < outcome.step
                        else "FAILURE"
                        if index == outcome.step
                        else "QUEUED"
                    )
            where = "the push" if outcome.step is None else f"Build step {outcome.step}"
            build["statusDetail"] = f"{where} ended FAILURE (injected)"
            return
        build["status"] = outcome
        if build["status"] == "SUCCESS":
            public_steps = [{k: v for k, v in st.items() if k != "status"} for st in build["steps"]]
            steps = json.dumps(public_steps, sort_keys=True).encode()
            digest = "sha256:" + hashlib.sha256(steps).hexdigest()
            build["results"] = {"images": [{"name": i, "digest": digest} for i in build["images"]]}
            for step in build["steps"]:
                step["status"] = "SUCCESS"
        else:
            build["statusDetail"] = f"Build step 0 ended {build['status']} (injected)"

    @staticmethod
    def _public(build: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in build.items() if not k.startswith("_")}

    def get_build(self, build_id: str) -> dict[str, Any]:
        return self._public(self.builds[build_id])
