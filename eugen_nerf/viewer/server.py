"""Starting a viser server without viser's process-scan race.

``viser.ViserServer`` first scans every process on the machine (psutil) to see whether its client is being
developed with ``yarn start``; a process that exits during the scan raises ``psutil.NoSuchProcess`` (viser
catches only access errors). On a busy machine that fails a viewer's start for nothing, so the scan is
simply run again: the race is over as soon as the vanished process is gone.
"""

from __future__ import annotations

import socket

import psutil
import viser

from eugen_nerf.inputs.errors import InputError
from eugen_nerf.inputs.options import tcp_port


def check_listen_address(host: str, port: int) -> None:
    """:class:`InputError` unless a server can listen on ``host`` (checked by binding a free port there) and
    ``port`` is a TCP port: viser reports a failed bind from its server thread and then waits for ever."""
    tcp_port("port", port)
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, 0, type=socket.SOCK_STREAM)[0]
        with socket.socket(family, kind, proto) as probe:
            probe.bind(address)
    except OSError as error:
        raise InputError(f"--host {host}: cannot listen there ({error.strerror or error})") from None


def start_viser_server(host: str, port: int, attempts: int = 5, **kwargs) -> viser.ViserServer:
    """``viser.ViserServer(host=host, port=port, **kwargs)``, retried when a process vanished during its scan."""
    if attempts < 1:
        raise ValueError(f"attempts must be >= 1, got {attempts}")
    for _ in range(attempts - 1):
        try:
            return viser.ViserServer(host=host, port=port, **kwargs)
        except psutil.NoSuchProcess:
            continue
    return viser.ViserServer(host=host, port=port, **kwargs)  # the last attempt reports what it meets
