"""The engine tier: every dynamic resource driven the way the Pulumi engine drives it.

Each bundled stack and example program runs under Pulumi's mocks (tests/engine/programs.py)
to capture what it registers for each dynamic resource (RegisterResource `object`, the
dill-pickled `__provider` included). A small engine double (tests/engine/double.py) then
starts the SDK's dynamic-provider host exactly as the `pulumi-resource-pulumi-python`
plugin is started, once per deployment, and makes the engine's gRPC calls for `preview`,
`up`, `refresh` and `destroy`. Cases: tests/engine/cases.py.

What it imitates (pulumi/pulumi at 1b5949891b3c, 2026-08-21; Python SDK 3.272.0):

Starting and closing the plugin
- Working directory = Pulumi.yaml's folder joined with `main` when `main` is a folder:
  pkg/engine/project.go 45-72 (getPwdMain), used by pkg/engine/deployment.go 57 and 67
  (plugin.NewContextWithRoot(..., pwd, ...)); pkg/resource/plugin/plugin.go 597-599
  (`exec.Command(bin, args...)`, `cmdutil.RegisterProcessGroup`, `cmd.Dir = pwd`).
- Environment = the engine's own plus `PULUMI_RUNTIME_<OPTION>` for each Pulumi.yaml
  `runtime.options` entry (`%v` formatting) and `PULUMI_PROJECT`:
  pkg/resource/plugin/provider_plugin.go 245-266. Arguments: the engine's address,
  provider_plugin.go 288 (`[]string{host.ServerAddr()}`).
- The plugin script sdk/python/dist/pulumi-resource-pulumi-python: no virtualenv option
  and toolchain uv means `.venv` (lines 4-11); a relative virtualenv is made absolute
  against `$PWD`, the working directory above (13-21); `<venv>/bin/python -u -m
  pulumi.dynamic <engine address>` with PATH prefixed and PYTHONHOME unset (23-33); a
  missing one prints "The 'virtualenv' option in Pulumi.yaml is set to ..." and exits 1
  (35-45); no virtualenv: `${PULUMI_PYTHON_CMD:-python3}` (49).
- The port is the first stdout line, read a byte at a time, trimmed and range-checked:
  plugin.go 373-430, 448-475 (parsePort); dialled at 127.0.0.1: plugin.go 189.
- Close: the gRPC connection is closed, then SIGINT to the process group, SIGKILL to the
  group after 5 s: plugin.go 746-760 (Close), 647-676 (kill);
  sdk/go/common/util/cmdutil/child_unix.go 29-57. The host exits 0 on SIGINT
  (pulumi/dynamic/__main__.py `main`: KeyboardInterrupt -> server.stop(0)); the tier
  asserts that it did, without SIGKILL.
- The engine serves an Engine gRPC service for plugin logs; the double's accepts Log.
  (SDK 3.272.0's host ignores the address: `get_provider` configures Settings without an
  engine, so provider logs go to its stderr.)

Calls and properties
- Configure before the first resource call: pkg/resource/deploy/providers/registry.go
  861, 962, 998; the host answers acceptSecrets=false.
- Check(olds, news) for every registration; olds empty for a new resource:
  pkg/resource/deploy/step_generator.go 1309-1349. Properties marshalled with
  KeepUnknowns = preview, KeepSecrets = the provider's acceptSecrets (false: secrets sent
  as plain values), PropagateNil (nulls sent) and numbers as protobuf Struct doubles:
  provider_plugin.go 1168-1270 (Check), 1284-1400 (Diff), 1403-1460 (Create).
- A new resource: a create step (step_generator.go 1785). In a preview Create is not
  called for a provider without preview support; the inputs stand in for the outputs
  (provider_plugin.go 1430-1442; step.go 366-372).
- An existing resource: Diff(id, olds = old outputs, old_inputs, news = Check's inputs)
  (step_generator.go 2884-2999, diffResource). DIFF_NONE: a same step. DIFF_SOME without
  replaces: Update (step_generator.go 2171-2177; step.go 1008-1018). With replaces and
  deleteBeforeReplace: Delete of the old resource, then Create (step_generator.go
  2041-2163); without: Create then Delete. A preview makes no Create / Update / Delete
  (step.go 651).
- refresh: Read(id, properties = old outputs, inputs = old inputs), an empty id meaning
  gone: step.go 1580-1592 (RefreshStep.Apply).
- destroy: Delete(id, properties = old outputs, old_inputs), reverse creation order:
  step.go 688-699 (DeleteStep.Apply).

What it does NOT imitate
- The language host: programs run under Pulumi's mocks in the test process, pulumi-gcp and
  Kubernetes resources are only recorded, their outputs come from trainstack.infra.mocks' tables
  (none in a first preview), and the project root the program sees is set to the
  repository (the mocks answer "root_directory").
- The dependency graph, parallel steps, targets, aliases, protect / retainOnDelete,
  ignoreChanges, import, custom timeouts, retries, partial failures, refresh-before-update,
  `up --refresh`, `up`'s own preview phase, plans, policy packs and the display.
- The engine's PropertyMap round trip is a Struct-to-Struct step (secrets unwrapped,
  unknown sentinels kept only in a preview); the state is kept in memory, unencrypted.
- Handshake, CheckConfig / DiffConfig of the provider resource, provider config in
  Configure or PULUMI_CONFIG, the `poetry` toolchain, Windows `.cmd` plugins, plugin
  output after the port shown as diagnostics.
- The HTTP endpoints: the tier sets the Vertex / TPU resources' `api_endpoint` input to
  the local fakes in tests/fakes (the program registers none).
- Close's 5 s grace: the double waits 30 s before its SIGKILL (a loaded test machine can
  be slower than 5 s to handle SIGINT); a host that needs the SIGKILL fails the tier.
- SIGINT is not ignored in the host even when the test run is a background job (a shell
  would make it ignored; the real CLI is run from a terminal).
"""
