"""The exported-field file: a JSON header and little-endian buffers in one file (``field.eugen``).

Layout (every integer little-endian)::

    bytes 0..7     b"EUGENFLD"                 magic
    bytes 8..11    uint32 header length H       (a multiple of 16)
    bytes 12..15   uint32 0                     reserved
    bytes 16..16+H JSON header, UTF-8, padded with spaces
    then           the data section: every buffer at its ``offset`` (16-byte aligned, from the section's start)

The header's ``format`` is ``"eugen-field"`` and its ``version`` is :data:`FORMAT_VERSION`; a reader refuses
any other version rather than guess. ``buffers`` maps a name to ``{"dtype", "shape", "offset", "nbytes"}``
(dtypes: ``float32``, ``float16``, ``uint8``); everything else in the header (the fields, their MLPs' steps,
the occupancy grid, the scene's bounds, near/far, background and the test cameras) refers to buffers by name.
``docs/export.md`` describes every key. The web page (``viewer/``) reads the same file.

This module imports numpy only (no torch, no nerfstudio, nothing else of eugen-nerf).
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

MAGIC = b"EUGENFLD"
FORMAT_NAME = "eugen-field"
FORMAT_VERSION = 1
FILE_NAME = "field.eugen"
"""The file an export directory holds."""
ALIGN = 16
DTYPES = {"float32": np.float32, "float16": np.float16, "uint8": np.uint8}


class ExportFormatError(ValueError):
    """A file that is not a readable export (wrong magic or version, truncated, inconsistent header); its
    message is one line naming the file. (A ``ValueError``, not the package's ``InputError``: this module
    imports nothing but numpy, so a machine without the training stack can read exports.)"""


@dataclass
class ExportFile:
    """A parsed export: its header and its buffers (numpy arrays, little-endian, in their stored dtype)."""

    header: dict
    buffers: dict[str, np.ndarray] = field(default_factory=dict)
    path: Path | None = None


def _padded(data: bytes, fill: bytes = b"\0") -> bytes:
    return data + fill * (-len(data) % ALIGN)


def encode(header: dict, buffers: dict[str, np.ndarray]) -> bytes:
    """The bytes of an export: ``header`` (without ``buffers``, which this fills in) and ``buffers``."""
    table, chunks, offset = {}, [], 0
    for name, array in buffers.items():
        array = np.asarray(array)
        dtype = next((key for key, value in DTYPES.items() if array.dtype == value), None)
        if dtype is None:
            raise ValueError(f"buffer {name}: dtype {array.dtype} is not one of {sorted(DTYPES)}")
        data = np.ascontiguousarray(array).astype(array.dtype.newbyteorder("<"), copy=False).tobytes()
        table[name] = {"dtype": dtype, "shape": list(array.shape), "offset": offset, "nbytes": len(data)}
        chunks.append(_padded(data))
        offset += len(chunks[-1])
    full = {"format": FORMAT_NAME, "version": FORMAT_VERSION, **header, "buffers": table}
    text = _padded(json.dumps(full, indent=1).encode(), b" ")
    return MAGIC + struct.pack("<II", len(text), 0) + text + b"".join(chunks)


def write(path: Path, header: dict, buffers: dict[str, np.ndarray]) -> int:
    """Write an export file; its size in bytes."""
    data = encode(header, buffers)
    Path(path).write_bytes(data)
    return len(data)


def decode(data: bytes, source: str = "export") -> ExportFile:
    """Parse the bytes of an export; :class:`ExportFormatError` (one line naming ``source``) if they are not one."""
    if len(data) < 16 or data[:8] != MAGIC:
        raise ExportFormatError(f"{source}: not an exported field (no {MAGIC.decode()} magic at its start)")
    length, _ = struct.unpack("<II", data[8:16])
    if 16 + length > len(data):
        raise ExportFormatError(
            f"{source}: truncated ({len(data)} bytes, its header alone needs {16 + length}); export it again"
        )
    try:
        header = json.loads(data[16 : 16 + length].decode())
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ExportFormatError(f"{source}: unreadable header ({error})") from None
    if not isinstance(header, dict) or header.get("format") != FORMAT_NAME:
        raise ExportFormatError(f"{source}: its header is not an {FORMAT_NAME} header")
    version = header.get("version")
    if version != FORMAT_VERSION:
        raise ExportFormatError(
            f"{source}: format version {version!r}, this reader reads version {FORMAT_VERSION} only; "
            "export the run again with this eugen-nerf"
        )
    section = memoryview(data)[16 + length :]
    table = header.get("buffers", {})
    if not isinstance(table, dict):
        raise ExportFormatError(f"{source}: its header's buffer table is not a table; export it again")
    buffers = {}
    for name, entry in table.items():
        try:
            offset, nbytes, shape = (
                int(entry["offset"]),
                int(entry["nbytes"]),
                [int(n) for n in entry["shape"]],
            )
            dtype = np.dtype(DTYPES[entry["dtype"]]).newbyteorder("<")
        except (KeyError, TypeError, ValueError):
            raise ExportFormatError(
                f"{source}: buffer {name}'s entry {entry!r} is not an offset, a size, a shape and one of the "
                f"types {', '.join(DTYPES)}; export it again"
            ) from None
        end = offset + nbytes
        if end > len(section):
            raise ExportFormatError(
                f"{source}: truncated (buffer {name} ends at byte {16 + length + end}, the file has "
                f"{len(data)}); export it again"
            )
        if offset < 0 or nbytes < 0 or nbytes % dtype.itemsize:
            raise ExportFormatError(
                f"{source}: buffer {name} spans {nbytes} bytes at {offset}, not whole values"
            )
        array = np.frombuffer(section[offset:end], dtype=dtype)
        if array.size != int(np.prod(shape, dtype=np.int64)):
            raise ExportFormatError(f"{source}: buffer {name} holds {array.size} values, not {shape}")
        buffers[name] = array.reshape(shape)
    return ExportFile(header, buffers)


def read(path: Path) -> ExportFile:
    """Read ``path`` (an export directory or its ``field.eugen``)."""
    path = Path(path)
    file = path / FILE_NAME if path.is_dir() else path
    if not file.is_file():
        raise ExportFormatError(f"{path}: no exported field there (expected {FILE_NAME}; run eugen-export)")
    try:
        data = file.read_bytes()
    except OSError as error:
        raise ExportFormatError(f"{file}: cannot read it ({error.strerror})") from None
    parsed = decode(data, str(file))
    parsed.path = file
    return parsed
