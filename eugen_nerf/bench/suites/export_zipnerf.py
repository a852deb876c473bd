"""The ``zipnerf`` part of the export suite (:mod:`eugen_nerf.bench.suites.export`): the Zip-NeRF head exported
and rendered.

A small dense-zipnerf / eugen-zipnerf pair (eugen-bench's CPU preset for Zip-NeRF, the same seed and steps) is
trained on ``--zipnerf-scene`` and exported (float32 and float16). On every test view the reference renderer's
proposal sampling is compared with nerfstudio and the page's march with the truth; at ``--camera`` the march
against nerfstudio, against itself without occupancy skipping and early termination, and float16 against
float32. Then the page renders both fields in headless Chromium (``--zipnerf-repeats`` frames each, the
fastest counts), the float16 export, and a ``--large-size`` frame of the EUGen field. Everything goes to
``zipnerf.json`` after every step; a rerun measures only what is missing. Pictures to look at (ground truth |
nerfstudio | reference | page's sampling) go beside the runs, the page's frames (truth | page | reference) to
``--output``.

The ``zipnerf-distilled`` part measures the same way a trained teacher (``--zipnerf-teacher``, by default the
shipped unbounded garden200 one; ``dense``) and its student distilled with ``eugen-distill``'s defaults
(``eugen``), on ``--distilled-views`` test views and in ``--distilled-size`` page frames, into
``zipnerf_distilled.json`` and ``page_zipnerf_distilled_*.png``.
"""

from __future__ import annotations

import copy
from pathlib import Path

import torch

from eugen_nerf.bench.suites import command_line
from eugen_nerf.bench.suites.export import (
    BenchExport,
    Results,
    browser_header,
    distilled_once,
    exported,
    forget_frames,
    forget_other_exports,
    frame_size,
    march,
    measure_reference,
    page_frame,
    page_screenshot,
    psnr,
    run_config,
    save_picture,
    screenshot_due,
)

METHODS = {"dense": "dense-zipnerf", "eugen": "eugen-zipnerf"}


def trained_pair(scene: Path, steps: int, root: Path) -> dict[str, Path]:
    """The dense-zipnerf and eugen-zipnerf runs' config.yml at eugen-bench's CPU preset for Zip-NeRF (torch
    grid: the exporter reads its table), trained on ``scene`` for ``steps`` under ``root`` (a finished run for
    the same steps, seed, model and scene is reused; the scene is named by its absolute path, so a run is
    reused from any working directory)."""
    from eugen_nerf.bench.suites.methods import small_zipnerf
    from eugen_nerf.bench.training import train_in_process
    from eugen_nerf.methods.zipnerf import dense_zipnerf, eugen_zipnerf

    runs = {}
    for name, spec in zip(METHODS, (dense_zipnerf, eugen_zipnerf), strict=True):
        config = copy.deepcopy(spec.config)
        config.machine.device_type = "cpu"
        config.mixed_precision = False
        small_zipnerf(config)
        config.pipeline.model.implementation = "torch"
        with torch.enable_grad():
            path, seconds = train_in_process(config, scene, steps, root, timestamp=METHODS[name], reuse=True)
        print(f"{METHODS[name]}: {path} ({seconds:.3f} s/step)", flush=True)
        runs[name] = path
    return runs


def measure_zipnerf(args: BenchExport, distilled: bool = False) -> Results:
    """The ``zipnerf`` part, or with ``distilled`` the ``zipnerf-distilled`` one (see the module docstring)."""
    from eugen_nerf.bench.browser import served_page
    from eugen_nerf.eval.runs import final_rgb, ground_truth, load_run
    from eugen_nerf.export import format as fmt
    from eugen_nerf.export.field import load_export
    from eugen_nerf.export.render import Sampling, render_view

    stem = "zipnerf_distilled" if distilled else "zipnerf"
    root = args.work_dir / stem
    views = args.distilled_views if distilled else args.views
    if not distilled:
        runs = trained_pair(args.zipnerf_scene.resolve(), args.zipnerf_steps, root)
    else:
        runs = {
            "dense": run_config(args.zipnerf_teacher),
            # not scored by eugen-distill: the part scores it
            "eugen": run_config(distilled_once(args.zipnerf_teacher, root / "student", evaluate=False)),
        }
    results = Results(args.output / f"{stem}.json")
    data = results.data
    data["command"] = command_line()
    exports, halves, truth = {}, {}, None
    camera, samples = args.camera, args.samples
    for name, method in METHODS.items():
        exports[name] = exported(runs[name], root / "exports" / method)
        halves[name] = exported(runs[name], root / "exports" / f"{method}-f16", "float16")
    page = data.setdefault("browser", {})
    frames = page.setdefault("frames", {})
    for name in forget_other_exports(data, exports, also=(page, frames)):
        print(f"zipnerf: {name} was exported again since it was measured: measuring it again", flush=True)
    for name, method in METHODS.items():
        entry = data.setdefault(name, {})
        if "min_reference_vs_nerfstudio_db" not in entry:
            measure_reference(entry, runs[name], exports[name], samples, views, results.save)
            entry["export_bytes_float16"] = (halves[name] / fmt.FILE_NAME).stat().st_size
            results.save()
        run = load_run(runs[name], device="cpu")
        field = load_export(exports[name], device="cpu")
        cameras = run.pipeline.datamanager.eval_dataset.cameras
        nerfstudio = final_rgb(run.model.get_outputs_for_camera(cameras[camera : camera + 1])).clamp(0, 1)
        reference = render_view(field, camera, Sampling(kind="nerfstudio"))
        marched = render_view(field, camera, march(samples))
        truth = ground_truth(run, camera).numpy()
        save_picture([truth, nerfstudio, reference, marched], root / f"views_{method}.png", scale=4)
        if f"{name}_march_vs_nerfstudio_db" not in data:
            data[f"{name}_march_vs_nerfstudio_db"] = psnr(marched, nerfstudio)
            results.save()
        if "march_skipping_vs_plain_db" not in entry:
            plain = render_view(
                field, camera, Sampling(samples=samples, occupancy=False, early_termination=False)
            )
            entry["march_skipping_vs_plain_db"] = psnr(marched, plain)
            results.save()
        if "float16_vs_float32_db" not in entry:
            halved = load_export(halves[name], device="cpu")
            entry["float16_vs_float32_db"] = {
                "march": psnr(render_view(halved, camera, march(samples)), marched),
                "nerfstudio": psnr(render_view(halved, camera, Sampling(kind="nerfstudio")), reference),
            }
            results.save()

    header: dict = {}
    browser_header(header, samples, camera)
    taken_with = {"chromium": header["browser"], "device": header["device"], "settings": header["settings"]}
    size = args.distilled_size if distilled else frame_size(args, truth, args.zipnerf_scene)
    wanted = [
        f"{name}_{size}_{repeat}" for repeat in range(args.zipnerf_repeats) for name in ("eugen", "dense")
    ]
    # frames of another header, or some missing beside frames of an earlier session: all taken again
    changed = any(page.get(key) not in (None, value) for key, value in taken_with.items())
    if changed or any(key not in frames for key in wanted):
        forget_frames(frames, list(frames))
    page.update(taken_with)
    with served_page([exports["eugen"], exports["dense"]]) as (browser, url):
        for repeat in range(args.zipnerf_repeats):
            for field_index, name in enumerate(("eugen", "dense")):
                key = f"{name}_{size}_{repeat}"
                if key in frames:
                    continue
                entry, picture, reference = page_frame(
                    browser, field_index, exports[name], camera, size, samples
                )
                if truth.shape[:2] == picture.shape[:2]:
                    entry["page_vs_truth_db"] = psnr(picture, truth)
                    if repeat == 0:
                        save_picture(
                            [truth, picture, reference], args.output / f"page_{stem}_{name}.png", scale=4
                        )
                elif repeat == 0:
                    save_picture([picture, reference], args.output / f"page_{stem}_{name}.png", scale=4)
                frames[key] = entry
                print(f"page: zipnerf {key} {entry}", flush=True)
                results.save()
        if screenshot_due(args.zipnerf_screenshot, [exports["eugen"], exports["dense"]]):
            page_screenshot(browser, f"{url}?resolution={size}&samples={samples}", args.zipnerf_screenshot)
    # the float16 export in the page (RGBA16F textures), then a larger frame of the EUGen field
    extra = [(f"eugen_float16_{size}", 0, halves["eugen"], size)]
    if args.large_size and not distilled:
        extra.append((f"eugen_{args.large_size}", 1, exports["eugen"], args.large_size))
    if any(key not in frames for key, *_ in extra):
        with served_page([halves["eugen"], exports["eugen"]]) as (browser, _):
            for key, field_index, path, side in extra:
                if key not in frames:
                    entry, picture, _ = page_frame(browser, field_index, path, camera, side, samples)
                    if truth.shape[:2] == picture.shape[:2]:
                        entry["page_vs_truth_db"] = psnr(picture, truth)
                    frames[key] = entry
                    print(f"page: zipnerf {key} {frames[key]}", flush=True)
                    results.save()
    best = {
        name: min(frames[f"{name}_{size}_{r}"]["frame_ms"] for r in range(args.zipnerf_repeats))
        for name in ("eugen", "dense")
    }
    page["dense_over_eugen_frame_time"] = round(best["dense"] / best["eugen"], 3)
    results.save()
    print(f"wrote {results.path}: {page}", flush=True)
    return results
