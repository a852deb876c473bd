"""Starting a viser server without viser's process-scan race.

``viser.ViserServer`` first scans every process on the machine (psutil) to see whether its client is being
developed with ``yarn start``; a process that exits during the scan raises ``psutil.NoSuchProcess`` (viser
catches only access errors). On a busy machine that fails a viewer's start for nothing, so the scan is
simply run again: the race is over as soon as the vanished process is gone.
"""

from __future__ import annotations

import psutil
import viser


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
