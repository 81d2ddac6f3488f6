"""Whether your own code can start on a TPU slice: the frameworks it imports against what the
slice's runtime ships and what `trainer.requirements` installs.

A TPU VM runs your entrypoint with the runtime's Python. The base runtimes
(`tpu-ubuntu2204-base`, `v2-alpha-tpuv5-lite`, ...: the default for your own code) ship no
framework: "Use the following common TPU software versions for PyTorch and JAX, then install
the framework you want to use" (https://cloud.google.com/tpu/docs/supported-tpu-versions,
"PyTorch and JAX"; `trainstack.components.catalog.tpu.TPU_RUNTIME_SOURCE`). A `tpu-vm-tf-*`
runtime ships TensorFlow (its name carries the version it ships, same page, "TensorFlow").
So torch code whose requirements name no torch would fail at `import torch` on every host,
with the slice billed from the moment it is created.

`imported_modules` reads the entrypoint script (and the modules of `trainer.source` it
imports, transitively) with `ast`, without running it. Imports inside `try:` blocks that
handle ImportError, and under `if TYPE_CHECKING:`, are optional and not counted. An
entrypoint that is not a Python file of the source (`./run.sh`, a program on PATH) is not
read, and nothing is refused for it.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Protocol

from trainstack.components.catalog.tpu_runtimes import parse_tf_runtime
from trainstack.trainers.common.user_code import (
    entrypoint_file,
    parse_requirements,
    resolve_source,
)

SUPPORTED_VERSIONS_SOURCE: Final = (
    "https://cloud.google.com/tpu/docs/supported-tpu-versions ('PyTorch and JAX: Use the "
    "following common TPU software versions for PyTorch and JAX, then install the framework "
    "you want to use'; TensorFlow runtimes are tpu-vm-tf-x.y.z[-pod][-device_api])"
)


class CodeFields(Protocol):
    """Where your code is and what it runs: `trainstack.components.UserCode`, or a stack's
    `StackTrainer.user_code`."""

    @property
    def source(self) -> str | None: ...
    @property
    def requirements(self) -> str | None: ...
    @property
    def entrypoint(self) -> Sequence[str]: ...


@dataclass(frozen=True)
class Framework:
    """A framework your code may import, and what installs it."""

    module: str
    """Top-level import name."""
    distributions: tuple[str, ...]
    """PyPI names (PEP 503 normalized) whose install provides `module`; naming one in the
    requirements counts."""
    needs: str
    """What to add to the requirements, as the `valid:` part says it."""
    source: str
    beside: tuple[str, ...] = ()
    """Distributions that must be named too for the code to use the TPU (torch:
    torch-xla), as `needs` says."""


FRAMEWORKS: Final[tuple[Framework, ...]] = (
    Framework(
        "torch",
        ("torch",),
        "torch and torch_xla[tpu] at the same version (e.g. torch~=2.5.0, torch_xla[tpu]~=2.5.0)",
        "pytorch/xla README.md, 'TPU Installation': pip install torch==2.7.0 'torch_xla[tpu]==2.7.0'",
        # torch alone runs on the host's CPU: "PyTorch/XLA is a Python package that uses the
        # XLA deep learning compiler to connect the PyTorch deep learning framework and Cloud
        # TPUs" (pytorch/xla README.md), so torch code on a slice needs torch_xla too.
        beside=("torch-xla",),
    ),
    Framework(
        "torch_xla",
        ("torch-xla",),
        # Worded as torch's, so code importing both gets the advice once.
        "torch and torch_xla[tpu] at the same version (e.g. torch~=2.5.0, torch_xla[tpu]~=2.5.0)",
        # torch-xla does not depend on torch: both must be named.
        "https://pypi.org/pypi/torch-xla/json (2.9.0 requires_dist: absl-py, numpy, pyyaml, "
        "requests, libtpu and tpu-info with [tpu]; no torch)",
    ),
    Framework(
        "jax",
        ("jax",),
        "jax[tpu]",
        "https://pypi.org/pypi/jax/json (extra 'tpu': jaxlib, libtpu, requests)",
    ),
    Framework(
        "tensorflow",
        ("tensorflow", "tensorflow-cpu", "tensorflow-tpu"),
        "tensorflow-tpu, or tpu.runtime_version: a tpu-vm-tf-X.Y.Z runtime, which ships it",
        SUPPORTED_VERSIONS_SOURCE,
    ),
)
_NAME: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_OPTIONAL_ERRORS: Final = frozenset({"ImportError", "ModuleNotFoundError", "Exception"})


def runtime_frameworks(runtime_version: str) -> frozenset[str]:
    """The framework modules a TPU runtime ships: TensorFlow on `tpu-vm-tf-*`, else none."""
    return frozenset({"tensorflow"}) if parse_tf_runtime(runtime_version) else frozenset()


def normalized(name: str) -> str:
    """A distribution name as PEP 503 compares them (`torch_xla` -> `torch-xla`)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_names(lines: Sequence[str]) -> frozenset[str]:
    """The normalized distribution names of PEP 508 requirement lines."""
    return frozenset(normalized(m[0]) for line in lines if (m := _NAME.match(line.strip())))


def _optional(handlers: list[ast.ExceptHandler]) -> bool:
    for handler in handlers:
        kinds = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
        if handler.type is None or any(
            isinstance(k, ast.Name) and k.id in _OPTIONAL_ERRORS for k in kinds
        ):
            return True
    return False


def _imports(node: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import statement under `node` that runs unconditionally when reached."""
    if isinstance(node, ast.Import | ast.ImportFrom):
        yield node
        return
    if isinstance(node, ast.Try) and _optional(node.handlers):
        for child in (*node.handlers, *node.orelse, *node.finalbody):
            yield from _imports(child)
        return
    if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
        for child in node.orelse:
            yield from _imports(child)
        return
    for child in ast.iter_child_nodes(node):
        yield from _imports(child)


def _local_files(base: Path, parts: Sequence[str]) -> list[Path]:
    """The files of module `parts` under `base`: a module file or a package's files."""
    if not parts:
        return sorted(base.glob("*.py"))
    path = base.joinpath(*parts)
    if path.with_suffix(".py").is_file():
        return [path.with_suffix(".py")]
    if path.is_dir():
        return sorted(path.rglob("*.py"))
    return []


def _entry_files(folder: Path, entrypoint: Sequence[str]) -> list[Path]:
    script = entrypoint_file(list(entrypoint))
    if script is not None:
        path = (folder / script).resolve()
        return [path] if path.suffix == ".py" and path.is_file() else []
    args = list(entrypoint)
    if len(args) >= 3 and args[0].startswith("python") and args[1] == "-m":
        parts = args[2].split(".")
        main = folder.joinpath(*parts, "__main__.py")
        return [main] if main.is_file() else _local_files(folder, parts)
    return []


def imported_modules(folder: Path, entrypoint: Sequence[str]) -> dict[str, str]:
    """Top-level modules outside `folder` that the entrypoint imports, directly or through
    the folder's own modules, each with where it is first imported (`train.py:27`)."""
    found: dict[str, str] = {}
    queue = _entry_files(folder, entrypoint)
    roots = [folder, *(p.parent for p in queue if p.parent != folder)]
    seen: set[Path] = set()
    while queue:
        path = queue.pop(0)
        if path in seen or not path.is_relative_to(folder):
            continue
        seen.add(path)
        try:
            tree = ast.parse(path.read_bytes(), filename=str(path))
        except (SyntaxError, ValueError):
            continue  # not Python this check can read; running it will say why
        where = path.relative_to(folder).as_posix()
        for node in _imports(tree):
            if isinstance(node, ast.ImportFrom) and node.level:
                base = path.parent
                for _ in range(node.level - 1):
                    base = base.parent
                parts = node.module.split(".") if node.module else []
                queue += _local_files(base, parts) or [
                    f for alias in node.names for f in _local_files(base, [*parts, alias.name])
                ]
                continue
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            for name in names:
                parts = name.split(".")
                local = [f for root in roots for f in _local_files(root, parts[:1])]
                if local:
                    queue += [f for root in roots for f in _local_files(root, parts)] or local
                else:
                    found.setdefault(parts[0], f"{where}:{node.lineno}")
    return found


def tpu_framework_problems(
    code: CodeFields | None, runtime_version: str, base_dir: Path, prefix: str = "trainer."
) -> list[str]:
    """One problem when your code on a TPU slice imports a framework that neither the runtime
    ships nor the requirements name (it could not start), or torch without torch_xla (it
    would not use the TPU); else none. Call it once
    `user_code_problems` found the source and requirements valid. The one rule a stack's
    `tpu` section (`prefix` `trainer.`) and `TpuPodSlice`'s `code` (`code.`) are held to."""
    if code is None or code.source is None:
        return []
    folder = resolve_source(code.source, base_dir)
    imported = imported_modules(folder, code.entrypoint)
    requirements: list[str] = []
    if code.requirements is not None:
        requirements = parse_requirements((folder / code.requirements).read_text(), "")[0]
    named = requirement_names(requirements)
    shipped = runtime_frameworks(runtime_version)
    missing = [
        f
        for f in FRAMEWORKS
        if f.module in imported
        and f.module not in shipped
        and not named.intersection(f.distributions)
    ]
    if not missing:
        return _beside_problems(code, imported, named, runtime_version, prefix)
    what = ", ".join(f"{f.module} ({imported[f.module]})" for f in missing)
    unnamed = (
        f"{code.requirements} does not name {'it' if len(missing) == 1 else 'them'}"
        if code.requirements is not None
        else f"there is no {prefix}requirements"
    )
    problem = (
        f"{prefix}requirements: your code imports {what}, which TPU runtime "
        f"{runtime_version!r} does not ship and {unnamed}, so it cannot start; valid: "
        f"{prefix}requirements naming {'; '.join(dict.fromkeys(f.needs for f in missing))}"
    )
    return [problem]


def _beside_problems(
    code: CodeFields, imported: dict[str, str], named: frozenset[str], runtime: str, prefix: str
) -> list[str]:
    """One problem when the requirements name a framework the code imports but not what it
    needs beside it to use the TPU (torch without torch_xla); else none."""
    short = [
        f for f in FRAMEWORKS if f.module in imported and f.beside and not named >= set(f.beside)
    ]
    if not short:
        return []
    f = short[0]
    lacking = " and ".join(d.replace("-", "_") for d in f.beside if d not in named)
    problem = (
        f"{prefix}requirements: your code imports {f.module} ({imported[f.module]}), and "
        f"{code.requirements} names {f.module} but not {lacking}, without which it does not use "
        f"the TPU of runtime {runtime!r}; valid: {prefix}requirements naming {f.needs}"
    )
    return [problem]
