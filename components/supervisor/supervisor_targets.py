"""The compute the run supervisor (`main.py` beside it) looks after, through Google's REST
APIs: a TPU node or queued resource (`Tpu`), a Compute Engine managed instance group
(`Group`), a GKE node pool (`NodePool`), a GKE cluster's TPU slice pools (`NodePools`). Each says what state it is in, whether that bills,
and how it is stopped; `main.py` decides when. Shipped in the bundle beside `main.py`."""

from __future__ import annotations

import os
from typing import Any

from googleapiclient import discovery
from googleapiclient.errors import HttpError

Json = dict[str, Any]
ENDPOINT_ENV = "TRAINSTACK_TPU_API_ENDPOINT"
COMPUTE_ENDPOINT_ENV = "TRAINSTACK_COMPUTE_API_ENDPOINT"
CONTAINER_ENDPOINT_ENV = "TRAINSTACK_CONTAINER_API_ENDPOINT"
NOT_FOUND = "NOT_FOUND"
STOPPED = "STOPPED"
"""What a group or node pool of size 0 with no instances left is seen as."""
DELETING_ = "DELETING_"
"""`DELETING_<n>`: a group or pool of size 0 whose `n` instances are still being deleted."""
RECOVER = {"node": ("PREEMPTED", "TERMINATED"), "queued": ("SUSPENDED", "FAILED")}
HEALTHY = {"node": "READY", "queued": "ACTIVE"}
"""Also what bills: a TPU while READY (tpu/pricing), a queued resource's node while ACTIVE."""


def _found(request: Any) -> Any:
    """What a get answers, or None on 404; any other error is raised (`main._unreadable`)."""
    try:
        return request.execute(num_retries=2)
    except HttpError as err:
        if err.resp.status == 404:
            return None
        raise


def _api(name: str, version: str, endpoint_env: str, credentials: Any) -> Any:
    """The API's discovery client (at the endpoint `endpoint_env` names, where set)."""
    endpoint = {"api_endpoint": os.environ[endpoint_env]} if os.environ.get(endpoint_env) else None
    return discovery.build(
        name, version, credentials=credentials, client_options=endpoint, cache_discovery=False
    )


class Tpu:
    """The one node or queued resource this stack owns, through the TPU v2 REST API."""

    def __init__(self, config: Json, credentials: Any) -> None:
        self.api = _api("tpu", "v2", ENDPOINT_ENV, credentials)
        self.kind, self.name, self.body = config["kind"], str(config["name"]), config["body"]
        self.parent, _, self.id = self.name.rpartition(
            "/nodes/" if self.kind == "node" else "/queuedResources/"
        )
        locations = self.api.projects().locations()
        self.collection = locations.nodes() if self.kind == "node" else locations.queuedResources()

    def state(self) -> str:
        found = _found(self.collection.get(name=self.name))
        if found is None:
            return NOT_FOUND
        state = found.get("state")  # a node's is a string; a queued resource's {"state": ...}
        state = state.get("state") if isinstance(state, dict) else state
        return str(state or "STATE_UNSPECIFIED")

    def billing(self, seen: str) -> bool:
        return seen == HEALTHY[self.kind]

    def delete(self) -> None:
        # force: an ACTIVE queued resource is deleted with its nodes (without it the API
        # refuses one that still has nodes).
        force = {"force": True} if self.kind == "queued" else {}
        self.collection.delete(name=self.name, **force).execute(num_retries=2)

    stop = delete
    STOPS_AT_ONCE = True  # a node whose delete is accepted is no longer READY (what bills)

    def create(self) -> None:
        key = "nodeId" if self.kind == "node" else "queuedResourceId"
        self.collection.create(parent=self.parent, body=self.body, **{key: self.id}).execute()


NOT_RUNNING = ("", "PENDING", "STOPPED", "SUSPENDED", "TERMINATED")
"""A managed instance's `instanceStatus` while it does not run (compute.v1 discovery,
ManagedInstance.instanceStatus: "" "when the instance does not exist"; PENDING "waiting for
available capacity"; STOPPED "has stopped successfully"; SUSPENDED "has suspended";
TERMINATED "has stopped (either by explicit action or underlying failure)", which is where
a Spot VM goes on preemption: Scheduling.instanceTerminationAction STOP, "Stop the VM ...
default action"). A group whose instances are all in these bills no accelerator and is not
counted. Which states Google bills is in no page read here (the stored instance life cycle
pages list the states, not their charges): every other state is counted, the short starts
and stops included, which errs toward counting too much, as a spend cap should."""


def _size_state(views: list[tuple[int, int, bool]]) -> str:
    """`SIZE_<target>` while the groups (`Group.view`) ask for instances, `DELETING_<left>`
    once they ask for none until none is left and every group is stable, then `STOPPED`."""
    target, left = sum(v[0] for v in views), sum(v[1] for v in views)
    if target:
        return f"SIZE_{target}"
    return f"{DELETING_}{left}" if left or not all(v[2] for v in views) else STOPPED


def left_to_delete(seen: str) -> int | None:
    """The instances still being deleted (`DELETING_<n>`), else None."""
    return int(seen.removeprefix(DELETING_)) if seen.startswith(DELETING_) else None


def _group_parts(url_or_name: str) -> tuple[str, str, str]:
    """(project, zone, name) of `.../projects/P/zones/Z/instanceGroupManagers/N` (a name or
    the URL GKE lists in `instanceGroupUrls`)."""
    parts = url_or_name.split("/")
    return parts[parts.index("projects") + 1], parts[parts.index("zones") + 1], parts[-1]


class Group:
    """A managed instance group (Compute Engine v1): billing while it holds instances;
    stopped by deleting its VMs by name, which is done once it holds none."""

    STOPS_AT_ONCE = False

    def __init__(self, config: Json, credentials: Any) -> None:
        self.api = _api("compute", "v1", COMPUTE_ENDPOINT_ENV, credentials)
        self.name: str = config["name"]
        self.instances: list[str] = list(config.get("instances") or [])
        self.running: int | None = None
        """Instances of the groups not `NOT_RUNNING` at the last `state()` (None: none read)."""

    def members(self, name: str) -> list[Json]:
        """The group's managed instances (`listManagedInstances`: "Lists all of the instances
        in the managed instance group"; one answer: a group's `listManagedInstancesResults`
        defaults to PAGELESS, "all instances are returned in a single response", and
        trainstack sets none)."""
        project, zone, group = _group_parts(name)
        found = (
            self.api.instanceGroupManagers()
            .listManagedInstances(project=project, zone=zone, instanceGroupManager=group)
            .execute(num_retries=2)
        )
        return list((found or {}).get("managedInstances") or [])

    def running_in(self, name: str, target: int) -> int:
        """How many of the group's instances run (`NOT_RUNNING`); none listed where it asks for
        none (a group emptying is counted by `_size_state` until its VMs are gone)."""
        if not target:
            return 0
        return sum(m.get("instanceStatus", "") not in NOT_RUNNING for m in self.members(name))

    def view(self, name: str) -> tuple[int, int, bool] | None:
        """(target size, instances left, stable) of the group (one GET); None if there is none."""
        project, zone, group = _group_parts(name)
        igm = self.api.instanceGroupManagers()
        found = _found(igm.get(project=project, zone=zone, instanceGroupManager=group))
        if found is None:
            return None
        # targetSize drops as soon as a delete is accepted, VMs or not (`main.py`'s docstring).
        # compute.v1 discovery, InstanceGroupManager: `currentActions` counts instances by
        # action (`deleting`: "scheduled to be deleted or are currently being deleted", ...);
        # `status.isStable`: "none of the instances ... is currently undergoing any type of
        # change (for example, creation, restart, or deletion); no future changes are
        # scheduled". Empty: all counts 0 and stable.
        left = sum(int(n) for n in (found.get("currentActions") or {}).values())
        stable = (found.get("status") or {}).get("isStable") is True
        return int(found.get("targetSize", 0)), left, stable

    def state(self) -> str:
        view = self.view(self.name)
        if view is None:
            self.running = 0
            return NOT_FOUND
        self.running = self.running_in(self.name, view[0])
        return _size_state([view])

    def billing(self, seen: str) -> bool:
        """While its VMs are being deleted, or it asks for some and one of them runs (a group
        whose Spot VMs were all preempted bills none until it recreates them)."""
        return seen.startswith(DELETING_) or (seen.startswith("SIZE_") and self.running != 0)

    def stop(self) -> None:
        """Delete the stack's VMs by name as the provider deletes a per-instance config
        (`catalog.billing.MIG_DELETE_INSTANCES_*`): their configs go with them, and
        `pulumi up --refresh` creates them again. Any other VM the group holds (someone
        resized it) is deleted by name too, from the group's list: a VM not named is not
        deleted, and would bill on. One already gone or being deleted is skipped
        (`skipInstancesOnValidationError`), not a failed stop."""
        project, zone, group = _group_parts(self.name)
        listed = sorted(str(m["name"]) for m in self.members(self.name) if m.get("name"))
        names = self.instances + [n for n in listed if n not in self.instances]
        body = {
            "instances": [f"zones/{zone}/instances/{name}" for name in names],
            "skipInstancesOnValidationError": True,
        }
        self.api.instanceGroupManagers().deleteInstances(
            project=project, zone=zone, instanceGroupManager=group, body=body
        ).execute(num_retries=2)


class NodePool:
    """A GKE node pool (container v1): billing while any of its instance groups has
    instances; stopped by setting its size to 0 (`nodePools.setSize`; GKE deletes the VMs
    through its groups, as a resize does), an autoscaled (flex-start) one by its bounds to 0
    and its groups' VMs deleted (`stop_autoscaled`); done once its groups hold none."""

    STOPS_AT_ONCE = False

    def __init__(self, config: Json, credentials: Any) -> None:
        self.api = _api("container", "v1", CONTAINER_ENDPOINT_ENV, credentials)
        self.groups = Group(config, credentials)
        self.name: str = config["name"]
        self.pools = self.api.projects().locations().clusters().nodePools()
        self.autoscaled = False
        """Whether the pool was autoscaled at the last `state()` (`NodePools.state`)."""
        self.urls: list[str] = []
        """Its instance groups at the last `state()` (`instanceGroupUrls`)."""

    def state(self) -> str:
        pool = _found(self.pools.get(name=self.name))
        if pool is None:
            self.groups.running = 0
            return NOT_FOUND
        self.autoscaled = (pool.get("autoscaling") or {}).get("enabled") is True
        # A node pool reports no node count of its own: its groups' instances are it.
        self.urls = urls = list(pool.get("instanceGroupUrls", []))
        views = {url: self.groups.view(url) for url in urls}
        found = {url: v for url, v in views.items() if v is not None}
        self.groups.running = sum(self.groups.running_in(u, v[0]) for u, v in found.items())
        return _size_state(list(found.values()))

    def billing(self, seen: str) -> bool:
        return self.groups.billing(seen)

    def stop(self) -> None:
        if self.autoscaled:
            stop_autoscaled(self.pools, self.groups, self.name, self.urls, ZONAL_BOUNDS)
        else:
            self.pools.setSize(name=self.name, body={"nodeCount": 0}).execute(num_retries=2)


ZONAL_BOUNDS = ("minNodeCount", "maxNodeCount")
"""The bounds of a GKE GPU pool, planned per zone (`a100_cluster.gke`: `min_node_count`,
`max_node_count`): NodePoolAutoscaling.maxNodeCount "Maximum number of nodes for one location
in the node pool. Must be >= min_node_count" (container.v1 discovery)."""
TOTAL_BOUNDS = ("totalMinNodeCount", "totalMaxNodeCount")
"""The bounds of a TPU slice's pool, planned for the pool (`tpu_gke_slices`:
`total_min_node_count`, `total_max_node_count`): "The total_*_node_count fields are mutually
exclusive with the *_node_count fields" (container.v1 discovery, NodePoolAutoscaling), so a
pool's stop sends the family it was planned with."""


def autoscaled_stop(bounds: tuple[str, str]) -> Json:
    """The `nodePools.setAutoscaling` body ("Sets the autoscaling settings for the specified
    node pool", container.v1 discovery, POST `v1/{+name}:setAutoscaling`,
    `SetNodePoolAutoscalingRequest.autoscaling`) that holds a pool's bounds at 0: the minimum
    "Must be greater than or equal to 0", the maximum "greater than or equal to" it."""
    low, high = bounds
    return {"autoscaling": {"enabled": True, low: 0, high: 0, "locationPolicy": "ANY"}}


def stop_autoscaled(
    pools: Any, groups: Group, name: str, urls: list[str], bounds: tuple[str, str]
) -> None:
    """Stop an autoscaled (flex-start) pool: its bounds to 0, then its groups' VMs deleted.
    The cluster autoscaler owns such a pool's size ("the cluster autoscaler adds nodes to the
    node pool ... removes nodes ... to the minimum size that you designate",
    https://cloud.google.com/kubernetes-engine/docs/concepts/cluster-autoscaler), so a
    `setSize` would be undone while the run's pods ask for nodes; with a maximum of 0 it adds
    none. But it does not remove nodes that still run pods for a lowered maximum
    (kubernetes/autoscaler#5691, "CA does not enforce max node count": "Update args to
    --nodes=0:0 ... Nothing. Nodes keep running as they were"), and a hung run's pods are
    alive: so the VMs are deleted through the pool's instance groups, the call the autoscaler
    itself removes a GKE node with (kubernetes/autoscaler cluster-autoscaler/cloudprovider/
    gce/autoscaling_gce_client.go `autoscalingGceClientV1.DeleteInstances`:
    `gceService.InstanceGroupManagers.DeleteInstances(migRef.Project, migRef.Zone,
    migRef.Name, &req)`). deleteInstances lowers the group's targetSize by the VMs it deletes
    (compute.v1 discovery), and the maximum of 0 keeps the autoscaler from raising it again."""
    pools.setAutoscaling(name=name, body=autoscaled_stop(bounds)).execute(num_retries=2)
    for url in urls:
        project, zone, group = _group_parts(url)
        names = sorted(str(m["name"]) for m in groups.members(url) if m.get("name"))
        if not names:  # an empty group: nothing to delete
            continue
        # One already gone or being deleted is skipped, not a failed stop (as `Group.stop`).
        body = {
            "instances": [f"zones/{zone}/instances/{n}" for n in names],
            "skipInstancesOnValidationError": True,
        }
        groups.api.instanceGroupManagers().deleteInstances(
            project=project, zone=zone, instanceGroupManager=group, body=body
        ).execute(num_retries=2)


class NodePools:
    """A GKE cluster's node pools (container v1), one per TPU slice: billing while any of
    their instance groups has a VM running (summed as `NodePool` reads one pool); stopped by
    setting each pool to 0 (`nodePools.setSize`), an autoscaled one as `stop_autoscaled`
    (its pods are a JobSet's, alive in a hung run); done once their groups hold no VM.
    `name` is the cluster's, `pools` the pools' ids in it."""

    STOPS_AT_ONCE = False

    def __init__(self, config: Json, credentials: Any) -> None:
        self.api = _api("container", "v1", CONTAINER_ENDPOINT_ENV, credentials)
        self.groups = Group(config, credentials)
        self.name: str = config["name"]
        self.pool_names = [f"{self.name}/nodePools/{pool}" for pool in config["pools"]]
        self.pools = self.api.projects().locations().clusters().nodePools()
        self.seen: dict[str, bool] = {}
        """The pools found at the last `state()`: whether each is autoscaled."""
        self.urls: dict[str, list[str]] = {}
        """The pools' instance groups at the last `state()` (`instanceGroupUrls`)."""

    def state(self) -> str:
        self.seen, self.urls, views, running = {}, {}, [], 0
        for name in self.pool_names:
            pool = _found(self.pools.get(name=name))
            if pool is None:
                continue
            # NodePool.autoscaling.enabled: "Is autoscaling enabled for this node pool."
            self.seen[name] = (pool.get("autoscaling") or {}).get("enabled") is True
            self.urls[name] = list(pool.get("instanceGroupUrls", []))
            for url in self.urls[name]:
                view = self.groups.view(url)
                if view is not None:
                    views.append(view)
                    running += self.groups.running_in(url, view[0])
        self.groups.running = running
        return _size_state(views) if self.seen else NOT_FOUND

    def billing(self, seen: str) -> bool:
        return self.groups.billing(seen)

    def stop(self) -> None:
        """Every pool found at the last check (a deleted one bills nothing)."""
        for name, autoscaled in self.seen.items():
            if autoscaled:
                stop_autoscaled(self.pools, self.groups, name, self.urls[name], TOTAL_BOUNDS)
            else:
                self.pools.setSize(name=name, body={"nodeCount": 0}).execute(num_retries=2)


Target = Tpu | Group | NodePool | NodePools
TARGETS: dict[str, type[Target]] = {
    "node": Tpu,
    "queued": Tpu,
    "mig": Group,
    "node_pool": NodePool,
    "node_pools": NodePools,
}


def target_of(config: Json, credentials: Any) -> Target:
    return TARGETS[config["kind"]](config, credentials)
