#!/bin/bash
# trainstack: startup script of every worker VM of a Cloud TPU slice.
#
# Rendered by components/startup/tpu_worker.py: each placeholder between double at-signs
# is replaced by a shell-quoted value before the script goes into the node's
# `startup-script` metadata. It carries no secrets: the VM's service account (through the
# metadata server) authorizes every Google API call.
#
# Compute Engine runs the startup script as root on every boot of every worker, so every
# step is idempotent and safe to re-run after a reboot or maintenance event:
#   1. worker id (`agent-worker-number`) and the slice's worker IPs
#      (`worker-network-endpoints`, worker 0 first) come from the metadata server;
#   2. the trainer package is downloaded from the staging bucket (retried for up to
#      TS_DOWNLOAD_WINDOW_S while the account's new bucket grant propagates) and pip-installed once per
#      package URI (a marker file records it; the URI changes whenever the code does), with
#      the runtime's own packages as constraints (`pip freeze`, taken once before trainstack
#      installs anything): pip fails loudly rather than replace what the runtime ships (a
#      numpy 2 under TensorFlow <= 2.16, which needs numpy < 2, breaks `import tensorflow`);
#   3. worker 0 runs the trainer under a lock (a second copy of this script, e.g. a manual
#      re-run, leaves a running trainer alone); the other workers of a multi-host slice
#      only serve their TPU chips to worker 0 (TensorFlow `-pod` runtime) and exit here.
#      Your own code (TS_USER_CODE=1) runs on EVERY worker instead: JAX, like PyTorch/XLA,
#      runs one process per host, which finds the slice through the metadata server; steps
#      4 and 5's TensorFlow setup (tf-keras, TPU_LOAD_LIBRARY, TPU_NAME...) are skipped;
#   4. before the first launch, worker 0 asks the runtime's Python which TensorFlow it has:
#      from TF 2.16 on the trainer's Keras 2 is the tf-keras package at the same minor,
#      installed once with --no-deps (pip must not put another TensorFlow over the TPU
#      build); older TF has Keras 2 built in and gets nothing;
#   5. the trainer starts under the node launcher (`python3 -m trainstack.trainers.node --launcher=node`,
#      which reads the worker from TPU_WORKER_ID/TPU_WORKER_HOSTNAMES) with the TPU
#      environment of its slice shape and device API (the variables Google's TensorFlow TPU
#      harness sets, see export_tpu_environment); TRAINSTACK_CLOUD_LOGGING=tpu_worker makes
#      the launcher write each trainer line to the Cloud Logging API as a structured entry
#      of resource tpu_worker {node_id: the slice, worker_id} (see export_logging_environment);
#   6. a trainer that exits non-zero is relaunched a bounded number of times (it resumes
#      from its newest checkpoint); one that finishes leaves a marker, so a later boot does
#      not train the same run again;
#   7. with a run limit (TS_MAX_RUN_SECONDS, the stack's limits.max_run_hours; the GA Cloud
#      TPU API has none) every launching worker reads the run's first start with the node
#      helper that the Compute Engine launcher uses (`run-started`: recorded once in the
#      checkpoint bucket at TS_RUN_CLOCK_URI, created only if absent) before it installs
#      anything, retried like the package download while the bucket grant propagates; once the limit has passed since then the trainer gets SIGTERM (it
#      checkpoints), the script logs `max_run_hours reached` and exits 0 without relaunching;
#      a boot after the deadline exits 0 at once.
#   8. the run's records for the supervisor (TS_RUN_RECORD, trainers/common/run_records.py),
#      written with the node helper (standard library only, so it works where the package
#      failed to install): each launching worker rewrites its heartbeat when the script
#      starts and when it installs; when it gives up for good (nothing retries the script
#      but a reboot: every `die`, the trainer's last attempt) it records the run's end, the
#      step that failed and why (`.ended`, created only if absent: the node launcher's own
#      record of its last attempt is kept). A worker that only serves its chips records
#      nothing: the trainer on worker 0 goes on without its package.
# Every line (trainer output included) is also prefixed with the slice and worker id and goes
# to stdout (the serial console) and to a log file under the state directory.
set -euo pipefail

readonly TS_SLICE_NAME=@@SLICE_NAME@@
readonly TS_PACKAGE_URI=@@PACKAGE_URI@@
readonly TS_TRAINER_MODULE=@@TRAINER_MODULE@@
readonly TS_EXPECTED_HOSTS=@@EXPECTED_HOSTS@@
readonly TS_PYTHON=@@PYTHON@@
readonly TS_TRAINER_ATTEMPTS=@@TRAINER_ATTEMPTS@@
readonly TS_RETRY_DELAY_S=@@RETRY_DELAY_S@@
readonly TS_DOWNLOAD_WINDOW_S=@@DOWNLOAD_WINDOW_S@@
readonly TS_TRAINER_ARGS=(@@TRAINER_ARGS@@)
readonly TS_RUNTIME_VERSION=@@RUNTIME_VERSION@@
readonly TS_RUNTIME_TF_MINOR=@@RUNTIME_TF_MINOR@@
readonly TS_DEVICE_API=@@DEVICE_API@@
readonly TS_TF_KERAS_FROM=@@TF_KERAS_FROM@@
readonly TS_USER_CODE=@@USER_CODE@@
readonly TS_MAX_RUN_SECONDS=@@MAX_RUN_SECONDS@@
readonly TS_RUN_CLOCK_URI=@@RUN_CLOCK_URI@@
# The run's end record and the supervisor's stop request (trainers/common/run_records.py).
readonly TS_RUN_RECORD=@@RUN_RECORD@@

# Only tests set these two: a local fake metadata server and a scratch state directory.
readonly TS_METADATA_URL="${TRAINSTACK_METADATA_URL:-http://metadata.google.internal/computeMetadata/v1}"
readonly TS_STATE_DIR="${TRAINSTACK_STATE_DIR:-/var/lib/trainstack}"

WORKER_ID="?"
LOG_FILE="$TS_STATE_DIR/logs/startup.log"
HELPER="$TS_STATE_DIR/trainstack_node_helper.py"
# The step under way: the `stage` of the run's end record.
STAGE=startup
# pip's output, whose last line says why an install failed.
PIP_LOG="$TS_STATE_DIR/logs/pip.log"

log() {
  local line
  line=$(printf '[trainstack slice=%s worker=%s] %s' "$TS_SLICE_NAME" "$WORKER_ID" "$*")
  printf '%s\n' "$line"
  printf '%s\n' "$line" >>"$LOG_FILE" 2>/dev/null || true
}

# launches: whether this worker runs the trainer (worker 0, or every worker for your code).
launches() {
  [[ $WORKER_ID =~ ^[0-9]+$ ]] && ((WORKER_ID == 0 || TS_USER_CODE))
}

# record_end STAGE REASON: the run ended for good here (a launching worker only).
record_end() {
  local said
  launches && [[ -f $HELPER ]] || return 0
  if said=$("$TS_PYTHON" "$HELPER" end "$TS_RUN_RECORD" "$1" "$WORKER_ID" "$2" 2>&1); then
    log "$said"
  else
    log "WARNING: could not record the run's end: $said"
  fi
}

# alive: this worker's heartbeat for the supervisor (a launching worker only).
alive() {
  launches && [[ -f $HELPER ]] || return 0
  "$TS_PYTHON" "$HELPER" alive "$TS_RUN_RECORD" "$WORKER_ID" "$STAGE" >/dev/null 2>&1 ||
    log "WARNING: could not write this worker's heartbeat under $TS_RUN_RECORD"
}

die() {
  log "ERROR: $*"
  record_end "$STAGE" "$*" || true
  exit 1
}

# Prefix each line of a stream like `log` does (used for the trainer's own output).
prefix_lines() {
  local line
  while IFS= read -r line || [[ -n $line ]]; do
    log "$line"
  done
}

# retry ATTEMPTS COMMAND...: run COMMAND until it succeeds, sleeping longer each time.
retry() {
  local attempts=$1 n=1
  shift
  until "$@"; do
    if ((n >= attempts)); then
      log "giving up after $n attempts: $*"
      return 1
    fi
    log "attempt $n/$attempts failed, retrying in $((n * TS_RETRY_DELAY_S))s: $*"
    sleep $((n * TS_RETRY_DELAY_S))
    n=$((n + 1))
  done
}

# metadata PATH: one value from the metadata server. curl retries connection errors and
# 5xx itself (the server can lag right after boot); a 404 (attribute absent) fails at once.
metadata() {
  curl --silent --show-error --fail --retry 5 --retry-connrefused --retry-delay 1 \
    --max-time 10 -H 'Metadata-Flavor: Google' "$TS_METADATA_URL/$1"
}

# Worker ids and IPs. `worker-network-endpoints` is "a:b:IP,a:b:IP,..." sorted by worker
# id (the format JAX's cloud_tpu_cluster reads: third ':' field of each ',' entry).
discover_workers() {
  local raw_id endpoints entry ip count
  raw_id=$(metadata instance/attributes/agent-worker-number 2>/dev/null) || raw_id=""
  endpoints=$(metadata instance/attributes/worker-network-endpoints 2>/dev/null) || endpoints=""
  WORKER_IPS=()
  if [[ -n $endpoints ]]; then
    IFS=',' read -r -a entries <<<"$endpoints"
    for entry in "${entries[@]}"; do
      IFS=':' read -r _ _ ip _ <<<"$entry"
      [[ $ip =~ ^[0-9]+(\.[0-9]+){3}$ ]] || die "worker-network-endpoints entry '$entry' has no IPv4 address"
      WORKER_IPS+=("$ip")
    done
  elif ((TS_EXPECTED_HOSTS == 1)); then
    ip=$(metadata instance/network-interfaces/0/ip) || die "cannot read this VM's internal IP"
    WORKER_IPS=("$ip")
  else
    die "metadata has no worker-network-endpoints on a slice of $TS_EXPECTED_HOSTS workers"
  fi
  count=${#WORKER_IPS[@]}
  if [[ -z $raw_id ]]; then
    ((count == 1)) || die "metadata has no agent-worker-number on a slice of $count workers"
    raw_id=0
  fi
  if [[ ! $raw_id =~ ^[0-9]+$ ]] || ((raw_id >= count)); then
    die "agent-worker-number '$raw_id' is not a worker index below $count"
  fi
  WORKER_ID=$raw_id
  if ((count != TS_EXPECTED_HOSTS)); then
    log "WARNING: the catalog expects $TS_EXPECTED_HOSTS workers but metadata lists $count; using the metadata"
  fi
  COORDINATOR=${WORKER_IPS[0]}
  WORKER_HOSTNAMES=$(
    IFS=','
    printf '%s' "${WORKER_IPS[*]}"
  )
}

download() {
  # gsutil only when this image's gcloud lacks `gcloud storage` (older Cloud SDKs).
  gcloud storage cp "$1" "$2" || gsutil cp "$1" "$2"
}

# retry_grant WHAT DONE CMD...: run CMD until it succeeds, with doubling waits (from
# TS_RETRY_DELAY_S up to 60 s) for TS_DOWNLOAD_WINDOW_S after the first failure. The slice
# is created after its account's bucket grants, but a new grant can take up to about 7
# minutes to reach every check (https://cloud.google.com/iam/docs/access-change-propagation):
# until then Cloud Storage answers 403, and giving up would leave the slice idle and billing.
# Each failed attempt logs one line naming WHAT; a late success logs DONE.
retry_grant() {
  local what=$1 done=$2 attempt=1 delay=$((TS_RETRY_DELAY_S > 0 ? TS_RETRY_DELAY_S : 1)) first="" waited
  shift 2
  until "$@"; do
    [[ -n $first ]] || first=$(date +%s)
    waited=$(($(date +%s) - first))
    if ((waited >= TS_DOWNLOAD_WINDOW_S)); then
      log "giving up on the $what after $attempt attempts over ${waited}s"
      return 1
    fi
    log "$what attempt $attempt failed (${waited}s of ${TS_DOWNLOAD_WINDOW_S}s); retrying in ${delay}s: a new grant of the training account can take up to 7 minutes to reach Cloud Storage"
    sleep "$delay"
    attempt=$((attempt + 1))
    delay=$((delay * 2 > 60 ? 60 : delay * 2))
  done
  ((attempt == 1)) || log "$done on attempt $attempt"
}

# download_package DEST: the trainer package, retried while a new grant propagates.
download_package() {
  retry_grant "package download" "package downloaded" download "$TS_PACKAGE_URI" "$1"
}

install_package() {
  local digest marker sdist said
  digest=$(printf '%s' "$TS_PACKAGE_URI" | sha256sum | cut -c1-16)
  marker="$TS_STATE_DIR/installed-$digest"
  if [[ -f $marker ]]; then
    log "trainer package already installed: $TS_PACKAGE_URI"
    return 0
  fi
  sdist="$TS_STATE_DIR/packages/${TS_PACKAGE_URI##*/}"
  mkdir -p "$TS_STATE_DIR/packages"
  log "installing trainer package $TS_PACKAGE_URI"
  STAGE=package_download
  alive
  download_package "$sdist" || die "cannot download $TS_PACKAGE_URI"
  STAGE=package_install
  freeze_runtime
  # With the runtime's packages as constraints pip refuses to change one the runtime ships.
  if ! retry 3 pip_install --quiet --disable-pip-version-check --constraint "$CONSTRAINTS" "$sdist"; then
    said=$(pip_said)
    die "pip could not install $TS_PACKAGE_URI${said:+: $said} (the runtime's own packages are constraints: $CONSTRAINTS)"
  fi
  touch "$marker"
  STAGE=startup
}

# pip_install ARGS...: pip install into the runtime's Python, its output also in PIP_LOG.
# The runtime image owns the system Python (TensorFlow lives there); PEP 668 images refuse
# a system-wide pip install without PIP_BREAK_SYSTEM_PACKAGES, older pips ignore it.
pip_install() {
  env PIP_BREAK_SYSTEM_PACKAGES=1 "$TS_PYTHON" -m pip install "$@" 2>&1 | tee "$PIP_LOG"
}

# pip_said: the last line pip printed (why it failed).
pip_said() {
  grep -v '^[[:space:]]*$' "$PIP_LOG" 2>/dev/null | tail -n 1 || true
}

# The runtime's packages as pip constraints (name==version lines only: editable and
# direct-URL entries cannot be constraints), frozen on the first boot before trainstack
# installs anything, so later installs keep to what the image shipped.
CONSTRAINTS="$TS_STATE_DIR/runtime-constraints.txt"
freeze_runtime() {
  local frozen
  [[ -f $CONSTRAINTS ]] && return 0
  frozen=$("$TS_PYTHON" -m pip freeze --disable-pip-version-check) ||
    die "cannot list the runtime's packages with $TS_PYTHON -m pip freeze"
  grep -E '^[A-Za-z0-9][A-Za-z0-9._-]*==[^ ;]+$' <<<"$frozen" >"$CONSTRAINTS.tmp" || true
  mv "$CONSTRAINTS.tmp" "$CONSTRAINTS"
  log "runtime packages frozen as install constraints: $(wc -l <"$CONSTRAINTS") pins in $CONSTRAINTS"
}

# at_least_minor VERSION MAJOR.MINOR: VERSION (x.y[.z...]) is at least MAJOR.MINOR.
at_least_minor() {
  local -a have want
  IFS=. read -r -a have <<<"$1"
  IFS=. read -r -a want <<<"$2"
  ((have[0] > want[0] || (have[0] == want[0] && have[1] >= want[1])))
}

# The TensorFlow release of the runtime's Python. The runtime's name only promises the
# minor (TF 2.16 runtimes named 2.16.0 ship 2.16.1). TPU_LOAD_LIBRARY=0 keeps this probe
# off the chips, so the trainer started next finds libtpu free.
tensorflow_version() {
  TPU_LOAD_LIBRARY=0 TF_CPP_MIN_LOG_LEVEL=3 "$TS_PYTHON" -c \
    'import tensorflow as tf; print(tf.__version__)' 2>/dev/null | tail -n 1
}

# The trainer's models are Keras 2 code. From TF 2.16 on `tf.keras` is Keras 3 unless the
# tf-keras package (same minor as TF: tf-keras X.Y requires TensorFlow X.Y) is installed;
# Google's TF TPU harness installs it with `pip install --upgrade --force-reinstall
# --no-deps tf-keras==<version>` (ml-auto-solutions dags/solutions_team/configs/tensorflow/
# common.py:106-108). --no-deps and the pin keep pip from replacing the TPU build of
# TensorFlow with whatever a newer tf-keras requires. TF < 2.16 ships Keras 2 itself.
install_keras() {
  local version minor pin marker said
  version=$(tensorflow_version) || version=""
  if [[ ! $version =~ ^([0-9]+)\.([0-9]+)\. ]]; then
    die "cannot import TensorFlow with $TS_PYTHON; runtime $TS_RUNTIME_VERSION should ship TensorFlow $TS_RUNTIME_TF_MINOR, which the trainer needs"
  fi
  minor="${BASH_REMATCH[1]}.${BASH_REMATCH[2]}"
  if [[ $minor != "$TS_RUNTIME_TF_MINOR" ]]; then
    log "WARNING: runtime $TS_RUNTIME_VERSION names TensorFlow $TS_RUNTIME_TF_MINOR but $TS_PYTHON has TensorFlow $version; matching Keras to $version"
  fi
  if ! at_least_minor "$version" "$TS_TF_KERAS_FROM"; then
    log "TensorFlow $version has Keras 2 built in; nothing to install"
    return 0
  fi
  pin="tf-keras==$minor.*"
  marker="$TS_STATE_DIR/installed-$(printf '%s' "$pin" | sha256sum | cut -c1-16)"
  if [[ -f $marker ]]; then
    log "TensorFlow $version: $pin already installed"
    return 0
  fi
  log "TensorFlow $version runs Keras 2 as tf-keras: installing $pin without dependencies"
  STAGE=package_install
  if ! retry 3 pip_install --quiet --disable-pip-version-check --upgrade --force-reinstall \
    --no-deps "$pin"; then
    said=$(pip_said)
    die "pip could not install $pin${said:+: $said}"
  fi
  STAGE=startup
  touch "$marker"
}

# libtpu.so of the libtpu package the runtime's Python would import (where pip puts it
# with TensorFlow's TPU build), else /lib/libtpu.so (where Google's harness copied it
# before 2024-07); fails when neither exists.
libtpu_path() {
  local found
  found=$("$TS_PYTHON" -c 'import importlib.util as u, os; s = u.find_spec("libtpu"); print(os.path.join(list(s.submodule_search_locations)[0], "libtpu.so") if s and s.submodule_search_locations else "")' 2>/dev/null) || found=""
  if [[ -n $found && -f $found ]]; then
    printf '%s' "$found"
  elif [[ -f /lib/libtpu.so ]]; then
    printf '%s' /lib/libtpu.so
  else
    return 1
  fi
}

# What Google's TensorFlow TPU harness exports (ml-auto-solutions dags/solutions_team/
# configs/tensorflow/common.py:120-148, export_env_variables; catalog:
# trainstack.components.catalog.tpu_runtimes.TPU_TF_ENVIRONMENT), except TPU_NAME on a multi-host
# slice: with it TPUClusterResolver would look the slice up through the Cloud TPU API (an
# extra IAM role); TPU_WORKER_HOSTNAMES reaches each worker's TPU runtime directly.
export_tpu_environment() {
  local libtpu
  export TPU_WORKER_ID="$WORKER_ID"
  export TPU_WORKER_HOSTNAMES="$WORKER_HOSTNAMES"
  export PYTHONUNBUFFERED=1
  # Your code's framework drives the chips itself (JAX's TPU backend, PyTorch/XLA's PJRT):
  # TensorFlow's variables would keep it off them (TPU_LOAD_LIBRARY=0).
  ((TS_USER_CODE)) && return 0
  if ((${#WORKER_IPS[@]} > 1)); then
    # Multi-host `-pod` runtime: the TPU runtime of every worker serves the chips, so the
    # TensorFlow client on worker 0 must not load libtpu itself (common.py:139-140).
    export TPU_LOAD_LIBRARY=0
    return 0
  fi
  # Single host: the chips of this VM (common.py:132; release config: 'local' unless a pod).
  export TPU_NAME=local
  if [[ $TS_DEVICE_API == pjrt ]]; then
    # Single-host PJRT: TensorFlow drives libtpu as a pluggable device (common.py:142-146).
    export NEXT_PLUGGABLE_DEVICE_USE_C_API=true
    if libtpu=$(libtpu_path); then
      export TF_PLUGGABLE_DEVICE_LIBRARY_PATH="$libtpu"
    else
      log "WARNING: no libtpu.so (no libtpu package for $TS_PYTHON, no /lib/libtpu.so); TF_PLUGGABLE_DEVICE_LIBRARY_PATH left unset"
    fi
  fi
}

# The node launcher (trainstack.trainers.node) ships the trainer's lines to Cloud Logging itself: the
# tpu_worker resource's node_id is this slice, its worker_id TPU_WORKER_ID; project and zone
# come from the metadata server (trainers/common/cloud_logging.py).
export_logging_environment() {
  export TRAINSTACK_CLOUD_LOGGING=tpu_worker
  export TRAINSTACK_TPU_NODE_ID="$TS_SLICE_NAME"
  export TRAINSTACK_RUN_RECORD="$TS_RUN_RECORD"
}

# The run limit. The node helper (components/gpu_startup/node_helper.py, standard library
# only) reads the clock, or records it with ifGenerationMatch=0 when this is the run's
# first start; GCE_METADATA_HOST and STORAGE_EMULATOR_HOST (tests only) point it at fakes.
RUN_DEADLINE=""
DEADLINE_HIT=0
TRAINER_PID=""
# read_run_clock HELPER: the run's start (recorded now if this is the first start) into
# $TS_STATE_DIR/run-started; a file, so the retry's progress lines stay out of the value.
read_run_clock() {
  "$TS_PYTHON" "$1" run-started "$TS_RUN_CLOCK_URI" >"$TS_STATE_DIR/run-started"
}

check_run_limit() {
  local started now
  [[ -n $TS_MAX_RUN_SECONDS ]] || return 0
  # The clock lives in the checkpoint bucket, whose grant is as new as the staging one's:
  # the same wait as the package download (a 403 here would otherwise leave the slice idle).
  retry_grant "run clock read" "run clock read" read_run_clock "$HELPER" ||
    die "cannot read or record the run's start time at $TS_RUN_CLOCK_URI"
  started=$(<"$TS_STATE_DIR/run-started")
  [[ $started =~ ^[0-9]+$ ]] || die "the run's start time at $TS_RUN_CLOCK_URI is '$started', not Unix seconds"
  now=$(date +%s)
  RUN_DEADLINE=$((started + TS_MAX_RUN_SECONDS))
  if ((now >= RUN_DEADLINE)); then
    log "max_run_hours reached: $((now - started))s since the run started (limit ${TS_MAX_RUN_SECONDS}s); not starting"
    exit 0
  fi
  log "run limit: $((RUN_DEADLINE - now))s of ${TS_MAX_RUN_SECONDS}s left (the run started at $started, recorded at $TS_RUN_CLOCK_URI)"
}

# shellcheck disable=SC2329  # called by the trap in start_deadline_timer
on_deadline() {
  DEADLINE_HIT=1
  if [[ -n $TRAINER_PID ]]; then
    kill -TERM "$TRAINER_PID" 2>/dev/null || true
  fi
}

# SIGUSR1 to this script (on_deadline) at the run's deadline, from a timer (TIMER_PID) that
# keeps neither the trainer lock (fd 9) nor the console open and takes its sleep with it
# when stopped.
TIMER_PID=""
start_deadline_timer() {
  local remaining
  remaining=$((RUN_DEADLINE - $(date +%s)))
  ((remaining > 0)) || remaining=0
  trap on_deadline USR1
  (
    trap - USR1
    nap=""
    trap 'kill "$nap" 2>/dev/null; exit 0' TERM
    sleep "$remaining" &
    nap=$!
    wait "$nap" && kill -USR1 "$$"
  ) 9>&- </dev/null >/dev/null 2>&1 &
  TIMER_PID=$!
}

# Run the trainer once in the background (so the deadline's trap runs at once), its lines
# prefixed; sets STATUS to its exit status once it and its output are done.
run_attempt() {
  local fifo printer
  fifo="$TS_STATE_DIR/trainer.out"
  rm -f "$fifo"
  mkfifo "$fifo"
  prefix_lines <"$fifo" &
  printer=$!
  # The trainer inherits the lock: if this script dies, a re-run still sees it held.
  "$@" >"$fifo" 2>&1 &
  TRAINER_PID=$!
  # A deadline that fell between the launch and the line above found no trainer to stop.
  if ((DEADLINE_HIT)); then
    kill -TERM "$TRAINER_PID" 2>/dev/null || true
  fi
  STATUS=0
  wait "$TRAINER_PID" || STATUS=$?
  # The deadline's trap interrupts `wait`: keep waiting while the trainer checkpoints.
  while kill -0 "$TRAINER_PID" 2>/dev/null; do
    STATUS=0
    wait "$TRAINER_PID" || STATUS=$?
  done
  TRAINER_PID=""
  wait "$printer" || true
  rm -f "$fifo"
}

run_trainer() {
  local -a cmd
  local digest done_marker attempt shown arg
  if ((TS_USER_CODE)); then
    cmd=("$TS_PYTHON" -m trainstack.trainers.node "${TS_TRAINER_ARGS[@]}")
  else
    cmd=("$TS_PYTHON" -m trainstack.trainers.node --launcher=node "$TS_TRAINER_MODULE" "${TS_TRAINER_ARGS[@]}")
  fi
  digest=$(printf '%s\n' "$TS_PACKAGE_URI" "${cmd[@]}" | sha256sum | cut -c1-16)
  done_marker="$TS_STATE_DIR/done-$digest"
  if [[ -f $done_marker ]]; then
    log "this run already finished on an earlier boot; not training again"
    return 0
  fi
  exec 9>"$TS_STATE_DIR/trainer.lock"
  if ! flock --nonblock 9; then
    log "a trainer is already running on this worker; leaving it alone"
    return 0
  fi
  ((TS_USER_CODE)) || install_keras
  export_tpu_environment
  export_logging_environment
  # The logged command line names each --env variable without its value (defence in depth:
  # a stack's credentials travel as --secret-env Secret Manager names, never as --env values).
  shown=""
  for arg in "${cmd[@]}"; do
    if [[ $arg == --env=*=* ]]; then
      arg="${arg#--env=}"
      shown+="--env=${arg%%=*}=*** "
    else
      shown+="$(printf '%q' "$arg") "
    fi
  done
  [[ -z $RUN_DEADLINE ]] || start_deadline_timer
  STATUS=0
  for ((attempt = 1; attempt <= TS_TRAINER_ATTEMPTS; attempt++)); do
    if ((DEADLINE_HIT)); then
      log "max_run_hours reached: ${TS_MAX_RUN_SECONDS}s since the run started; not launching the trainer"
      STATUS=0
      break
    fi
    if ((attempt == TS_TRAINER_ATTEMPTS)); then
      # The last attempt: no retry follows a failure now, so it ends the run (the node
      # launcher records it for the supervisor); a preemption (143) does not.
      export TRAINSTACK_RUN_FINAL_CODES="1 2 3 4 5"
    fi
    log "launching trainer (attempt $attempt/$TS_TRAINER_ATTEMPTS): ${shown% }"
    run_attempt "${cmd[@]}"
    if ((STATUS == 0)); then
      touch "$done_marker"
      log "trainer finished"
      break
    fi
    if ((DEADLINE_HIT)); then
      log "max_run_hours reached: stopped the trainer after ${TS_MAX_RUN_SECONDS}s of the run (trainer exit $STATUS); the newest checkpoint holds its state"
      STATUS=0
      break
    fi
    log "trainer exited with status $STATUS"
    if ((attempt < TS_TRAINER_ATTEMPTS)); then
      sleep $((attempt * TS_RETRY_DELAY_S))
    fi
  done
  if [[ -n $TIMER_PID ]]; then
    kill "$TIMER_PID" 2>/dev/null || true
  fi
  if ((STATUS != 0 && STATUS != 143)); then
    # No attempt follows on this boot; the node launcher's own record of its last exit, if
    # it wrote one, is kept. A preemption (143) ends the machine, not the run.
    record_end trainer "the trainer exited $STATUS on its last attempt ($TS_TRAINER_ATTEMPTS of $TS_TRAINER_ATTEMPTS)"
  fi
  return "$STATUS"
}

main() {
  mkdir -p "$TS_STATE_DIR/logs"
  cd "$TS_STATE_DIR"
  cat >"$HELPER" <<'TRAINSTACK_HELPER_EOF'
@@NODE_HELPER@@
TRAINSTACK_HELPER_EOF
  discover_workers
  log "worker $WORKER_ID of ${#WORKER_IPS[@]}; coordinator (worker 0) is $COORDINATOR"
  alive
  if ((WORKER_ID == 0 || TS_USER_CODE)); then
    check_run_limit
  fi
  install_package
  if ((WORKER_ID != 0 && !TS_USER_CODE)); then
    log "serving TPU chips to the trainer on worker 0 ($COORDINATOR); nothing to launch here"
    return 0
  fi
  run_trainer
}

main "$@"
