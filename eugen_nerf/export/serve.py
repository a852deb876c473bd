"""Serve the web viewer (``viewer/``, shipped in the package) and one or two exports on 127.0.0.1.

The page is static: it reads ``fields.json`` (the exports' names and URLs) and then each ``field.eugen``. Only
the page's files and the named exports are served, nothing else from the disk.
"""

from __future__ import annotations

import json
import mimetypes
from functools import partial
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np

from eugen_nerf.export import format as fmt

PAGE = Path(__file__).resolve().parent / "viewer"
"""The web page's files: the repository's top-level ``viewer/`` (a link in a checkout, copied into a wheel)."""


def page_dir() -> Path:
    if not (PAGE / "index.html").is_file():
        raise fmt.ExportFormatError(f"the web viewer's files are missing from {PAGE}; reinstall eugen-nerf")
    return PAGE


def world_cameras(header: dict) -> list[tuple]:
    """An export's test cameras in the scene's own frame (a NeRF export stores them in the object's frame):
    size, intrinsics and camera-to-world, rounded so that two exports of one scene compare equal."""
    frame = header.get("scene", {}).get("frame", {"origin": [0.0, 0.0, 0.0], "unit": 1.0})
    origin, unit = np.asarray(frame["origin"], dtype=np.float64), float(frame["unit"])
    out = []
    for camera in header.get("cameras", []):
        c2w = np.asarray(camera["camera_to_world"], dtype=np.float64)
        c2w[:, 3] = c2w[:, 3] * unit + origin
        intrinsics = [camera[key] for key in ("width", "height", "fx", "fy", "cx", "cy")]
        out.append(tuple(np.round(np.concatenate([intrinsics, c2w.ravel()]), 4).tolist()))
    return out


def check_same_cameras(exports: list[Path], headers: list[dict]) -> None:
    """Two exports are shown from one camera: refused in one line unless their test cameras are the same."""
    if len(headers) == 2 and world_cameras(headers[0]) != world_cameras(headers[1]):
        raise fmt.ExportFormatError(
            f"{exports[0]} and {exports[1]} have different test cameras (exports of different scenes?); "
            "serve two exports of the same scene, or each on its own"
        )


def describe(path: Path) -> dict:
    """The page's entry for an export (checked readable first: a bad one is one line, before serving)."""
    parsed = fmt.read(path)
    source = parsed.header.get("source", {})
    eugen = source.get("eugen_layers", 0)
    kind = f"EUGen, {eugen} layers" if eugen else "dense"
    return {
        # the export's folder names it, a field.eugen given as a file too (not "field.eugen" for each)
        "name": f"{parsed.path.resolve().parent.name} ({source.get('method', '?')}, {kind})",
        "path": parsed.path,
        "bytes": parsed.path.stat().st_size,
        "header": parsed.header,
    }


class Handler(BaseHTTPRequestHandler):
    def __init__(self, *args, page: Path, fields: list[dict], **kwargs) -> None:
        self.page, self.fields = page, fields
        super().__init__(*args, **kwargs)

    def log_message(self, format: str, *args) -> None:
        pass

    def _send(self, data: bytes, kind: str) -> None:
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0].lstrip("/") or "index.html"
        if path == "fields.json":
            listing = [
                {"name": f["name"], "url": f"fields/{i}/{fmt.FILE_NAME}"} for i, f in enumerate(self.fields)
            ]
            self._send(json.dumps({"fields": listing}).encode(), "application/json")
            return
        parts = path.split("/")
        if len(parts) == 3 and parts[0] == "fields" and parts[1].isdigit() and parts[2] == fmt.FILE_NAME:
            index = int(parts[1])
            if index < len(self.fields):
                self._send(self.fields[index]["path"].read_bytes(), "application/octet-stream")
                return
        file = (self.page / path).resolve()
        if file.is_file() and file.is_relative_to(self.page):
            kind = mimetypes.guess_type(file.name)[0] or "application/octet-stream"
            self._send(file.read_bytes(), kind)
            return
        self.send_error(404)


def make_server(exports: list[Path], port: int = 0, host: str = "127.0.0.1") -> ThreadingHTTPServer:
    """A server (not yet serving) for ``exports``; port 0 picks a free port."""
    page = page_dir()
    fields = [describe(path) for path in exports]
    check_same_cameras(exports, [f["header"] for f in fields])
    return ThreadingHTTPServer((host, port), partial(Handler, page=page.resolve(), fields=fields))
