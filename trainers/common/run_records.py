"""A run's records beside its checkpoints, shared by the node launcher and the supervisor.

`TRAINSTACK_RUN_RECORD` (set by the GCE, GKE and TPU launches) is the run's prefix,
`gs://<checkpoint bucket>/trainstack-run-<key>`, whose `.started` object the startup
scripts already keep (the run clock). More objects:

- `<prefix>.ended`, written when the run is over for good. The node launcher writes rank
  0's `{"outcome": "done"}` after a finished run, rank 0's `{"outcome": "stopped",
  "reason"}` after it stopped the trainer on a stop request, any node's `{"outcome":
  "capacity_ended", "step": N}` after its trainer saved a checkpoint at step N (None: no
  step known) and stopped because the machine's capacity ends (exit 6,
  `trainstack.trainers.common.deadline`), or any node's `{"outcome":
  "failed", "stage": "trainer", "exit": N}` for an exit code the target never retries
  (`TRAINSTACK_RUN_FINAL_CODES`, e.g. `1 2 5`; the last attempt adds the setup code 3
  where the platform retries it a bounded number of times). The shell stages before it
  (the Compute Engine launcher, the TPU startup script, the GKE pod script) write
  `{"outcome": "failed", "stage", "reason", "node_rank", "time"}` when they give up for
  good, on their last attempt only (`STAGES`; `components/gpu_startup/node_helper.py end`,
  standard library only, so it works where the package failed to install), created only
  if absent: the first cause of a run's end is the one kept. The supervisor
  (`components/supervisor/main.py`) stops the compute when it sees it.
- `<prefix>.alive/<node_rank>`, a heartbeat `{"node_rank", "stage", "time"}`: each shell
  stage rewrites it when it starts, the node launcher every `HEARTBEAT_S` while its
  trainer runs. What nothing inside a machine can record (an image that cannot be pulled,
  a Job that failed with no pod left, a unit that stopped restarting on exits that are
  not setup failures) ends in silence: the supervisor stops the compute once no rank has
  written one for `NO_HEARTBEAT_S` of billing.
- `<prefix>.stop`, written by the supervisor when `limits.max_run_hours` or
  `limits.max_total_usd` is reached: `{"reason", "time", "spend_usd"}`. The node launcher
  polls it (one small GET every `STOP_POLL_S`, off the training loop) and passes SIGTERM to
  the trainer, which saves a checkpoint and exits 143 as on a preemption (the run
  contract). While the request stands, a launcher that starts again (a restarted unit, a
  replaced pod) holds before training instead of training on.

Reading or writing a record never changes the launcher's exit code: a failure is logged.
Framework-free; fsspec/gcsfs are imported only when a record is read or written.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, Final

from trainstack.trainers.common.contract import EVENT_CAPACITY_ENDED as CAPACITY_ENDED
from trainstack.trainers.common.exit_codes import (
    ACCELERATORS_MISSING_EXIT_CODE,
    CAPACITY_ENDED_EXIT_CODE,
    CONFIG_ERROR_EXIT_CODE,
    CRASH_EXIT_CODE,
    SETUP_FAILED_EXIT_CODE,
)
from trainstack.trainers.common.storage import url_to_fs

RUN_RECORD_ENV: Final = "TRAINSTACK_RUN_RECORD"
FINAL_CODES_ENV: Final = "TRAINSTACK_RUN_FINAL_CODES"
ENDED_SUFFIX: Final = ".ended"
STOP_SUFFIX: Final = ".stop"
STAGES: Final = ("package_download", "package_install", "launch", "startup", "trainer", "job")
"""Where a run ended for good (`.ended`'s `stage`): the trainer package's download or
install, the Compute Engine launcher, the TPU startup script, the trainer under the node
launcher, or the GKE Job (its pod script's own steps)."""
TRAINER_STAGE: Final = "trainer"
EXIT_MEANINGS: Final = {
    CRASH_EXIT_CODE: "the trainer exited 1 (an error in the code; the log has its traceback)",
    CONFIG_ERROR_EXIT_CODE: (
        "the trainer exited 2 (an invalid config, cluster environment or checkpoint)"
    ),
    SETUP_FAILED_EXIT_CODE: "the node launcher exited 3 (its setup failed before training)",
    ACCELERATORS_MISSING_EXIT_CODE: (
        "the node launcher exited 5 (this machine has fewer accelerators than the plan bought)"
    ),
}
"""The `reason` of a `failed` record the node launcher writes, by exit code
(`trainstack.trainers.common.exit_codes`), so `trainstack status` says why."""
STOP_POLL_S: Final = 30.0
"""How often the launcher looks for a stop request: the supervisor runs every 2 minutes and
waits for the checkpoint, so 30 s costs at most a fraction of that wait."""
POLL_ENV: Final = "TRAINSTACK_RUN_STOP_POLL_S"
"""Tests only: a shorter poll."""
ALIVE_SUFFIX: Final = ".alive/"
"""`<prefix>.alive/<node_rank>`: each node's heartbeat, rewritten by the shell stages when they
start and by the node launcher every `HEARTBEAT_S` while its trainer runs; the supervisor
reads only the objects' server-side `updated` time (one get of each rank's, by name)."""
HEARTBEAT_S: Final = 300
NO_HEARTBEAT_S: Final = 2700
"""The supervisor ends a run (`no_heartbeat`) whose compute has billed this long since the
later of its own first sight of the run's compute billing and the newest heartbeat
(`components/supervisor/main.py` cannot import this module; a test holds the two equal)."""
HEARTBEAT_ENV: Final = "TRAINSTACK_RUN_HEARTBEAT_S"
"""Tests only: a shorter heartbeat."""


class RunRecords:
    """The records of the run at `prefix` (see the module docstring)."""

    def __init__(
        self,
        prefix: str,
        final_codes: frozenset[int],
        poll_s: float = STOP_POLL_S,
        heartbeat_s: float = HEARTBEAT_S,
    ) -> None:
        if not prefix.startswith("gs://") and "://" in prefix:
            raise ValueError(f"{RUN_RECORD_ENV}: {prefix!r} is not a gs:// or local path")
        self.prefix = prefix
        self.final_codes = final_codes
        self.poll_s = poll_s
        self.heartbeat_s = heartbeat_s

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> RunRecords | None:
        prefix = env.get(RUN_RECORD_ENV, "")
        if not prefix:
            return None
        raw = env.get(FINAL_CODES_ENV, "").split()
        if not all(code.isdigit() for code in raw):
            raise ValueError(f"{FINAL_CODES_ENV}: {' '.join(raw)!r} is not a list of exit codes")
        poll = float(env.get(POLL_ENV) or STOP_POLL_S)
        beat = float(env.get(HEARTBEAT_ENV) or HEARTBEAT_S)
        return cls(prefix, frozenset(int(code) for code in raw), poll, beat)

    @property
    def stop_uri(self) -> str:
        return self.prefix + STOP_SUFFIX

    @property
    def end_uri(self) -> str:
        return self.prefix + ENDED_SUFFIX

    def alive_uri(self, node_rank: int) -> str:
        return f"{self.prefix}{ALIVE_SUFFIX}{node_rank}"

    def stop_request(self) -> dict[str, Any] | None:
        """The standing stop request, or None (none, or unreadable: training goes on)."""
        fs, path = url_to_fs(self.stop_uri)
        fs.invalidate_cache()
        try:
            raw = fs.cat_file(path)
        except FileNotFoundError:
            return None
        try:
            value = json.loads(raw)
        except ValueError:
            return {"reason": "unreadable stop request"}
        return value if isinstance(value, dict) else {"reason": "unreadable stop request"}

    def hold_while_stopped(self, log: Callable[[str], None], stop: threading.Event) -> bool:
        """Wait while a stop request stands; False when `stop` was set meanwhile."""
        shown = False
        while (request := self._safe(self.stop_request, log)) is not None:
            if not shown:
                log(
                    f"holding: the supervisor asked this run to stop ({request.get('reason')}); "
                    "waiting for the compute to stop or the request to be withdrawn"
                )
                shown = True
            if stop.wait(self.poll_s):
                return False
        return True

    def watch(
        self, on_stop: Callable[[dict[str, Any]], None], log: Callable[[str], None]
    ) -> threading.Event:
        """Poll for a stop request in a daemon thread until the returned event is set; call
        `on_stop(request)` once when one appears."""
        done = threading.Event()

        def poll() -> None:
            while not done.wait(self.poll_s):
                request = self._safe(self.stop_request, log)
                if request is not None:
                    on_stop(request)
                    return

        threading.Thread(target=poll, name="trainstack-stop-watch", daemon=True).start()
        return done

    def end_record(
        self, code: int, node_rank: int, stop: dict[str, Any] | None, saved: int | None = None
    ) -> dict[str, Any] | None:
        """What this node records of the run's end (None: nothing, the run goes on);
        `saved`: the step of the checkpoint a capacity's end left."""
        if code == 0 and node_rank == 0:
            return {"outcome": "done", "node_rank": 0}
        if stop is not None and node_rank == 0:
            return {"outcome": "stopped", "reason": stop.get("reason"), "node_rank": 0}
        if stop is None and code == CAPACITY_ENDED_EXIT_CODE:
            # Any node: each machine's capacity has its own end, the first one ends the run.
            return {"outcome": CAPACITY_ENDED, "step": saved, "node_rank": node_rank}
        if stop is None and code in self.final_codes:
            return {
                "outcome": "failed",
                "stage": TRAINER_STAGE,
                "exit": code,
                "reason": EXIT_MEANINGS.get(code, f"the trainer exited {code}"),
                "node_rank": node_rank,
            }
        return None

    def record_end(self, record: dict[str, Any], log: Callable[[str], None]) -> None:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        data = json.dumps({**record, "time": stamp}, sort_keys=True).encode()

        def write() -> None:
            fs, path = url_to_fs(self.end_uri)
            fs.pipe_file(path, data)

        if self._safe(write, log, "record the run's end") is not False:
            log(f"recorded the run's end ({record['outcome']}) at {self.end_uri}")

    def heartbeat(self, node_rank: int, log: Callable[[str], None]) -> threading.Event:
        """Write this node's heartbeat now and every `heartbeat_s` in a daemon thread until
        the returned event is set; a write that fails is logged once, then retried quietly
        at the next beat."""
        done = threading.Event()
        uri = self.alive_uri(node_rank)
        failed: list[bool] = []

        def beat() -> None:
            stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            record = {"node_rank": node_rank, "stage": TRAINER_STAGE, "time": stamp}
            fs, path = url_to_fs(uri)
            if "://" not in uri:
                os.makedirs(os.path.dirname(path), exist_ok=True)
            fs.pipe_file(path, json.dumps(record, sort_keys=True).encode())

        def run() -> None:
            while True:
                quiet = (lambda _: None) if failed else log
                if self._safe(beat, quiet, f"write the heartbeat {uri}") is False:
                    failed.append(True)
                if done.wait(self.heartbeat_s):
                    return

        threading.Thread(target=run, name="trainstack-heartbeat", daemon=True).start()
        return done

    @staticmethod
    def _safe(call: Callable[[], Any], log: Callable[[str], None], what: str = "") -> Any:
        try:
            return call()
        except Exception as exc:  # noqa: BLE001 - storage or credentials: log, go on
            log(f"could not {what or 'read the stop request'}: {type(exc).__name__}: {exc}")
            return False if what else None
