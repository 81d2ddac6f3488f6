"""Reduction Server fidelity: the plugin image's build puts the plugin where NCCL, with
`NCCL_NET_PLUGIN` unset, finds it by its default name.

The plan of a Vertex stack with reducers on the default image registers the Cloud Build
build of the plugin image (`ImageBuild`, its Dockerfile) and the CustomJob whose chief and
workers run that image. This test does, on this machine, what the two do there:

- the build: each `RUN` of the planned Dockerfile under `/bin/sh -c`, as Docker runs a shell
  form `RUN`, as root, in a private mount namespace whose `/usr/lib` and `/etc/apt` are
  writable overlays of this machine's, as is `/var/lib/apt` (nothing changes outside it). The network
  tools the lines call are stand-ins on `PATH`: `curl` prints a key, `apt-key` reads it,
  `apt-get update` does nothing, and `apt-get install google-reduction-server` installs
  what the package is inferred to install (`/usr/lib/libnccl-net.so`:
  `trainstack.components.catalog.reduction_server.PLUGIN_PATH_SOURCE`): a stand-in plugin
  built here with `cc`, exporting the table symbol NCCL looks up. The real package is
  not fetchable here (no network to packages.cloud.google.com), so its file list is not
  checked; the Dockerfile's own last `RUN` checks it on every real build.
- each chief and worker replica: the environment Vertex sets on it (`tests.fidelity.vertex.
  vertex_env`: CLUSTER_SPEC, TF_CONFIG, MASTER_ADDR, ..., plus the pool's `env`) in a
  process in the same namespace, which dlopens (`RTLD_NOW | RTLD_LOCAL`) the names NCCL
  2.18.3, 2.21.5, 2.27.3 and 2.27.5 each try for the `NCCL_NET_PLUGIN` it sees
  (`trainstack.components.catalog.reduction_server.NCCL_NET_PLUGIN_SOURCE`), then looks up
  the `ncclNetPlugin_v*` symbol, and reports the plugin each version loaded and the files
  mapped. Unset, every version asks for `libnccl-net.so`, a name with no slash, which the
  dynamic loader looks up along its search path (`LOADER_SOURCE`; no LD_LIBRARY_PATH is set
  and /etc/ld.so.cache is this machine's, so it is the default path that finds /usr/lib).
  With the path in `NCCL_NET_PLUGIN` (as before) 2.18.3 and 2.27.3 ask for
  `libnccl-net-<path>.so` only, and load nothing.

Not run here: NCCL itself (it needs GPUs), the image's pod setup script and trainer (run by
tests/fidelity/test_vertex.py with the same env), Cloud Build and the push.
"""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.fidelity.vertex import planned_job, replicas, stack_config, vertex_env
from trainstack.components.catalog.reduction_server import PLUGIN_PATH
from trainstack.infra.plan import build_plan

IMAGE_BUILD = "pulumi-python:dynamic/cloudbuild:ImageBuild"
STAND_IN_NAME = "trainstack-stand-in-reduction-server"
PLUGIN_C = f"""
typedef struct {{ const char* name; }} ncclNet_stand_in_t;
ncclNet_stand_in_t ncclNetPlugin_v8 = {{ "{STAND_IN_NAME}" }};
"""
FAKE_TOOLS = {
    # apt-get install <...> google-reduction-server: what the package is inferred to install.
    "apt-get": """#!/bin/bash
echo "apt-get $*" >> "$FIDELITY_LOG"
if [ "$1" = install ] && [[ " $* " == *" google-reduction-server "* ]]; then
  cp "$FIDELITY_PLUGIN" /usr/lib/libnccl-net.so
  echo /usr/lib/libnccl-net.so > "$FIDELITY_DPKG_LIST"
fi
""",
    "curl": '#!/bin/bash\necho "curl $*" >> "$FIDELITY_LOG"\necho "-----KEY-----"\n',
    "apt-key": '#!/bin/bash\necho "apt-key $* <$(cat)>" >> "$FIDELITY_LOG"\n',
    "dpkg": '#!/bin/bash\ncat "$FIDELITY_DPKG_LIST"\n',
}
PROBE = textwrap.dedent(
    """
    import ctypes, json, os
    env = os.environ.get("NCCL_NET_PLUGIN")
    prefixed = f"libnccl-net-{env}.so"
    lib_name = bool(env) and env.startswith("lib") and env.endswith(".so")
    # The names each NCCL dlopens, in order (catalog.reduction_server.NCCL_NET_PLUGIN_SOURCE:
    # src/net.cc ncclNetPluginInit, openNetPluginLib; src/plugin/plugin_open.cc
    # openPluginLib); unset, every one of them asks for libnccl-net.so, a name with no
    # slash, which the loader looks up along its search path.
    names = {
        "2.18.3": [prefixed] if env else ["libnccl-net.so"],
        "2.21.5": [env, prefixed] if env else ["libnccl-net.so"],
        "2.27.3": [env if lib_name else prefixed] if env else ["libnccl-net.so"],
        "2.27.5": [env] + ([] if "/" in env or lib_name else [prefixed])
        if env else ["libnccl-net.so"],
    }
    plugin = {}
    for version, tries in names.items():
        plugin[version] = None
        for name in tries:
            try:
                lib = ctypes.CDLL(name, mode=os.RTLD_NOW | os.RTLD_LOCAL)
            except OSError:  # NCCL logs it at INFO and goes on without the plugin
                continue
            plugin[version] = ctypes.c_char_p.in_dll(lib, "ncclNetPlugin_v8").value.decode()
            break
    maps = open("/proc/self/maps").read().split()
    loaded = sorted({p for p in maps if p.endswith("libnccl-net.so")})
    spec = json.loads(os.environ["CLUSTER_SPEC"])["task"]
    print(json.dumps({"task": spec, "env": env, "loaded": loaded, "plugin": plugin}))
    """
)
NCCL_VERSIONS = ("2.18.3", "2.21.5", "2.27.3", "2.27.5")


def _run_lines(dockerfile: str) -> list[str]:
    """The shell of each RUN instruction, its backslash continuations joined."""
    joined = dockerfile.replace("\\\n", "")
    return [line.removeprefix("RUN ") for line in joined.splitlines() if line.startswith("RUN ")]


def _namespace_script(run_lines: list[str], probes: list[tuple[str, dict[str, str]]]) -> str:
    lines = [
        "set -e",
        'for d in /usr/lib /etc/apt /var/lib/apt; do u="$FIDELITY_ROOT/upper$d"; w="$FIDELITY_ROOT/work$d"',
        '  mkdir -p "$u" "$w"',
        '  mount -t overlay overlay -o "lowerdir=$d,upperdir=$u,workdir=$w" "$d"; done',
        "mkdir -p /etc/apt/sources.list.d",
    ]
    # shlex.quote: each value stays one word, its `$` and backquotes unexpanded (the replicas'
    # env holds shell code since the pod script carries the node helper).
    lines += [f"/bin/sh -c {shlex.quote(line)}" for line in run_lines]
    for name, env in probes:
        exports = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(env.items()))
        lines.append(f'env -i PATH="$PATH" {exports} "$FIDELITY_PYTHON" "$FIDELITY_PROBE" > {name}')
    return "\n".join(lines) + "\n"


def test_the_workers_load_the_plugin_the_build_installed(tmp_path: Path) -> None:
    if shutil.which("unshare") is None or shutil.which("cc") is None:
        pytest.skip("needs unshare (a private mount namespace) and cc (the stand-in plugin)")
    config = stack_config(
        {
            "machine_type": "a2-highgpu-2g",
            "replica_count": 3,
            "reduction_server": {"enabled": True, "replica_count": 2},
        },
        {"model": "mlp", "dataset": "digits", "steps": 4, "global_batch_size": 48},
    )
    plan = build_plan("vertex-rs-fidelity", config)
    [build] = [r for r in plan["resources"] if r["type"] == IMAGE_BUILD]
    job = planned_job(plan)

    plugin = tmp_path / "standin.so"
    source = tmp_path / "standin.c"
    source.write_text(PLUGIN_C)
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(plugin), str(source)], check=True)
    tools = tmp_path / "tools"
    tools.mkdir()
    for name, text in FAKE_TOOLS.items():
        (tools / name).write_text(text)
        (tools / name).chmod(0o755)
    (tmp_path / "probe.py").write_text(PROBE)

    hosts: dict[int, list[str]] = {}
    for r in replicas(job.job_spec):
        hosts.setdefault(r.pool, []).append(f"host-{r.pool}-{r.index}:2222")
    workers = [r for r in replicas(job.job_spec) if r.pool in (0, 1)]
    probes = [(f"probe-{r.pool}-{r.index}.json", vertex_env(job, r, hosts)) for r in workers]
    script = _namespace_script(_run_lines(build["inputs"]["dockerfile"]), probes)
    env = {
        "PATH": f"{tools}:/usr/bin:/bin",
        "FIDELITY_ROOT": str(tmp_path / "ovl"),
        "FIDELITY_LOG": str(tmp_path / "tools.log"),
        "FIDELITY_PLUGIN": str(plugin),
        "FIDELITY_DPKG_LIST": str(tmp_path / "dpkg.list"),
        "FIDELITY_PYTHON": sys.executable,
        "FIDELITY_PROBE": str(tmp_path / "probe.py"),
    }
    # A file, not `bash -c`: with each replica's environment the script is over Linux's
    # 128 KiB limit on one argument (MAX_ARG_STRLEN; execve(2) E2BIG).
    (tmp_path / "namespace.sh").write_text(script)
    done = subprocess.run(
        ["unshare", "-m", "--propagation", "private", "bash", str(tmp_path / "namespace.sh")],
        check=False,
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    if done.returncode != 0 and "unshare failed" in done.stderr:
        pytest.skip(f"no private mount namespace here: {done.stderr.strip()}")
    assert done.returncode == 0, done.stdout + done.stderr
    assert not Path(PLUGIN_PATH).exists()  # the overlay kept this machine's /usr/lib as it was

    # The build ran Google's lines: the apt repository, the key, the package.
    assert (tmp_path / "tools.log").read_text().splitlines() == [
        "apt-get update",
        "apt-get install -y --no-install-recommends ca-certificates curl gnupg",
        "curl -s -L https://packages.cloud.google.com/apt/doc/apt-key.gpg",
        "apt-key add - <-----KEY----->",
        "apt-get update",
        "apt-get install -y google-reduction-server",
    ]
    # No chief or worker has NCCL_NET_PLUGIN, and the name every NCCL then loads resolves,
    # through the loader's search path, to exactly the file the build installed. (With the
    # path in NCCL_NET_PLUGIN, 2.18.3 and 2.27.3 would ask for libnccl-net-/usr/lib/...so
    # and train without the reducers.)
    reports = [json.loads((tmp_path / name).read_text()) for name, _ in probes]
    assert reports == [
        {
            "task": {"type": f"workerpool{r.pool}", "index": r.index},
            "env": None,
            "loaded": [PLUGIN_PATH],
            "plugin": dict.fromkeys(NCCL_VERSIONS, STAND_IN_NAME),
        }
        for r in workers
    ]
    assert [(r.pool, r.index) for r in workers] == [(0, 0), (1, 0), (1, 1)]
