"""The run supervisor's source bundle (`trainstack.components.run_supervisor`): its
`config.json` and the reproducible zip Cloud Functions builds, named by its sha256."""

from __future__ import annotations

import hashlib
import io
import json
import re
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import pulumi

from trainstack.components._args import ArgsError
from trainstack.components._project import current_build_dir
from trainstack.components.catalog.supervisor_iam import NAME_FORMS, RESOURCE_NAMES
from trainstack.trainers.common.bounds import MAX_TOTAL_USD
from trainstack.trainers.common.run_records import ALIVE_SUFFIX, ENDED_SUFFIX, STOP_SUFFIX

SOURCE_DIR: Final = Path(__file__).resolve().parent / "supervisor"
SOURCE_FILES: Final = ("main.py", "supervisor_store.py", "supervisor_targets.py")
REQUIREMENTS: Final = (
    "functions-framework==3.10.2",
    "google-api-python-client==2.202.0",
    "google-auth==2.63.0",
    "google-auth-httplib2==0.4.4",
    "gcsfs==2026.10.1",
)
"""The bundle's requirements.txt (what main.py imports), pinned to the versions the tests run
main.py with, so every build of one zip gets the same libraries (here: no .txt package data)."""
OBJECT_PREFIX: Final = "supervisor/"
TPU_KINDS: Final = frozenset({"node", "queued"})
INSTANCE_NAME: Final = re.compile(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$")
"""A Compute Engine instance name (compute.v1 discovery, `Instance.name`: "must be 1-63
characters long and match the regular expression `[a-z]([-a-z0-9]*[a-z0-9])?`")."""
RUN_KEYS: Final = frozenset(
    {"end_uri", "stop_uri", "alive_uri", "node_count"}
    | {"max_run_seconds", "hourly_usd", "max_total_usd"}
)
"""What `run` may hold (`supervisor/main.py` reads each; all optional, but `alive_uri` needs
`node_count`: one heartbeat per node)."""
MAX_TOTAL_USD_ABOVE: Final = 0.0
"""`limits.max_total_usd` (and the component's `run.max_total_usd`) must be above this."""
_FIXED_TIME = (1980, 1, 1, 0, 0, 0)


def max_total_usd_problem(value: object, key: str) -> str | None:
    """The one rule of a run's spend cap, for the stack key and the component argument
    (which targets enforce it is the target's `supervised`, `trainstack.infra.targets`)."""
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not (MAX_TOTAL_USD_ABOVE < value < float("inf"))
    ):
        return f"{key}: {value!r} is not allowed; valid: a number of US dollars above 0"
    if value > MAX_TOTAL_USD:
        return f"{key}: {value!r} is too large; valid: <= {MAX_TOTAL_USD} (US dollars)"
    return None


@dataclass(frozen=True)
class SourceBundle:
    path: Path
    sha256: str

    @property
    def object_name(self) -> str:
        return f"{OBJECT_PREFIX}trainstack_supervisor-{self.sha256[:16]}.zip"


def source_zip(config: dict[str, Any]) -> bytes:
    """The function's source: `SOURCE_FILES`, `requirements.txt`, `config.json`; byte for
    byte the same for the same config (sorted members, fixed times and modes)."""
    members = {name: (SOURCE_DIR / name).read_bytes() for name in SOURCE_FILES}
    members["config.json"] = (json.dumps(config, sort_keys=True, indent=1) + "\n").encode()
    members["requirements.txt"] = "".join(f"{r}\n" for r in REQUIREMENTS).encode()
    raw = io.BytesIO()
    with zipfile.ZipFile(raw, "w", compression=zipfile.ZIP_DEFLATED) as bundle:
        for name in sorted(members):
            info = zipfile.ZipInfo(name, date_time=_FIXED_TIME)
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            bundle.writestr(info, members[name])
    return raw.getvalue()


def build_source(config: dict[str, Any], build_dir: Path | None = None) -> SourceBundle:
    """Write the bundle under `build_dir` (default: the current project's
    `current_build_dir()`), named by its digest, and return it."""
    build_dir = build_dir or current_build_dir()
    data = source_zip(config)
    digest = hashlib.sha256(data).hexdigest()
    build_dir.mkdir(parents=True, exist_ok=True)
    path = build_dir / f"trainstack_supervisor-{digest[:16]}.zip"
    if not path.is_file() or path.read_bytes() != data:
        tmp = path.with_suffix(".tmp")
        tmp.write_bytes(data)
        tmp.replace(path)
    return SourceBundle(path=path, sha256=digest)


def supervisor_config(
    kind: str,
    resource_name: str,
    body: dict[str, Any] | None,
    state_bucket: str,
    *,
    recover: bool | None = None,
    run: dict[str, Any] | None = None,
    instances: list[str] | None = None,
    pools: list[str] | None = None,
) -> dict[str, Any]:
    """`config.json` of the bundle: its state (and the marker it recovers under) is in
    `state_bucket`, the supervisor's own; `instances`: a `mig`'s VMs, which it deletes by
    name at the run's end (their per-instance configs with them); `pools`: a `node_pools`
    cluster's pools (ids), each set to 0 nodes at the run's end."""
    if kind not in RESOURCE_NAMES:
        raise ValueError(f"kind: {kind!r} is not allowed; valid: {', '.join(RESOURCE_NAMES)}")
    if not RESOURCE_NAMES[kind].match(resource_name):
        what = "a TPU " + kind if kind in TPU_KINDS else "a " + kind
        raise ValueError(
            f"resource_name: {resource_name!r} is not {what} name; valid: {NAME_FORMS[kind]}"
        )
    recover = kind in TPU_KINDS if recover is None else recover
    if recover and (kind not in TPU_KINDS or not body):
        raise ValueError(
            f"recover: only a TPU slice with its body is recreated; kind {kind!r}"
            + ("" if kind not in TPU_KINDS else " has no body")
        )
    problem = instances_problem(kind, instances) or pools_problem(kind, pools)
    if problem:
        raise ValueError(problem)
    unknown = sorted(set(run or {}) - RUN_KEYS)
    if unknown:
        raise ValueError(f"run.{unknown[0]}: unknown key; valid: {', '.join(sorted(RUN_KEYS))}")
    cap = (run or {}).get("max_total_usd")
    problem = None if cap is None else max_total_usd_problem(cap, "run.max_total_usd")
    if problem or (problem := node_count_problem(run or {})):
        raise ValueError(problem)
    config = {
        "kind": kind,
        "name": resource_name,
        "body": body or {},
        "recover": recover,
        "run": dict(run or {}),
        "state_uri": f"gs://{state_bucket}",
    }
    config |= {"pools": list(pools)} if pools is not None else {}
    return config | ({"instances": list(instances)} if instances is not None else {})


def pools_problem(kind: str, pools: object, key: str = "pools") -> str | None:
    """The one rule of a supervisor's `pools`: a `node_pools` cluster's pool ids (one or
    more, each once), nothing for the other kinds."""
    if kind != "node_pools":
        return None if pools is None else f"{key}: only node_pools has pools; kind {kind!r}"
    valid = "valid: the cluster's node pool ids, one or more, each once"
    if not isinstance(pools, list | tuple) or not pools:
        return f"{key}: {pools!r} names no node pool; {valid}"
    for pool in pools:
        if not isinstance(pool, str) or not INSTANCE_NAME.match(pool):
            return f"{key}: {pool!r} is not a node pool id; {valid}"
    if len(set(pools)) < len(pools):
        return f"{key}: {list(pools)!r} names a node pool twice; {valid}"
    return None


def node_count_problem(run: dict[str, Any]) -> str | None:
    """`run.node_count`: the nodes whose heartbeats `run.alive_uri` holds (one each, ranks 0
    to node_count - 1)."""
    count = run.get("node_count")
    if count is None and not run.get("alive_uri"):
        return None
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        return (
            f"run.node_count: {count!r} is not allowed; valid: the number of nodes (1 or more), "
            "each writing its heartbeat under run.alive_uri"
        )
    return None


def instances_problem(kind: str, instances: object, key: str = "instances") -> str | None:
    """The one rule of a supervisor's `instances`: a `mig`'s VM names (each once; none for a
    group whose VMs a resize request names, which the supervisor finds in its list),
    nothing for the other kinds."""
    if kind != "mig":
        return None if instances is None else f"{key}: only a mig has instances; kind {kind!r}"
    valid = "valid: the group's instance names, each once (none: the VMs the group lists)"
    if not isinstance(instances, list | tuple):
        return f"{key}: {instances!r} names no instance; {valid}"
    for name in instances:
        if not isinstance(name, str) or not INSTANCE_NAME.match(name):
            return f"{key}: {name!r} is not an instance name; {valid}"
    if len(set(instances)) < len(instances):
        return f"{key}: {list(instances)!r} names an instance twice; {valid}"
    return None


def supervisor_run(
    run_record: pulumi.Input[str] | None,
    node_count: int,
    *,
    hourly_usd: float | None = None,
    max_run_seconds: int | None = None,
    max_total_usd: float | None = None,
) -> dict[str, Any]:
    """A supervisor's `run` argument for the compute whose run writes its records under
    `run_record` (`supervised_compute(args).run_record`, `slice_target(args).run_record`): the
    end record (so it stops the compute at the run's end), the `node_count` nodes' heartbeats
    and the stop request, with the run limit and spend cap (`hourly_usd`: the compute's $/hour
    at list price, `supervised_compute(args).hourly_usd`, `supervised_slices(args).hourly_usd`). The stack config's supervisor
    gets its `run` here too (`trainstack.infra.supervision.run_settings`)."""
    if max_total_usd is not None:
        problem = max_total_usd_problem(max_total_usd, "supervisor_run.max_total_usd")
        if problem is None and hourly_usd is None:
            problem = (
                "supervisor_run.hourly_usd: missing; the spend cap counts the compute's "
                "$/hour; valid: the supervised compute's, supervised_compute(args).hourly_usd "
                "(A100Cluster) or supervised_slices(args).hourly_usd (TpuGkeSlices)"
            )
        if problem:
            raise ArgsError([problem])

    out: dict[str, Any] = {} if hourly_usd is None else {"hourly_usd": hourly_usd}
    if run_record is not None:
        # Each URI an Output of its own: the keys are known in a preview where the bucket's
        # name is not, and with them what the supervisor stops on (its facts' `stops_on`).
        record = pulumi.Output.from_input(run_record)
        out["end_uri"] = pulumi.Output.concat(record, ENDED_SUFFIX)
        out["stop_uri"] = pulumi.Output.concat(record, STOP_SUFFIX)
        out["alive_uri"] = pulumi.Output.concat(record, ALIVE_SUFFIX)
        out["node_count"] = node_count
    if max_run_seconds is not None:
        out["max_run_seconds"] = max_run_seconds
    if max_total_usd is not None:
        out["max_total_usd"] = max_total_usd
    return out
