"""Validate REST request bodies against Google's discovery documents, offline.

google-api-python-client ships the discovery document of every Google API in its wheel
(`googleapiclient/discovery_cache/documents/<api>.json`). The REST bodies trainstack sends
itself (Vertex AI `CustomJob`, TPU `QueuedResource`) are checked against those schemas
before anything is registered, so a typo in a field name, an int64 sent as a JSON number or
an enum value Google never defined fails in `pulumi preview` and in the test suite instead
of at `pulumi up`.

    from trainstack.components._discovery import assert_valid, validate_body

    errors = validate_body("aiplatform.v1", "CustomJob", {"displayName": "x"})
    # ['jobSpec: required field missing (GoogleCloudAiplatformV1CustomJob)']
    assert_valid("tpu.v2", "QueuedResource", body)  # raises ValueError listing every error

Rules (what the discovery format says, nothing more):
- unknown fields and output-only (`readOnly`) fields are errors;
- `string` with format `int64`/`uint64` must be a decimal string (JSON numbers lose
  precision past 2**53, so Google's JSON mapping encodes them as strings);
  `google-duration` must look like `"3600s"`;
- `integer` (`int32`/`uint32`) must be a JSON integer in range, `number` any JSON number,
  `boolean` a JSON boolean, `array` a list, `object` a dict (`properties` and/or
  `additionalProperties`), `$ref` the named schema, `any` anything;
- an `enum` value must be one of the listed values;
- a field whose description starts with "Required." must be present in its object.
"""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path
from typing import Any

import googleapiclient

from trainstack.components._unknown import is_unknown

DOCUMENTS_DIR = Path(googleapiclient.__file__).resolve().parent / "discovery_cache" / "documents"

_API_NAME = re.compile(r"^[a-z][a-z0-9]*\.v[0-9][a-z0-9]*$")
_INT64 = re.compile(r"^-?[0-9]+$")
_UINT64 = re.compile(r"^[0-9]+$")
_DURATION = re.compile(r"^-?[0-9]+(\.[0-9]{1,9})?s$")
_INT_RANGES: dict[str, tuple[int, int]] = {
    "int32": (-(2**31), 2**31 - 1),
    "uint32": (0, 2**32 - 1),
}


@functools.lru_cache(maxsize=8)
def load_document(api: str) -> dict[str, Any]:
    """The bundled discovery document for `api` (e.g. `aiplatform.v1`, `tpu.v2`)."""
    if not _API_NAME.match(api):
        raise ValueError(f"api: {api!r} is not of the form '<name>.<version>' (e.g. 'tpu.v2')")
    path = DOCUMENTS_DIR / f"{api}.json"
    if not path.is_file():
        raise ValueError(f"api: no bundled discovery document {path.name!r} in {DOCUMENTS_DIR}")
    document: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return document


def document_text(api: str) -> str:
    """The raw JSON of the bundled document (what `build_from_document` accepts)."""
    load_document(api)  # validates the name
    return (DOCUMENTS_DIR / f"{api}.json").read_text(encoding="utf-8")


def schema_name(api: str, schema: str) -> str:
    """Resolve a short schema name (`CustomJob`) to its full discovery name.

    aiplatform prefixes every schema (`GoogleCloudAiplatformV1CustomJob`); tpu does not
    (`QueuedResource`). An exact name always wins.
    """
    schemas = load_document(api)["schemas"]
    if schema in schemas:
        return schema
    prefixed = re.compile(rf"^GoogleCloud[A-Za-z]+V[0-9][A-Za-z0-9]*?{re.escape(schema)}$")
    matches = [name for name in schemas if prefixed.match(name)]
    # The shortest match is the one whose prefix is exactly the API's (V1 vs V1beta1 etc.).
    matches.sort(key=len)
    if not matches or (len(matches) > 1 and len(matches[0]) == len(matches[1])):
        raise ValueError(f"schema: {schema!r} is not a schema of {api} (or is ambiguous)")
    return matches[0]


def validate_body(api: str, schema: str, body: Any, *, allow_unknowns: bool = False) -> list[str]:
    """Every problem with `body` as the request schema `schema` of `api`, as exact strings.

    Each error is `<path>: <problem>` where `<path>` is dotted field names with `[i]` for
    list items and `[key]` for map entries (`jobSpec.workerPoolSpecs[0].replicaCount`).
    With `allow_unknowns`, a value Pulumi does not know yet (`trainstack.components._unknown.is_unknown`:
    the dynamic host's `Unknown` object or the engine's sentinel string) is accepted
    anywhere, the whole body included: a provider's `check` sees them in a preview.
    """
    full = schema_name(api, schema)
    errors: list[str] = []
    _Validator(load_document(api)["schemas"], allow_unknowns, errors).ref(full, body, "")
    return errors


def assert_valid(api: str, schema: str, body: Any, *, allow_unknowns: bool = False) -> None:
    """Raise ValueError listing every error `validate_body` finds."""
    errors = validate_body(api, schema, body, allow_unknowns=allow_unknowns)
    if errors:
        listed = "\n".join(f"  - {error}" for error in errors)
        raise ValueError(f"{api} {schema} body is invalid ({len(errors)} errors):\n{listed}")


def _type_name(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return f"integer {value}"
    if isinstance(value, float):
        return f"number {value!r}"
    if isinstance(value, str):
        return f"string {value!r}"
    if isinstance(value, list | tuple):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


class _Validator:
    def __init__(self, schemas: dict[str, Any], allow_unknowns: bool, errors: list[str]) -> None:
        self.schemas = schemas
        self.allow_unknowns = allow_unknowns
        self.errors = errors

    def error(self, path: str, problem: str) -> None:
        self.errors.append(f"{path or '<body>'}: {problem}")

    def ref(self, name: str, value: Any, path: str) -> None:
        self.value(self.schemas[name], value, path, name)

    def value(self, spec: dict[str, Any], value: Any, path: str, name: str | None = None) -> None:
        if self.allow_unknowns and is_unknown(value):
            return
        if "$ref" in spec:
            self.ref(spec["$ref"], value, path)
            return
        kind = spec.get("type")
        fmt = spec.get("format")
        if kind == "any":
            return
        if kind == "object":
            self.object(spec, value, path, name)
        elif kind == "array":
            if not isinstance(value, list | tuple):
                self.error(path, f"expected array, got {_type_name(value)}")
                return
            for i, item in enumerate(value):
                self.value(spec.get("items", {"type": "any"}), item, f"{path}[{i}]")
        elif kind == "boolean":
            if not isinstance(value, bool):
                self.error(path, f"expected boolean, got {_type_name(value)}")
        elif kind == "integer":
            self.integer(fmt, value, path)
        elif kind == "number":
            if isinstance(value, bool) or not isinstance(value, int | float):
                self.error(path, f"expected number, got {_type_name(value)}")
        elif kind == "string":
            self.string(spec, fmt, value, path)

    def integer(self, fmt: str | None, value: Any, path: str) -> None:
        label = f"integer ({fmt})" if fmt else "integer"
        if isinstance(value, bool) or not isinstance(value, int):
            self.error(path, f"expected {label}, got {_type_name(value)}")
            return
        low, high = _INT_RANGES.get(fmt or "", (None, None))
        if low is not None and high is not None and not low <= value <= high:
            self.error(path, f"{value} is out of range for {fmt} [{low}, {high}]")

    def string(self, spec: dict[str, Any], fmt: str | None, value: Any, path: str) -> None:
        if not isinstance(value, str):
            if fmt in ("int64", "uint64"):
                self.error(
                    path, f"expected {fmt} as a decimal JSON string, got {_type_name(value)}"
                )
            else:
                self.error(path, f"expected string, got {_type_name(value)}")
            return
        if fmt == "int64" and not _INT64.match(value):
            self.error(path, f"expected int64 as a decimal JSON string, got {value!r}")
        elif fmt == "uint64" and not _UINT64.match(value):
            self.error(path, f"expected uint64 as a decimal JSON string, got {value!r}")
        elif fmt == "google-duration" and not _DURATION.match(value):
            self.error(path, f"expected a duration like '3600s', got {value!r}")
        enum = spec.get("enum")
        if enum is not None and value not in enum:
            self.error(path, f"{value!r} is not one of {', '.join(enum)}")

    def object(self, spec: dict[str, Any], value: Any, path: str, name: str | None) -> None:
        if not isinstance(value, dict):
            self.error(path, f"expected object, got {_type_name(value)}")
            return
        properties: dict[str, Any] = spec.get("properties", {})
        extra = spec.get("additionalProperties")
        where = f" ({name})" if name else ""
        for key, item in value.items():
            child = _join(path, key) if properties else f"{path}[{key}]"
            if key in properties:
                field = properties[key]
                if field.get("readOnly"):
                    self.error(child, f"output-only field{where}")
                    continue
                self.value(field, item, child)
            elif extra is not None:
                self.value(extra, item, f"{path}[{key}]")
            else:
                self.error(child, f"unknown field{where}")
        for key, field in properties.items():
            if key not in value and field.get("description", "").startswith("Required."):
                self.error(_join(path, key), f"required field missing{where}")


def normalize_numbers(api: str, schema: str, body: Any) -> Any:
    """`body` with whole floats turned into ints wherever the schema wants an `integer`.

    Pulumi carries every number through protobuf `Struct` as a double, so a dynamic
    provider receives `8.0` for the `8` the program registered; Google's JSON parser wants
    an integer there.
    """
    schemas = load_document(api)["schemas"]

    def walk(spec: dict[str, Any], value: Any) -> Any:
        if "$ref" in spec:
            return walk(schemas[spec["$ref"]], value)
        kind = spec.get("type")
        if kind == "integer" and isinstance(value, float) and value.is_integer():
            return int(value)
        if kind == "array" and isinstance(value, list):
            return [walk(spec.get("items", {}), item) for item in value]
        if kind == "object" and isinstance(value, dict):
            props = spec.get("properties", {})
            extra = spec.get("additionalProperties", {})
            return {k: walk(props.get(k, extra), v) for k, v in value.items()}
        return value

    return walk(schemas[schema_name(api, schema)], body)
