"""Build the bundled `trainers` package as an sdist and upload it to the staging bucket.

    from trainstack.components.trainer_package import TrainerPackage

    package = TrainerPackage("exp-42-trainer", {"staging_bucket": buckets.staging_bucket})
    # launch with: pip install <package.uri, copied locally>; python -m trainstack.trainers.torch_ddp

The sdist is byte-for-byte reproducible: members sorted, fixed mtime, uid/gid 0, gzip
header mtime 0, no `__pycache__` or `*.pyc`. Its sha256 names the uploaded object
(`trainers/trainstack_trainers-<sha256[:16]>.tar.gz`), so an unchanged trainer registers
identical inputs and relaunches nothing, while any source change yields a new object and a
new `uri`, which is what compute components key their relaunch on.

The sdist declares the trainers' light runtime dependencies but not torch or tensorflow:
those come from the platform image (Deep Learning VM/Containers, Vertex prebuilt images,
TPU VM runtimes) in the build that matches its accelerator drivers. `requirements` adds what
the target's image lacks, pinned to the image's framework (a Vertex TensorFlow 2.17 image:
`tf-keras~=2.17.0`, `trainstack.components.catalog.images.VERTEX_TRAINING_IMAGES`), so pip never
installs a framework of another version beside the image's.

With `user_source` (your own code, `trainstack:trainer.source`) the sdist is
`trainstack-code`: the `trainers` package (the node launcher, `trainstack.trainers.node`, and
`trainstack.trainers.user_code`) plus your folder as `trainstack/user_source/`, depending on your
requirements only. Not all of the folder: what its `.gcloudignore` lists, secrets (dotenv
files, private keys, credential files) and build leftovers stay out, and a link leaving the
folder is refused (`code_files` says what goes, `source_problems` what refuses the folder,
as `trainstack plan` shows them); every target installs it the way it installs the bundled
trainers (Vertex `pythonPackageSpec`, the GCE/TPU startup scripts' and GKE pods'
`pip install <uri>`), and `python -m trainstack.trainers.node --launcher=... -- ARGV` then
runs ARGV in the installed folder.
Unchanged code gives the same bytes, digest and `uri`, so nothing relaunches.

Naming: the local file is `<build_dir>/trainstack_trainers-<sha16>.tar.gz` (your code's:
`trainstack_code-<sha16>.tar.gz`, uploaded as `code/trainstack_code-<sha16>.tar.gz`), by
default in your project's `.trainstack/build/` (`trainstack.infra.project`), never in the
installed package.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import tarfile
import tempfile
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Final, NotRequired, TypedDict

import pulumi
from pulumi_gcp import storage

from trainstack import trainers
from trainstack.components._args import ArgsError, check_args, component_check
from trainstack.components._code_files import CodeFiles, code_files, source_problems
from trainstack.components._project import current_build_dir
from trainstack.components.naming import labels_input
from trainstack.components.user_code import CodeRules, UserCode
from trainstack.trainers.common.contract import SOURCE_PACKAGE
from trainstack.trainers.common.user_code import requirement_problem

__all__ = [
    "CODE_DIST_NAME",
    "CODE_OBJECT_PREFIX",
    "COMPONENT_LABEL",
    "DIST_NAME",
    "OBJECT_PREFIX",
    "PACKAGE_CODE",
    "REQUIRES_PYTHON",
    "RUNTIME_DEPENDENCIES",
    "TOKEN",
    "CodeFiles",
    "TrainerPackage",
    "TrainerPackageArgs",
    "code_files",
    "source_problems",
]

TOKEN = "trainstack:storage:TrainerPackage"
COMPONENT_LABEL = "trainer-package"

DIST_NAME = "trainstack-trainers"
OBJECT_PREFIX = "trainers/"
CODE_DIST_NAME = "trainstack-code"
CODE_OBJECT_PREFIX = "code/"
RUNTIME_DEPENDENCIES: tuple[str, ...] = (
    "pydantic>=2.7,<3",
    "numpy>=1.26",
    "pyyaml>=6",
    "fsspec>=2024.6",
    "gcsfs>=2024.6",
    "cloudml-hypertune>=0.1.0.dev6",
)
"""What the trainers import at run time besides the framework (which the image provides)."""
REQUIRES_PYTHON = ">=3.10"
"""Prebuilt training images still ship Python 3.10."""

# 1980-01-01: the earliest time zip-based tools accept, the usual reproducible-build epoch.
_FIXED_MTIME = 315532800
_EXCLUDED_DIRS = frozenset({"__pycache__"})
_EXCLUDED_SUFFIXES = (".pyc", ".pyo")


@dataclass(frozen=True)
class _Sdist:
    path: Path
    sha256: str
    dist: str = DIST_NAME

    @property
    def object_name(self) -> str:
        prefix = CODE_OBJECT_PREFIX if self.dist == CODE_DIST_NAME else OBJECT_PREFIX
        return f"{prefix}{self.dist.replace('-', '_')}-{self.sha256[:16]}.tar.gz"


# Key: digest of the version plus every source path and its bytes.
_BUILD_CACHE: dict[str, _Sdist] = {}


class TrainerPackageArgs(TypedDict):
    """Arguments for `TrainerPackage`."""

    staging_bucket: pulumi.Input[str]
    """Name of the bucket the sdist is uploaded to (`TrainingBuckets.staging_bucket`)."""
    source_root: NotRequired[str]
    """Directory that contains the `trainers/` package. Default: the folder of the installed
    `trainstack.trainers` (read only)."""
    build_dir: NotRequired[str]
    """Folder the sdist is written to. Default: `.trainstack/build/` of the current project
    (`trainstack.components._project.current_build_dir`: the project of the current folder, under
    `pulumi up` the Pulumi project; never the install)."""
    labels: NotRequired[pulumi.Input[dict[str, str]]]
    """Extra labels, written as custom metadata on the uploaded object (objects have no
    labels)."""
    requirements: NotRequired[list[str]]
    """Install requirements added to `RUNTIME_DEPENDENCIES`: what the target's image lacks,
    pinned to its framework version (`VertexTrainingImage.requirements`). Default none. With
    `user_source`: your code's requirements, the package's only dependencies."""
    user_source: NotRequired[str]
    """Your code's folder (`trainstack:trainer.source`, absolute): packaged beside the node
    launcher as `trainstack/user_source/`, so installing the package gives a machine both; the
    object is `code/trainstack_code-<sha16>.tar.gz`. Its `.gcloudignore`, secrets and links
    decide what goes (`code_files`); a link leaving the folder is refused."""
    code: NotRequired[UserCode]
    """Your own code (`trainstack.components.UserCode`): its `source` folder as
    `user_source` and its `requirements` file's lines as `requirements` (exclusive with
    both); an image's code (no `source`) packages the node launcher alone. Give the
    package's `uri` to the compute component that takes the same `code`."""


def _default_source_root() -> Path:
    return Path(trainers.__file__).resolve().parent.parent


def _version() -> str:
    try:
        return metadata.version("trainstack")
    except metadata.PackageNotFoundError:
        return "0.0.0"


def _source_files(source_root: Path) -> list[tuple[str, bytes]]:
    package = source_root / "trainers"
    if not (package / "__init__.py").is_file():
        raise ValueError(f"source_root {str(source_root)!r} has no trainers/__init__.py")
    # Members go under `trainstack/trainers/`: machines import `trainstack.trainers` (a
    # namespace package, so nothing but `trainstack` is installed at top level).
    files: list[tuple[str, bytes]] = []
    for dirpath, dirnames, filenames in os.walk(package):
        dirnames[:] = sorted(
            d for d in dirnames if d not in _EXCLUDED_DIRS and not d.startswith(".")
        )
        for filename in filenames:
            if filename.startswith(".") or filename.endswith(_EXCLUDED_SUFFIXES):
                continue
            path = Path(dirpath) / filename
            files.append(
                (f"trainstack/{path.relative_to(source_root).as_posix()}", path.read_bytes())
            )
    return sorted(files)


def _dependencies(requirements: tuple[str, ...], code: bool) -> tuple[str, ...]:
    # Your code's package depends on your requirements only: the node launcher is standard
    # library, and the bundled trainers' pins must not constrain your environment.
    return requirements if code else (*RUNTIME_DEPENDENCIES, *requirements)


def _toml_string(value: str) -> str:
    """`value` as a TOML basic string. JSON's escapes are TOML's (https://toml.io/en/v1.0.0#string:
    "\\b \\t \\n \\f \\r \\" \\\\ \\uXXXX"), and TOML also wants DEL escaped ("Any Unicode
    character may be used except those that must be escaped: quotation mark, backslash, and
    the control characters other than tab (U+0000 to U+0008, U+000A to U+001F, U+007F)"),
    which JSON leaves as is."""
    return json.dumps(value, ensure_ascii=False).replace("\x7f", "\\u007f")


def _pyproject(version: str, requirements: tuple[str, ...], code: bool = False) -> str:
    deps = "".join(f"  {_toml_string(dep)},\n" for dep in _dependencies(requirements, code))
    text = (
        "[build-system]\n"
        f'requires = ["setuptools>={"62.3" if code else "61"}"]\n'
        'build-backend = "setuptools.build_meta"\n'
        "\n"
        "[project]\n"
        f'name = "{CODE_DIST_NAME if code else DIST_NAME}"\n'
        f'version = "{version}"\n'
        f'description = "{_summary(code)}"\n'
        f'requires-python = "{REQUIRES_PYTHON}"\n'
        f"dependencies = [\n{deps}]\n"
        "\n"
        "[tool.setuptools.packages.find]\n"
        f"include = {_packages(code)}\n"
        "namespaces = true\n"
        "\n"
        "[tool.setuptools.package-data]\n"
        '"*" = ["*.json", "*.yaml", "*.npz", "*.sh", "py.typed"]\n'
    )
    # Every file of your folder, at any depth (recursive globs: setuptools >= 62.3).
    return text + (f'"{SOURCE_PACKAGE}" = ["**/*"]\n' if code else "")


def _summary(code: bool) -> str:
    if code:
        return "your training code with the trainstack node launcher"
    return "trainstack bundled distributed trainers"


def _packages(code: bool) -> str:
    return f'["trainstack.trainers*", "{SOURCE_PACKAGE}*"]' if code else '["trainstack.trainers*"]'


def _pkg_info(version: str, requirements: tuple[str, ...], code: bool = False) -> str:
    lines = [
        "Metadata-Version: 2.1",
        f"Name: {CODE_DIST_NAME if code else DIST_NAME}",
        f"Version: {version}",
        f"Summary: {_summary(code)}",
        f"Requires-Python: {REQUIRES_PYTHON}",
        *(f"Requires-Dist: {dep}" for dep in _dependencies(requirements, code)),
    ]
    return "\n".join(lines) + "\n"


def _tarball(
    version: str,
    files: list[tuple[str, bytes]],
    requirements: tuple[str, ...] = (),
    code: bool = False,
) -> bytes:
    top = f"{CODE_DIST_NAME if code else DIST_NAME}-{version}"
    members = sorted(
        [
            *files,
            ("pyproject.toml", _pyproject(version, requirements, code).encode()),
            ("PKG-INFO", _pkg_info(version, requirements, code).encode()),
        ]
    )
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for relpath, data in members:
            info = tarfile.TarInfo(f"{top}/{relpath}")
            info.size = len(data)
            info.mtime = _FIXED_MTIME
            info.mode = 0o644
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            tar.addfile(info, io.BytesIO(data))
    packed = io.BytesIO()
    # filename="" and mtime=0 keep the gzip header free of build-machine details.
    with gzip.GzipFile(filename="", fileobj=packed, mode="wb", compresslevel=9, mtime=0) as gz:
        gz.write(raw.getvalue())
    return packed.getvalue()


def _build_sdist(
    source_root: Path,
    requirements: tuple[str, ...] = (),
    user_source: CodeFiles | None = None,
    build_dir: Path | None = None,
) -> _Sdist:
    """Build (once per process per source content and build folder) into `build_dir`
    (default: the current project's, `current_build_dir()`) and return the
    reproducible sdist."""
    build_dir = (build_dir or current_build_dir()).resolve()
    version = _version()
    files = _source_files(source_root)
    code = user_source is not None
    if user_source is not None:
        files += [
            (f"{SOURCE_PACKAGE.replace('.', '/')}/{rel}", data) for rel, data in user_source.files
        ]
        files.sort()
    dist = CODE_DIST_NAME if code else DIST_NAME
    key_hash = hashlib.sha256(f"{dist}\0{version}".encode() if code else version.encode())
    for requirement in requirements:
        key_hash.update(f"\0requires\0{requirement}".encode())
    for relpath, data in files:
        key_hash.update(f"\0{relpath}\0{len(data)}\0".encode())
        key_hash.update(data)
    key = f"{source_root}\0{build_dir}\0{key_hash.hexdigest()}"
    cached = _BUILD_CACHE.get(key)
    if cached is not None and cached.path.is_file():
        return cached

    data = _tarball(version, files, requirements, code)
    digest = hashlib.sha256(data).hexdigest()
    build_dir.mkdir(parents=True, exist_ok=True)
    path = build_dir / f"{dist.replace('-', '_')}-{digest[:16]}.tar.gz"
    if not path.is_file() or path.read_bytes() != data:
        # Atomic replace: concurrent programs (plan, tests, up) may build at the same time.
        fd, tmp = tempfile.mkstemp(dir=build_dir, suffix=".tmp")
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        os.replace(tmp, path)
    sdist = _Sdist(path=path, sha256=digest, dist=dist)
    _BUILD_CACHE[key] = sdist
    return sdist


class TrainerPackage(pulumi.ComponentResource):
    """The bundled trainers as a content-addressed sdist in the staging bucket."""

    uri: pulumi.Output[str]
    """`gs://<bucket>/trainers/trainstack_trainers-<sha16>.tar.gz`; changes iff the sources do."""
    object_name: pulumi.Output[str]
    """Object name inside the staging bucket."""
    sha256: pulumi.Output[str]
    """Full sha256 of the sdist bytes."""
    local_path: pulumi.Output[str]
    """Where the sdist was built on this machine."""
    object: storage.BucketObject
    """The uploaded sdist object."""
    user_source: str | None
    """The folder of your code it packages (absolute), None for the bundled trainers: a
    compute given `code` and this package checks they are the same code."""
    requirements: tuple[str, ...]
    """The install requirements it adds (your code's requirements among them)."""

    def __init__(
        self, name: str, args: TrainerPackageArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        check_args("TrainerPackage", TrainerPackageArgs, args)
        # The key the folder's problems name: the one the caller gave it by.
        source_key = "code.source" if args.get("code") is not None else "user_source"
        args = component_check("TrainerPackage", _with_code, args)
        labels = component_check(
            "TrainerPackage", labels_input, args.get("labels"), COMPONENT_LABEL
        )
        source_root = Path(args.get("source_root") or _default_source_root()).resolve()
        requirements = tuple(args.get("requirements") or ())
        given_source = args.get("user_source")
        self.user_source = str(Path(given_source).resolve()) if given_source else None
        self.requirements = requirements
        problems = [
            f"TrainerPackage.requirements[{i}]: {r!r} is not a requirement ({problem}); "
            "valid: a PEP 508 requirement, e.g. 'tf-keras~=2.17.0'"
            for i, r in enumerate(requirements)
            if (problem := requirement_problem(r)) is not None
        ]
        user_source = args.get("user_source")
        code = None
        if user_source is not None and not Path(user_source).is_dir():
            problems.append(
                f"TrainerPackage.user_source: {user_source!r} is not a folder; valid: a folder"
            )
        elif user_source is not None:
            code = code_files(Path(user_source).resolve())
            problems += [f"TrainerPackage.{source_key}: {p}" for p in code.problems]
        if problems:
            raise ArgsError(problems)
        build_dir = args.get("build_dir")
        sdist = _build_sdist(
            source_root,
            requirements,
            code,
            Path(build_dir) if build_dir else None,
        )
        super().__init__(TOKEN, name, None, opts)

        self.object = storage.BucketObject(
            f"{name}-sdist",
            bucket=args["staging_bucket"],
            name=sdist.object_name,
            source=pulumi.FileAsset(str(sdist.path)),
            content_type="application/gzip",
            metadata=pulumi.Output.from_input(labels).apply(
                lambda merged: {**merged, "sha256": sdist.sha256}
            ),
            # The object name only changes with the content, so any other replacement (labels,
            # content type, the asset's local path) reuses the name: create-then-delete would
            # upload the new object and then delete it.
            opts=pulumi.ResourceOptions(parent=self, delete_before_replace=True),
        )

        self.object_name = self.object.name
        self.uri = pulumi.Output.concat("gs://", self.object.bucket, "/", self.object.name)
        self.sha256 = pulumi.Output.from_input(sdist.sha256)
        self.local_path = pulumi.Output.from_input(str(sdist.path))
        self.register_outputs(
            {
                "uri": self.uri,
                "object_name": self.object_name,
                "sha256": self.sha256,
                "local_path": self.local_path,
            }
        )


PACKAGE_CODE: Final = CodeRules("package", runs_image=True, pulumi_secrets=True)
"""What a package holds of your code whatever the compute: either launcher, an image's code."""


def _with_code(args: TrainerPackageArgs) -> TrainerPackageArgs:
    """`args` with `code` as the folder and requirements it stands for."""
    code = args.get("code")
    if code is None:
        return args
    clash = [key for key in ("user_source", "requirements") if key in args]
    if clash:
        raise ValueError(f"{clash[0]}: given with code, which sets it; valid: one of the two")
    out: TrainerPackageArgs = {k: v for k, v in args.items() if k != "code"}  # type: ignore[assignment]
    # The lines a compute given this code prints (a missing folder, requirements file or
    # entrypoint), before a file is read; the compute's own rules are its to check.
    problems = code.problems(PACKAGE_CODE, prefix="code.")
    if problems:
        raise ValueError("\n".join(problems))
    folder = code.source_folder()
    if folder is not None:
        out["user_source"] = str(folder)
        out["requirements"] = code.requirement_lines()
    return out
