"""Metadata-server and Cloud Storage access for the node launcher, standard library only.

Deep Learning VM images and public PyTorch containers do not all ship gcloud or curl, but
every one of them has Python. The launcher writes this file next to its work and runs it:

    python3 node_helper.py metadata instance/attributes/trainstack-node-rank
    python3 node_helper.py download gs://bucket/trainers/pkg.tar.gz /var/lib/trainstack/pkg.tar.gz
    python3 node_helper.py check-args --steps=100 --global_batch_size=64
    python3 node_helper.py run-started gs://bucket/trainstack-run-0123abcd.started
    python3 node_helper.py log ERROR "pip could not install ..."
    python3 node_helper.py end gs://bucket/trainstack-run-0123abcd package_install 1 "pip ..."
    python3 node_helper.py alive gs://bucket/trainstack-run-0123abcd 1 launch
    python3 node_helper.py claim-rank gs://bucket/trainstack-run-0123abcd 2 exp-a100-x7k2
    python3 node_helper.py rank-host gs://bucket/trainstack-run-0123abcd 0
    python3 node_helper.py apt-key https://packages.cloud.google.com/apt/doc/apt-key.gpg \
        /etc/apt/keyrings/cloud.google.gpg

`claim-rank PREFIX NUM_NODES NAME` gives a VM of a group whose VMs have no rank metadata (a
flex-start group: its resize request names the VMs itself) a node rank of its own: the
first of `<prefix>.ranks/0..NUM_NODES-1` it creates (`ifGenerationMatch=0`, as the run
clock) holds its instance name, and a VM that finds its name in one already (a restart)
keeps that rank; it prints the rank. Claims go in rank order, so `rank-host PREFIX 0`, the
rank-0 VM's name (the rendezvous host), is there once any VM holds a rank.

`end` and `alive` keep the run's records for the supervisor where the node launcher cannot
(`trainstack.trainers.common.run_records`, whose names and record shapes these copy:
tests/unit/test_shell_run_records.py holds them equal): `end PREFIX STAGE NODE_RANK REASON`
records that a shell stage gave up for good, `<prefix>.ended` =
`{"outcome": "failed", "stage", "reason", "node_rank", "time"}` (NODE_RANK may be empty
before the rank is known: null), created only if absent (`ifGenerationMatch=0`, as the run
clock): the first cause recorded is the one kept, a later one is reported and dropped;
`alive PREFIX NODE_RANK STAGE` rewrites the heartbeat `<prefix>.alive/<node_rank>` =
`{"node_rank", "stage", "time"}`, one attempt with short timeouts (the next stage or beat
writes it again). Both run before anything is installed, with the interpreter alone.

`log` writes one line of the launcher's own to Cloud Logging (`entries:write`,
https://cloud.google.com/logging/docs/reference/v2/rest/v2/entries/write) as the entry the
node launcher's shipper writes for a trainer line (`trainstack.trainers.common.cloud_logging`): log
`projects/<project>/logs/trainstack`, resource `gce_instance` {project_id, instance_id,
zone}, entry label `compute.googleapis.com/resource_name` = the instance name, so
`trainstack logs` and the dashboard's filter find the launcher's download, install and
rendezvous failures beside the trainer's lines. The launcher runs before the trainer package
(and its shipper) is installed, hence this copy; tests/unit/test_launcher_logging.py holds
the two to the same entry. One attempt, short timeouts: a Logging outage must not hold the
node up.

`apt-key URL DEST` stores an apt repository's signing key where a `signed-by=DEST` source
names it, as Google's NCCL/gIB page does with curl and `gpg --dearmor` ("If you're not
using an image from Google, trust the Google Cloud signing key: curl
http://packages.cloud.google.com/apt/doc/apt-key.gpg | sudo gpg --dearmor -o
/etc/apt/trusted.gpg.d/cloud.google.gpg",
https://docs.cloud.google.com/ai-hypercomputer/docs/nccl/test-vms) without either: an
ASCII-armored key is unpacked to the binary OpenPGP form apt reads from a `.gpg` file
("apt-key supports only the binary OpenPGP format ... in files with the "gpg" extension",
apt-key(8), https://manpages.ubuntu.com/manpages/noble/man8/apt-key.8.html), a binary one is
kept; world-readable, as sources.list(5) asks of a signed-by keyring ("have to be accessible
and readable for the _apt system user").

`GCE_METADATA_HOST` and `STORAGE_EMULATOR_HOST`, the variables Google's client libraries
honour, and `TRAINSTACK_LOGGING_ENDPOINT` (as for the trainer's shipper) point it at local
fakes, and `TRAINSTACK_APT_KEY_URL` replaces apt-key's URL; on Google Cloud all are unset.

Exit codes: 0 ok; 1 a request failed; 2 the trainer arguments are invalid; 3 usage error.
It must run on the oldest Python of the images (3.10): no newer syntax or modules.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

LOG_ID = "trainstack"
"""The log the trainer's lines go to (`trainstack.trainers.common.contract.LOG_ID`)."""
GCE_NAME_LABEL = "compute.googleapis.com/resource_name"
SEVERITIES = ("DEFAULT", "DEBUG", "INFO", "NOTICE", "WARNING", "ERROR", "CRITICAL")
LOG_TIMEOUT_S = 5
ENDED_SUFFIX = ".ended"
ALIVE_SUFFIX = ".alive/"
STAGES = ("package_download", "package_install", "launch", "startup", "trainer", "job")
RECORD_TYPE = "application/octet-stream"
"""The records' content type: what gcsfs gives the node launcher's (`pipe_file`'s default)."""
REASON_MAX = 500
"""Characters of a reason kept: one line that says why, not a log."""
ATTEMPTS = 5
"""Tries per request; transient failures (connection errors, 429, 5xx) back off 1, 2, 4, 8 s."""
TIMEOUT_S = 60


def metadata_base() -> str:
    host = os.environ.get("GCE_METADATA_HOST") or "metadata.google.internal"
    return f"http://{host}/computeMetadata/v1/"


def storage_base() -> str:
    return (os.environ.get("STORAGE_EMULATOR_HOST") or "https://storage.googleapis.com").rstrip("/")


def object_url(uri: str) -> str:
    """JSON API media URL of a `gs://bucket/object` URI."""
    if not uri.startswith("gs://"):
        raise ValueError(f"not a gs:// URI: {uri!r}")
    bucket, _, name = uri[len("gs://") :].partition("/")
    if not bucket or not name:
        raise ValueError(f"gs:// URI without bucket or object: {uri!r}")
    quoted = urllib.parse.quote(name, safe="")
    return f"{storage_base()}/storage/v1/b/{bucket}/o/{quoted}?alt=media"


def _get(url: str, headers: dict[str, str]) -> bytes:
    error: Exception | None = None
    for attempt in range(ATTEMPTS):
        if attempt:
            time.sleep(min(2 ** (attempt - 1), 30))
        try:
            request = urllib.request.Request(url, headers=headers)
            with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
                return bytes(response.read())
        except urllib.error.HTTPError as exc:
            if exc.code != 429 and exc.code < 500:
                raise
            error = exc
        except OSError as exc:  # connection refused, reset, timeout (URLError is an OSError)
            error = exc
    assert error is not None
    raise error


def metadata(path: str) -> str:
    return _get(metadata_base() + path, {"Metadata-Flavor": "Google"}).decode()


def access_token() -> str:
    token = json.loads(metadata("instance/service-accounts/default/token"))
    return str(token["access_token"])


def download(uri: str, dest: str) -> None:
    """Fetch a Cloud Storage object as the node's service account; the file appears whole
    or not at all."""
    data = _get(object_url(uri), {"Authorization": f"Bearer {access_token()}"})
    partial = dest + ".part"
    with open(partial, "wb") as out:
        out.write(data)
    os.replace(partial, dest)


ARMOR_BEGIN = b"-----BEGIN PGP PUBLIC KEY BLOCK-----"
ARMOR_END = b"-----END PGP PUBLIC KEY BLOCK-----"


def dearmor(data: bytes) -> bytes:
    """The binary OpenPGP packets of an ASCII-armored public key block (RFC 4880 section 6.2:
    armor headers up to a blank line, the base64 body, a `=` CRC-24 line, the tail); data
    that is not armored is returned as it is."""
    text = data.strip()
    if not text.startswith(ARMOR_BEGIN):
        return data
    body = text[len(ARMOR_BEGIN) : text.find(ARMOR_END)].splitlines()
    blank = next((i for i, line in enumerate(body) if i and not line.strip()), None)
    if blank is None:
        raise ValueError("armored key without the blank line before its body")
    lines = [line.strip() for line in body[blank + 1 :] if line.strip()]
    if lines and lines[-1].startswith(b"="):
        lines.pop()
    try:
        return base64.b64decode(b"".join(lines), validate=True)
    except binascii.Error as exc:
        raise ValueError(f"armored key with a bad body: {exc}") from exc


def apt_key(url: str, dest: str) -> None:
    """Store the signing key at `url` in binary form at `dest`, readable by apt's _apt user;
    the file appears whole or not at all."""
    data = dearmor(_get(os.environ.get("TRAINSTACK_APT_KEY_URL") or url, {}))
    partial = dest + ".part"
    os.makedirs(os.path.dirname(dest) or ".", exist_ok=True)
    with open(partial, "wb") as out:
        out.write(data)
    os.chmod(partial, 0o644)
    os.replace(partial, dest)


def _send(url: str, data: bytes, headers: dict[str, str]) -> int:
    """POST `data`; the HTTP status (412 included: a precondition that did not hold)."""
    error: Exception | None = None
    for attempt in range(ATTEMPTS):
        if attempt:
            time.sleep(min(2 ** (attempt - 1), 30))
        try:
            request = urllib.request.Request(url, data=data, headers=headers, method="POST")
            with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
                return int(response.status)
        except urllib.error.HTTPError as exc:
            if exc.code != 429 and exc.code < 500:
                return int(exc.code)
            error = exc
        except OSError as exc:
            error = exc
    assert error is not None
    raise error


def run_started(uri: str) -> int:
    """The run's first start (Unix seconds) recorded in the object `uri`; the first node
    to ask records the current time there, created only if absent (ifGenerationMatch=0), so
    every node and every restart reads the same clock."""
    auth = {"Authorization": f"Bearer {access_token()}"}
    for _ in range(ATTEMPTS):
        try:
            return int(_get(object_url(uri), auth).decode().strip())
        except urllib.error.HTTPError as exc:
            if exc.code != 404:
                raise
        url = upload_url(uri, if_absent=True)
        status = _send(url, str(int(time.time())).encode(), {**auth, "Content-Type": "text/plain"})
        if status not in (200, 412):  # 412: another node recorded it first; read that
            raise ValueError(f"recording the run start at {uri} failed with HTTP {status}")
    raise ValueError(f"no run start recorded at {uri}")


RANKS_SUFFIX = ".ranks/"


def _read_text(uri: str, auth: dict[str, str]) -> str | None:
    try:
        return _get(object_url(uri), auth).decode().strip()
    except urllib.error.HTTPError as exc:
        if exc.code != 404:
            raise
        return None


def claim_rank(prefix: str, num_nodes: str, name: str) -> int:
    """This VM's node rank under `prefix`: the rank whose claim holds `name` already, else
    the lowest one still free, claimed for `name` (module docstring)."""
    if not num_nodes.isdigit() or int(num_nodes) < 1 or not name:
        raise ValueError(f"claim-rank needs a node count and a name, got {num_nodes!r} {name!r}")
    auth = {"Authorization": f"Bearer {access_token()}"}
    headers = {**auth, "Content-Type": "text/plain"}
    for rank in range(int(num_nodes)):
        uri = f"{prefix}{RANKS_SUFFIX}{rank}"
        holder = _read_text(uri, auth)
        if holder is None:
            status = _send(upload_url(uri, if_absent=True), name.encode(), headers)
            if status == 200:
                return rank
            if status != 412:  # 412: another VM claimed it first; read whose it is
                raise ValueError(f"claiming rank {rank} at {uri} failed with HTTP {status}")
            holder = _read_text(uri, auth)
        if holder == name:
            return rank
    raise ValueError(f"every rank of {num_nodes} under {prefix}{RANKS_SUFFIX} is another VM's")


def rank_host(prefix: str, rank: str) -> str:
    """The instance name that claimed `rank` under `prefix`."""
    if not rank.isdigit():
        raise ValueError(f"rank {rank!r} is not a non-negative integer")
    uri = f"{prefix}{RANKS_SUFFIX}{int(rank)}"
    holder = _read_text(uri, {"Authorization": f"Bearer {access_token()}"})
    if not holder:
        raise ValueError(f"no VM has claimed {uri}")
    return holder


def _stamp() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def upload_url(uri: str, if_absent: bool) -> str:
    """JSON API media upload URL of a `gs://bucket/object` URI (`ifGenerationMatch=0`: only
    if the object does not exist yet)."""
    bucket, _, name = uri[len("gs://") :].partition("/")
    if not uri.startswith("gs://") or not bucket or not name:
        raise ValueError(f"not a gs://bucket/object URI: {uri!r}")
    url = (
        f"{storage_base()}/upload/storage/v1/b/{bucket}/o?uploadType=media"
        f"&name={urllib.parse.quote(name, safe='')}"
    )
    return url + ("&ifGenerationMatch=0" if if_absent else "")


def _rank(node_rank: str) -> int | None:
    if node_rank == "":
        return None
    if not node_rank.isdigit():
        raise ValueError(f"node rank {node_rank!r} is not a non-negative integer or empty")
    return int(node_rank)


def record_end(prefix: str, stage: str, node_rank: str, reason: str) -> str:
    """Record that stage `stage` ended the run at `prefix` for good, unless a record is
    there already; what happened, as one line."""
    if stage not in STAGES:
        raise ValueError(f"stage {stage!r} is not one of {', '.join(STAGES)}")
    lines = reason.strip().splitlines()
    record = {
        "outcome": "failed",
        "stage": stage,
        "reason": (lines[0] if lines else "")[:REASON_MAX],
        "node_rank": _rank(node_rank),
        "time": _stamp(),
    }
    uri = prefix + ENDED_SUFFIX
    headers = {"Authorization": f"Bearer {access_token()}", "Content-Type": RECORD_TYPE}
    status = _send(upload_url(uri, True), json.dumps(record, sort_keys=True).encode(), headers)
    if status == 412:
        return f"the run's end was recorded before at {uri}; kept"
    if status != 200:
        raise ValueError(f"recording the run's end at {uri} failed with HTTP {status}")
    return f"recorded the run's end (failed: {stage}) at {uri}"


def write_alive(prefix: str, node_rank: str, stage: str) -> None:
    """This node's heartbeat: one attempt, short timeouts."""
    rank = _rank(node_rank)
    if rank is None or stage not in STAGES:
        raise ValueError(f"alive needs a node rank and a stage, got {node_rank!r} {stage!r}")
    record = {"node_rank": rank, "stage": stage, "time": _stamp()}
    token = json.loads(_metadata_once("instance/service-accounts/default/token"))
    request = urllib.request.Request(
        upload_url(f"{prefix}{ALIVE_SUFFIX}{rank}", False),
        data=json.dumps(record, sort_keys=True).encode(),
        headers={
            "Authorization": f"Bearer {token['access_token']}",
            "Content-Type": RECORD_TYPE,
        },
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=LOG_TIMEOUT_S) as response:
        response.read()


def _metadata_once(path: str) -> str:
    request = urllib.request.Request(metadata_base() + path, headers={"Metadata-Flavor": "Google"})
    with urllib.request.urlopen(request, timeout=LOG_TIMEOUT_S) as response:
        return bytes(response.read()).decode()


def log_entry_request(severity: str, message: str, now: float) -> dict[str, Any]:
    """The entries:write body of one launcher line on this Compute Engine VM."""
    if severity not in SEVERITIES:
        raise ValueError(f"severity {severity!r} is not one of {', '.join(SEVERITIES)}")
    project = _metadata_once("project/project-id")
    zone = _metadata_once("instance/zone").rsplit("/", 1)[-1]
    labels = {"project_id": project, "instance_id": _metadata_once("instance/id"), "zone": zone}
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now)) + f".{int(now % 1 * 1e6):06d}Z"
    return {
        "logName": f"projects/{project}/logs/{LOG_ID}",
        "resource": {"type": "gce_instance", "labels": labels},
        "labels": {GCE_NAME_LABEL: _metadata_once("instance/name")},
        "entries": [{"timestamp": stamp, "severity": severity, "textPayload": message}],
    }


def ship_log(severity: str, message: str) -> None:
    """Write one launcher line to Cloud Logging as this VM's service account."""
    body = json.dumps(log_entry_request(severity, message, time.time())).encode()
    token = json.loads(_metadata_once("instance/service-accounts/default/token"))
    endpoint = os.environ.get("TRAINSTACK_LOGGING_ENDPOINT") or "https://logging.googleapis.com/"
    request = urllib.request.Request(
        endpoint.rstrip("/") + "/v2/entries:write",
        data=body,
        headers={
            "Authorization": f"Bearer {token['access_token']}",
            "Content-Type": "application/json",
        },
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=LOG_TIMEOUT_S) as response:
        response.read()


def check_args(args: list[str]) -> None:
    """Parse the trainer's flags with the trainer's own parser (raises ValueError)."""
    from trainstack.trainers.common.cli import load_config

    load_config(args)


def main(argv: list[str]) -> int:
    if not argv:
        print(
            "usage: node_helper.py metadata PATH | download URI DEST | run-started URI | "
            "check-args ARGS... | log SEVERITY MESSAGE | end PREFIX STAGE NODE_RANK REASON | "
            "alive PREFIX NODE_RANK STAGE | claim-rank PREFIX NUM_NODES NAME | "
            "rank-host PREFIX RANK | apt-key URL DEST"
        )
        return 3
    command, rest = argv[0], argv[1:]
    try:
        if command == "metadata" and len(rest) == 1:
            sys.stdout.write(metadata(rest[0]))
        elif command == "download" and len(rest) == 2:
            download(rest[0], rest[1])
        elif command == "run-started" and len(rest) == 1:
            print(run_started(rest[0]))
        elif command == "check-args":
            check_args(rest)
        elif command == "log" and len(rest) == 2:
            ship_log(rest[0], rest[1])
        elif command == "end" and len(rest) == 4:
            print(record_end(*rest))
        elif command == "alive" and len(rest) == 3:
            write_alive(*rest)
        elif command == "claim-rank" and len(rest) == 3:
            print(claim_rank(*rest))
        elif command == "rank-host" and len(rest) == 2:
            print(rank_host(*rest))
        elif command == "apt-key" and len(rest) == 2:
            apt_key(*rest)
        else:
            print(f"trainstack-helper: bad usage: {' '.join(argv)}", file=sys.stderr)
            return 3
    except ValueError as exc:
        print(f"trainstack-helper: {exc}", file=sys.stderr)
        return 2 if command == "check-args" else 1
    except (OSError, KeyError) as exc:
        print(f"trainstack-helper: {command} failed: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
