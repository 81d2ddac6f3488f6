#!/usr/bin/env bash
# trainstack pod setup: the container command of every KubernetesTrainingJob pod (and of
# every Vertex replica that runs your code in your image: components/_pod_setup.py), run as
#   bash -c "<this script>" trainstack-pod PYTHON -m trainstack.trainers.node MODULE [ARGS...]
# (the container's args). It installs the trainer package into PYTHON's environment, then
# execs the args: the node launcher, which reads the pod's place from JOB_COMPLETION_INDEX
# and starts torchrun with one process per GPU, or the trainer once per pod.
#
# Environment (the Job's pod template):
#   TRAINSTACK_PACKAGE_URI  gs:// URI of the trainer sdist, fetched as the pod's Google
#                           service account (Workload Identity: the GKE metadata server)
#   TRAINSTACK_TF_KERAS     1: the trainer runs tf.keras as Keras 2, so install tf-keras at
#                           the image's TensorFlow minor (from TF 2.16 on), --no-deps
#   GCE_METADATA_HOST, STORAGE_EMULATOR_HOST  point the download at local fakes (tests
#                           only), as in Google's client libraries (the tests also put a
#                           fake `date` and `sleep` first on PATH: the retry's clock)
#   TRAINSTACK_NVIDIA_DIR   where the GPU driver is mounted (tests only; /usr/local/nvidia)
#   TRAINSTACK_NCCL_PLUGIN_FILES, TRAINSTACK_NCCL_ENV_SCRIPT  a GPUDirect fabric's: the
#                           node's NCCL plugin files to wait for, and a script of the plugin
#                           to source (gIB's set_nccl_env.sh) before the launcher
#   TRAINSTACK_CAPACITY_RUN_S  a flex-start node's run duration: exported to the launcher as
#                           TRAINSTACK_DEADLINE (the node's boot time plus it)
#   TRAINSTACK_RUN_RECORD   the run's records for the supervisor (trainers/common/
#                           run_records.py): the pod rewrites its heartbeat as it starts and,
#                           on its index's last attempt, records the run's end when its setup
#                           fails (the step and why), with the node helper below (standard
#                           library only: it works where the package failed to install)
#   TRAINSTACK_INDEX_FAILURES, TRAINSTACK_BACKOFF_LIMIT_PER_INDEX  the counted failures of
#                           this pod's index before it (the Job controller's annotation
#                           batch.kubernetes.io/job-index-failure-count, through the downward
#                           API) and the Job's backoffLimitPerIndex: the index fails with this
#                           pod's counted failure once the first is at least the second
#                           (kubernetes pkg/controller/job/indexed_job_utils.go,
#                           isIndexFailed), so this is its last attempt and, with
#                           maxFailedIndexes 0, the Job's; the node launcher then also
#                           records a setup failure of its own (3 joins
#                           TRAINSTACK_RUN_FINAL_CODES). What no pod can record (an image
#                           that cannot be pulled, activeDeadlineSeconds) ends in silence:
#                           the supervisor stops the pool once the heartbeats stop.
#
# Exit codes: 3 when setup fails before the launcher starts, after the download's own
# 15-minute retry (a retry may help: the Job counts it against backoffLimitPerIndex);
# otherwise the node launcher's own.
set -euo pipefail

log() { printf 'trainstack-pod: %s\n' "$*" >&2; }
helper=""
python=""
stage=job
records="${TRAINSTACK_RUN_RECORD:-}"
rank="${JOB_COMPLETION_INDEX:-}"
# A GKE TPU pod (TpuGkeSlices' JobSet): JOB_COMPLETION_INDEX is its place in its slice's Job
# and repeats in every slice; its node rank is the one the node launcher reports and beats
# under, slice x hosts + worker (trainers/common/cluster.py, _from_tpu_vm), from the TPU
# webhook's TPU_WORKER_ID / TPU_WORKER_HOSTNAMES and JobSet's MEGASCALE_SLICE_ID (empty on
# one slice, as the downward API gives a label the pod lacks).
if [[ "${TPU_WORKER_ID:-}" =~ ^[0-9]+$ ]]; then
  IFS=, read -r -a tpu_hosts <<<"${TPU_WORKER_HOSTNAMES:-}"
  tpu_slice="${MEGASCALE_SLICE_ID:-0}"
  [[ "$tpu_slice" =~ ^[0-9]+$ ]] || tpu_slice=0
  rank=$((tpu_slice * (${#tpu_hosts[@]} > 0 ? ${#tpu_hosts[@]} : 1) + TPU_WORKER_ID))
fi
last_attempt=0
if [ -n "${TRAINSTACK_BACKOFF_LIMIT_PER_INDEX:-}" ] &&
  [ "${TRAINSTACK_INDEX_FAILURES:-0}" -ge "$TRAINSTACK_BACKOFF_LIMIT_PER_INDEX" ]; then
  last_attempt=1
fi
# give_up REASON: setup failed (exit 3); on the index's last attempt the run's end is recorded
# at `stage` first.
give_up() {
  local said
  log "$1"
  if [ "$last_attempt" = 1 ] && [ -n "$records" ] && [ -n "$helper" ]; then
    if said="$("$python" "$helper" end "$records" "$stage" "$rank" "$1" 2>&1)"; then
      log "$said"
    else
      log "could not record the run's end: $said"
    fi
  fi
  exit 3
}
trap 'give_up "setup failed at line $LINENO"' ERR

if [ "$#" -lt 1 ]; then
  give_up "no command in the container args"
fi
python="$1"
work="${TMPDIR:-/tmp}/trainstack"
mkdir -p "$work"
package="$work/${TRAINSTACK_PACKAGE_URI##*/}"
if [ -n "$records" ]; then
  helper="$work/trainstack_node_helper.py"
  cat >"$helper" <<'TRAINSTACK_HELPER_EOF'
@@NODE_HELPER@@
TRAINSTACK_HELPER_EOF
fi

# download: one attempt at the package; exit 75 when a retry may help (no connection, HTTP
# 401/403/408/429/5xx, or 404 from the token endpoint), 1 when it cannot (a missing object).
download() {
  "$python" - "$TRAINSTACK_PACKAGE_URI" "$package" <<'TRAINSTACK_DOWNLOAD_EOF'
import json, os, sys, urllib.error, urllib.parse, urllib.request

RETRY = 75
uri, dest = sys.argv[1:3]
bucket, _, name = uri.removeprefix("gs://").partition("/")
metadata = os.environ.get("GCE_METADATA_HOST") or "metadata.google.internal"
storage = (os.environ.get("STORAGE_EMULATOR_HOST") or "https://storage.googleapis.com").rstrip("/")


def get(url, headers, what, retry_404=False):
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=60) as r:
            return r.read()
    except urllib.error.HTTPError as exc:
        print(f"trainstack-pod: {what}: HTTP {exc.code} {exc.reason}", file=sys.stderr)
        retry = exc.code in (401, 403, 408, 429) or exc.code >= 500 or (retry_404 and exc.code == 404)
        sys.exit(RETRY if retry else 1)
    except OSError as exc:  # connection refused or reset, a timeout (URLError is an OSError)
        print(f"trainstack-pod: {what}: {exc}", file=sys.stderr)
        sys.exit(RETRY)


# GKE's metadata server answers for the pod's Kubernetes service account only once its
# Workload Identity binding has propagated.
token = json.loads(
    get(
        f"http://{metadata}/computeMetadata/v1/instance/service-accounts/default/token",
        {"Metadata-Flavor": "Google"},
        "access token",
        retry_404=True,
    )
)["access_token"]
quoted = urllib.parse.quote(name, safe="")
data = get(
    f"{storage}/storage/v1/b/{bucket}/o/{quoted}?alt=media",
    {"Authorization": f"Bearer {token}"},
    uri,
)
with open(dest + ".part", "wb") as out:
    out.write(data)
os.replace(dest + ".part", dest)
TRAINSTACK_DOWNLOAD_EOF
}

# The pod starts seconds after its account's Workload Identity binding and minutes after its
# bucket grants, and a new grant can take up to about 7 minutes to reach every check
# (https://cloud.google.com/iam/docs/access-change-propagation): until then the token or the
# object read is refused. Retried as the TPU startup script does (components/startup/
# tpu_worker.sh, retry_grant): doubling waits from RETRY_DELAY_S up to 60 s, for
# DOWNLOAD_WINDOW_S after the first failure, one line per failed attempt; a GKE pod that gave
# up at once would spend one of its index's retries on each refusal.
RETRY_DELAY_S=10
DOWNLOAD_WINDOW_S=900
stage=package_download
if [ -n "$helper" ]; then
  "$python" "$helper" alive "$records" "$rank" "$stage" >/dev/null 2>&1 ||
    log "could not write this pod's heartbeat under $records"
fi
log "installing $TRAINSTACK_PACKAGE_URI"
attempt=1
delay=$RETRY_DELAY_S
first=""
while :; do
  status=0
  download || status=$?
  if [ "$status" -eq 0 ]; then
    break
  fi
  if [ "$status" -ne 75 ]; then
    give_up "cannot download $TRAINSTACK_PACKAGE_URI"
  fi
  [ -n "$first" ] || first=$(date +%s)
  waited=$(($(date +%s) - first))
  if [ "$waited" -ge "$DOWNLOAD_WINDOW_S" ]; then
    give_up "giving up on the package download after $attempt attempts over ${waited}s"
  fi
  log "package download attempt $attempt failed (${waited}s of ${DOWNLOAD_WINDOW_S}s); retrying in ${delay}s: a new grant of the training account can take up to 7 minutes to reach Cloud Storage"
  sleep "$delay"
  attempt=$((attempt + 1))
  delay=$((delay * 2 > 60 ? 60 : delay * 2))
done
if [ "$attempt" -gt 1 ]; then
  log "package downloaded on attempt $attempt"
fi

stage=package_install
pip=("$python" -m pip install --disable-pip-version-check --no-input)
# install ARGS...: pip install into the image's Python (the container's own: pip may);
# its output also in a file, whose last line says why it failed.
install() {
  PIP_BREAK_SYSTEM_PACKAGES=1 "${pip[@]}" "$@" 2>&1 | tee "$work/pip.log" >&2
}
# pip_said: the last line pip printed.
pip_said() {
  grep -v '^[[:space:]]*$' "$work/pip.log" 2>/dev/null | tail -n 1 || true
}
if ! install "$package"; then
  said="$(pip_said)"
  give_up "pip could not install $TRAINSTACK_PACKAGE_URI${said:+: $said}"
fi

if [ "${TRAINSTACK_TF_KERAS:-0}" = 1 ]; then
  # From TF 2.16 on tf.keras is Keras 3 unless tf-keras (same minor: tf-keras X.Y requires
  # TensorFlow X.Y) is installed; --no-deps so pip never replaces the image's TensorFlow
  # with the one a newer tf-keras requires. Older TensorFlow ships Keras 2 itself.
  pin="$("$python" -c 'import tensorflow as tf
v = tuple(int(p) for p in tf.__version__.split(".")[:2])
print(f"tf-keras=={v[0]}.{v[1]}.*" if v >= (2, 16) else "")')"
  if [ -n "$pin" ]; then
    log "installing $pin without dependencies"
    if ! install --no-deps "$pin"; then
      said="$(pip_said)"
      give_up "pip could not install $pin${said:+: $said}"
    fi
  else
    log "TensorFlow has Keras 2 built in; no tf-keras"
  fi
fi

# GKE's GPU device plugin mounts the node's NVIDIA driver libraries at
# /usr/local/nvidia/lib64 and its tools at /usr/local/nvidia/bin
# (GoogleCloudPlatform/container-engine-accelerators, cmd/nvidia_gpu: -container-path).
# NVIDIA's CUDA images put that folder on LD_LIBRARY_PATH; an image built another way would
# not find libcuda there and torch would quietly train on the CPU.
nvidia="${TRAINSTACK_NVIDIA_DIR:-/usr/local/nvidia}"
if [ -d "$nvidia/lib64" ]; then
  case ":${LD_LIBRARY_PATH:-}:" in
    *":$nvidia/lib64:"*) ;;
    *) export LD_LIBRARY_PATH="$nvidia/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" ;;
  esac
fi
if [ -d "$nvidia/bin" ]; then
  case ":$PATH:" in
    *":$nvidia/bin:"*) ;;
    *) export PATH="$PATH:$nvidia/bin" ;;
  esac
fi

# A GPUDirect fabric (components/_pod_fabric.py): its installer DaemonSet copies the NCCL
# plugin onto the node, maybe after this pod started on a new node; without the files NCCL
# aborts (a missing tuner config) or quietly runs over TCP. Waited for PLUGIN_WAIT_S, then a
# setup failure (3) the Job retries. gIB's settings come from its own script, sourced here
# so the launcher and every rank inherit them, as Google's manifests do before NCCL starts.
stage=launch
PLUGIN_WAIT_S=600
if [ -n "${TRAINSTACK_NCCL_PLUGIN_FILES:-}" ]; then
  first=$(date +%s)
  for file in $TRAINSTACK_NCCL_PLUGIN_FILES; do
    while [ ! -e "$file" ]; do
      waited=$(($(date +%s) - first))
      if [ "$waited" -ge "$PLUGIN_WAIT_S" ]; then
        give_up "no $file after ${waited}s: the node's NCCL plugin installer DaemonSet has not installed it"
      fi
      log "waiting for $file, which the node's NCCL plugin installer copies (${waited}s of ${PLUGIN_WAIT_S}s)"
      sleep 10
    done
  done
fi
if [ -n "${TRAINSTACK_NCCL_ENV_SCRIPT:-}" ]; then
  log "sourcing $TRAINSTACK_NCCL_ENV_SCRIPT"
  # Its own lines may use unset variables or fail a test: it runs as it would in a shell.
  trap - ERR
  set +eu +o pipefail
  # shellcheck disable=SC1090
  source "$TRAINSTACK_NCCL_ENV_SCRIPT"
  set -euo pipefail
  trap 'give_up "setup failed at line $LINENO"' ERR
fi

if [ "$last_attempt" = 1 ] && [ -n "${TRAINSTACK_RUN_FINAL_CODES:-}" ]; then
  # No replacement pod follows a counted failure of this one: the node launcher's own
  # setup failure (3) ends the run too.
  export TRAINSTACK_RUN_FINAL_CODES="$TRAINSTACK_RUN_FINAL_CODES 3"
fi
# -- Flex-start: the deadline ------------------------------------------------------------
# TRAINSTACK_CAPACITY_RUN_S: the run duration of a flex-start pool's nodes, set on its pods
# (trainstack.components.catalog.capacity_end); GKE removes the node at its end. The deadline
# is the node's boot time (/proc/stat is the node kernel's, in a container too) plus it: a
# little late, never early; the trainer saves trainer.deadline_margin_s before it and the
# node launcher exits 6 (trainers/common/deadline.py).
if [ -n "${TRAINSTACK_CAPACITY_RUN_S:-}" ]; then
  boot="$(awk '$1 == "btime" { print $2 }' /proc/stat)"
  export TRAINSTACK_DEADLINE="$((boot + TRAINSTACK_CAPACITY_RUN_S))"
fi
# ------------------------------------------------------------------------------------------
trap - ERR
exec "$@"
