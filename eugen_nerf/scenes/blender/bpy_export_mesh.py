"""Blender-side export of a built scene's triangles, the ground truth of geometry metrics.

Runs as a second script after ``bpy_render.py`` on a job with no frames (that script builds the scene and
renders nothing): ``blender -b --factory-startup --python bpy_render.py --python bpy_export_mesh.py --
JOB.json``. Writes ``job["export_mesh"]`` (relative to the job's output folder): every mesh object's
evaluated triangles (modifiers applied) in world coordinates as a binary little-endian PLY, skipping the
objects named in ``job["export_exclude"]``. Runs inside Blender's Python (``bpy`` only).
"""

import json
import os
import struct
import sys

import bpy


def export_ply(path, objects):
    depsgraph = bpy.context.evaluated_depsgraph_get()
    vertices, faces = [], []
    for obj in objects:
        evaluated = obj.evaluated_get(depsgraph)
        mesh = evaluated.to_mesh()
        mesh.calc_loop_triangles()
        base = len(vertices)
        vertices.extend(tuple(evaluated.matrix_world @ v.co) for v in mesh.vertices)
        faces.extend(tuple(base + i for i in tri.vertices) for tri in mesh.loop_triangles)
        evaluated.to_mesh_clear()
    header = (
        f"ply\nformat binary_little_endian 1.0\nelement vertex {len(vertices)}\nproperty float x\n"
        f"property float y\nproperty float z\nelement face {len(faces)}\n"
        "property list uchar int vertex_indices\nend_header\n"
    )
    with open(path + ".partial", "wb") as f:
        f.write(header.encode("ascii"))
        f.writelines(struct.pack("<3f", *vertex) for vertex in vertices)
        f.writelines(struct.pack("<B3i", 3, *tri) for tri in faces)
    os.replace(path + ".partial", path)
    print(f"EUGEN-MESH {len(vertices)} {len(faces)} {path}", flush=True)


def main():
    with open(sys.argv[sys.argv.index("--") + 1]) as f:
        job = json.load(f)
    path = os.path.join(job["output"], job["export_mesh"])
    os.makedirs(os.path.dirname(path), exist_ok=True)
    skip = set(job.get("export_exclude", []))
    export_ply(path, [o for o in bpy.context.scene.objects if o.type == "MESH" and o.name not in skip])


main()
