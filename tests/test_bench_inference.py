"""The inference suite's protocol logic: the 800-pixel extrapolation, refusing non-finite timings and
reports, the measuring order and resume, and render memory of an untrained model in a fresh process."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import pytest
import torch
import yaml

from eugen_nerf.bench.merge import refuse_non_finite
from eugen_nerf.bench.suites import inference
from eugen_nerf.eval.memory import build_untrained, render_memory, view_at_size
from eugen_nerf.eval.timing import NonFiniteOutput

SCENE = Path(__file__).resolve().parents[1] / "scenes" / "bunny32"


def test_extrapolation_is_seconds_per_ray_times_the_pixels():
    cell = inference.extrapolate(2.0, 6400, 800, 800)
    assert cell["kind"] == "extrapolated" and cell["rays_timed"] == 6400
    assert cell["seconds_per_ray"] == pytest.approx(2.0 / 6400)
    assert cell["seconds"] == pytest.approx(2.0 / 6400 * 640_000)  # 200 s for the whole view
    assert cell["fps"] == pytest.approx(1 / 200)
    assert inference.extrapolate(1.0, 100, 20, 10)["seconds"] == pytest.approx(2.0)  # width x height
    for seconds, rays in ((float("nan"), 10), (float("inf"), 10), (0.0, 10), (1.0, 0)):
        with pytest.raises(NonFiniteOutput):
            inference.extrapolate(seconds, rays, 800, 800)


class _Runner:
    """Stands in for a variant: its n-th call returns what ``outputs`` holds at n."""

    def __init__(self, outputs):
        self.outputs, self.calls = outputs, 0

    def render(self):
        out = self.outputs[min(self.calls, len(self.outputs) - 1)]
        self.calls += 1
        return out


def test_a_non_finite_timed_output_is_refused_on_any_repeat():
    good = _Runner([torch.zeros(4)])
    late_nan = _Runner([torch.zeros(4), torch.zeros(4), torch.tensor([0.0, float("nan")])])
    seconds = inference.timed({"dense": good}, lambda r: r.render(), "cpu", 0, 3)
    assert set(seconds) == {"dense"} and seconds["dense"] >= 0
    with pytest.raises(NonFiniteOutput, match="eugen_fused"):
        inference.timed({"dense": good, "eugen_fused": late_nan}, lambda r: r.render(), "cpu", 0, 3)


def test_a_report_with_a_non_finite_figure_is_refused():
    report = {"devices": {"cpu": {"nerf": {"variants": {"dense": {"render": {"400": {"fps": 0.1}}}}}}}}
    refuse_non_finite(report)
    report["devices"]["cpu"]["nerf"]["variants"]["dense"]["render"]["400"]["fps"] = math.inf
    with pytest.raises(NonFiniteOutput, match=r"devices\.cpu\.nerf\.variants\.dense\.render\.400\.fps"):
        refuse_non_finite(report)
    with pytest.raises(NonFiniteOutput, match=r"sizes\[1\]"):
        refuse_non_finite({"sizes": [1.0, float("nan")]})


def _args(**overrides) -> inference.BenchInference:
    return inference.BenchInference(**{"families": ["nerf", "zipnerf"], "sizes": [200, 400], **overrides})


def test_every_head_is_measured_at_the_smaller_size_before_the_larger():
    order = inference.tasks(_args())
    renders = [(size, head) for task, size, head, _ in order if task == "render"]
    assert renders == [(200, "nerf"), (200, "zipnerf"), (400, "nerf"), (400, "zipnerf")]
    memory = [(size, head, name) for task, size, head, name in order if task == "memory"]
    # the goal's pair (dense, EUGen fused) of every head at a size first, then the other variants' memory
    assert memory[:4] == [(200, h, n) for h in ("nerf", "zipnerf") for n in ("dense", "eugen_fused")]
    others = {(200, h, n) for h in ("nerf", "zipnerf") for n in ("eugen_unfused", "narrowed_dense")}
    assert set(memory[4:8]) == others
    # then that size's renders, and only then the next size
    assert order.index(("render", 200, "nerf", None)) > order.index(
        ("memory", 200, "zipnerf", "narrowed_dense")
    )
    assert order.index(("memory", 400, "nerf", "dense")) > order.index(("render", 200, "zipnerf", None))
    assert len(memory) == 2 * 2 * 4 and len(set(order)) == len(order)  # sizes x heads x variants, once each


def test_once_the_ray_batches_are_in_the_quickest_renders_come_first_within_each_group():
    def head(seconds_per_ray: float) -> dict:
        names = ("dense", "eugen_fused", "eugen_unfused", "narrowed_dense")
        return {"variants": {n: {"render": {"800": {"seconds_per_ray": seconds_per_ray}}} for n in names}}

    heads = {"nerf": head(3e-3), "zipnerf": head(1e-3)}
    order = inference.tasks(_args(), heads)
    assert order[:4] == [("memory", 200, h, n) for h in ("zipnerf", "nerf") for n in ("dense", "eugen_fused")]
    renders = [(size, h) for task, size, h, _ in order if task == "render"]
    assert renders == [(200, "zipnerf"), (200, "nerf"), (400, "zipnerf"), (400, "nerf")]
    assert sorted(order) == sorted(inference.tasks(_args()))  # the same tasks, in another order
    heads["nerf"]["variants"]["eugen_unfused"]["render"]["800"]["seconds_per_ray"] = 1e-4
    others = [(h, n) for task, size, h, n in order if task == "memory" and size == 200][4:]
    assert others[0] != ("nerf", "eugen_unfused")  # ... until the batches say otherwise
    others = [
        (h, n) for task, size, h, n in inference.tasks(_args(), heads) if task == "memory" and size == 200
    ]
    assert others[4] == ("nerf", "eugen_unfused")


def test_a_rerun_continues_only_a_report_of_the_same_setting(tmp_path):
    out = tmp_path / "inference.json"
    setting = inference.setting_of(_args())
    heads = {"cpu": {"nerf": {"variants": {}}}}
    out.write_text(json.dumps({"setting": setting, "devices": heads}))
    assert inference.earlier_heads(out, inference.setting_of(_args())) == heads
    assert inference.earlier_heads(out, inference.setting_of(_args(sizes=[200]))) == {}
    assert inference.earlier_heads(out, inference.setting_of(_args(scene=Path("scenes/other")))) == {}
    assert inference.earlier_heads(tmp_path / "absent.json", setting) == {}


def test_a_report_timed_with_the_other_clock_keeps_its_memory_and_is_timed_again(tmp_path):
    out = tmp_path / "inference.json"
    wall = inference.setting_of(_args(clock="wall"))
    out.write_text(json.dumps({"setting": wall, "devices": {"cpu": {"nerf": _head()}}}))
    heads = inference.earlier_heads(out, inference.setting_of(_args(clock="cpu")))
    nerf = heads["cpu"]["nerf"]
    assert not inference.has_speed(nerf)
    for row in nerf["variants"].values():
        assert row["render"] == {} and row["memory"]["200"]["bytes"] == 100_000_000
    # a report written before the clock was part of the setting was timed by the wall clock
    del wall["clock"]
    out.write_text(json.dumps({"setting": wall, "devices": {"cpu": {"nerf": _head()}}}))
    assert not inference.has_speed(inference.earlier_heads(out, inference.setting_of(_args()))["cpu"]["nerf"])
    # any other change of setting still measures everything again
    assert inference.earlier_heads(out, inference.setting_of(_args(sizes=[200]))) == {}


def test_the_cpu_clock_counts_cpu_seconds_not_time_spent_waiting():
    runner = inference.Variant.__new__(inference.Variant)
    waited = inference.timed(
        {"dense": runner}, lambda r: (time.sleep(0.2), torch.ones(1))[1], "cpu", 0, 1, "cpu"
    )
    assert waited["dense"] < 0.1
    walled = inference.timed(
        {"dense": runner}, lambda r: (time.sleep(0.2), torch.ones(1))[1], "cpu", 0, 1, "wall"
    )
    assert walled["dense"] >= 0.2


def test_views_are_rescaled_to_the_width_asked_for():
    _, cameras = build_untrained(_tiny_config(), SCENE)
    view = view_at_size(cameras, 1, 200)
    assert (int(view.width), int(view.height)) == (200, 200) and len(cameras) > 1
    assert float(view.fx) == pytest.approx(float(cameras.fx[1]) * 200 / 32)
    assert float(view.cx) == pytest.approx(float(cameras.cx[1]) * 200 / 32)
    assert int(cameras.width[1]) == 32  # the scene's cameras are left as they were
    with pytest.raises(ValueError, match="at least 1 pixel"):
        view_at_size(cameras, 0, 0)


def _tiny_config():
    config = inference.family_configs("nerf", full_size=False)["dense"]
    config.pipeline.model.num_coarse_samples = config.pipeline.model.num_importance_samples = 4
    return config


@pytest.mark.slow  # two fresh processes, each importing nerfstudio
def test_render_memory_of_an_untrained_model_in_a_fresh_process(tmp_path):
    path = tmp_path / "config.yml"
    path.write_text(yaml.dump(_tiny_config()))
    measured = render_memory(path, 0, size=8, scene=SCENE, device="cpu", timeout=600)
    assert measured["render_memory_kind"] == "rss_delta_fresh_process"
    assert isinstance(measured["render_memory_bytes"], int) and measured["render_memory_bytes"] >= 0
    assert measured["resolution"] == [8, 8]
    with pytest.raises(RuntimeError, match="test view 99 does not exist"):
        render_memory(path, 99, size=8, scene=SCENE, device="cpu", timeout=600)


def _row(fps_200: float, per_ray: float, memory: int | None) -> dict:
    render = {
        "800": {**inference.extrapolate(per_ray * 6400, 6400, 800, 800), "speedup": 1.0},
        "200": {"kind": "measured", "resolution": [200, 200], "fps": fps_200, "speedup": 1.0},
    }
    return {
        "field_speedup": 1.0,
        "render": render,
        **({"memory": {"200": {"bytes": memory}}} if memory else {}),
    }


def test_memory_ratios_goals_and_completeness_come_from_the_measurements():
    args = _args(families=["nerf"], sizes=[200])
    entry = {"variants": {"dense": _row(1.0, 1e-5, 100_000_000), "eugen_fused": _row(2.0, 5e-6, 70_000_000)}}
    entry["variants"]["eugen_fused"]["render"]["200"]["speedup"] = 2.0
    entry["variants"]["eugen_unfused"] = _row(1.2, 8e-6, None)
    inference.finish_head("nerf", entry, args)
    fused = entry["variants"]["eugen_fused"]
    assert fused["memory"]["200"]["ratio_to_dense"] == pytest.approx(0.7)
    assert fused["memory"]["200"]["megabytes"] == pytest.approx(70.0)
    assert fused["render"]["200"]["fps_predicted_from_rays"] == pytest.approx(1 / (5e-6 * 40_000))
    goals = entry["goals"]
    assert goals["render_memory_ratio"] == {
        "goal": 0.8,
        "measured": pytest.approx(0.7),
        "met": True,
        "size": 200,
    }
    assert goals["render_speedup"]["measured"] == 2.0 and goals["render_speedup"]["met"]
    assert not entry["complete"]  # EUGen unfused's memory is missing
    entry["variants"]["eugen_unfused"]["memory"] = {"200": {"bytes": 90_000_000}}
    entry["variants"]["narrowed_dense"] = _row(1.5, 7e-6, 80_000_000)
    inference.finish_head("nerf", entry, args)
    assert entry["complete"]


def test_render_memory_builds_the_merged_forms_before_it_measures() -> None:
    """Merging is done once per model, as loading is: a render-memory measurement must not count it."""
    from eugen_nerf.eval.memory import prepare_fused_forms
    from eugen_nerf.layers import EUGenMLP

    model = torch.nn.Sequential(EUGenMLP(in_dim=8, num_layers=3, layer_width=32, out_dim=3, eugen_layers=[1]))
    model.eval()
    mlp = model[0]
    assert mlp.has_eugen and mlp._fused is None
    prepare_fused_forms(model)
    assert mlp._fused is not None
    built = mlp._fused
    with torch.no_grad():
        model(torch.randn(4, 8))
    assert mlp._fused is built  # the render reuses it: nothing is merged inside the measured region


def _head() -> dict:
    """A head measured at 200 px and at the 800 px extrapolation, with memory, for the --forget tests."""
    rows = {name: _row(1.0, 1e-5, 100_000_000) for name in ("dense", "eugen_fused")}
    for row in rows.values():
        row.update({key: 1.0 for key in inference.SPEED_FIGURES})
    return {"max_abs_rgb_diff_fused": 0.0, "variants": rows, "ceiling": {"field_speedup": 2.0}}


def test_forget_removes_only_the_named_part_of_the_named_head():
    heads = {"nerf": _head(), "zipnerf": _head()}
    removed = inference.forget(heads, inference.parse_forget(["nerf/speed", "zipnerf/memory"]), 800)
    assert removed == ["nerf/speed", "zipnerf/memory"]
    nerf, zipnerf = heads["nerf"], heads["zipnerf"]
    assert not inference.has_speed(nerf) and inference.has_speed(zipnerf)
    for row in nerf["variants"].values():
        assert set(row["render"]) == {"200"} and "memory" in row  # the whole-view render and memory stay
        assert not set(inference.SPEED_FIGURES) & set(row)
    assert "max_abs_rgb_diff_fused" not in nerf and "ceiling" not in nerf
    for row in zipnerf["variants"].values():
        assert "memory" not in row and set(row["render"]) == {"200", "800"}
    inference.forget(heads, inference.parse_forget(["zipnerf/renders"]), 800)
    assert all(set(row["render"]) == {"800"} for row in zipnerf["variants"].values())
    assert inference.forget(heads, [("siren", "speed")], 800) == []  # a head not measured: nothing


@pytest.mark.parametrize("item", ["nerf", "nerf/fps", "hashgrid/speed", "/memory"])
def test_forget_refuses_what_it_does_not_know(item):
    with pytest.raises(ValueError, match=f"--forget {item}: give HEAD/PART"):
        inference.parse_forget([item])


def test_a_head_measured_again_keeps_its_renders_and_memory_and_its_goals_follow():
    args = _args(families=["nerf"], sizes=[200])
    heads = {"nerf": _head()}
    inference.forget(heads, [("nerf", "speed")], 800)
    inference.finish_head("nerf", heads["nerf"], args)  # a report without the timings is still written
    assert heads["nerf"]["goals"]["render_speedup_extrapolated"]["measured"] is None
    assert not heads["nerf"]["complete"]
    fresh = _head()
    for row in fresh["variants"].values():
        del row["memory"], row["render"]["200"]
    fresh["variants"]["eugen_fused"]["render"]["800"]["speedup"] = 1.9
    assert not inference.has_speed({"variants": fresh["variants"]}), "timed without the ceiling: incomplete"
    entry = inference.with_speed(heads["nerf"], fresh, "eugen-bench inference")
    assert inference.has_speed(entry) and entry["command"] == "eugen-bench inference"
    fused = entry["variants"]["eugen_fused"]
    assert set(fused["render"]) == {"200", "800"} and fused["memory"]["200"]["bytes"] == 100_000_000
    inference.finish_head("nerf", entry, args)
    assert entry["goals"]["render_speedup_extrapolated"]["measured"] == 1.9
    assert entry["complete"]


def test_live_tensors_count_what_is_alive_at_the_peak_exactly():
    from eugen_nerf.eval.memory import LiveTensors

    x = torch.randn(1000, 8)  # made before: not counted
    with torch.no_grad(), LiveTensors() as live:
        a = x @ torch.ones(8, 100)  # 100 columns (the ones are freed with the statement)
        b = a.relu_()  # in place: nothing new
        c = torch.cat([b, b], dim=1)  # 200 columns: the peak, a and c
        del a, b
        d = c[:, :10].sum(dim=1)  # a view, then 1 column
        del c
        e = d * 2  # 1 more column
    row = 1000 * 4
    assert live.peak == 300 * row
    assert sorted(live.at_peak.values()) == [100 * row, 200 * row]
    assert any(
        what.startswith("cat @ tests/test_bench_inference.py:") and "(1000, 200)" in what
        for what in live.at_peak
    )
    assert live.current == 2 * row and e.shape == (1000,)  # d and e are alive, nothing else


def test_the_nerf_head_renders_merged_fused_and_layer_by_layer_unfused() -> None:
    """``eugen-nerf`` trains its trunk merged: its fused variant is that merged trunk (its MACs counted), and
    its unfused variant the same layers trained apart, run layer by layer, whose fused render it equals."""
    from eugen_nerf.layers import MergedMLP

    args = inference.BenchInference(scene=SCENE, families=["nerf"])
    head = inference.Head("nerf", args, "cpu")
    fused, unfused = head.runners["eugen_fused"], head.runners["eugen_unfused"]
    assert any(isinstance(m, MergedMLP) for m in fused.model.modules())
    assert not any(isinstance(m, MergedMLP) for m in unfused.model.modules())
    assert unfused.model is head.layered and not unfused.fused
    dense_macs = inference.mlp_macs(head.models["dense"], fused=False)
    merged_macs = inference.mlp_macs(fused.model, fused=True)
    assert merged_macs < dense_macs / 2  # the trunk's merged form is counted, not left out
    assert inference.mlp_macs(unfused.model, fused=True) == merged_macs  # the same shapes merged
    assert inference.mlp_macs(unfused.model, fused=False) > dense_macs  # A and G, layer by layer
    view = view_at_size(head.cameras, 0, 8)
    with torch.no_grad():
        a = inference.Variant(head.layered, fused=True).render(view)
        b = inference.Variant(head.layered, fused=False).render(view)
    assert torch.allclose(a, b, atol=1e-5)


@pytest.mark.parametrize("family", ["nerf", "zipnerf", "nerfacto", "siren"])
def test_every_heads_unfused_configuration_builds_and_runs_layer_by_layer(family) -> None:
    """Render memory builds each variant from its configuration in a fresh process: the unfused one must be
    a configuration the method accepts (SIREN's trunk takes its own spec, not ``eugen``) whose EUGen MLPs
    stay layer by layer in eval mode, while the fused one merges them."""
    from eugen_nerf.layers import EUGenMLP

    configs = inference.variant_configs(family, full_size=False)
    built = {}
    for name in ("eugen_fused", "eugen_unfused"):
        model, _ = build_untrained(configs[name], SCENE)
        built[name] = [m for m in model.modules() if isinstance(m, EUGenMLP) and m.has_eugen]
    assert not inference.layer_spec(configs["eugen_unfused"]).fused_inference
    assert built["eugen_unfused"] and not any(m.runs_fused for m in built["eugen_unfused"])
    assert all(m.runs_fused for m in built["eugen_fused"])


def test_the_ceiling_frees_the_eugen_mlps_of_the_dense_twin_only_during_its_calls() -> None:
    """The speed-up ceiling is the dense twin with the MLPs EUGen replaces (Zip-NeRF: the view MLP) returning
    zeros: its renders differ only while it runs, and the model is left as it was."""
    args = inference.BenchInference(scene=SCENE, families=["zipnerf"])
    head = inference.Head("zipnerf", args, "cpu")
    paths = inference.eugen_mlp_paths(head.models["eugen_fused"])
    assert paths == ["field.view_mlp"]
    dense = head.models["dense"]
    ceiling = inference.WithoutMLPs(dense, paths)
    view = view_at_size(head.cameras, 0, 8)
    bundle = inference.middle_rows(view, 2)
    with torch.no_grad():
        before = inference.Variant(dense, fused=True).rays(bundle)
        free = ceiling.rays(bundle)
        after = inference.Variant(dense, fused=True).rays(bundle)
    assert torch.equal(before, after), "the MLPs are back once the call returns"
    assert not torch.allclose(free, before)
    assert torch.isfinite(free).all() and "forward" not in vars(dense.field.view_mlp)
