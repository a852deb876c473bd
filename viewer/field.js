// Reading an exported field (field.eugen) and rendering it with WebGL2: the per-sample MLP runs in the
// fragment shader, its weights in one float texture (a Zip-NeRF's hash grid too: corners hashed and blended in
// the shader, the table in a second float texture, each level down-weighted by the interval's blur). The sampling is the reference renderer's "march"
// (eugen_nerf/export/render.py): uniform intervals between near and far, samples outside the occupancy grid's
// box or in empty cells skipped, colour evaluated only where a sample's weight is at least MIN_WEIGHT, the
// march stopped once the transmittance is below TERMINATION (when early termination is on). On an unbounded
// scene (Zip-NeRF, scene.contraction) the intervals are uniform in disparity beyond distance 1, positions are
// contracted into the ball of radius 2 where the grid and occupancy lie, and the background is the ray's colour
// at its last interval.

export const FORMAT_NAME = "eugen-field";
export const FORMAT_VERSION = 1;
export const MIN_WEIGHT = 1e-5;
export const TERMINATION = 1e-3;
export const HEADS = ["nerf", "zipnerf"];
const MAGIC = "EUGENFLD";

export class FieldError extends Error {}

function float16ToFloat32(bits) {
  const out = new Float32Array(bits.length);
  for (let i = 0; i < bits.length; i++) {
    const h = bits[i];
    const s = h & 0x8000 ? -1 : 1;
    const e = (h >> 10) & 0x1f;
    const f = h & 0x3ff;
    out[i] = e === 0 ? s * 2 ** -14 * (f / 1024) : e === 31 ? (f ? NaN : s * Infinity) : s * 2 ** (e - 15) * (1 + f / 1024);
  }
  return out;
}

// Parse the bytes of an export: {header, buffers (Float32Array or Uint8Array by name)}. Throws FieldError
// with one line for a file that is not an export, is truncated or has another version.
export function parseField(bytes, source) {
  const data = new Uint8Array(bytes);
  const magic = String.fromCharCode(...data.subarray(0, 8));
  if (data.length < 16 || magic !== MAGIC) throw new FieldError(`${source}: not an exported field (no ${MAGIC} magic at its start)`);
  const view = new DataView(data.buffer, data.byteOffset, data.byteLength);
  const length = view.getUint32(8, true);
  if (16 + length > data.length) {
    throw new FieldError(`${source}: truncated (${data.length} bytes, its header alone needs ${16 + length}); export it again`);
  }
  let header;
  try {
    header = JSON.parse(new TextDecoder().decode(data.subarray(16, 16 + length)));
  } catch (error) {
    throw new FieldError(`${source}: unreadable header (${error.message})`);
  }
  if (header.format !== FORMAT_NAME) throw new FieldError(`${source}: its header is not an ${FORMAT_NAME} header`);
  if (header.version !== FORMAT_VERSION) {
    throw new FieldError(`${source}: format version ${header.version}, this page reads version ${FORMAT_VERSION} only; export the run again`);
  }
  if (!HEADS.includes(header.head)) throw new FieldError(`${source}: field head ${header.head}; this page renders ${HEADS.join(", ")}`);
  const start = 16 + length;
  const buffers = {};
  for (const [name, entry] of Object.entries(header.buffers)) {
    const end = start + entry.offset + entry.nbytes;
    if (end > data.length) {
      throw new FieldError(`${source}: truncated (buffer ${name} ends at byte ${end}, the file has ${data.length}); export it again`);
    }
    const slice = data.slice(start + entry.offset, end).buffer; // aligned copy
    if (entry.dtype === "float32") buffers[name] = new Float32Array(slice);
    else if (entry.dtype === "float16") buffers[name] = float16ToFloat32(new Uint16Array(slice));
    else if (entry.dtype === "uint8") buffers[name] = new Uint8Array(slice);
    else throw new FieldError(`${source}: buffer ${name} has dtype ${entry.dtype}`);
    buffers[name].shape = entry.shape;
  }
  return { header, buffers, bytes: data.length };
}

export async function fetchField(url) {
  let response;
  try {
    response = await fetch(url);
  } catch (error) {
    throw new FieldError(`${url}: could not be fetched (${error.message})`);
  }
  if (!response.ok) throw new FieldError(`${url}: HTTP ${response.status}`);
  return parseField(await response.arrayBuffer(), url);
}

// What the browser lacks for this page, or null. `gl` is a WebGL2 context (or null when there is none).
export function capabilityProblem(gl) {
  if (!gl) return "This browser has no WebGL2: the viewer needs WebGL2 (enable hardware acceleration or use a current Chrome, Firefox or Safari).";
  const high = gl.getShaderPrecisionFormat(gl.FRAGMENT_SHADER, gl.HIGH_FLOAT);
  if (!high || high.precision === 0) return "This browser's fragment shaders have no highp float: the viewer needs 32-bit floats in fragment shaders.";
  const texture = gl.createTexture();
  gl.bindTexture(gl.TEXTURE_2D, texture);
  while (gl.getError() !== gl.NO_ERROR);
  gl.texImage2D(gl.TEXTURE_2D, 0, gl.RGBA32F, 1, 1, 0, gl.RGBA, gl.FLOAT, new Float32Array(4));
  const failed = gl.getError() !== gl.NO_ERROR;
  gl.deleteTexture(texture);
  if (failed) return "This browser cannot create float textures (RGBA32F): the viewer keeps the field's weights in them.";
  return null;
}

const glsl = (x) => {
  const s = Number(x).toPrecision(9);
  return s.includes("e") || s.includes(".") ? (s.includes("e") ? Number(x).toExponential(8) : s) : `${s}.0`;
};

// One matrix block of the weight atlas: texel (x0 + 4*i + c, y0 + j) holds rows 4j..4j+3 of input column 4i+c.
class Atlas {
  constructor() {
    this.blocks = [];
    this.width = 0;
    this.height = 0;
  }
  // rows: number of output rows; cols: input columns; get(r, c) -> value (rows/cols in the padded layout)
  // The block's position in shader code is a placeholder (x, y) until pack() places it (place()).
  add(rows4, cols, get) {
    const id = this.blocks.length;
    const block = { rows4, width: Math.ceil(cols / 4) * 4, get, x: `@X${id}@`, y: `@Y${id}@`, id };
    this.blocks.push(block);
    return block;
  }
  place(code) {
    return code.replace(/@([XY])(\d+)@/g, (_, axis, id) => String(axis === "X" ? this.blocks[Number(id)].px : this.blocks[Number(id)].py));
  }
  // Shelf packing: blocks placed side by side in rows of at most `limit` texels, shelves stacked.
  pack(limit) {
    let x = 0, y = 0, shelf = 0;
    for (const block of this.blocks) {
      if (block.width > limit) return block;
      if (x + block.width > limit) {
        y += shelf;
        x = 0;
        shelf = 0;
      }
      block.px = x;
      block.py = y;
      x += block.width;
      shelf = Math.max(shelf, block.rows4);
      this.width = Math.max(this.width, x);
    }
    this.height = y + shelf;
    return null;
  }
  data() {
    const out = new Float32Array(this.width * this.height * 4);
    for (const b of this.blocks) {
      for (let j = 0; j < b.rows4; j++) {
        for (let col = 0; col < b.width; col++) {
          const base = ((b.py + j) * this.width + b.px + col) * 4;
          for (let r = 0; r < 4; r++) out[base + r] = b.get(4 * j + r, col);
        }
      }
    }
    return out;
  }
}

// A layout of a vector of `size` values in vec4 slots; EUGen features are laid out order by order, each
// order's m values padded to a multiple of 4, so products of orders are products of whole vec4s.
function denseLayout(size) {
  return { slots: Math.ceil(size / 4), index: (i) => i };
}
function featureLayout(m, k) {
  const m4 = Math.ceil(m / 4) * 4;
  return { slots: (k * m4) / 4, index: (i) => Math.floor(i / m) * m4 + (i % m), m4 };
}

// Builds the GLSL of one field (NeRF's fine field, or Zip-NeRF's NeRF field and its hash table) and its weight atlas.
export class FieldProgram {
  constructor(field, buffers) {
    this.atlas = new Atlas();
    this.buffers = buffers;
    this.maxSlots = 1;
    this.code = [];
    this.field = field;
  }

  matrix(name, rows, cols, rowIndex, colIndex, rows4) {
    const values = this.buffers[name];
    const [nr, nc] = values.shape;
    const inverseRow = new Map(), inverseCol = new Map();
    for (let r = 0; r < nr; r++) inverseRow.set(rowIndex(r), r);
    for (let c = 0; c < nc; c++) inverseCol.set(colIndex(c), c);
    return this.atlas.add(rows4, cols, (r, c) => {
      const rr = inverseRow.get(r), cc = inverseCol.get(c);
      return rr === undefined || cc === undefined ? 0 : values[rr * nc + cc];
    });
  }

  vector(name, rowIndex, rows4) {
    const values = this.buffers[name];
    const inverse = new Map();
    for (let r = 0; r < values.length; r++) inverse.set(rowIndex(r), r);
    return this.atlas.add(rows4, 1, (r, c) => {
      const rr = inverse.get(r);
      return c !== 0 || rr === undefined ? 0 : values[rr];
    });
  }

  // GLSL for dst[j] (j < rows4) = W src (+ bias); src has `slots` vec4s.
  product(block, src, slots, dst, rows4, bias, init) {
    const lines = [];
    lines.push(`for (int j = 0; j < ${rows4}; j++) {`);
    lines.push(`  int y = ${block.y} + j;`);
    lines.push(bias ? `  vec4 acc = texelFetch(uW, ivec2(${bias.x}, ${bias.y} + j), 0);` : `  vec4 acc = ${init ? `${init}[j]` : "vec4(0.0)"};`);
    if (bias && init) lines.push(`  acc += ${init}[j];`);
    lines.push(`  for (int i = 0; i < ${slots}; i++) {`);
    lines.push(`    int x = ${block.x} + 4 * i;`);
    lines.push(`    acc += mat4(texelFetch(uW, ivec2(x, y), 0), texelFetch(uW, ivec2(x + 1, y), 0), texelFetch(uW, ivec2(x + 2, y), 0), texelFetch(uW, ivec2(x + 3, y), 0)) * ${src}[i];`);
    lines.push(`  }`);
    lines.push(`  ${dst}[j] = acc;`);
    lines.push(`}`);
    return lines.join("\n");
  }

  // An MLP's steps as GLSL; returns {code, out: name of the array holding the output, layout}.
  // input: {name, layout, normSq (GLSL expression of |x|^2 or null)}; first: optional {split, dirName, dirSlots,
  // dirNormSq} (the colour MLP: its first step's direction columns are applied once per ray, see rayCode).
  mlp(spec, prefix, input, arrays, first) {
    const code = [];
    let src = input.name, srcLayout = input.layout, srcNormSq = input.normSq;
    let materialised = true;
    let [a, b] = arrays;
    spec.steps.forEach((step, index) => {
      const dst = src === a ? b : a;
      const other = dst === a ? b : a;
      const isEugen = step.kind === "eugen";
      const m = step.num_features, k = step.degree;
      const featLayout = isEugen ? featureLayout(m, k) : null;
      const [rows, cols] = this.buffers[step.weight].shape;
      const projRows = rows - (step.norm_rows || 0);
      const projLayout = isEugen ? featLayout : denseLayout(projRows);
      const normSlots = isEugen ? Math.ceil((step.norm_rows || 0) / 4) : 0;
      const rowIndex = (r) => (r < projRows ? projLayout.index(r) : projLayout.slots * 4 + (r - projRows));
      const rows4 = projLayout.slots + normSlots;
      this.maxSlots = Math.max(this.maxSlots, rows4);
      const split = index === 0 && first ? first.split : 0;
      const colIndex = (c) => srcLayout.index(c - split);
      const block = this.matrix(step.weight, rows, srcLayout.slots * 4, rowIndex, (c) => (c < split ? -1 - c : colIndex(c)), rows4);
      const bias = index === 0 && first ? null : this.vector(step.bias, rowIndex, rows4);
      code.push(`// ${prefix} step ${index}: ${step.kind} ${rows}x${cols}`);
      code.push(this.product(block, src, srcLayout.slots, dst, rows4, bias, index === 0 && first ? first.dirName : null));
      if (step.skip_weight) {
        const skip = this.matrix(step.skip_weight, projRows, input.layout.slots * 4, projLayout.index, input.layout.index, projLayout.slots);
        code.push(this.product(skip, input.name, input.layout.slots, "skipTmp", projLayout.slots, null, null));
        code.push(`for (int j = 0; j < ${projLayout.slots}; j++) ${dst}[j] += skipTmp[j];`);
        this.maxSlots = Math.max(this.maxSlots, projLayout.slots);
        this.needsSkipTmp = true;
      }
      if (!isEugen) {
        if (step.activation === "relu") code.push(`for (int j = 0; j < ${rows4}; j++) ${dst}[j] = max(${dst}[j], 0.0);`);
        else if (step.activation) throw new FieldError(`${prefix}: activation ${step.activation} is not supported by this page`);
        src = dst;
        srcLayout = projLayout;
        srcNormSq = null;
        materialised = true;
        return;
      }
      if (!["unit", "linear", "projected", "polynomial"].includes(step.scaling)) {
        throw new FieldError(`${prefix}: scaling ${step.scaling} is not supported by this page`);
      }
      const exactRms = step.scaling === "unit" || step.scaling === "linear";
      const needsNorm = step.use_norm || exactRms;
      code.push(`{`);
      if (needsNorm) {
        if (step.norm_rows) {
          code.push(`  float nsq = 0.0;`);
          code.push(`  for (int j = ${projLayout.slots}; j < ${rows4}; j++) nsq += dot(${dst}[j], ${dst}[j]);`);
          if (step.norm_constant !== null && step.norm_constant !== undefined) code.push(`  nsq += ${glsl(step.norm_constant ** 2)};`);
        } else {
          if (!materialised) throw new FieldError(`${prefix}: an EUGen step without norm rows reads features`);
          code.push(`  float nsq = ${srcNormSq || `0.0`};`);
          if (!srcNormSq) code.push(`  for (int i = 0; i < ${srcLayout.slots}; i++) nsq += dot(${src}[i], ${src}[i]);`);
          if (index === 0 && first) code.push(`  nsq += ${first.dirNormSq};`);
        }
        if (step.skip_weight) code.push(`  nsq += inputSq;`);
        code.push(`  float nrm = sqrt(nsq);`);
        if (step.use_norm) {
          const np = this.vector(step.norm_projection, projLayout.index, projLayout.slots);
          code.push(`  for (int j = 0; j < ${projLayout.slots}; j++) ${dst}[j] += nrm * texelFetch(uW, ivec2(${np.x}, ${np.y} + j), 0);`);
        }
        if (exactRms) {
          code.push(`  float rms = sqrt((nsq * ${step.use_norm ? "2.0" : "1.0"} + 1.0) / ${glsl(step.augmented_dim)});`);
          code.push(`  for (int j = 0; j < ${projLayout.slots}; j++) ${dst}[j] /= rms;`);
        }
      }
      if (step.scaling === "projected") {
        // rms(x+) estimated by the projections' own rms (padding slots hold zeros)
        code.push(`  float psq = 0.0;`);
        code.push(`  for (int j = 0; j < ${projLayout.slots}; j++) psq += dot(${dst}[j], ${dst}[j]);`);
        code.push(`  float rms = sqrt(psq / ${glsl(projRows)} + 1e-30);`);
        code.push(`  for (int j = 0; j < ${projLayout.slots}; j++) ${dst}[j] /= rms;`);
      }
      const mb = featLayout.m4 / 4;
      for (let o = 1; o < k; o++) code.push(`  for (int j = 0; j < ${mb}; j++) ${dst}[${o * mb} + j] *= ${dst}[${(o - 1) * mb} + j];`);
      const map = { identity: "", relu: "max(v, 0.0)", softplus: "softplusv(v)", sin: "sin(v)" }[step.feature_map];
      if (map === undefined) throw new FieldError(`${prefix}: feature map ${step.feature_map} is not supported by this page`);
      if (map) code.push(`  for (int j = 0; j < ${featLayout.slots}; j++) { vec4 v = ${dst}[j]; ${dst}[j] = ${map}; }`);
      if (step.scaling === "linear" || step.scaling === "projected") code.push(`  for (int j = 0; j < ${featLayout.slots}; j++) ${dst}[j] *= rms;`);
      code.push(`}`);
      src = dst;
      srcLayout = featLayout;
      materialised = false;
      srcNormSq = null;
      if (step.out_weight) {
        const [l, M] = this.buffers[step.out_weight].shape;
        const outLayout = denseLayout(l);
        const ow = this.matrix(step.out_weight, l, featLayout.slots * 4, (r) => r, featLayout.index, outLayout.slots);
        const ob = this.vector(step.out_bias, (r) => r, outLayout.slots);
        this.maxSlots = Math.max(this.maxSlots, outLayout.slots);
        code.push(this.product(ow, src, featLayout.slots, other, outLayout.slots, ob, null));
        src = other;
        srcLayout = outLayout;
        materialised = true;
      }
    });
    if (spec.out_activation === "relu") code.push(`for (int j = 0; j < ${srcLayout.slots}; j++) ${src}[j] = max(${src}[j], 0.0);`);
    else if (spec.out_activation === "sigmoid") code.push(`for (int j = 0; j < ${srcLayout.slots}; j++) ${src}[j] = 1.0 / (1.0 + exp(-${src}[j]));`);
    else if (spec.out_activation) throw new FieldError(`${prefix}: output activation ${spec.out_activation} is not supported by this page`);
    return { code: code.join("\n"), out: src, layout: srcLayout };
  }

  encodingCode(spec, input, out, size) {
    const lines = [];
    const freqs = spec.frequencies;
    const n = freqs.length;
    lines.push(`float ${out}[${Math.ceil(size / 4) * 4}];`);
    for (let d = 0; d < 3; d++) {
      for (let f = 0; f < n; f++) {
        lines.push(`{ float s = ${glsl(spec.scale)} * ${input}[${d}] * ${glsl(freqs[f])}; ${out}[${d * n + f}] = sinr(s); ${out}[${3 * n + d * n + f}] = sinr(s + ${glsl(Math.PI / 2)}); }`);
      }
    }
    let next = 6 * n;
    if (spec.include_input) for (let d = 0; d < 3; d++) lines.push(`${out}[${next++}] = ${input}[${d}];`);
    for (let i = next; i < Math.ceil(size / 4) * 4; i++) lines.push(`${out}[${i}] = 0.0;`);
    return lines.join("\n");
  }

  packAtlas(limits) {
    const limit = limits.maxTextureSize;
    const tooWide = this.atlas.pack(limit);
    if (tooWide) throw new FieldError(`This field needs a weight texture ${tooWide.width} texels wide; this browser's MAX_TEXTURE_SIZE is ${limit}.`);
    if (this.atlas.height > limit) throw new FieldError(`This field needs a weight texture of ${this.atlas.width}x${this.atlas.height} texels; this browser's MAX_TEXTURE_SIZE is ${limit}.`);
  }

  // Returns {fragment shader source, atlas, table}; throws FieldError naming a limit the field exceeds.
  build(limits) {
    return this.field.head === "zipnerf" ? this.buildZipNeRF(limits) : this.buildNeRF(limits);
  }

  buildNeRF(limits) {
    const field = this.field;
    const posDim = 6 * field.position_encoding.frequencies.length + (field.position_encoding.include_input ? 3 : 0);
    const dirDim = 6 * field.direction_encoding.frequencies.length + (field.direction_encoding.include_input ? 3 : 0);
    const posLayout = denseLayout(posDim);
    const trunk = this.mlp(field.trunk, "trunk", { name: "inp", layout: posLayout, normSq: null }, ["hA", "hB"]);
    const featureSlots = trunk.layout.slots;
    // density: one dense row on the trunk's features
    const density = this.matrix(field.density.steps[0].weight, 1, featureSlots * 4, (r) => r, trunk.layout.index, 1);
    const densityBias = this.buffers[field.density.steps[0].bias][0];
    // colour: the first step's direction columns once per ray (into cdir, bias included), the rest per sample
    const first = field.color.steps[0];
    const [crow] = this.buffers[first.weight].shape;
    const colorRows4 = first.kind === "eugen" ? featureLayout(first.num_features, first.degree).slots + Math.ceil((first.norm_rows || 0) / 4) : Math.ceil(crow / 4);
    const color = this.mlp(field.color, "color", { name: "feat", layout: trunk.layout, normSq: null }, ["hA", "hB"], {
      split: dirDim,
      dirName: "cdir",
      dirNormSq: "dirSq",
    });
    // the direction part: a matrix over the dir encoding's columns, rows as the first step lays them out
    const firstLayout = first.kind === "eugen" ? featureLayout(first.num_features, first.degree) : denseLayout(crow - (first.norm_rows || 0));
    const projRows = crow - (first.norm_rows || 0);
    const rowIndex = (r) => (r < projRows ? firstLayout.index(r) : firstLayout.slots * 4 + (r - projRows));
    const dirLayout = denseLayout(dirDim);
    const dirBlock = this.matrix(first.weight, crow, dirLayout.slots * 4, rowIndex, (c) => (c < dirDim ? c : -1), colorRows4);
    const dirBias = this.vector(first.bias, rowIndex, colorRows4);
    this.packAtlas(limits);
    const slots = Math.max(this.maxSlots, featureSlots, colorRows4, posLayout.slots);
    const code = `
vec4 hA[${slots}];
vec4 hB[${slots}];
vec4 inp[${posLayout.slots}];
vec4 feat[${featureSlots}];
vec4 cdir[${colorRows4}];
${this.needsSkipTmp ? `vec4 skipTmp[${slots}];` : ""}
float inputSq;
float dirSq;

float densityAt(vec3 p, float blur) {
  float pos[3] = float[3](p.x, p.y, p.z);
  ${this.encodingCode(field.position_encoding, "pos", "enc", posDim)}
  inputSq = 0.0;
  for (int i = 0; i < ${posLayout.slots}; i++) { inp[i] = vec4(enc[4 * i], enc[4 * i + 1], enc[4 * i + 2], enc[4 * i + 3]); inputSq += dot(inp[i], inp[i]); }
  ${trunk.code}
  for (int i = 0; i < ${featureSlots}; i++) feat[i] = ${trunk.out}[i];
  float d = ${glsl(densityBias)};
  for (int i = 0; i < ${featureSlots}; i++) {
    int x = ${density.x} + 4 * i;
    d += dot(vec4(texelFetch(uW, ivec2(x, ${density.y}), 0).x, texelFetch(uW, ivec2(x + 1, ${density.y}), 0).x, texelFetch(uW, ivec2(x + 2, ${density.y}), 0).x, texelFetch(uW, ivec2(x + 3, ${density.y}), 0).x), feat[i]);
  }
  return softplus1(d);
}

vec3 colorAt() {
  ${color.code}
  return ${color.out}[0].xyz;
}

void rayDirection(vec3 d) {
  float dir[3] = float[3](d.x, d.y, d.z);
  ${this.encodingCode(field.direction_encoding, "dir", "denc", dirDim)}
  vec4 de[${dirLayout.slots}];
  dirSq = 0.0;
  for (int i = 0; i < ${dirLayout.slots}; i++) { de[i] = vec4(denc[4 * i], denc[4 * i + 1], denc[4 * i + 2], denc[4 * i + 3]); dirSq += dot(de[i], de[i]); }
  ${this.product(dirBlock, "de", dirLayout.slots, "cdir", colorRows4, dirBias, null)}
}
`;
    return { source: this.atlas.place(shaderSource(field, code, false)), atlas: this.atlas, table: null };
  }

  // Zip-NeRF: the hash grid read at the interval's middle (blurred as its frustum), the density MLP (its output
  // the bottleneck, channel 0 the raw density), then the view MLP on [bottleneck, direction encoding].
  buildZipNeRF(limits) {
    const field = this.field;
    const grid = field.grid;
    const levels = grid.resolutions.length, features = grid.features_per_level;
    const table = this.buffers[grid.table];
    const rows = table.shape[0];
    if (![1, 2, 4].includes(features)) throw new FieldError(`This page reads hash grids of 1, 2 or 4 features per level, not ${features}.`);
    const primes = (grid.hash && grid.hash.primes) || HASH_PRIMES;
    if (primes.some((p, i) => p !== HASH_PRIMES[i])) throw new FieldError(`This page hashes with the primes ${HASH_PRIMES.join(", ")}, not ${primes.join(", ")}.`);
    const limit = limits.maxTextureSize;
    const tableWidth = Math.min(limit, rows);
    const tableHeight = Math.ceil(rows / tableWidth);
    if (tableHeight > limit) throw new FieldError(`This field's hash table needs a texture of ${tableWidth}x${tableHeight} texels; this browser's MAX_TEXTURE_SIZE is ${limit}.`);
    const gridDim = levels * features;
    const gridLayout = denseLayout(gridDim);
    const density = this.mlp(field.density, "density", { name: "inp", layout: gridLayout, normSq: null }, ["hA", "hB"]);
    const width = this.buffers[field.density.steps.at(-1).out_weight || field.density.steps.at(-1).weight].shape[0];
    const widthPadded = Math.ceil(width / 4) * 4;
    const featureSlots = widthPadded / 4;
    const dirDim = 3 * (1 + 2 * field.direction_frequencies);
    const dirSlots = Math.ceil(dirDim / 4);
    const viewLayout = { slots: featureSlots + dirSlots, index: (c) => (c < width ? c : widthPadded + (c - width)) };
    const view = this.mlp(field.view, "view", { name: "vin", layout: viewLayout, normSq: null }, ["hA", "hB"]);
    this.packAtlas(limits);
    const slots = Math.max(this.maxSlots, featureSlots, gridLayout.slots);
    const [low, high] = field.bounds;
    const extent = high.map((h, i) => h - low[i]);
    const cubeRoot = Math.cbrt(extent[0] * extent[1] * extent[2]);
    const pad = field.rgb_padding;
    const channels = "xyzw".slice(0, features);
    const code = `
uniform highp sampler2D uTable;
const int LEVELS = ${levels};
const float RESOLUTIONS[${levels}] = float[${levels}](${grid.resolutions.map(glsl).join(", ")});
const vec3 GRID_LOW = vec3(${low.map(glsl).join(", ")});
const vec3 GRID_EXTENT = vec3(${extent.map(glsl).join(", ")});
vec4 hA[${slots}];
vec4 hB[${slots}];
vec4 inp[${gridLayout.slots}];
vec4 feat[${featureSlots}];
vec4 vin[${featureSlots + dirSlots}];
vec4 de[${dirSlots}];
${this.needsSkipTmp ? `vec4 skipTmp[${slots}];` : ""}
float inputSq;
float featSq;
float dirSq;

// erf (Abramowitz and Stegun 7.1.26, error below 1.5e-7)
float erf1(float x) {
  float t = 1.0 / (1.0 + 0.3275911 * abs(x));
  float y = 1.0 - (((((1.061405429 * t - 1.453152027) * t) + 1.421413741) * t - 0.284496736) * t + 0.254829592) * t * exp(-x * x);
  return sign(x) * y;
}

// one level's features at u (the unit cube), blended trilinearly from the hashed corners' rows
vec4 gridLevel(vec3 u, int level) {
  vec3 s = u * RESOLUTIONS[level];
  vec3 f = floor(s);
  vec3 w = s - f;
  uvec3 c = uvec3(ivec3(f));
  vec4 acc = vec4(0.0);
  for (int k = 0; k < 8; k++) {
    uvec3 b = uvec3(k & 1, (k >> 1) & 1, (k >> 2) & 1);
    uvec3 q = c + b;
    uint h = (q.x * ${HASH_PRIMES[0]}u) ^ (q.y * ${HASH_PRIMES[1]}u) ^ (q.z * ${HASH_PRIMES[2]}u);
    uint row = (h & ${grid.table_size - 1}u) + uint(level) * ${grid.table_size}u;
    vec3 t = mix(1.0 - w, w, vec3(b));
    acc += t.x * t.y * t.z * texelFetch(uTable, ivec2(int(row % ${tableWidth}u), int(row / ${tableWidth}u)), 0);
  }
  return acc;
}

float densityAt(vec3 p, float blur) {
${field.contraction ? `  // unbounded scene: the point and its blur contracted into the ball of radius 2 (contract_gaussians)
  float r = max(length(p), 1e-12);
  if (r > 1.0) {
    float q = (2.0 - 1.0 / r) / r;
    blur *= pow(max(q * q / (r * r), 1e-30), 1.0 / 3.0);
    p *= q;
  }` : ""}
  vec3 u = (p - GRID_LOW) / GRID_EXTENT;
  if (any(lessThanEqual(u, vec3(0.0))) || any(greaterThanEqual(u, vec3(1.0)))) return 0.0;
  float s = 2.0 * blur / ${glsl(cubeRoot)}; // the blur in the grid's [-1, 1] units
  float g[${gridLayout.slots * 4}];
  for (int i = 0; i < ${gridLayout.slots * 4}; i++) g[i] = 0.0;
  for (int l = 0; l < LEVELS; l++) {
    float n = RESOLUTIONS[l];
    vec4 f = gridLevel(u, l) * erf1(1.0 / sqrt(8.0 * s * s * n * n + 1e-12));
    ${[...channels].map((c, j) => `g[l * ${features} + ${j}] = f.${c};`).join(" ")}
  }
  for (int i = 0; i < ${gridLayout.slots}; i++) inp[i] = vec4(g[4 * i], g[4 * i + 1], g[4 * i + 2], g[4 * i + 3]);
  ${density.code}
  featSq = 0.0;
  for (int i = 0; i < ${featureSlots}; i++) { feat[i] = ${density.out}[i]; featSq += dot(feat[i], feat[i]); }
  return softplus1(feat[0].x + ${glsl(field.density_bias)});
}

vec3 colorAt() {
  for (int i = 0; i < ${featureSlots}; i++) vin[i] = feat[i];
  for (int i = 0; i < ${dirSlots}; i++) vin[${featureSlots} + i] = de[i];
  inputSq = featSq + dirSq;
  ${view.code}
  return ${view.out}[0].xyz * ${glsl(1 + 2 * pad)} - ${glsl(pad)};
}

void rayDirection(vec3 d) {
  float e[${dirSlots * 4}];
  for (int i = 0; i < ${dirSlots * 4}; i++) e[i] = 0.0;
  e[0] = d.x; e[1] = d.y; e[2] = d.z;
  for (int i = 0; i < ${field.direction_frequencies}; i++) {
    vec3 v = d * exp2(float(i));
    e[3 + 3 * i] = sin(v.x); e[4 + 3 * i] = sin(v.y); e[5 + 3 * i] = sin(v.z);
    e[${3 + 3 * field.direction_frequencies} + 3 * i] = cos(v.x); e[${4 + 3 * field.direction_frequencies} + 3 * i] = cos(v.y); e[${5 + 3 * field.direction_frequencies} + 3 * i] = cos(v.z);
  }
  dirSq = 0.0;
  for (int i = 0; i < ${dirSlots}; i++) { de[i] = vec4(e[4 * i], e[4 * i + 1], e[4 * i + 2], e[4 * i + 3]); dirSq += dot(de[i], de[i]); }
}
`;
    // the table as RGBA texels, one row each (features beyond 4 channels padded with 0)
    const texels = new Float32Array(tableWidth * tableHeight * 4);
    for (let r = 0; r < rows; r++) for (let j = 0; j < features; j++) texels[4 * r + j] = table[r * features + j];
    return {
      source: this.atlas.place(shaderSource(field, code, true)),
      atlas: this.atlas,
      table: { width: tableWidth, height: tableHeight, data: texels },
    };
  }
}

export const HASH_PRIMES = [1, 2654435761, 805459861];
// A multisample's blur relative to the pixel cone's radius at its distance (Zip-NeRF's).
export const MULTISAMPLE_STD_SCALE = 0.5;

// The fragment shader: the field's code (densityAt, colorAt, rayDirection) inside the page's march.
// blurred: the field reads each interval's blur (Zip-NeRF), from the pixel's cone radius.
function linDisp(x) { return x < 1 ? x / 2 : 1 - 1 / (2 * x); }

function shaderSource(field, code, blurred) {
  return `#version 300 es
precision highp float;
precision highp int;
precision highp sampler2D;
precision highp sampler3D;
uniform sampler2D uW;
uniform mediump sampler3D uOcc;
uniform vec3 uOrigin;
uniform mat3 uRotation;
uniform vec4 uIntrinsics; // fx, fy, cx, cy in pixels of the full frame
uniform vec4 uRadial;     // the lens's distortion (nerfstudio's OpenCV model): k1, k2, k3, k4
uniform vec2 uTangential; // p1, p2
uniform vec2 uOffset;     // this draw's pixel offset
uniform float uHeight;
uniform int uSamples;
uniform bool uOccupancy;
uniform bool uEarlyTermination;
uniform vec3 uLow;
uniform vec3 uHigh;
const float NEAR = ${glsl(field.near)};
const float FAR = ${glsl(field.far)};
const bool CONTRACTION = ${field.contraction ? "true" : "false"};
// the spacing of an unbounded scene's intervals: linear up to distance 1, then in disparity
const float S_NEAR = ${glsl(linDisp(field.near))};
const float S_FAR = ${glsl(linDisp(field.far))};
const bool LAST_SAMPLE = ${field.background === "last_sample" ? "true" : "false"};
const vec3 BACKGROUND = vec3(${(field.background === "last_sample" ? [0, 0, 0] : field.background).map(glsl).join(", ")});
out vec4 outColor;
vec4 softplusv(vec4 x) { return mix(log(1.0 + exp(x)), x, step(20.0, x)); }
// sin of a large argument (the encoding's reach 2 pi 2^8 |x|): reduced by 2 pi in two parts first (Cody-Waite),
// as some GPUs' and SwiftShader's sin lose accuracy far from 0
float sinr(float x) {
  float k = floor(x * 0.159154943 + 0.5);
  return sin((x - k * 6.28125) - k * 0.00193530717958647692);
}
float softplus1(float x) { return x > 20.0 ? x : log(1.0 + exp(x)); }
${code}
float spacingToDistance(float s) {
  float x = s * S_FAR + (1.0 - s) * S_NEAR;
  return x < 0.5 ? 2.0 * x : 1.0 / (2.0 - 2.0 * x);
}

bool occupied(vec3 p) {
  if (CONTRACTION) { float r = max(length(p), 1e-12); if (r > 1.0) p *= (2.0 - 1.0 / r) / r; }
  vec3 u = (p - uLow) / (uHigh - uLow);
  if (any(lessThan(u, vec3(0.0))) || any(greaterThanEqual(u, vec3(1.0)))) return false;
  ivec3 size = textureSize(uOcc, 0);
  ivec3 cell = clamp(ivec3(floor(u * vec3(size.z, size.y, size.x))), ivec3(0), ivec3(size.z, size.y, size.x) - 1);
  return texelFetch(uOcc, cell.zyx, 0).r > 0.0;
}

// Normalised image coordinates (y down) without the lens's distortion: nerfstudio's Newton iteration
// (radial_and_tangential_undistort), step for step.
vec2 undistort(vec2 c) {
  if (uRadial == vec4(0.0) && uTangential == vec2(0.0)) return c;
  float k1 = uRadial.x, k2 = uRadial.y, k3 = uRadial.z, k4 = uRadial.w, p1 = uTangential.x, p2 = uTangential.y;
  float x = c.x, y = c.y;
  for (int i = 0; i < 10; i++) {
    float r = x * x + y * y;
    float d = 1.0 + r * (k1 + r * (k2 + r * (k3 + r * k4)));
    float fx = d * x + 2.0 * p1 * x * y + p2 * (r + 2.0 * x * x) - c.x;
    float fy = d * y + 2.0 * p2 * x * y + p1 * (r + 2.0 * y * y) - c.y;
    float dr = k1 + r * (2.0 * k2 + r * (3.0 * k3 + r * 4.0 * k4));
    float dx = 2.0 * x * dr, dy = 2.0 * y * dr;
    float fxx = d + dx * x + 2.0 * p1 * y + 6.0 * p2 * x;
    float fxy = dy * x + 2.0 * p1 * x + 2.0 * p2 * y;
    float fyx = dx * y + 2.0 * p2 * y + 2.0 * p1 * x;
    float fyy = d + dy * y + 2.0 * p2 * x + 6.0 * p1 * y;
    float den = fyx * fxy - fxx * fyy;
    if (abs(den) > 1e-3) { x += (fx * fyy - fy * fxy) / den; y += (fy * fxx - fx * fyx) / den; }
  }
  return vec2(x, y);
}

vec3 pixelDirection(vec2 pixel) {
  float row = uHeight - pixel.y; // row 0 at the top, as the cameras' images
  vec2 c = undistort(vec2((pixel.x - uIntrinsics.z) / uIntrinsics.x, (row - uIntrinsics.w) / uIntrinsics.y));
  return normalize(uRotation * vec3(c.x, -c.y, -1.0));
}

void main() {
  vec2 pixel = gl_FragCoord.xy + uOffset;
  vec3 d = pixelDirection(pixel);
  vec3 o = uOrigin;
  // the pixel's cone radius at distance 1 (nerfstudio's pixel area, mip-NeRF's radius of it)
  float radius = ${blurred ? "sqrt(length(d - pixelDirection(pixel + vec2(1.0, 0.0))) * length(d - pixelDirection(pixel - vec2(0.0, 1.0)))) * 0.577350269" : "0.0"};
  float delta = (FAR - NEAR) / float(uSamples);
  int first = 0, last = uSamples - 1;
  rayDirection(d);
  vec3 background = BACKGROUND;
  if (LAST_SAMPLE) { // the ray's colour at its last interval's middle
    float t0 = spacingToDistance(float(uSamples - 1) / float(uSamples)), t1 = spacingToDistance(1.0);
    float t = 0.5 * (t0 + t1);
    densityAt(o + d * t, ${glsl(MULTISAMPLE_STD_SCALE / Math.SQRT2)} * radius * t);
    background = colorAt();
  }
  if (uOccupancy && !CONTRACTION) { // only the samples inside the grid's box can count
    vec3 inv = 1.0 / d;
    vec3 t0 = (uLow - o) * inv, t1 = (uHigh - o) * inv;
    float enter = max(max(min(t0.x, t1.x), min(t0.y, t1.y)), min(t0.z, t1.z));
    float exit = min(min(max(t0.x, t1.x), max(t0.y, t1.y)), max(t0.z, t1.z));
    if (exit < enter) { outColor = vec4(background, 1.0); return; }
    first = max(0, int(floor((enter - NEAR) / delta - 0.5)) - 1);
    last = min(uSamples - 1, int(ceil((exit - NEAR) / delta - 0.5)) + 1);
  }
  vec3 color = vec3(0.0);
  float transmittance = 1.0;
  for (int i = first; i <= last; i++) {
    float t = NEAR + (float(i) + 0.5) * delta;
    if (CONTRACTION) {
      float t0 = spacingToDistance(float(i) / float(uSamples)), t1 = spacingToDistance(float(i + 1) / float(uSamples));
      t = 0.5 * (t0 + t1);
      delta = t1 - t0;
    }
    vec3 p = o + d * t;
    if (uOccupancy && !occupied(p)) continue;
    float sigma = densityAt(p, ${glsl(MULTISAMPLE_STD_SCALE / Math.SQRT2)} * radius * t);
    float alpha = 1.0 - exp(-sigma * delta);
    float weight = transmittance * alpha;
    if (weight >= ${glsl(MIN_WEIGHT)}) color += weight * colorAt();
    transmittance *= 1.0 - alpha;
    if (uEarlyTermination && transmittance < ${glsl(TERMINATION)}) break;
  }
  outColor = vec4(clamp(color + transmittance * background, 0.0, 1.0), 1.0);
}
`;
}
