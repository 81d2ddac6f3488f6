"""A local HTTP server speaking the Cloud Quotas `quotaInfos.get` and Compute Engine
`regions.get` / `projects.get` shapes, for `trainstack quota --live` tests; and
`provider_invoke`, which answers QuotaGuard's `getSQuotaInfo` invoke under Pulumi mocks by
calling that server as the pulumi-gcp provider calls the API."""

from __future__ import annotations

import json
from http.server import BaseHTTPRequestHandler
from typing import Any

import requests

from tests.fakes import LocalServer
from trainstack.infra.mocks import InvokeFailure, InvokeFn

_STATUS = {403: "PERMISSION_DENIED", 404: "NOT_FOUND"}


def _error(code: int, message: str) -> dict[str, Any]:
    """Google's JSON error body."""
    return {"error": {"code": code, "message": message, "status": _STATUS[code]}}


class QuotaFakeServer(LocalServer):
    """limits: {quota_id: [(dimensions, value)]}; usage: {scope: [(metric, limit, usage)]}.

    Ids not in `limits` are answered 404 NOT_FOUND, as the API answers an id it does not
    know; ids in `forbidden` 403 PERMISSION_DENIED, as for a caller without
    `cloudquotas.quotas.get` (https://cloud.google.com/docs/quotas/reference/rest/v1/
    projects.locations.services.quotaInfos/get names that permission)."""

    def __init__(
        self,
        limits: dict[str, list[tuple[dict[str, str], str]]],
        usage: dict[str, list[tuple[str, float, float]]],
        forbidden: frozenset[str] = frozenset(),
        metrics: dict[str, str] | None = None,
    ) -> None:
        self.limits = limits
        self.usage = usage
        self.forbidden = forbidden
        self.metrics = metrics or {}
        """quota_id -> its `metric` (`<service>/<name>`): the quotas `quotaInfos.list` of
        a service answers (https://cloud.google.com/docs/quotas/reference/rest/v1/
        projects.locations.services.quotaInfos/list)."""
        self.requests: list[str] = []
        super().__init__(self._handler())

    @property
    def endpoint(self) -> str:
        return self.base_url

    def answer(self, path: str) -> tuple[int, Any]:
        self.requests.append(path)
        parts = path.strip("/").split("/")
        if parts[:1] == ["v1"] and parts[-1] == "quotaInfos":
            service = parts[-2]
            return 200, {
                "quotaInfos": [
                    self._info("/".join(parts[1:]) + "/" + quota_id, quota_id)
                    for quota_id, metric in sorted(self.metrics.items())
                    if metric.startswith(f"{service}/") and quota_id in self.limits
                ]
            }
        if parts[:1] == ["v1"] and "quotaInfos" in parts:
            quota_id = parts[-1]
            if quota_id in self.forbidden:
                return 403, _error(403, f"Permission 'cloudquotas.quotas.get' denied on {quota_id}")
            if quota_id not in self.limits:
                return 404, _error(404, f"quota {quota_id} not found")
            return 200, self._info("/".join(parts[1:]), quota_id)
        if parts[:2] == ["compute", "v1"]:
            scope = parts[5] if len(parts) > 5 and parts[4] == "regions" else "global"
            quotas = [
                {"metric": m, "limit": limit, "usage": used}
                for m, limit, used in self.usage.get(scope, [])
            ]
            return 200, {"name": scope, "quotas": quotas}
        return 404, {"error": {"code": 404, "message": "no such path"}}

    def _info(self, name: str, quota_id: str) -> dict[str, Any]:
        info: dict[str, Any] = {
            "name": name,
            "quotaId": quota_id,
            "dimensionsInfos": [
                {"dimensions": dims, "details": {"value": value}}
                for dims, value in self.limits[quota_id]
            ],
        }
        if quota_id in self.metrics:
            info["metric"] = self.metrics[quota_id]
        return info

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # keep test output clean
                pass

            def do_GET(self) -> None:
                status, body = fake.answer(self.path)
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        return Handler


def provider_invoke(fake: QuotaFakeServer, project: str) -> InvokeFn:
    """`gcp:cloudquota/getSQuotaInfo` as the provider answers it, over HTTP to `fake`.

    The provider is Terraform's `google_cloud_quotas_quota_info` data source
    (hashicorp/terraform-provider-google,
    google/services/cloudquotas/data_source_google_cloud_quotas_quota_info.go): a GET of
    `{parent}/locations/global/services/{service}/quotaInfos/{quota_id}`; a 404 goes through
    `transport_tpg.HandleNotFoundError`, which clears the id and returns NO error, so the
    invoke answers an empty result; any other error is wrapped as "Error when reading or
    editing CloudQuotasQuotaInfo ...: googleapi: Error <code>: <message>"; each
    dimensionsInfo's `details` object is flattened to a one-element list.
    """

    def answer(args: dict[str, Any]) -> dict[str, Any]:
        assert args["parent"] == f"projects/{project}"
        url = (
            f"{fake.endpoint}/v1/{args['parent']}/locations/global/services/{args['service']}"
            f"/quotaInfos/{args['quotaId']}"
        )
        response = requests.get(url, timeout=10)
        if response.status_code == 404:
            return {}
        if response.status_code != 200:
            error = response.json()["error"]
            raise InvokeFailure(
                'Error when reading or editing CloudQuotasQuotaInfo "": googleapi: Error '
                f"{error['code']}: {error['message']}"
            )
        body = response.json()
        return {
            "name": body["name"],
            "quotaId": body["quotaId"],
            "service": args["service"],
            "dimensionsInfos": [
                {
                    "dimensions": info.get("dimensions") or {},
                    "details": [info["details"]] if info.get("details") else [],
                    "applicableLocations": [],
                }
                for info in body.get("dimensionsInfos", [])
            ],
        }

    return answer


def provider_list_invoke(fake: QuotaFakeServer, project: str) -> InvokeFn:
    """`gcp:cloudquota/getSQuotaInfos` as the provider answers it (Terraform's
    `google_cloud_quotas_quota_infos` data source): a GET of
    `{parent}/locations/global/services/{service}/quotaInfos`, each entry flattened as
    `provider_invoke` flattens one."""

    def answer(args: dict[str, Any]) -> dict[str, Any]:
        assert args["parent"] == f"projects/{project}"
        url = f"{fake.endpoint}/v1/{args['parent']}/locations/global/services/{args['service']}/quotaInfos"
        response = requests.get(url, timeout=10)
        if response.status_code != 200:
            raise InvokeFailure(f"googleapi: Error {response.status_code}")
        return {
            "parent": args["parent"],
            "service": args["service"],
            "quotaInfos": [
                {
                    "name": info["name"],
                    "quotaId": info["quotaId"],
                    "metric": info.get("metric", ""),
                    "service": args["service"],
                    "dimensionsInfos": [
                        {
                            "dimensions": d.get("dimensions") or {},
                            "details": [d["details"]] if d.get("details") else [],
                            "applicableLocations": [],
                        }
                        for d in info.get("dimensionsInfos", [])
                    ],
                }
                for info in response.json().get("quotaInfos", [])
            ],
        }

    return answer
