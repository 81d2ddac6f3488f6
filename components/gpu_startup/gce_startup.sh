#!/bin/bash
# trainstack Compute Engine startup script. Rendered by components.gpu_startup, which
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
# waits for its checkpoint. Exit 3 (setup failed) restarts the service; 1, 2 and 143 do not
# (143: the machine is stopping, and the next boot runs this script again).
systemd-run --unit="$UNIT" --description="trainstack trainer" --collect \
  --property=KillMode=mixed --property=TimeoutStopSec="$STOP_TIMEOUT_S" \
  --property=Restart=on-failure --property=RestartSec=30 \
  --property="RestartPreventExitStatus=1 2 143" \
  --setenv=HOME=/root \
  /bin/bash "$launcher"
log "started $UNIT with $launcher"
