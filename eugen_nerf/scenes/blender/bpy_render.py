"""Blender-side renderer: ``blender -b --factory-startup --python bpy_render.py -- JOB.json``.

Runs inside Blender's own Python (``bpy``, ``mathutils``; no numpy, nothing of eugen_nerf), so it is shipped
as package data and never imported by the package. It builds the scene the job describes (see
``eugen_nerf/scenes/blender/spec.py`` for the format), then renders every listed frame that is not on disk
yet: each frame is written under a temporary name and renamed, so an interrupted run resumes where it
stopped. One line per frame on stdout (``EUGEN-FRAME done|skip INDEX COUNT SECONDS PATH``) drives the
caller's progress bar.
"""

import json
import math
import os
import struct
import sys
import time

import bpy
import mathutils

# ----------------------------------------------------------------------------------------------- textures


def _node(tree, kind, **inputs):
    node = tree.nodes.new(kind)
    for name, value in inputs.items():
        node.inputs[name].default_value = value
    return node


def _rgba(color):
    return (*color[:3], 1.0)


def _coordinates(tree, spec):
    """Texture coordinates: 'uv', 'generated' (object bounding box) or 'object' (object space)."""
    coords = tree.nodes.new("ShaderNodeTexCoord")
    space = spec.get("coordinates", "object")
    socket = {"uv": "UV", "generated": "Generated", "object": "Object", "world": "Generated"}[space]
    mapping = tree.nodes.new("ShaderNodeMapping")
    mapping.inputs["Scale"].default_value = spec.get("stretch", (1.0, 1.0, 1.0))
    mapping.inputs["Rotation"].default_value = spec.get("rotation", (0.0, 0.0, 0.0))
    tree.links.new(coords.outputs[socket], mapping.inputs["Vector"])
    return mapping.outputs["Vector"]


def texture(tree, spec, base_dir):
    """A colour socket for a texture description (or a constant colour given as [r, g, b])."""
    if isinstance(spec, (list, tuple)):
        rgb = _node(tree, "ShaderNodeRGB")
        rgb.outputs[0].default_value = _rgba(spec)
        return rgb.outputs[0]
    kind = spec["kind"]
    vector = _coordinates(tree, spec)
    color1 = texture(tree, spec.get("color1", (0.8, 0.8, 0.8)), base_dir)
    color2 = texture(tree, spec.get("color2", (0.1, 0.1, 0.1)), base_dir)
    scale = spec.get("scale", 5.0)
    if kind == "image":
        node = tree.nodes.new("ShaderNodeTexImage")
        node.image = bpy.data.images.load(os.path.join(base_dir, spec["path"]))
        node.image.colorspace_settings.name = "sRGB"
        node.interpolation = "Cubic"
        node.projection = spec.get("projection", "FLAT")
        tree.links.new(vector, node.inputs["Vector"])
        if "tint" not in spec:
            return node.outputs["Color"]
        tint = tree.nodes.new("ShaderNodeMixRGB")
        tint.blend_type = "MULTIPLY"
        tint.inputs["Fac"].default_value = 1.0
        tree.links.new(node.outputs["Color"], tint.inputs["Color1"])
        tree.links.new(texture(tree, spec["tint"], base_dir), tint.inputs["Color2"])
        return tint.outputs["Color"]
    if kind == "checker":
        node = _node(tree, "ShaderNodeTexChecker", Scale=scale)
        tree.links.new(vector, node.inputs["Vector"])
        tree.links.new(color1, node.inputs["Color1"])
        tree.links.new(color2, node.inputs["Color2"])
        return node.outputs["Color"]
    if kind == "brick":
        node = _node(tree, "ShaderNodeTexBrick", Scale=scale, **{"Mortar Size": spec.get("mortar", 0.02)})
        node.inputs["Mortar"].default_value = _rgba(spec.get("mortar_color", (0.9, 0.9, 0.85)))
        node.offset = spec.get("offset", 0.5)
        tree.links.new(vector, node.inputs["Vector"])
        tree.links.new(color1, node.inputs["Color1"])
        tree.links.new(color2, node.inputs["Color2"])
        return node.outputs["Color"]
    # scalar patterns mixed between two colours
    if kind == "noise":
        node = _node(tree, "ShaderNodeTexNoise", Scale=scale, Detail=spec.get("detail", 4.0))
        node.inputs["Roughness"].default_value = spec.get("roughness", 0.5)
        factor = node.outputs["Fac"]
    elif kind == "voronoi":
        node = _node(tree, "ShaderNodeTexVoronoi", Scale=scale)
        node.feature = spec.get("feature", "F1")
        node.distance = spec.get("distance", "EUCLIDEAN")
        factor = node.outputs["Distance"]
    elif kind == "wave":
        node = _node(tree, "ShaderNodeTexWave", Scale=scale, Distortion=spec.get("distortion", 0.0))
        node.wave_type = spec.get("wave_type", "BANDS")
        node.bands_direction = spec.get("direction", "X")
        node.inputs["Detail"].default_value = spec.get("detail", 0.0)
        factor = node.outputs["Fac"]
    elif kind == "magic":
        node = _node(tree, "ShaderNodeTexMagic", Scale=scale, Distortion=spec.get("distortion", 1.0))
        node.turbulence_depth = spec.get("depth", 2)
        factor = node.outputs["Fac"]
    elif kind == "gradient":
        node = tree.nodes.new("ShaderNodeTexGradient")
        node.gradient_type = spec.get("gradient", "LINEAR")
        factor = node.outputs["Fac"]
    else:
        raise ValueError(f"unknown texture kind {kind!r}")
    tree.links.new(vector, node.inputs["Vector"])
    ramp = tree.nodes.new("ShaderNodeMapRange")
    low, high = spec.get("range", (0.0, 1.0))
    ramp.inputs["From Min"].default_value = low
    ramp.inputs["From Max"].default_value = high
    ramp.clamp = True
    tree.links.new(factor, ramp.inputs["Value"])
    mix = tree.nodes.new("ShaderNodeMixRGB")
    tree.links.new(ramp.outputs["Result"], mix.inputs["Fac"])
    tree.links.new(color2, mix.inputs["Color1"])
    tree.links.new(color1, mix.inputs["Color2"])
    return mix.outputs["Color"]


def _scalar(tree, value, base_dir):
    """A float socket value or a texture whose luminance is used (e.g. a roughness map)."""
    if isinstance(value, (int, float)):
        return value
    bw = tree.nodes.new("ShaderNodeRGBToBW")
    tree.links.new(texture(tree, value, base_dir), bw.inputs["Color"])
    return bw.outputs["Val"]


# ---------------------------------------------------------------------------------------------- materials

PRINCIPLED_KEYS = {
    "metallic": "Metallic",
    "roughness": "Roughness",
    "specular": "Specular",
    "clearcoat": "Clearcoat",
    "clearcoat_roughness": "Clearcoat Roughness",
    "sheen": "Sheen",
    "anisotropic": "Anisotropic",
}


def material(name, spec, base_dir):
    """A Principled BSDF material: colour (constant or texture), scalars (constant or texture), bump."""
    mat = bpy.data.materials.new(name)
    mat.use_nodes = True
    tree = mat.node_tree
    bsdf = tree.nodes["Principled BSDF"]
    tree.links.new(texture(tree, spec.get("color", (0.8, 0.8, 0.8)), base_dir), bsdf.inputs["Base Color"])
    for key, socket in PRINCIPLED_KEYS.items():
        if key in spec:
            value = _scalar(tree, spec[key], base_dir)
            if isinstance(value, (int, float)):
                bsdf.inputs[socket].default_value = value
            else:
                tree.links.new(value, bsdf.inputs[socket])
    if "emission" in spec:
        tree.links.new(texture(tree, spec["emission"], base_dir), bsdf.inputs["Emission"])
        bsdf.inputs["Emission Strength"].default_value = spec.get("emission_strength", 1.0)
    if "bump" in spec:
        bump = _node(tree, "ShaderNodeBump", Strength=spec["bump"].get("strength", 0.3))
        bump.inputs["Distance"].default_value = spec["bump"].get("distance", 0.02)
        height = tree.nodes.new("ShaderNodeRGBToBW")
        tree.links.new(texture(tree, spec["bump"]["texture"], base_dir), height.inputs["Color"])
        tree.links.new(height.outputs["Val"], bump.inputs["Height"])
        tree.links.new(bump.outputs["Normal"], bsdf.inputs["Normal"])
    return mat


# ------------------------------------------------------------------------------------------------- objects


def _primitive(spec, base_dir):
    shape = spec["shape"]
    ops = bpy.ops.mesh
    if shape == "uv_sphere":
        ops.primitive_uv_sphere_add(segments=spec.get("segments", 64), ring_count=spec.get("rings", 32))
    elif shape == "ico_sphere":
        ops.primitive_ico_sphere_add(subdivisions=spec.get("subdivisions", 3))
    elif shape == "cube":
        ops.primitive_cube_add()
    elif shape == "cylinder":
        ops.primitive_cylinder_add(vertices=spec.get("segments", 64))
    elif shape == "cone":
        ops.primitive_cone_add(vertices=spec.get("segments", 64), radius2=spec.get("radius_top", 0.0))
    elif shape == "torus":
        ops.primitive_torus_add(
            major_segments=spec.get("segments", 96),
            minor_segments=spec.get("minor_segments", 32),
            major_radius=spec.get("major_radius", 1.0),
            minor_radius=spec.get("minor_radius", 0.25),
        )
    elif shape == "plane":
        ops.primitive_plane_add()
    elif shape == "ply":
        bpy.ops.import_mesh.ply(filepath=os.path.join(base_dir, spec["path"]))
    else:
        raise ValueError(f"unknown shape {shape!r}")
    return bpy.context.active_object


def add_object(spec, materials, base_dir):
    obj = _primitive(spec, base_dir)
    obj.name = spec.get("name", obj.name)
    obj.location = spec.get("location", (0.0, 0.0, 0.0))
    obj.rotation_euler = [math.radians(a) for a in spec.get("rotation", (0.0, 0.0, 0.0))]
    obj.scale = spec.get("scale", (1.0, 1.0, 1.0))
    for modifier in spec.get("modifiers", []):
        kind = modifier["kind"]
        if kind == "wireframe":
            mod = obj.modifiers.new("wireframe", "WIREFRAME")
            mod.thickness = modifier["thickness"]
            mod.use_even_offset = True
            mod.use_replace = True
        elif kind == "subsurf":
            mod = obj.modifiers.new("subsurf", "SUBSURF")
            mod.levels = mod.render_levels = modifier.get("levels", 2)
        elif kind == "bevel":
            mod = obj.modifiers.new("bevel", "BEVEL")
            mod.width = modifier.get("width", 0.02)
            mod.segments = modifier.get("segments", 3)
        elif kind == "solidify":
            mod = obj.modifiers.new("solidify", "SOLIDIFY")
            mod.thickness = modifier.get("thickness", 0.02)
        else:
            raise ValueError(f"unknown modifier {kind!r}")
    if spec.get("smooth", True):
        for polygon in obj.data.polygons:
            polygon.use_smooth = True
        if hasattr(obj.data, "use_auto_smooth"):
            obj.data.use_auto_smooth = spec.get("auto_smooth", False)
            obj.data.auto_smooth_angle = math.radians(40.0)
    if "material" in spec:
        obj.data.materials.clear()
        obj.data.materials.append(materials[spec["material"]])
    return obj


def add_light(spec):
    kind = spec["kind"]
    data = bpy.data.lights.new(spec.get("name", kind.lower()), kind)
    data.energy = spec["strength"]
    data.color = spec.get("color", (1.0, 1.0, 1.0))
    if kind == "SUN":
        data.angle = math.radians(spec.get("angle", 2.0))
    elif kind == "AREA":
        data.size = spec.get("size", 1.0)
    elif kind in ("POINT", "SPOT"):
        data.shadow_soft_size = spec.get("radius", 0.1)
    obj = bpy.data.objects.new(data.name, data)
    bpy.context.scene.collection.objects.link(obj)
    obj.location = spec.get("location", (0.0, 0.0, 5.0))
    obj.rotation_euler = [math.radians(a) for a in spec.get("rotation", (0.0, 0.0, 0.0))]
    return obj


# --------------------------------------------------------------------------------------------------- world


def world(spec, base_dir):
    """The world shader: 'color', 'sky' (Nishita daylight) or 'studio' (a procedural room-like panorama)."""
    w = bpy.data.worlds.new("world")
    w.use_nodes = True
    tree = w.node_tree
    background = tree.nodes["Background"]
    background.inputs["Strength"].default_value = spec.get("strength", 1.0)
    kind = spec["kind"]
    if kind == "color":
        background.inputs["Color"].default_value = _rgba(spec["color"])
    elif kind == "sky":
        sky = tree.nodes.new("ShaderNodeTexSky")
        sky.sky_type = "NISHITA"
        sky.sun_disc = False
        sky.sun_elevation = math.radians(spec.get("sun_elevation", 35.0))
        sky.sun_rotation = math.radians(spec.get("sun_rotation", 40.0))
        sky.air_density = spec.get("air", 1.0)
        sky.dust_density = spec.get("dust", 1.0)
        tree.links.new(sky.outputs["Color"], background.inputs["Color"])
    elif kind == "studio":
        # A panorama with detail everywhere a reflection can look: a sky gradient above, a tiled floor
        # below and walls of coloured panels with bright window strips around the horizon.
        coords = tree.nodes.new("ShaderNodeTexCoord")
        direction = coords.outputs["Generated"]
        split = tree.nodes.new("ShaderNodeSeparateXYZ")
        tree.links.new(direction, split.inputs["Vector"])
        sky = texture(tree, spec["sky"], base_dir)
        floor = texture(tree, spec["floor"], base_dir)
        walls = texture(tree, spec["walls"], base_dir)

        # walls between z = -0.1 and z = 0.5 (directions), floor below, sky above
        def band(low, high):
            ramp = tree.nodes.new("ShaderNodeMapRange")
            ramp.inputs["From Min"].default_value = low
            ramp.inputs["From Max"].default_value = high
            ramp.clamp = True
            tree.links.new(split.outputs["Z"], ramp.inputs["Value"])
            return ramp.outputs["Result"]

        lower = tree.nodes.new("ShaderNodeMixRGB")
        tree.links.new(band(-0.12, -0.08), lower.inputs["Fac"])
        tree.links.new(floor, lower.inputs["Color1"])
        tree.links.new(walls, lower.inputs["Color2"])
        upper = tree.nodes.new("ShaderNodeMixRGB")
        tree.links.new(band(0.48, 0.52), upper.inputs["Fac"])
        tree.links.new(lower.outputs["Color"], upper.inputs["Color1"])
        tree.links.new(sky, upper.inputs["Color2"])
        tree.links.new(upper.outputs["Color"], background.inputs["Color"])
    else:
        raise ValueError(f"unknown world kind {kind!r}")
    bpy.context.scene.world = w


# -------------------------------------------------------------------------------------------------- render


def configure(render, seed):
    scene = bpy.context.scene
    scene.render.engine = "CYCLES"
    cycles = scene.cycles
    cycles.device = "CPU"
    cycles.samples = render["samples"]
    cycles.use_adaptive_sampling = render.get("adaptive_threshold", 0.0) > 0.0
    cycles.adaptive_threshold = render.get("adaptive_threshold", 0.01)
    cycles.adaptive_min_samples = render.get("adaptive_min_samples", 0)
    cycles.use_denoising = False
    cycles.seed = seed
    cycles.use_animated_seed = False
    cycles.max_bounces = render.get("max_bounces", 8)
    cycles.diffuse_bounces = render.get("diffuse_bounces", 3)
    cycles.glossy_bounces = render.get("glossy_bounces", 4)
    cycles.transmission_bounces = render.get("transmission_bounces", 4)
    cycles.transparent_max_bounces = 8
    cycles.caustics_reflective = False
    cycles.caustics_refractive = False
    cycles.sample_clamp_indirect = render.get("clamp_indirect", 5.0)
    cycles.pixel_filter_type = "BLACKMAN_HARRIS"
    cycles.filter_width = render.get("filter_width", 1.5)
    scene.render.resolution_x = render["width"]
    scene.render.resolution_y = render["height"]
    scene.render.resolution_percentage = 100
    scene.render.film_transparent = render["transparent"]
    scene.render.use_file_extension = False
    scene.render.use_compositing = bool(render.get("depth"))
    scene.render.use_sequencer = False
    scene.render.use_persistent_data = True  # keep the BVH and shaders between frames
    scene.view_settings.view_transform = "Standard"
    scene.view_settings.look = "None"
    scene.view_settings.exposure = render.get("exposure", 0.0)
    scene.view_settings.gamma = 1.0
    scene.display_settings.display_device = "sRGB"
    image = scene.render.image_settings
    fmt = render["format"]
    if fmt == "JPEG":
        image.file_format = "JPEG"
        image.color_mode = "RGB"
        image.quality = render.get("jpeg_quality", 95)
    else:
        image.file_format = "PNG"
        image.color_mode = "RGBA" if render["transparent"] else "RGB"
        image.color_depth = "8"
        image.compression = 90
    if render.get("depth"):
        scene.view_layers[0].use_pass_z = True
        scene.use_nodes = True
        tree = scene.node_tree
        for node in list(tree.nodes):
            tree.nodes.remove(node)
        layers = tree.nodes.new("CompositorNodeRLayers")
        composite = tree.nodes.new("CompositorNodeComposite")
        tree.links.new(layers.outputs["Image"], composite.inputs["Image"])
        output = tree.nodes.new("CompositorNodeOutputFile")
        output.name = "depth"
        output.format.file_format = "OPEN_EXR"
        output.format.color_mode = "RGB"
        output.format.color_depth = "32"
        output.format.exr_codec = "ZIP"
        tree.links.new(layers.outputs["Depth"], output.inputs[0])


def write_npy(path, width, height, values):
    """A float32 (height, width) .npy file written without numpy."""
    header = f"{{'descr': '<f4', 'fortran_order': False, 'shape': ({height}, {width}), }}"
    header = header + " " * (63 - (len(header) + 10) % 64) + "\n"
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode("latin1"))
        f.write(struct.pack(f"<{len(values)}f", *values))


def depth_output(folder):
    """Point the compositor's depth output at ``folder`` (it writes the EXR ``depth0001`` there)."""
    output = bpy.context.scene.node_tree.nodes["depth"]
    output.base_path = folder
    output.file_slots[0].path = "depth"
    # no extension: use_file_extension is off
    return os.path.join(folder, f"depth{bpy.context.scene.frame_current:04d}")


def save_depth(exr, path, width, height):
    """Cycles' Z pass (distance along the camera's viewing axis) as a .npy, top row first, 0 = no hit."""
    image = bpy.data.images.load(exr)
    pixels = [0.0] * (width * height * 4)
    image.pixels.foreach_get(pixels)
    bpy.data.images.remove(image)
    os.remove(exr)
    depth = pixels[0::4]
    rows = [depth[y * width : (y + 1) * width] for y in range(height)]
    values = [v if v < 1e9 else 0.0 for row in reversed(rows) for v in row]
    write_npy(path, width, height, values)


def camera(angle_x):
    data = bpy.data.cameras.new("camera")
    data.sensor_fit = "HORIZONTAL"
    data.angle_x = angle_x
    data.clip_start = 0.05
    data.clip_end = 1000.0
    obj = bpy.data.objects.new("camera", data)
    bpy.context.scene.collection.objects.link(obj)
    bpy.context.scene.camera = obj
    return obj


def main():
    job_path = sys.argv[sys.argv.index("--") + 1]
    with open(job_path) as f:
        job = json.load(f)
    base_dir = os.path.dirname(os.path.abspath(job_path))
    out_dir = job["output"]
    bpy.ops.wm.read_factory_settings(use_empty=True)
    scene = bpy.context.scene
    spec = job["scene"]
    render = job["render"]
    configure(render, job["sampling_seed"])
    world(spec["world"], base_dir)
    materials = {name: material(name, m, base_dir) for name, m in spec["materials"].items()}
    for obj in spec["objects"]:
        add_object(obj, materials, base_dir)
    for light in spec.get("lights", []):
        add_light(light)
    cam = camera(job["camera_angle_x"])
    frames = job["frames"]
    suffix = ".jpg" if render["format"] == "JPEG" else ".png"
    for index, frame in enumerate(frames):
        target = os.path.join(out_dir, frame["file_path"] + suffix)
        depth_target = os.path.join(out_dir, frame["depth_path"] + ".npy") if render.get("depth") else None
        if os.path.exists(target) and (depth_target is None or os.path.exists(depth_target)):
            print(f"EUGEN-FRAME skip {index} {len(frames)} 0 {frame['file_path']}", flush=True)
            continue
        start = time.time()
        cam.matrix_world = mathutils.Matrix(frame["transform_matrix"])
        os.makedirs(os.path.dirname(target), exist_ok=True)
        partial = target + ".partial" + suffix
        scene.render.filepath = partial
        if depth_target is not None:
            exr = depth_output(os.path.join(out_dir, ".depth-exr"))
        bpy.ops.render.render(write_still=True)
        if depth_target is not None:
            os.makedirs(os.path.dirname(depth_target), exist_ok=True)
            save_depth(exr, depth_target + ".partial", render["width"], render["height"])
            os.replace(depth_target + ".partial", depth_target)
        os.replace(partial, target)
        print(
            f"EUGEN-FRAME done {index} {len(frames)} {time.time() - start:.2f} {frame['file_path']}",
            flush=True,
        )


main()
