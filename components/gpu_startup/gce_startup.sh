#!/bin/bash
# trainstack Compute Engine startup script. Rendered by trainstack.components.gpu_startup, which
# replaces each at-sign-delimited NAME marker with a shell-quoted value (LAUNCHER with the
# node launcher's text).
#
# Runs as root on every boot. It writes the node launcher and starts it as a transient
# systemd service, so the startup script returns at once and a stop or a preemption reaches
# the trainer as SIGTERM. Running it again is safe: it does nothing while the service is
# running, or once this run has finished on this machine.
set -euo pipefail

STATE_DIR=@@STATE_DIR@@
UNIT=@@UNIT@@
RUN_KEY=@@RUN_KEY@@
STOP_TIMEOUT_S=@@STOP_TIMEOUT_S@@
RESTART_SEC=@@RESTART_SEC@@
RESTART_PREVENT=@@RESTART_PREVENT@@
START_LIMIT_BURST=@@START_LIMIT_BURST@@
START_LIMIT_INTERVAL_S=@@START_LIMIT_INTERVAL_S@@

log() { printf 'trainstack-startup: %s\n' "$*" >&2; }

if [ -e "$STATE_DIR/done-$RUN_KEY" ]; then
  log "run $RUN_KEY already finished on this machine; nothing to start"
  exit 0
fi
state="$(systemctl is-active "$UNIT" 2>/dev/null || true)"
case "$state" in
  active | activating | reloading | deactivating)
    log "$UNIT is already $state"
    exit 0
    ;;
esac

mkdir -p "$STATE_DIR"
launcher="$STATE_DIR/launch-$RUN_KEY.sh"
cat >"$launcher.tmp" <<'TRAINSTACK_LAUNCHER_EOF'
@@LAUNCHER@@
TRAINSTACK_LAUNCHER_EOF
chmod 0755 "$launcher.tmp"
mv -f "$launcher.tmp" "$launcher"

# A failed unit left by an earlier attempt would block a new one of the same name.
systemctl reset-failed "$UNIT" >/dev/null 2>&1 || true
# KillMode=mixed: a stop signals only the launcher, which forwards SIGTERM to the trainer and
# waits for its checkpoint. RESTART_PREVENT lists the exits that end the service: 0 (done),
# 1 (a code error), 2 (bad arguments) and 5 (fewer usable GPUs than planned). Every other
# exit restarts it: 143 (preempted), 4 (a peer or node 0 lost) and 3 (setup); the restarted
# launcher rejoins the elastic rendezvous and resumes from the newest checkpoint. The start
# limit bounds the retries of a setup that every attempt repeats.
systemd-run --unit="$UNIT" --description="trainstack trainer" --collect \
  --property=KillMode=mixed --property=TimeoutStopSec="$STOP_TIMEOUT_S" \
  --property=Restart=on-failure --property=RestartSec="$RESTART_SEC" \
  --property="RestartPreventExitStatus=$RESTART_PREVENT" \
  --property=StartLimitIntervalSec="$START_LIMIT_INTERVAL_S" \
  --property=StartLimitBurst="$START_LIMIT_BURST" \
  --setenv=HOME=/root \
  /bin/bash "$launcher"
log "started $UNIT with $launcher"
