"""``eugen-viewer``: two trained runs of one scene side by side in the browser, driven by one camera.

The image shows left | right | |left - right|; the control panel gives each side's render time for the
current frame and its PSNR on the test view nearest the camera, camera presets at the scene's test views,
and (where a run has EUGen layers) fused vs unfused inference. It uses viser, as nerfstudio's viewer does.
"""

from __future__ import annotations

import signal
import threading
from dataclasses import dataclass
from pathlib import Path

import viser
from nerfstudio.utils.rich_utils import CONSOLE

from eugen_nerf.eval.panels import compose
from eugen_nerf.eval.panels import difference as difference_image
from eugen_nerf.eval.runs import mismatched_test_views
from eugen_nerf.inputs.errors import one_line_errors
from eugen_nerf.inputs.options import POSITIVE_INT, check_options, parse_command_line, tcp_port
from eugen_nerf.viewer.compare import (
    HeldOutViews,
    Run,
    SceneMismatchError,
    ViewScores,
    c2w_to_viser,
    check_same_scene,
    panel_camera,
    stats_markdown,
    viser_to_c2w,
)
from eugen_nerf.viewer.controls import FUSED_LABEL, eugen_mlps, set_fused
from eugen_nerf.viewer.server import check_listen_address, start_viser_server

PRESET_LABEL = "Camera preset"
PANEL_LABELS = ["left", "right", "|left - right|"]


class ComparisonViewer:
    """Serves the comparison to every connected browser.

    Camera callbacks only mark a client as pending; one worker thread renders, always from the client's
    newest camera, so a dragged camera never queues up stale frames on a slow CPU.
    """

    def __init__(
        self, server: viser.ViserServer, runs: list[Run], views: HeldOutViews, render_height: int
    ) -> None:
        self.server, self.runs, self.views = server, runs, views
        self.render_height = render_height
        self.scores = ViewScores(runs, views)
        self._pending: dict[int, viser.ClientHandle] = {}
        self._stats: dict[int, viser.GuiMarkdownHandle] = {}
        self._awaiting_preset: set[int] = set()
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stopping = False

        # A fixed sidebar: a floating panel would cover the difference image on the right.
        server.gui.configure_theme(control_layout="fixed", show_share_button=False)
        with server.gui.add_folder("Runs"):
            server.gui.add_markdown(
                "\n".join(
                    f"**{side}**: {run.label}  \n`{run.config_path}`  "
                    for side, run in zip(("Left", "Right"), runs)
                )
            )
        self.fused = None
        if any(eugen_mlps(run.pipeline.model) for run in runs):
            self.fused = server.gui.add_checkbox(
                FUSED_LABEL,
                True,
                hint="Merged feature-to-feature form of the EUGen layers; off: layer by layer.",
            )
            self.fused.on_update(lambda _: self._set_fused())
        server.on_client_connect(self._connect)
        server.on_client_disconnect(self._disconnect)
        self._worker = threading.Thread(target=self._work, name="eugen-viewer-render")
        self._worker.start()

    def _connect(self, client: viser.ClientHandle) -> None:
        preset = client.gui.add_dropdown(
            PRESET_LABEL,
            self.views.names,
            initial_value=self.views.names[0],
            hint="Move the camera to one of the scene's test views.",
        )
        preset.on_update(lambda event: self._move(client, self.views.names.index(preset.value)))
        self._stats[client.client_id] = client.gui.add_markdown("Waiting for the first frame…")
        with self._lock:
            self._awaiting_preset.add(client.client_id)
        client.camera.on_update(lambda _: self._camera_moved(client))

    def _disconnect(self, client: viser.ClientHandle) -> None:
        with self._lock:
            self._pending.pop(client.client_id, None)
            self._stats.pop(client.client_id, None)
            self._awaiting_preset.discard(client.client_id)

    def _camera_moved(self, client: viser.ClientHandle) -> None:
        """The first camera message of a client (its camera is known from then on) moves it to a test view."""
        with self._lock:
            first = client.client_id in self._awaiting_preset
            self._awaiting_preset.discard(client.client_id)
        if first:
            self._move(client, 0)
        else:
            self._request(client)

    def _move(self, client: viser.ClientHandle, index: int) -> None:
        camera = self.views.cameras[index]
        wxyz, position = c2w_to_viser(camera.camera_to_worlds)
        with client.atomic():
            client.camera.fov = float(2 * (camera.cy / camera.fy).atan())
            client.camera.position = position
            client.camera.wxyz = wxyz
        self._request(client)

    def _set_fused(self) -> None:
        for run in self.runs:
            set_fused(run.pipeline.model, self.fused.value)
        for client in self.server.get_clients().values():
            self._request(client)

    def _request(self, client: viser.ClientHandle) -> None:
        with self._lock:
            self._pending[client.client_id] = client
        self._wake.set()

    def _work(self) -> None:
        while True:
            self._wake.wait()
            with self._lock:
                if self._stopping:
                    return
                clients = list(self._pending.values())
                self._pending.clear()
                self._wake.clear()
            for client in clients:
                try:
                    self._render(client)
                except Exception:  # noqa: BLE001 (a failed frame must not end the viewer: report it, keep serving)
                    CONSOLE.print_exception()

    def _render(self, client: viser.ClientHandle) -> None:
        c2w = viser_to_c2w(client.camera.wxyz, client.camera.position)
        camera = panel_camera(c2w, client.camera.fov, client.camera.aspect, self.render_height)
        (left, left_s), (right, right_s) = (run.render(camera) for run in self.runs)
        image = compose([left, right, difference_image(left, right)], PANEL_LABELS)
        client.scene.set_background_image(image, format="jpeg", jpeg_quality=90)
        index = self.views.nearest(c2w)
        fused = self.fused is None or self.fused.value
        psnrs = [self.scores.psnr(side, index, fused) for side in range(len(self.runs))]
        stats = self._stats.get(client.client_id)
        if stats is not None:
            stats.content = stats_markdown(
                [run.label for run in self.runs], [left_s, right_s], psnrs, self.views.names[index]
            )

    def close(self) -> None:
        """Stop the render worker (after its current frame)."""
        with self._lock:
            self._stopping = True
        self._wake.set()
        self._worker.join()


@dataclass
class EUGenViewer:
    """Compare two trained runs of one scene side by side: one camera drives both renders.

    Shows left | right | |left - right|, each side's render time and its PSNR on the nearest test view,
    and camera presets at the scene's test views. Open the printed address in a browser; Ctrl-C stops.
    """

    left: Path
    """config.yml of the left run (an ns-train run or a distilled student)."""
    right: Path
    """config.yml of the right run, trained on the same scene as the left one."""
    host: str = "127.0.0.1"
    """Address to listen on: 127.0.0.1 keeps the viewer on this machine, 0.0.0.0 shares it."""
    port: int = 7008
    """Port of the viewer's web page and websocket."""
    render_height: int = 128
    """Height in pixels of each rendered panel (the width follows the browser window); keep it small on CPU."""

    def main(self) -> None:
        check_options(self, {"port": tcp_port, "render_height": POSITIVE_INT})
        check_listen_address(self.host, self.port)  # before the runs load, which takes a while
        check_same_scene(self.left, self.right)
        runs = [Run.load(self.left), Run.load(self.right)]
        mismatch = mismatched_test_views([run.pipeline for run in runs], ["--left", "--right"])
        if mismatch is not None:  # one camera drives both: they must place the scene alike
            raise SceneMismatchError(mismatch)
        server = start_viser_server(self.host, self.port)
        viewer = ComparisonViewer(
            server, runs, HeldOutViews.from_pipeline(runs[0].pipeline), self.render_height
        )
        stop = threading.Event()
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, lambda *_: stop.set())
        CONSOLE.print(f"eugen-viewer: open http://{self.host}:{server.get_port()} (Ctrl-C to stop)")
        while not stop.wait(0.5):
            pass
        CONSOLE.print("eugen-viewer: stopping")
        viewer.close()
        server.stop()


def entrypoint() -> None:
    """Console script: tyro parses the options (``--help`` explains each), errors end in one line."""
    options = parse_command_line(EUGenViewer, "eugen-viewer")
    # Ctrl-C while the runs load, before the viewer's own handler is installed: one line, exit 130
    with one_line_errors("eugen-viewer", code=2, also=(FileNotFoundError,)):
        options.main()


if __name__ == "__main__":
    entrypoint()
