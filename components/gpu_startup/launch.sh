#!/usr/bin/env bash
# trainstack node launcher for Compute Engine. Rendered by trainstack.components.gpu_startup, which
# replaces each at-sign-delimited NAME marker with a shell-quoted value before it reaches a
# node; the startup script (gce_startup.sh) writes it to disk and runs it as a systemd
# service.
#
# Installs the trainer package from Cloud Storage, then runs the node launcher
# (`python -m trainstack.trainers.node`): torchrun with one process per accelerator for
# trainstack.trainers.torch_ddp, one process per node for other trainers (they read the node-level
# environment exported below). Node rank: the instance's node-rank metadata attribute.
# Node 0 hosts the (elastic) rendezvous. Your own code (USER_CODE=1): NODE_ARGV is the node
# launcher's `--launcher=... -- ENTRYPOINT` command line; no bundled-trainer flag check.
#
# Run limit (MAX_RUN_SECONDS, the stack's limits.max_run_hours): the first node to start
# records the run's start time in the checkpoint bucket (RUN_CLOCK_URI, created only if
# absent); once MAX_RUN_SECONDS have passed since then the launcher sends the node launcher
# SIGTERM (the trainer checkpoints), logs `max_run_hours reached` and exits 0, which the
# unit does not restart; a start after the deadline exits 0 at once. The managed instance
# group keeps the VMs (stop them with `pulumi destroy`): a VM-level maxRunDuration would
# only make the group recreate them.
#
# The run's end (RUN_RECORD, trainers/common/run_records.py): the unit never restarts exits
# 1, 2 and 5, so a failure of the launcher's own with one of them ends the run, and it
# records so (`node_helper.py end`: the stage that failed and why). A setup failure (3:
# the rank, the download, the install, the argument check, or the node launcher's own 3)
# is retried by the unit; the launcher counts them in SETUP_FAILURES (consecutive: any
# other exit of the node launcher resets it) and records the run's end on the
# SETUP_ATTEMPTS-th, the unit's last start when the attempts come faster than the start
# limit's interval allows (StartLimitBurst), and the last one anyway: a start after it
# exits 0 at once, so a slow failing setup cannot restart for ever either. On that last
# attempt the node launcher also records a setup failure of its own (3 joins
# TRAINSTACK_RUN_FINAL_CODES). This holds from the first step that can fail after the helper
# is on disk, the GPU fabric's install included: until the framework's python is found the
# helper runs on the image's python3. Each start rewrites this node's heartbeat
# (`node_helper.py alive`) once it knows its rank, before the fabric's install.
#
# A rank at or above NUM_NODES is a VM the group is removing (node_count lowered: its
# per-instance config's deletion lands after the new template reached it): it exits 0 with
# a log line, no end record, and the unit (Restart=on-failure) does not start it again.
#
# Exit codes (the Compute Engine unit's restart rule uses them):
#   0    training finished, or the run limit was reached, or (flex-start) the VM's run
#        duration ends: the node launcher exited 6 after the trainer saved a checkpoint,
#        or this VM's rank is not below the node count (the group is removing it)
#   1    the trainer failed after it started: a code error
#   2    invalid trainer arguments or node environment
#   3    setup failed before training started (download, install): retryable
#   4    a peer node or the elastic rendezvous was lost (node 0 gone, no quorum in time)
#   5    fewer usable accelerators than EXPECTED_ACCELERATORS (the plan's GPUs per node)
#   143  preempted: SIGTERM reached this node, or the trainer checkpointed and stopped
set -euo pipefail

PACKAGE_URI=@@PACKAGE_URI@@
TRAINER_ARGS=(@@TRAINER_ARGS@@)
NODE_ARGV=(@@NODE_ARGV@@)
USE_TORCHRUN=@@USE_TORCHRUN@@
USER_CODE=@@USER_CODE@@
NUM_NODES=@@NUM_NODES@@
EXPECTED_ACCELERATORS=@@EXPECTED_ACCELERATORS@@
COORDINATOR=@@COORDINATOR@@
COORDINATOR_PORT=@@COORDINATOR_PORT@@
WORK_DIR=@@WORK_DIR@@
DONE_MARKER=@@DONE_MARKER@@
EXTRA_PATH=@@EXTRA_PATH@@
NODE_RANK_ATTRIBUTE=@@NODE_RANK_ATTRIBUTE@@
# 1: the VMs carry no rank metadata (a flex-start group's resize request names them): each
# claims a rank under RUN_RECORD, and the rank-0 VM's name replaces COORDINATOR.
RANK_CLAIMS=@@RANK_CLAIMS@@
TF_WORKERS=@@TF_WORKERS@@
MAX_RUN_SECONDS=@@MAX_RUN_SECONDS@@
RUN_CLOCK_URI=@@RUN_CLOCK_URI@@
RUN_RECORD=@@RUN_RECORD@@
RUN_FINAL_CODES=@@RUN_FINAL_CODES@@
SETUP_ATTEMPTS=@@SETUP_ATTEMPTS@@
SETUP_FAILURES=@@SETUP_FAILURES@@
# The GPU fabric (A4, A3 Ultra: GPUDirect RDMA): the NCCL plugin's signing key (URL and the
# keyring its apt source's signed-by names), apt source, list file and package, the torch to
# install where the image has none, and the plugin's NCCL settings and libraries. All empty
# without a fabric.
FABRIC_APT_KEY_URL=@@FABRIC_APT_KEY_URL@@
FABRIC_APT_KEYRING=@@FABRIC_APT_KEYRING@@
FABRIC_APT_SOURCE=@@FABRIC_APT_SOURCE@@
FABRIC_APT_LIST=@@FABRIC_APT_LIST@@
FABRIC_PACKAGE=@@FABRIC_PACKAGE@@
TORCH_REQUIREMENT=@@TORCH_REQUIREMENT@@
TORCH_PIP_PACKAGE=@@TORCH_PIP_PACKAGE@@
NCCL_ENV_SCRIPT=@@NCCL_ENV_SCRIPT@@
NCCL_LIB_DIR=@@NCCL_LIB_DIR@@

# Each of the launcher's own lines goes to the unit's journal and, once the helper is on disk,
# to Cloud Logging as this VM's entry (node_helper.py log), where `trainstack logs` and the
# dashboard's filter find download, install and rendezvous failures; shipping a line never
# fails the launcher.
helper=""
# The framework environment's python, once found (after the fabric's install, which can
# bring torch); the helper is standard library only, so until then the image's python3
# runs it (as it does the fabric's key fetch).
python=""
helper_python() { "${python:-python3}" "$helper" "$@"; }
say() {
  local severity=$1
  shift
  printf 'trainstack-launch: %s\n' "$*" >&2
  if [ -n "$helper" ]; then
    helper_python log "$severity" "trainstack-launch: $*" >/dev/null 2>&1 || true
  fi
}
log() { say INFO "$@"; }
# What the launcher is doing (the `stage` of the run's end record) and this node's rank,
# once known.
stage=launch
node_rank=""
# record_end REASON: the run ended for good at `stage` (first line of REASON: why).
record_end() {
  local said
  if [ -z "$RUN_RECORD" ] || [ -z "$helper" ]; then
    return 0
  fi
  if said="$(helper_python end "$RUN_RECORD" "$stage" "$node_rank" "$1" 2>&1)"; then
    say INFO "$said"
  else
    say WARNING "could not record the run's end: $said"
  fi
}
# ends_run CODE: whether exit CODE ends the run for good (see the top of this file);
# counts a setup failure.
ends_run() {
  local failures
  case "$1" in
    1 | 2 | 5) return 0 ;;
    3)
      failures=$(($(cat "$SETUP_FAILURES" 2>/dev/null || echo 0) + 1))
      printf '%s\n' "$failures" >"$SETUP_FAILURES" 2>/dev/null || true
      [ "$failures" -ge "$SETUP_ATTEMPTS" ]
      ;;
    *) return 1 ;;
  esac
}
fail() {
  local code=$1
  shift
  say ERROR "$*"
  if ends_run "$code"; then
    record_end "$*" || true
  fi
  exit "$code"
}
# Anything else that fails is a node problem, not a code error: a bounded retry (exit 3)
# rather than the fail-fast exit 1 that `set -e` would report.
trap 'fail 3 "unexpected failure at line $LINENO"' ERR

terminated=0
deadline=0
child=""
# shellcheck disable=SC2329  # called by the trap below
on_term() {
  terminated=1
  if [ -n "$child" ]; then
    kill -TERM "$child" 2>/dev/null || true
  fi
}
trap on_term TERM INT
# shellcheck disable=SC2329  # called by the trap below: the run limit's timer
on_deadline() {
  deadline=1
  if [ -n "$child" ]; then
    kill -TERM "$child" 2>/dev/null || true
  fi
}
trap on_deadline USR1

# Deep Learning VM images keep their Python outside the PATH that system services get.
if [ -n "$EXTRA_PATH" ]; then
  PATH="$PATH:$EXTRA_PATH"
fi
mkdir -p "$WORK_DIR"
helper="$WORK_DIR/trainstack_node_helper.py"
cat >"$helper" <<'TRAINSTACK_HELPER_EOF'
@@NODE_HELPER@@
TRAINSTACK_HELPER_EOF

failures="$(cat "$SETUP_FAILURES" 2>/dev/null || echo 0)"
if [ "$failures" -ge "$SETUP_ATTEMPTS" ]; then
  log "the setup failed $failures times in a row (at most $SETUP_ATTEMPTS); not starting again"
  exit 0
fi
if [ "$RANK_CLAIMS" = 1 ]; then
  name="$(helper_python metadata instance/name)" || fail 3 "could not read this VM's name"
  rank="$(helper_python claim-rank "$RUN_RECORD" "$NUM_NODES" "$name")" ||
    fail 3 "could not claim a node rank under $RUN_RECORD.ranks/"
  COORDINATOR="$(helper_python rank-host "$RUN_RECORD" 0)" ||
    fail 3 "could not read the rank-0 VM's name under $RUN_RECORD.ranks/"
  log "$name holds node rank $rank; node 0 is $COORDINATOR"
else
  rank="$(helper_python metadata "instance/attributes/$NODE_RANK_ATTRIBUTE")" ||
    fail 3 "could not read the $NODE_RANK_ATTRIBUTE metadata attribute"
fi
case "$rank" in
  '' | *[!0-9]*) fail 2 "node rank '$rank' is not a non-negative integer" ;;
esac
if [ "$rank" -ge "$NUM_NODES" ]; then
  # node_count was lowered and this VM's per-instance config is being deleted: the group
  # removes the VM; its run is no longer this one's. Exit 0: Restart=on-failure restarts
  # only an unclean exit (systemd.service(5), Restart=).
  log "node rank $rank is not below the node count $NUM_NODES: the group is removing this VM; not starting"
  exit 0
fi
node_rank="$rank"
if [ -n "$RUN_RECORD" ]; then
  helper_python alive "$RUN_RECORD" "$node_rank" "$stage" >/dev/null 2>&1 ||
    say WARNING "could not write this node's heartbeat under $RUN_RECORD"
fi

# The fabric's NCCL plugin (Google's nccl-gib) from Google's apt repository, signed by the
# Google Cloud key the helper stores (the image is not Google's, so apt trusts no key of
# Google's yet), once per boot disk, and torch where the image has no torchrun (Google's
# accelerator-optimized image carries the driver, not PyTorch).
# apt_get ARGS: apt-get ARGS, its output to the journal; on a failure apt_said is why (apt's
# last `E:` line, else its last line), for the run's end record.
apt_get() {
  local out rc=0
  out="$(apt-get "$@" 2>&1)" || rc=$?
  printf '%s\n' "$out" >&2
  apt_said="$(printf '%s\n' "$out" | grep '^E: ' | tail -n 1 || true)"
  if [ -z "$apt_said" ]; then
    apt_said="$(printf '%s\n' "$out" | grep -v '^[[:space:]]*$' | tail -n 1 || true)"
  fi
  return "$rc"
}
if [ -n "$FABRIC_PACKAGE" ] && [ ! -e "$WORK_DIR/fabric-installed" ]; then
  packages=("$FABRIC_PACKAGE")
  need_torch=0
  if [ "$USE_TORCHRUN" = 1 ] && ! command -v torchrun >/dev/null 2>&1; then
    need_torch=1
    packages+=("$TORCH_PIP_PACKAGE")
  fi
  log "installing ${packages[*]} from '$FABRIC_APT_SOURCE'"
  python3 "$helper" apt-key "$FABRIC_APT_KEY_URL" "$FABRIC_APT_KEYRING" ||
    fail 3 "could not fetch the signing key $FABRIC_APT_KEY_URL into $FABRIC_APT_KEYRING"
  printf '%s\n' "$FABRIC_APT_SOURCE" >"$FABRIC_APT_LIST" || fail 3 "could not write $FABRIC_APT_LIST"
  export DEBIAN_FRONTEND=noninteractive
  apt_get update -q || fail 3 "apt-get update failed: $apt_said"
  apt_get install -y -q "${packages[@]}" || fail 3 "apt-get could not install ${packages[*]}: $apt_said"
  if [ "$need_torch" = 1 ]; then
    log "installing $TORCH_REQUIREMENT"
    python3 -m pip install --disable-pip-version-check --no-input "$TORCH_REQUIREMENT" >&2 ||
      fail 3 "pip could not install $TORCH_REQUIREMENT"
  fi
  mkdir -p "$WORK_DIR"
  touch "$WORK_DIR/fabric-installed"
fi
if [ "$USE_TORCHRUN" = 1 ]; then anchor=torchrun; else anchor=python3; fi
anchor_path="$(command -v "$anchor")" || fail 3 "$anchor is not on PATH ($PATH)"
# python and pip of the environment that holds the framework, so the trainer lands beside it.
bin_dir="$(dirname "$anchor_path")"
python="$bin_dir/python3"
[ -x "$python" ] || python="$bin_dir/python"
[ -x "$python" ] || fail 3 "no python next to $anchor_path"
pip=("$bin_dir/pip")
[ -x "${pip[0]}" ] || pip=("$python" -m pip)

remaining=""
if [ -n "$MAX_RUN_SECONDS" ]; then
  started="$("$python" "$helper" run-started "$RUN_CLOCK_URI")" ||
    fail 3 "could not read or record the run's start time at $RUN_CLOCK_URI"
  elapsed=$(($(date +%s) - started))
  remaining=$((MAX_RUN_SECONDS - elapsed))
  if [ "$remaining" -le 0 ]; then
    log "max_run_hours reached: ${elapsed}s since the run started (limit ${MAX_RUN_SECONDS}s); not starting"
    exit 0
  fi
fi

# The object name carries the sdist's hash, so an installed marker is valid for this URI only.
package_file="$WORK_DIR/${PACKAGE_URI##*/}"
if [ ! -e "$package_file.installed" ]; then
  log "installing $PACKAGE_URI"
  # The helper's and pip's own words go into the shipped line: the journal is not shipped.
  # Their last line is the reason a run's end record keeps.
  stage=package_download
  if ! out="$("$python" "$helper" download "$PACKAGE_URI" "$package_file" 2>&1)"; then
    fail 3 "could not download $PACKAGE_URI: $(printf '%s\n' "$out" | tail -n 1)"
  fi
  stage=package_install
  if ! out="$("${pip[@]}" install --disable-pip-version-check --no-input "$package_file" 2>&1)"; then
    printf '%s\n' "$out" >&2
    said="$(printf '%s\n' "$out" | grep -v '^[[:space:]]*$' || true)"
    # pip's last line says why; up to 5 lines before it go with it as context.
    before="$(printf '%s\n' "$said" | tail -n 6 | sed '$d')"
    fail 3 "pip could not install $PACKAGE_URI: $(printf '%s\n' "$said" | tail -n 1)${before:+
$before}"
  fi
  printf '%s\n' "$out" >&2
  touch "$package_file.installed"
fi
stage=launch
if [ "$terminated" = 1 ]; then
  fail 143 "terminated before training started"
fi
rc=0
if [ "$USER_CODE" = 0 ]; then
  "$python" "$helper" check-args "${TRAINER_ARGS[@]}" || rc=$?
fi
case "$rc" in
  0) ;;
  2) fail 2 "invalid trainer arguments: ${TRAINER_ARGS[*]}" ;;
  *) fail 3 "could not check the trainer arguments (exit $rc)" ;;
esac

# The fabric's NCCL settings, as Google's NCCL/gIB page says a workload gets them: its script
# sourced (every assignment exported, so torchrun's workers inherit it) and its libraries on
# LD_LIBRARY_PATH (first, unless the script put them there).
if [ -n "$NCCL_ENV_SCRIPT" ]; then
  [ -r "$NCCL_ENV_SCRIPT" ] || fail 3 "$NCCL_ENV_SCRIPT is missing ($FABRIC_PACKAGE not installed)"
  set +u -a
  # shellcheck disable=SC1090  # the plugin package's own script
  . "$NCCL_ENV_SCRIPT"
  set -u +a
  case ":${LD_LIBRARY_PATH:-}:" in
    *":$NCCL_LIB_DIR:"*) ;;
    *) export LD_LIBRARY_PATH="$NCCL_LIB_DIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" ;;
  esac
  log "NCCL: sourced $NCCL_ENV_SCRIPT; LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
fi
export TRAINSTACK_NUM_NODES="$NUM_NODES" TRAINSTACK_COORDINATOR_PORT="$COORDINATOR_PORT"
# The node launcher stops (exit 5) on a node with fewer usable GPUs than the plan bought.
export TRAINSTACK_EXPECTED_ACCELERATORS="$EXPECTED_ACCELERATORS"
export PYTHONUNBUFFERED=1 TRAINSTACK_PROGRESS=0
export TRAINSTACK_NODE_RANK="$node_rank" TRAINSTACK_COORDINATOR="$COORDINATOR:$COORDINATOR_PORT"
# Nothing on a Compute Engine VM ships a unit's output to Cloud Logging: the node launcher
# writes the trainer's lines through the Logging API itself (trainers/common/cloud_logging).
export TRAINSTACK_CLOUD_LOGGING=gce_instance
# The run's end record and the supervisor's stop request (trainers/common/run_records.py):
# the exits the unit never restarts end the run for good.
if [ -n "$RUN_RECORD" ]; then
  if [ "$((failures + 1))" -ge "$SETUP_ATTEMPTS" ]; then
    # The last attempt: the unit restarts a setup failure of the node launcher no more.
    RUN_FINAL_CODES="$RUN_FINAL_CODES 3"
  fi
  export TRAINSTACK_RUN_RECORD="$RUN_RECORD" TRAINSTACK_RUN_FINAL_CODES="$RUN_FINAL_CODES"
fi
if [ "$USE_TORCHRUN" = 0 ] && [ -n "$TF_WORKERS" ]; then
  # TensorFlow needs every worker's address; the variables above name only node 0.
  export TF_CONFIG="{\"cluster\": {\"worker\": $TF_WORKERS}, \"task\": {\"type\": \"worker\", \"index\": $node_rank}}"
fi
# -- Flex-start: the deadline --------------------------------------------------------------
# CAPACITY_RUN_SECONDS is a flex-start VM's run duration (its maxRunDuration, empty
# otherwise). Compute Engine deletes the VM at its end, counted from when the VM entered
# RUNNING, with no metadata key that says when (trainstack.components.catalog.capacity_end).
# The deadline is this VM's first boot (kept on its disk, so a reboot does not move it) plus
# the duration: a little late, never early; the trainer saves trainer.deadline_margin_s
# before it and the node launcher exits 6 (trainers/common/deadline.py).
CAPACITY_RUN_SECONDS=@@CAPACITY_RUN_SECONDS@@
if [ -n "$CAPACITY_RUN_SECONDS" ]; then
  first_boot="$WORK_DIR/first-boot"
  if [ ! -s "$first_boot" ]; then
    awk '$1 == "btime" { print $2 }' /proc/stat >"$first_boot"
  fi
  export TRAINSTACK_DEADLINE="$(($(cat "$first_boot") + CAPACITY_RUN_SECONDS))"
fi
# -----------------------------------------------------------------------------------------
# One launcher on every target: trainstack.trainers.node counts this machine's accelerators and runs
# torchrun (elastic rendezvous on node 0 when there are several nodes) or the trainer once,
# and maps the outcome to the exit codes above.
cmd=("$python" "${NODE_ARGV[@]}")
stage=trainer
# The logged command line names each --env variable without its value (defence in depth:
# a stack's credentials travel as --secret-env Secret Manager names, never as --env values).
shown=()
for arg in "${cmd[@]}"; do
  if [[ $arg == --env=*=* ]]; then
    arg="${arg#--env=}"
    arg="--env=${arg%%=*}=***"
  fi
  shown+=("$arg")
done
log "node $node_rank of $NUM_NODES: ${shown[*]}"
# The node launcher's stderr (why it stopped: a lost rendezvous, fewer GPUs than planned, a
# worker's traceback) goes to the journal as before and to a file whose last lines travel
# with the shipped failure line; only its stdout reaches Cloud Logging otherwise.
node_log="$WORK_DIR/node-launcher.stderr"
node_fifo="$WORK_DIR/node-launcher.fifo"
rm -f "$node_fifo"
mkfifo "$node_fifo"
: >"$node_log"
tee -a "$node_log" <"$node_fifo" >&2 &
tee_pid=$!
"${cmd[@]}" 2>"$node_fifo" &
child=$!
timer=""
if [ -n "$remaining" ]; then
  # The run limit: SIGUSR1 to this script (on_deadline) once the time is up.
  (
    trap - TERM INT USR1 ERR
    sleep "$remaining" && kill -USR1 "$$"
  ) </dev/null >/dev/null 2>&1 &
  timer=$!
fi
status=0
wait "$child" || status=$?
# A trapped SIGTERM interrupts `wait`: keep waiting while the trainer checkpoints and exits.
while kill -0 "$child" 2>/dev/null; do
  status=0
  wait "$child" || status=$?
done
if [ -n "$timer" ]; then
  kill "$timer" 2>/dev/null || true
fi
wait "$tee_pid" 2>/dev/null || true
rm -f "$node_fifo"
if [ "$status" -ne 3 ]; then
  rm -f "$SETUP_FAILURES" # the setup went through: the count starts again
fi
# why CODE TEXT: the failure line for the node launcher's exit CODE, with its last stderr
# lines (at most NODE_LOG_LINES) when it wrote any.
NODE_LOG_LINES=20
why() {
  local tail_lines
  tail_lines="$(tail -n "$NODE_LOG_LINES" "$node_log" 2>/dev/null || true)"
  if [ -n "$tail_lines" ]; then
    printf '%s; its last lines:\n%s' "$2" "$tail_lines"
  else
    printf '%s' "$2"
  fi
}

if [ "$status" -eq 0 ]; then
  if [ -n "$DONE_MARKER" ]; then
    touch "$DONE_MARKER"
  fi
  log "training finished"
  exit 0
fi
# -- Flex-start: the capacity's end (6): the run's end record is the node launcher's ------
if [ "$status" -eq 6 ]; then
  log "this VM's flex-start run duration ends at ${TRAINSTACK_DEADLINE:-an unknown time} (Unix time): the trainer saved a checkpoint and stopped (launcher exit 6); the unit does not restart"
  exit 0
fi
# -----------------------------------------------------------------------------------------
if [ "$deadline" = 1 ] && [ "$terminated" = 0 ]; then
  log "max_run_hours reached: stopped the trainer after ${MAX_RUN_SECONDS}s of the run (launcher exit $status); the newest checkpoint holds its state"
  exit 0
fi
if [ "$terminated" = 1 ]; then
  fail 143 "preempted (launcher exit $status); a restart resumes from the newest checkpoint"
fi
# The node launcher's codes (trainers/common/exit_codes.py) and what the unit does with them.
case "$status" in
  1) reason="a code error in the trainer; the unit does not restart it" ;;
  2) reason="the trainer's arguments, the cluster environment or a checkpoint's settings do not match; the unit does not restart it" ;;
  3) reason="the trainer's setup failed before training started; the unit restarts it" ;;
  4) reason="a peer node or the elastic rendezvous was lost (node 0 gone, or no quorum in time); the unit restarts it and the node rejoins from the newest checkpoint" ;;
  5) reason="fewer usable GPUs than the plan bought ($EXPECTED_ACCELERATORS); the unit does not restart it" ;;
  143) reason="the trainer saved a checkpoint and stopped (a peer was preempted); the unit restarts it" ;;
  *) reason="killed or failed outside the trainer's own codes" ;;
esac
fail "$status" "$(why "$status" "the node launcher exited $status: $reason")"
