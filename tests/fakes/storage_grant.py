"""Cloud Storage as an account sees it whose grant on one bucket is held by an IAM condition on
object names, `resource.name.startsWith("projects/_/buckets/<bucket>/objects/<prefix>")` (the
run supervisor's grant on the checkpoint bucket, `components/_supervisor_iam.py`
`records_condition`): a front on 127.0.0.1 that passes the JSON API's calls to the GCS
emulator and answers 403 where that condition does not hold.

    with running_gcs_emulator() as gcs, ObjectNameGrant(gcs, "b", "trainstack-run-") as front:
        front.url    # STORAGE_EMULATOR_HOST for the account under the condition
        front.denied  # (method, path) of every call it refused
        front.refused = "trainstack-run-k.alive/"  # and these objects too (a narrower grant)

How Google evaluates it (https://cloud.google.com/iam/docs/conditions-resource-attributes,
`catalog.supervisor_iam.STORAGE_CONDITIONS_SOURCE`): a call on an object (get, media download,
insert, delete) carries the object's name `projects/_/buckets/B/objects/O`, so it is granted
where O starts with the prefix; a list (`GET b/B/o`) is a call on the bucket, `projects/_/
buckets/B`, which no object-name condition matches, so it is refused. Other buckets pass as
they are (the supervisor's own state bucket is granted without a condition). The refusal is
Google's 403 error shape (`tests.fakes.google_error`); its wording is this fake's.

It also serves objects stored with `contentEncoding: gzip` as Cloud Storage does, which the
emulator does not (https://cloud.google.com/storage/docs/transcoding): "When an object meets
these two criteria [gzip-compressed, `Content-Encoding: gzip` in its metadata], it undergoes
decompressive transcoding when served, and the response containing the object does not
contain a Content-Encoding or Content-Length header"; "If the Accept-Encoding: gzip header is
included in a request for the object, the object is served as-is in that specific request,
along with a Content-Encoding: gzip response header"; "If the Cache-Control metadata field
for the object is set to no-transform, the object is served as a compressed object in all
subsequent requests". `front.delivered` counts, per object name, the bytes each media
download leaves the reader holding once a `Content-Encoding: gzip` answer is decoded (aiohttp
under gcsfs asks for gzip and decodes it, `ClientSession(auto_decompress=True)`). The
emulator ignores `generation` and `ifMetagenerationMatch` on a download; so does this front.
"""

from __future__ import annotations

import gzip
import json
import re
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import parse_qs, quote, unquote, urlsplit

from tests.fakes import LocalServer, google_error

_CALL = re.compile(
    r"^/(?:upload/|download/)?storage/v1/b/(?P<bucket>[^/]+)(?P<objects>/o(?:/(?P<object>.+))?)?$"
)
_UPLOAD_NAME = re.compile(rb'"name"\s*:\s*"([^"]+)"')
"""The object name in a multipart upload's JSON part (gcsfs `simple_upload`)."""


class ObjectNameGrant(LocalServer):
    def __init__(self, upstream: str, bucket: str, prefix: str) -> None:
        self.upstream, self.bucket, self.prefix = upstream.rstrip("/"), bucket, prefix
        self.denied: list[tuple[str, str]] = []
        self.refused: str | None = None
        """Objects under this prefix refused as well (a grant that does not reach them)."""
        self.delivered: dict[str, int] = {}
        """Bytes of each object's media the reader held, decoded, summed over downloads."""
        super().__init__(_handler(self))

    @property
    def url(self) -> str:
        return self.base_url

    def refusal(self, method: str, raw_path: str, body: bytes) -> str | None:
        """The permission the grant does not give this call, or None where it does."""
        split = urlsplit(raw_path)
        match = _CALL.match(split.path)
        if match is None or unquote(match["bucket"]) != self.bucket:
            return None
        name = unquote(match["object"]) if match["object"] else None
        if name is None and split.path.startswith("/upload/"):
            named = parse_qs(split.query).get("name") or [
                found.decode() for found in _UPLOAD_NAME.findall(body[:4096])[:1]
            ]
            name = named[0] if named else None
        if name is None:  # a call on the bucket: no object-name condition holds for it
            return "storage.objects.list" if match["objects"] else "storage.buckets.get"
        refused = self.refused is not None and name.startswith(self.refused)
        if refused or not name.startswith(self.prefix):
            return _permission(method)
        return None


def _media(raw_path: str) -> tuple[str, str] | None:
    """The (bucket, object) of a media download (`alt=media`), or None."""
    split = urlsplit(raw_path)
    match = _CALL.match(split.path)
    if match is None or not match["object"] or parse_qs(split.query).get("alt") != ["media"]:
        return None
    return unquote(match["bucket"]), unquote(match["object"])


def _permission(method: str) -> str:
    return {"GET": "storage.objects.get", "DELETE": "storage.objects.delete"}.get(
        method, "storage.objects.create"
    )


def _forward(
    grant: ObjectNameGrant, method: str, path: str, headers: Any, body: bytes
) -> tuple[int, bytes, str]:
    """The emulator's answer to the call: status, body and content type."""
    forward = urllib.request.Request(
        grant.upstream + path, data=body if body else None, method=method
    )
    for header in ("Content-Type", "Range"):
        if headers.get(header):
            forward.add_header(header, headers[header])
    try:
        with urllib.request.urlopen(forward, timeout=30) as answer:
            return (
                answer.status,
                answer.read(),
                answer.headers.get("Content-Type", "application/json"),
            )
    except urllib.error.HTTPError as err:
        return err.code, err.read(), err.headers.get("Content-Type", "application/json")


def _handler(grant: ObjectNameGrant) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: Any) -> None:
            pass

        def _answer(self, status: int, data: bytes, content_type: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _serve(self, method: str) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            refused = grant.refusal(method, self.path, body)
            if refused is not None:
                grant.denied.append((method, urlsplit(self.path).path))
                message = (
                    f"The caller does not have {refused} access to the Google Cloud Storage "
                    f"bucket {grant.bucket} under its grant's condition."
                )
                self._answer(
                    403, json.dumps(google_error(403, message)).encode(), "application/json"
                )
                return
            status, data, kind = _forward(grant, method, self.path, self.headers, body)
            media = _media(self.path) if method == "GET" and status in (200, 206) else None
            if media is None:
                self._answer(status, data, kind)
                return
            self._serve_media(media, status, data, kind)

        def _serve_media(self, media: tuple[str, str], status: int, data: bytes, kind: str) -> None:
            bucket, name = media
            meta_url = f"{grant.upstream}/storage/v1/b/{bucket}/o/{quote(name, safe='')}"
            with urllib.request.urlopen(meta_url, timeout=30) as answer:
                meta = json.loads(answer.read())
            encoded = meta.get("contentEncoding") == "gzip"
            as_is = "gzip" in self.headers.get("Accept-Encoding", "") or "no-transform" in (
                meta.get("cacheControl") or ""
            )
            held = gzip.decompress(data) if encoded else data
            grant.delivered[name] = grant.delivered.get(name, 0) + len(held)
            if not encoded:
                self._answer(status, data, kind)
                return
            if as_is:
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Encoding", "gzip")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                return
            # Transcoded: no Content-Length, so the end of the answer is the connection's.
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(held)
            self.close_connection = True

        def do_GET(self) -> None:
            self._serve("GET")

        def do_POST(self) -> None:
            self._serve("POST")

        def do_PUT(self) -> None:
            self._serve("PUT")

        def do_PATCH(self) -> None:
            self._serve("PATCH")

        def do_DELETE(self) -> None:
            self._serve("DELETE")

    return Handler
