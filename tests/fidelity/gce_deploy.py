"""`pulumi up` of the gce backend's instance group as the Pulumi engine and the Terraform
provider under pulumi-gcp run it, against `tests.fakes.compute_server.ComputeFakeServer`.

    with ComputeFakeServer() as api:
        stack = Stack(Provider(api.endpoint))
        stack.up(registered(stack_config))          # first deploy
        stack.up(registered(stack_config), refresh=True)  # `pulumi up --refresh`
        api.members("my-ml-project/us-central1-c/prod-a100-gce-a100")

Inputs are what the program registers under mocks (`registered`: `run_program` of
`main_program`, the recording `trainstack plan` makes), for the instance template, the
group and its per-instance configs; no other resource changes the group's VMs.

The provider, modelled on terraform-provider-google (the mirror's HEAD;
google/services/compute/):
- group, resource_compute_instance_group_manager.go: Create
  (resourceComputeInstanceGroupManagerCreate) POSTs `insert` with
  `"targetSize": int64(d.Get("target_size").(int))`, 0 where the program sets none; Read
  GETs it (a 404 drops it); Update PATCHes the changed fields (`versions`, `updatePolicy`,
  ...) and then calls `resize` only `if d.HasChange("target_size")`; Delete DELETEs it.
  `target_size` is Optional and Computed: a program that leaves it out never changes it.
- per-instance config, resource_compute_per_instance_config.go: Create POSTs
  `createInstances` with `{"instances": [{name, preservedState}]}`
  (resourceComputePerInstanceConfigEncoder); Read POSTs `listPerInstanceConfigs` and looks
  for its name (flattenNestedComputePerInstanceConfig: not listed, the resource is gone);
  Delete with `remove_instance_on_destroy` POSTs `deleteInstances` with
  `zones/<zone>/instances/<name>` and polls `listManagedInstances` filtered by the name
  until it is gone (stateful_mig_polling.go, PollCheckInstanceConfigInstanceDeleted).

- resize request (flex-start), resource_compute_resize_request.go:
  Create (resourceComputeResizeRequestCreate) POSTs `.../resizeRequests` with `name`,
  `description`, `resizeBy`, `requestedRunDuration` {seconds} and `zone` as the relative
  link `projects/<p>/zones/<z>` (expandComputeResizeRequestZone), then Reads it; Read GETs
  it (a 404 drops it) and keeps `state`; Delete (resourceComputeResizeRequestDelete) POSTs
  `.../cancel` first when the state last read is CREATING or ACCEPTED, then DELETEs it.
  Every field is ForceNew.

The engine: `refresh` Reads every resource and drops the ones gone; then, in registration
order, a new resource is created, a changed one updated in place or, where a ForceNew field
changed (the schemas' ForceNew, components/catalog/replace_on_change.py), replaced: deleted
first where it was registered with `delete_before_replace` (its dependents, which take its
outputs into ForceNew inputs, deleted before it and created again after it), else created
first and the old one deleted after every create; resources the program no longer
registers are deleted last, newest first. The template makes no call here: its self link is
a digest of its inputs (every input of an instance template forces a new one), which the
group's `versions` take where the plan says "(known after deploy)". `destroy` deletes what is
in the state, dependents before what they depend on (each antichain together); a delete
that fails stops it after that antichain, the rest left in the state. Whether `up` and `destroy` refresh first
is the project's: `refresh_option` is pulumi/pulumi pkg/cmd/pulumi/operations/io.go
getRefreshOption (a `--refresh` given wins, else `options.refresh: always` in Pulumi.yaml,
else no refresh), which up.go, preview.go and destroy.go call.

A call the API refuses is the provider's error: Delete of a per-instance config with
`remove_instance_on_destroy` (resourceComputePerInstanceConfigDelete) returns
`transport_tpg.HandleNotFoundError(err, ...)` for a failed `deleteInstances`, which takes a
404 as gone and returns every other error (google/transport/transport.go
HandleNotFoundError); it sends no `skipInstancesOnValidationError`, so a VM no longer in the
group fails the call (`tests.fakes.compute_server`: 400).
"""

from __future__ import annotations

import hashlib
import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from trainstack.infra.compose import main_program
from trainstack.infra.mocks import UNKNOWN, RecordedResource, run_program

TEMPLATE = "gcp:compute/instanceTemplate:InstanceTemplate"
GROUP = "gcp:compute/instanceGroupManager:InstanceGroupManager"
CONFIG = "gcp:compute/perInstanceConfig:PerInstanceConfig"
RESIZE = "gcp:compute/resizeRequest:ResizeRequest"
REPLACE_ON = {
    GROUP: ("baseInstanceName", "name", "project", "zone"),
    CONFIG: ("instanceGroupManager", "name", "project", "zone"),
    RESIZE: (
        "description",
        "instanceGroupManager",
        "name",
        "project",
        "requestedRunDuration",
        "resizeBy",
        "zone",
    ),
}
"""The ForceNew fields the programs set (the two schemas)."""
COMPUTED = {GROUP: ("targetSize",)}
"""Optional and Computed: left out of the program, the state keeps what Read found."""
CLIENT_SIDE = {GROUP: ("waitForInstances",)}
"""Fields Update sends nowhere."""
POLLS = 50


class ProviderError(Exception):
    """A call the API refused with other than 404: the provider returns it to the engine."""

    def __init__(self, call: str, code: int, message: str) -> None:
        super().__init__(f"{call}: HTTP {code}: {message}")
        self.code = code
        self.message = message


class DestroyFailed(Exception):
    """`pulumi destroy` stopped: the deletes the provider returned an error for, by name."""

    def __init__(self, refused: Mapping[str, ProviderError]) -> None:
        super().__init__("; ".join(f"{name}: {err}" for name, err in sorted(refused.items())))
        self.refused = dict(refused)


def refresh_option(project_file: Path, flag: str = "") -> bool:
    """Whether `pulumi up`/`preview`/`destroy` in the project of `project_file` refresh first
    (getRefreshOption): `flag` is `--refresh`'s value ("" when not given)."""
    if flag:
        return flag.lower() in ("1", "t", "true")  # strconv.ParseBool's true forms
    options = yaml.safe_load(project_file.read_text()).get("options") or {}
    return bool(options.get("refresh") == "always")


@dataclass
class Deployed:
    """One resource in the stack's state."""

    type: str
    inputs: dict[str, Any]
    """Resolved (no unknowns)."""
    outputs: dict[str, Any]
    delete_before_replace: bool
    urn: str = ""
    dependencies: tuple[str, ...] = ()


def registered(config: Mapping[str, Any], stack: str = "prod-a100-gce") -> list[RecordedResource]:
    """The template, group, per-instance configs and resize request the stack program
    registers for `config` (a stack file's `config:`), in registration order."""
    run = run_program(main_program, config=config, stack=stack)
    return [r for r in run.resources if r.type in (TEMPLATE, GROUP, CONFIG, RESIZE)]


def template_link(inputs: Mapping[str, Any]) -> str:
    """The self link standing for a template with these inputs."""
    digest = hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()
    return (
        f"https://www.googleapis.com/compute/v1/projects/{inputs['project']}/global/"
        f"instanceTemplates/{inputs['namePrefix']}{digest[:12]}?uniqueId={int(digest[:12], 16)}"
    )


def _fixed(value: Any) -> dict[str, int]:
    return {"fixed": int(value or 0)}


class Provider:
    """The provider's create, read, update and delete of the two resource types."""

    def __init__(self, endpoint: str) -> None:
        self.endpoint = endpoint

    def _send(
        self, method: str, path: str, body: Any = None, query: Mapping[str, str] | None = None
    ) -> dict[str, Any] | None:
        """One REST call (transport_tpg.SendRequest); None for a 404."""
        url = self.endpoint + path + (f"?{urllib.parse.urlencode(query)}" if query else "")
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(url, data=data, method=method)
        request.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(request, timeout=10) as answer:
                found: dict[str, Any] = json.loads(answer.read() or b"{}")
                return found
        except urllib.error.HTTPError as err:
            if err.code == 404:
                return None
            raw = err.read()
            try:
                message = str(json.loads(raw)["error"]["message"])
            except (ValueError, KeyError, TypeError):
                message = raw.decode(errors="replace")
            raise ProviderError(f"{method} {path}", err.code, message) from None

    @staticmethod
    def _group_path(i: Mapping[str, Any], name: str | None = None) -> str:
        path = f"projects/{i['project']}/zones/{i['zone']}/instanceGroupManagers"
        return f"{path}/{name or i['name']}"

    def _config_path(self, i: Mapping[str, Any], verb: str) -> str:
        return f"{self._group_path(i, i['instanceGroupManager'])}/{verb}"

    def _request_path(self, i: Mapping[str, Any], name: str = "") -> str:
        path = self._config_path(i, "resizeRequests")
        return f"{path}/{name}" if name else path

    def create(self, type_: str, i: Mapping[str, Any]) -> dict[str, Any]:
        if type_ == GROUP:
            body = {
                "name": i["name"],
                "description": i.get("description", ""),
                "baseInstanceName": i["baseInstanceName"],
                "targetSize": int(i.get("targetSize", 0)),
                "listManagedInstancesResults": "PAGELESS",
                "versions": [
                    {"name": v["name"], "instanceTemplate": v["instanceTemplate"]}
                    for v in i["versions"]
                ],
                "updatePolicy": self._update_policy(i.get("updatePolicy") or {}),
                "instanceLifecyclePolicy": i.get("instanceLifecyclePolicy") or {},
            }
            path = f"projects/{i['project']}/zones/{i['zone']}/instanceGroupManagers"
            self._send("POST", path, body)
        elif type_ == CONFIG:
            entry = {"name": i["name"], "preservedState": i.get("preservedState") or {}}
            self._send("POST", self._config_path(i, "createInstances"), {"instances": [entry]})
        elif type_ == RESIZE:
            body = {
                "name": i["name"],
                "description": i.get("description"),
                "resizeBy": int(i["resizeBy"]),
                "requestedRunDuration": i["requestedRunDuration"],
                "zone": f"projects/{i['project']}/zones/{i['zone']}",
            }
            self._send("POST", self._request_path(i), {k: v for k, v in body.items() if v})
        found = self.read(type_, i)
        assert found is not None, f"{type_} {i['name']} not found after its create"
        return found

    @staticmethod
    def _update_policy(policy: Mapping[str, Any]) -> dict[str, Any]:
        """expandUpdatePolicy (its null `percent`s left out)."""
        return {
            "minimalAction": policy.get("minimalAction"),
            "type": policy.get("type"),
            "replacementMethod": policy.get("replacementMethod"),
            "maxSurge": _fixed(policy.get("maxSurgeFixed")),
            "maxUnavailable": _fixed(policy.get("maxUnavailableFixed")),
        }

    def read(self, type_: str, i: Mapping[str, Any]) -> dict[str, Any] | None:
        if type_ == TEMPLATE:
            return {"selfLinkUnique": template_link(i)}
        if type_ == GROUP:
            found = self._send("GET", self._group_path(i))
            return None if found is None else {"targetSize": int(found.get("targetSize", 0))}
        if type_ == RESIZE:
            request = self._send("GET", self._request_path(i, i["name"]))
            return None if request is None else {"state": request.get("state")}
        listed = self._send("POST", self._config_path(i, "listPerInstanceConfigs")) or {}
        mine = [item for item in listed.get("items", []) if item.get("name") == i["name"]]
        return {"preservedState": mine[0].get("preservedState")} if mine else None

    def update(self, type_: str, old: Deployed, new: Mapping[str, Any]) -> dict[str, Any]:
        assert type_ == GROUP, f"in-place update of {type_} is not modelled"
        patch: dict[str, Any] = {}
        if new.get("versions") != old.inputs.get("versions"):
            patch["versions"] = [
                {"name": v["name"], "instanceTemplate": v["instanceTemplate"]}
                for v in new["versions"]
            ]
        if new.get("updatePolicy") != old.inputs.get("updatePolicy"):
            patch["updatePolicy"] = self._update_policy(new.get("updatePolicy") or {})
        for key in ("description", "instanceLifecyclePolicy"):
            if new.get(key) != old.inputs.get(key):
                patch[key] = new.get(key)
        if patch:
            self._send("PATCH", self._group_path(new), patch)
        if "targetSize" in new and int(new["targetSize"]) != old.outputs.get("targetSize"):
            query = {"size": str(int(new["targetSize"]))}
            self._send("POST", self._group_path(new) + "/resize", query=query)
        found = self.read(GROUP, new)
        assert found is not None
        return found

    def delete(
        self, type_: str, i: Mapping[str, Any], outputs: Mapping[str, Any] | None = None
    ) -> None:
        """`outputs`: what the last Read left in the state (a resize request's `state`)."""
        if type_ == GROUP:
            self._send("DELETE", self._group_path(i))
        elif type_ == RESIZE:
            if (outputs or {}).get("state") in ("CREATING", "ACCEPTED"):
                self._send("POST", self._request_path(i, i["name"]) + "/cancel")
            self._send("DELETE", self._request_path(i, i["name"]))
        elif type_ == CONFIG:
            assert i.get("removeInstanceOnDestroy"), "deletePerInstanceConfigs is not modelled"
            vm = f"zones/{i['zone']}/instances/{i['name']}"
            self._send("POST", self._config_path(i, "deleteInstances"), {"instances": [vm]})
            query = {"filter": f'name="{i["name"]}"'}
            for _ in range(POLLS):
                listed = self._send(
                    "POST", self._config_path(i, "listManagedInstances"), None, query
                )
                if not (listed or {}).get("managedInstances"):
                    return
            raise AssertionError(f"instance {i['name']} still there after {POLLS} polls")


class Stack:
    """The stack's state and the engine's steps over it."""

    def __init__(self, provider: Provider) -> None:
        self.provider = provider
        self.state: dict[str, Deployed] = {}
        """By logical name, in the order they were created."""

    def refresh(self) -> None:
        for name, deployed in list(self.state.items()):
            found = self.provider.read(deployed.type, deployed.inputs)
            if found is None:
                del self.state[name]
            else:
                deployed.outputs = found

    def up(
        self,
        resources: Iterable[RecordedResource],
        *,
        refresh: bool = False,
        replace: Iterable[str] = (),
    ) -> None:
        """`pulumi up` (`--refresh`; `--replace` of the logical names in `replace`)."""
        if refresh:
            self.refresh()
        forced = set(replace)
        wanted: list[str] = []
        after: list[Deployed] = []
        links: dict[str, str] = {}
        for r in resources:
            wanted.append(r.name)
            inputs = _resolved(r.inputs, links)
            old = self.state.get(r.name)
            if old is not None and (r.name in forced or self._replaces(r.type, old, inputs)):
                if r.delete_before_replace:
                    for name in reversed(list(self.state)):
                        if old.urn in self.state[name].dependencies:
                            dependent = self.state.pop(name)
                            self.provider.delete(
                                dependent.type, dependent.inputs, dependent.outputs
                            )
                    self.provider.delete(old.type, old.inputs, old.outputs)
                else:
                    after.append(old)
                del self.state[r.name]
                old = None
            if old is None:
                outputs = self.provider.create(r.type, inputs)
                self.state[r.name] = Deployed(
                    r.type, inputs, outputs, r.delete_before_replace, r.urn, r.dependencies
                )
            elif self._changes(r.type, old, inputs):
                old.outputs = self.provider.update(r.type, old, inputs)
                old.inputs = inputs
            if r.type == TEMPLATE:
                links[TEMPLATE] = self.state[r.name].outputs["selfLinkUnique"]
        gone = [self.state.pop(n) for n in reversed(list(self.state)) if n not in wanted]
        for deployed in [*reversed(after), *gone]:
            self.provider.delete(deployed.type, deployed.inputs, deployed.outputs)

    def destroy(self, *, refresh: bool = False) -> None:
        """`pulumi destroy` (`refresh`: the project's option or `--refresh`): the deletes in
        antichains, each the resources nothing left in the state depends on, run together
        (pulumi/pulumi pkg/resource/deploy/step_generator.go ScheduleDeletes,
        step_executor.go ExecuteParallel); after an antichain with a refused delete no
        further one starts (cancelDueToError), and DestroyFailed lists what was refused,
        those resources left in the state."""
        if refresh:
            self.refresh()
        while self.state:
            needed = {d for deployed in self.state.values() for d in deployed.dependencies}
            antichain = [n for n, deployed in self.state.items() if deployed.urn not in needed]
            refused: dict[str, ProviderError] = {}
            for name in antichain:
                deployed = self.state[name]
                try:
                    self.provider.delete(deployed.type, deployed.inputs, deployed.outputs)
                except ProviderError as err:
                    refused[name] = err
                else:
                    del self.state[name]
            if refused:
                raise DestroyFailed(refused)

    @staticmethod
    def _replaces(type_: str, old: Deployed, new: Mapping[str, Any]) -> bool:
        if type_ == TEMPLATE:
            return old.inputs != new
        return any(old.inputs.get(k) != new.get(k) for k in REPLACE_ON.get(type_, ()))

    @staticmethod
    def _changes(type_: str, old: Deployed, new: Mapping[str, Any]) -> bool:
        skip = set(CLIENT_SIDE.get(type_, ()))
        changed = {k for k in old.inputs.keys() | new.keys() if old.inputs.get(k) != new.get(k)}
        computed = {k for k in COMPUTED.get(type_, ()) if k not in new}
        if "targetSize" in new and int(new["targetSize"]) != old.outputs.get("targetSize"):
            changed.add("targetSize")  # configured: diffed against the state Read left
        return bool(changed - skip - computed)


def _resolved(inputs: Mapping[str, Any], links: Mapping[str, str]) -> dict[str, Any]:
    """`inputs` with the template's self link where the plan has it unknown."""
    if TEMPLATE not in links:
        return dict(inputs)
    text = json.dumps(inputs).replace(json.dumps(UNKNOWN), json.dumps(links[TEMPLATE]))
    resolved: dict[str, Any] = json.loads(text)
    return resolved
