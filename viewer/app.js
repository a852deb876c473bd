// The viewer page: loads one or two exported fields, renders them with field.js's shader, orbit/zoom, test
// cameras, resolution and samples-per-ray controls, a frame-time counter, fields toggled or side by side.
// Frames are drawn in bands of rows across animation frames, so a slow device keeps the page responsive.
// window.eugen exposes renderTest/benchmark for automated checks (tests/test_web_viewer*.py).

import { capabilityProblem, fetchField, FieldError, FieldProgram, parseField } from "./field.js";

const $ = (id) => document.getElementById(id);
const params = new URLSearchParams(location.search);
const BAND_MS = 30; // aim of one band's render time

// two significant figures below 10 fps, so a software renderer's slow frame never reads as "0.00 fps"
const framesPerSecond = (ms) => (ms > 100 ? (1000 / ms).toPrecision(2) : (1000 / ms).toFixed(1));

// Names and header fields come from files and URLs: they go into the page as text, never as markup.
function option(value, text) {
  const element = document.createElement("option");
  element.value = String(value);
  element.textContent = text;
  return element;
}

function appendTerm(list, term, description, bold = false) {
  const dt = document.createElement("dt");
  if (bold) dt.appendChild(document.createElement("b")).textContent = term;
  else dt.textContent = term;
  const dd = document.createElement("dd");
  dd.textContent = description;
  list.append(dt, dd);
}

function showMessage(text) {
  const box = $("message");
  box.textContent = text;
  box.hidden = false;
  $("status").textContent = "error";
}

const VERTEX = `#version 300 es
void main() {
  vec2 p = vec2(float((gl_VertexID & 1) << 2) - 1.0, float((gl_VertexID & 2) << 1) - 1.0);
  gl_Position = vec4(p, 0.0, 1.0);
}`;

class FieldRenderer {
  constructor(canvas, parsed) {
    this.canvas = canvas;
    const gl = canvas.getContext("webgl2", { preserveDrawingBuffer: true, antialias: false, alpha: false });
    const problem = capabilityProblem(gl);
    if (problem) throw new FieldError(problem);
    this.gl = gl;
    this.header = parsed.header;
    const scene = parsed.header.scene;
    const override = Number(params.get("max-texture-size")) || Infinity;
    const limits = { maxTextureSize: Math.min(gl.getParameter(gl.MAX_TEXTURE_SIZE), override) };
    const rendered = parsed.header.occupancy.field; // NeRF's fine field, Zip-NeRF's nerf field
    const field = { ...parsed.header.fields[rendered], head: parsed.header.head, near: scene.near, far: scene.far, background: scene.background, contraction: Boolean(scene.contraction) };
    const { source, atlas, table } = new FieldProgram(field, parsed.buffers).build(limits);
    this.atlasSize = [atlas.width, atlas.height];
    this.program = this.compile(source);
    const float16 = parsed.header.dtype === "float16";
    this.weights = gl.createTexture();
    gl.activeTexture(gl.TEXTURE0);
    gl.bindTexture(gl.TEXTURE_2D, this.weights);
    gl.texParameteri(gl.TEXTURE_2D, gl.TEXTURE_MIN_FILTER, gl.NEAREST);
    gl.texParameteri(gl.TEXTURE_2D, gl.TEXTURE_MAG_FILTER, gl.NEAREST);
    gl.texImage2D(gl.TEXTURE_2D, 0, float16 ? gl.RGBA16F : gl.RGBA32F, atlas.width, atlas.height, 0, gl.RGBA, gl.FLOAT, atlas.data());
    this.table = null;
    if (table) { // Zip-NeRF's hash table: one row per texel
      this.table = gl.createTexture();
      gl.activeTexture(gl.TEXTURE2);
      gl.bindTexture(gl.TEXTURE_2D, this.table);
      gl.texParameteri(gl.TEXTURE_2D, gl.TEXTURE_MIN_FILTER, gl.NEAREST);
      gl.texParameteri(gl.TEXTURE_2D, gl.TEXTURE_MAG_FILTER, gl.NEAREST);
      gl.texImage2D(gl.TEXTURE_2D, 0, float16 ? gl.RGBA16F : gl.RGBA32F, table.width, table.height, 0, gl.RGBA, gl.FLOAT, table.data);
    }
    this.tableSize = table ? [table.width, table.height] : null;
    const grid = parsed.buffers[parsed.header.occupancy.buffer];
    const [rx, ry, rz] = grid.shape;
    const max3d = Math.min(gl.getParameter(gl.MAX_3D_TEXTURE_SIZE), override);
    if (Math.max(rx, ry, rz) > max3d) throw new FieldError(`This field's occupancy grid is ${rx}x${ry}x${rz}; this browser's MAX_3D_TEXTURE_SIZE is ${max3d}.`);
    this.occupancy = gl.createTexture();
    gl.activeTexture(gl.TEXTURE1);
    gl.bindTexture(gl.TEXTURE_3D, this.occupancy);
    gl.texParameteri(gl.TEXTURE_3D, gl.TEXTURE_MIN_FILTER, gl.NEAREST);
    gl.texParameteri(gl.TEXTURE_3D, gl.TEXTURE_MAG_FILTER, gl.NEAREST);
    gl.pixelStorei(gl.UNPACK_ALIGNMENT, 1);
    gl.texImage3D(gl.TEXTURE_3D, 0, gl.R8, rz, ry, rx, 0, gl.RED, gl.UNSIGNED_BYTE, grid.map((v) => (v ? 255 : 0)));
    const error = gl.getError();
    if (error !== gl.NO_ERROR) throw new FieldError(`WebGL could not upload the field's textures (error ${error}; weights ${atlas.width}x${atlas.height} texels).`);
    this.occupied = grid.reduce((a, v) => a + (v ? 1 : 0), 0) / grid.length;
    this.vao = gl.createVertexArray();
    this.probe = new Uint8Array(4);
    this.band = 8;
    this.frame = null;
    this.lastFrameMs = null;
  }

  compile(fragment) {
    const gl = this.gl;
    const program = gl.createProgram();
    for (const [type, text] of [[gl.VERTEX_SHADER, VERTEX], [gl.FRAGMENT_SHADER, fragment]]) {
      const shader = gl.createShader(type);
      gl.shaderSource(shader, text);
      gl.compileShader(shader);
      if (!gl.getShaderParameter(shader, gl.COMPILE_STATUS)) {
        const log = (gl.getShaderInfoLog(shader) || "").split("\n")[0];
        throw new FieldError(`This browser could not compile the field's shader: ${log}`);
      }
      gl.attachShader(program, shader);
    }
    gl.linkProgram(program);
    if (!gl.getProgramParameter(program, gl.LINK_STATUS)) throw new FieldError(`This browser could not link the field's shader: ${gl.getProgramInfoLog(program)}`);
    return program;
  }

  // Start a frame of `view` ({c2w, fxN, fyN, cxN, cyN, aspect, distortion}) at width x height.
  start(view, settings) {
    const { width, height } = settings;
    if (this.canvas.width !== width || this.canvas.height !== height) {
      this.canvas.width = width;
      this.canvas.height = height;
    }
    const gl = this.gl;
    gl.useProgram(this.program);
    const u = (name) => gl.getUniformLocation(this.program, name);
    const c = view.c2w;
    gl.uniform1i(u("uW"), 0);
    gl.uniform1i(u("uOcc"), 1);
    if (this.table) gl.uniform1i(u("uTable"), 2);
    gl.uniform3f(u("uOrigin"), c[0][3], c[1][3], c[2][3]);
    gl.uniformMatrix3fv(u("uRotation"), false, [c[0][0], c[1][0], c[2][0], c[0][1], c[1][1], c[2][1], c[0][2], c[1][2], c[2][2]]);
    gl.uniform4f(u("uIntrinsics"), view.fxN * width, view.fyN * height, view.cxN * width, view.cyN * height);
    const k = view.distortion || [0, 0, 0, 0, 0, 0];
    gl.uniform4f(u("uRadial"), k[0], k[1], k[2], k[3]);
    gl.uniform2f(u("uTangential"), k[4], k[5]);
    gl.uniform2f(u("uOffset"), 0, 0);
    gl.uniform1f(u("uHeight"), height);
    gl.uniform1i(u("uSamples"), settings.samples);
    gl.uniform1i(u("uOccupancy"), settings.occupancy ? 1 : 0);
    gl.uniform1i(u("uEarlyTermination"), settings.earlyTermination ? 1 : 0);
    const [low, high] = this.header.scene.bounds;
    gl.uniform3f(u("uLow"), ...low);
    gl.uniform3f(u("uHigh"), ...high);
    this.frame = { row: 0, width, height, ms: 0, view, settings };
  }

  // Render the next band of rows; true when the frame is complete.
  step() {
    const gl = this.gl;
    const f = this.frame;
    if (!f) return true;
    const rows = Math.min(this.band, f.height - f.row);
    gl.useProgram(this.program);
    gl.activeTexture(gl.TEXTURE0);
    gl.bindTexture(gl.TEXTURE_2D, this.weights);
    gl.activeTexture(gl.TEXTURE1);
    gl.bindTexture(gl.TEXTURE_3D, this.occupancy);
    if (this.table) {
      gl.activeTexture(gl.TEXTURE2);
      gl.bindTexture(gl.TEXTURE_2D, this.table);
    }
    gl.bindVertexArray(this.vao);
    gl.viewport(0, 0, f.width, f.height);
    gl.enable(gl.SCISSOR_TEST);
    gl.scissor(0, f.height - f.row - rows, f.width, rows);
    const t0 = performance.now();
    gl.drawArrays(gl.TRIANGLES, 0, 3);
    gl.readPixels(0, f.height - f.row - 1, 1, 1, gl.RGBA, gl.UNSIGNED_BYTE, this.probe); // waits for the band (finish() need not)
    const ms = performance.now() - t0;
    f.ms += ms;
    f.row += rows;
    // adapt the band to about BAND_MS per draw
    this.band = Math.max(1, Math.min(f.height, Math.round((rows * BAND_MS) / Math.max(ms, 1))));
    if (f.row >= f.height) {
      this.lastFrameMs = f.ms;
      this.frame = null;
      return true;
    }
    return false;
  }

  renderNow(view, settings) {
    this.start(view, settings);
    while (!this.step());
    return this.lastFrameMs;
  }

  pixels() {
    const gl = this.gl;
    const { width, height } = this.canvas;
    const rgba = new Uint8Array(width * height * 4);
    gl.readPixels(0, 0, width, height, gl.RGBA, gl.UNSIGNED_BYTE, rgba);
    const rgb = new Uint8Array(width * height * 3);
    for (let y = 0; y < height; y++) {
      for (let x = 0; x < width; x++) {
        const src = ((height - 1 - y) * width + x) * 4, dst = (y * width + x) * 3;
        rgb[dst] = rgba[src];
        rgb[dst + 1] = rgba[src + 1];
        rgb[dst + 2] = rgba[src + 2];
      }
    }
    let text = "";
    for (let i = 0; i < rgb.length; i += 0x8000) text += String.fromCharCode(...rgb.subarray(i, i + 0x8000));
    return btoa(text);
  }
}

// ---------------------------------------------------------------- camera
function cameraView(camera) {
  return {
    c2w: camera.camera_to_world.map((row) => row.slice()),
    fxN: camera.fx / camera.width,
    fyN: camera.fy / camera.height,
    cxN: camera.cx / camera.width,
    cyN: camera.cy / camera.height,
    aspect: camera.height / camera.width,
    distortion: camera.distortion || [0, 0, 0, 0, 0, 0], // k1, k2, k3, k4, p1, p2
  };
}
const sub = (a, b) => a.map((v, i) => v - b[i]);
const add = (a, b) => a.map((v, i) => v + b[i]);
const scale = (a, s) => a.map((v) => v * s);
const dot = (a, b) => a.reduce((s, v, i) => s + v * b[i], 0);
const cross = (a, b) => [a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2], a[0] * b[1] - a[1] * b[0]];
const normalize = (a) => scale(a, 1 / Math.hypot(...a));
function rotate(v, axis, angle) { // Rodrigues
  const c = Math.cos(angle), s = Math.sin(angle);
  return add(add(scale(v, c), scale(cross(axis, v), s)), scale(axis, dot(axis, v) * (1 - c)));
}

// ---------------------------------------------------------------- page
const state = { renderers: [], names: [], show: 0, view: null, target: [0, 0, 0], up: [0, 0, 1], dirty: true, turn: 0 };

function settings() {
  const size = Number($("resolution").value); // the frame's width; its height keeps the camera's aspect
  const height = Math.max(1, Math.round(size * (state.view ? state.view.aspect : 1)));
  return { width: size, height, samples: Number($("samples").value), occupancy: $("occupancy").checked, earlyTermination: $("termination").checked };
}

function visible() {
  if (state.show === 2) return [0, 1];
  return [state.show];
}

function restart() {
  state.dirty = true;
}

function loop() {
  const indices = visible();
  if (state.dirty) {
    state.dirty = false;
    for (const i of indices) state.renderers[i].start(state.view, settings());
  }
  const deadline = performance.now() + 40;
  while (performance.now() < deadline) {
    const pending = indices.filter((i) => state.renderers[i].frame);
    if (!pending.length) break;
    const i = pending[state.turn++ % pending.length];
    const r = state.renderers[i];
    if (r.step()) {
      $(`view-${i}`).querySelector(".fps").textContent = `${r.lastFrameMs.toFixed(0)} ms/frame (${framesPerSecond(r.lastFrameMs)} fps)`;
    }
  }
  requestAnimationFrame(loop);
}

function setupControls(header) {
  const cameras = header.cameras;
  $("camera").replaceChildren(...cameras.map((c, i) => option(i, c.name || String(i))));
  $("camera").onchange = () => {
    state.view = cameraView(cameras[Number($("camera").value)]);
    restart();
  };
  const options = state.names.map((n, i) => option(i, `${"AB"[i]}: ${n}`));
  if (state.renderers.length === 2) options.push(option(2, "A | B side by side"));
  $("show").replaceChildren(...options);
  $("show").value = String(state.show);
  $("show").onchange = () => {
    state.show = Number($("show").value);
    $("view-0").hidden = !visible().includes(0);
    $("view-1").hidden = !visible().includes(1);
    restart();
  };
  for (const id of ["resolution", "samples", "occupancy", "termination"]) $(id).onchange = restart;
  const ups = cameras.map((c) => [c.camera_to_world[0][1], c.camera_to_world[1][1], c.camera_to_world[2][1]]);
  const up = ups.reduce(add, [0, 0, 0]);
  state.up = Math.hypot(...up) > 1e-3 ? normalize(up) : [0, 0, 1];
  const [low, high] = header.scene.bounds;
  state.target = scale(add(low, high), 0.5);
  state.view = cameraView(cameras[0]);
  for (const canvas of document.querySelectorAll("canvas")) {
    let drag = null;
    canvas.addEventListener("pointerdown", (e) => { drag = [e.clientX, e.clientY]; canvas.setPointerCapture(e.pointerId); });
    canvas.addEventListener("pointerup", () => { drag = null; });
    canvas.addEventListener("pointermove", (e) => {
      if (!drag) return;
      const [dx, dy] = [e.clientX - drag[0], e.clientY - drag[1]];
      drag = [e.clientX, e.clientY];
      orbit(-dx * 0.01, -dy * 0.01);
    });
    canvas.addEventListener("wheel", (e) => { e.preventDefault(); zoom(Math.exp(e.deltaY * 0.001)); }, { passive: false });
  }
}

function applyRotation(axis, angle) {
  const c = state.view.c2w;
  const position = [c[0][3], c[1][3], c[2][3]];
  const moved = add(state.target, rotate(sub(position, state.target), axis, angle));
  for (let col = 0; col < 3; col++) {
    const v = rotate([c[0][col], c[1][col], c[2][col]], axis, angle);
    for (let r = 0; r < 3; r++) c[r][col] = v[r];
  }
  for (let r = 0; r < 3; r++) c[r][3] = moved[r];
}

function orbit(yaw, pitch) {
  applyRotation(state.up, yaw);
  const c = state.view.c2w;
  applyRotation(normalize([c[0][0], c[1][0], c[2][0]]), pitch);
  restart();
}

function zoom(factor) {
  const c = state.view.c2w;
  for (let r = 0; r < 3; r++) c[r][3] = state.target[r] + (c[r][3] - state.target[r]) * factor;
  restart();
}

function showInfo(parsed, renderer, index) {
  const h = parsed.header;
  const rows = [
    ["file", `${(parsed.bytes / 1e6).toFixed(2)} MB, ${h.dtype}`],
    ["head", h.head],
    ["MLP multiply-adds per sample", (h.macs_per_sample?.[h.occupancy.field] ?? 0).toLocaleString()],
    ["occupied cells", `${(100 * renderer.occupied).toFixed(1)}%`],
    ["weight texture", renderer.atlasSize.join("x")],
    ...(renderer.tableSize ? [["hash-table texture", renderer.tableSize.join("x")]] : []),
    ["source", `${h.source?.method} step ${h.source?.step}`],
  ];
  appendTerm($("info"), "AB"[index], state.names[index], true);
  for (const [term, description] of rows) appendTerm($("info"), term, String(description));
}

async function sources() {
  const urls = params.getAll("field");
  if (urls.length) return urls.map((url) => ({ name: url.split("/").slice(-2, -1)[0] || url, url }));
  try {
    const response = await fetch("fields.json");
    if (response.ok) return (await response.json()).fields;
  } catch (error) {
    // a page opened from the disk: the file picker below
  }
  return [];
}

async function start(loaded) {
  state.renderers = [];
  state.names = loaded.map((l) => l.name);
  $("info").replaceChildren();
  loaded.forEach((l, i) => {
    const renderer = new FieldRenderer($(`view-${i}`).querySelector("canvas"), l.parsed);
    state.renderers.push(renderer);
    $(`view-${i}`).querySelector(".name").textContent = `${"AB"[i]}: ${l.name}`;
    showInfo(l.parsed, renderer, i);
  });
  state.show = 0;
  $("view-1").hidden = true;
  setupControls(loaded[0].parsed.header);
  $("status").textContent = "ready";
  if (!params.has("still")) requestAnimationFrame(loop); // ?still: draw only on request (automated checks)
}

function initialControls() {
  // ?resolution=N&samples=N choose the controls' first values
  for (const id of ["resolution", "samples"]) {
    const value = params.get(id);
    if (value && ![...$(id).options].some((o) => o.value === value)) $(id).add(new Option(value, value));
    if (value) $(id).value = value;
  }
}

async function main() {
  initialControls();
  const gl = document.createElement("canvas").getContext("webgl2");
  const problem = capabilityProblem(gl);
  if (problem) throw new FieldError(problem);
  $("file").onchange = async () => {
    const files = [...$("file").files].slice(0, 2);
    const loaded = [];
    for (const file of files) loaded.push({ name: file.name, parsed: parseField(await file.arrayBuffer(), file.name) });
    await start(loaded).catch((e) => showMessage(e.message));
  };
  const list = await sources();
  if (!list.length) {
    $("status").textContent = "no field: open a field.eugen, or run `eugen-export serve DIR`";
    return;
  }
  const loaded = [];
  for (const entry of list.slice(0, 2)) loaded.push({ name: entry.name, parsed: await fetchField(entry.url) });
  await start(loaded);
}

// For automated checks: render a test camera of one field at once and return its pixels (RGB, base64).
window.eugen = {
  ready: null,
  capabilityProblem,
  renderTest({ field = 0, camera = 0, width = 64, height = 64, samples = 128, occupancy = true, earlyTermination = true } = {}) {
    const renderer = state.renderers[field];
    const view = cameraView(renderer.header.cameras[camera]);
    const ms = renderer.renderNow(view, { width, height, samples, occupancy, earlyTermination });
    return { rgb: renderer.pixels(), ms, width, height };
  },
  benchmark({ field = 0, camera = 0, width = 200, height = 200, samples = 128, repeats = 3 } = {}) {
    const renderer = state.renderers[field];
    const view = cameraView(renderer.header.cameras[camera]);
    const times = [];
    for (let i = 0; i < repeats; i++) times.push(renderer.renderNow(view, { width, height, samples, occupancy: true, earlyTermination: true }));
    return times;
  },
};
window.eugen.ready = main().then(
  () => "ready",
  (error) => {
    showMessage(error instanceof FieldError ? error.message : `The viewer failed: ${error.message}`);
    return `error: ${error.message}`;
  },
);
