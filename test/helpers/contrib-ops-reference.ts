/**
 * Plain TypeScript implementations of ONNX Runtime's fused `com.microsoft`
 * operators, written from their definitions (the contrib operator schemas
 * in docs/ContribOperators.md and the CUDA kernels' formulas), to check the
 * standard-operator rewrites against. Row-major float tensors; statistics
 * in double precision.
 */

export interface Tensor {
  data: Float32Array;
  dims: number[];
}

const sigmoid = (x: number) => 1 / (1 + Math.exp(-x));

/** erf to about 1e-7 (Abramowitz & Stegun 7.1.26). */
export function erf(x: number): number {
  const sign = x < 0 ? -1 : 1;
  const a = Math.abs(x);
  const t = 1 / (1 + 0.3275911 * a);
  const poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))));
  return sign * (1 - poly * Math.exp(-a * a));
}

export const gelu = (x: number) => 0.5 * x * (1 + erf(x / Math.SQRT2));
/** FastGelu: the tanh approximation, 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))). */
export const fastGelu = (x: number) => 0.5 * x * (1 + Math.tanh(Math.sqrt(2 / Math.PI) * (x + 0.044715 * x ** 3)));

export interface GroupNormOptions {
  groups: number;
  epsilon: number;
  silu: boolean;
  channelsLast: boolean;
}

/** Where element (n, c, pixel p) of a 4-D tensor lives, NHWC or NCHW. */
function layout(dims: number[], channelsLast: boolean) {
  const [n, a, b, c] = dims as [number, number, number, number];
  const channels = channelsLast ? c : a;
  const pixels = channelsLast ? a * b : b * c;
  const at = (i: number, ch: number, p: number) => (channelsLast ? (i * pixels + p) * channels + ch : (i * channels + ch) * pixels + p);
  return { batch: n, channels, pixels, at };
}

/** GroupNorm: gamma·(x − mean)/√(var + ε) + beta per (batch, group), then SiLU if asked. */
export function groupNorm(x: Tensor, gamma: Float32Array, beta: Float32Array, o: GroupNormOptions): Float32Array {
  const { batch, channels, pixels, at } = layout(x.dims, o.channelsLast);
  const per = channels / o.groups;
  const out = new Float32Array(x.data.length);
  for (let n = 0; n < batch; n++) {
    for (let g = 0; g < o.groups; g++) {
      let sum = 0;
      let squares = 0;
      for (let c = g * per; c < (g + 1) * per; c++) {
        for (let p = 0; p < pixels; p++) {
          const v = x.data[at(n, c, p)]!;
          sum += v;
          squares += v * v;
        }
      }
      const count = per * pixels;
      const mean = sum / count;
      const scale = 1 / Math.sqrt(squares / count - mean * mean + o.epsilon);
      for (let c = g * per; c < (g + 1) * per; c++) {
        for (let p = 0; p < pixels; p++) {
          const i = at(n, c, p);
          const y = gamma[c]! * (x.data[i]! - mean) * scale + beta[c]!;
          out[i] = o.silu ? y * sigmoid(y) : y;
        }
      }
    }
  }
  return out;
}

/** SkipGroupNorm: s = x + skip (+ bias), skip full-size, (N,1,1,C)/(N,C,1,1) or (N,C); returns Y and S. */
export function skipGroupNorm(x: Tensor, gamma: Float32Array, beta: Float32Array, skip: Tensor, bias: Float32Array | undefined, o: GroupNormOptions): { y: Float32Array; s: Float32Array } {
  const { batch, channels, pixels, at } = layout(x.dims, o.channelsLast);
  const perImage = skip.data.length === batch * channels;
  const s = new Float32Array(x.data.length);
  for (let n = 0; n < batch; n++) {
    for (let c = 0; c < channels; c++) {
      for (let p = 0; p < pixels; p++) {
        const i = at(n, c, p);
        s[i] = x.data[i]! + (perImage ? skip.data[n * channels + c]! : skip.data[i]!) + (bias ? bias[c]! : 0);
      }
    }
  }
  return { y: groupNorm({ data: s, dims: x.dims }, gamma, beta, o), s };
}

/** BiasSplitGelu: h = x + bias, halves on the last axis, left · gelu(right). */
export function biasSplitGelu(x: Tensor, bias: Float32Array): Float32Array {
  const d = x.dims[x.dims.length - 1]!;
  const half = d / 2;
  const rows = x.data.length / d;
  const out = new Float32Array(rows * half);
  for (let r = 0; r < rows; r++) {
    for (let j = 0; j < half; j++) {
      const left = x.data[r * d + j]! + bias[j]!;
      const right = x.data[r * d + half + j]! + bias[half + j]!;
      out[r * half + j] = left * gelu(right);
    }
  }
  return out;
}

/** BiasAdd: x + bias (last axis) + skip. */
export function biasAdd(x: Tensor, bias: Float32Array, skip: Float32Array): Float32Array {
  return x.data.map((v, i) => v + bias[i % bias.length]! + skip[i]!);
}

/** GemmFastGelu: FastGelu(X·W + bias), X [M, K], W [K, N]. */
export function gemmFastGelu(x: Tensor, w: Tensor, bias: Float32Array | undefined): Float32Array {
  const [m, k] = x.dims as [number, number];
  const n = w.dims[1]!;
  const out = new Float32Array(m * n);
  for (let i = 0; i < m; i++) {
    for (let j = 0; j < n; j++) {
      let sum = bias ? bias[j]! : 0;
      for (let t = 0; t < k; t++) sum += x.data[i * k + t]! * w.data[t * n + j]!;
      out[i * n + j] = fastGelu(sum);
    }
  }
  return out;
}

export interface ConvOptions {
  pads: [number, number, number, number];
  strides: [number, number];
  dilations: [number, number];
  group: number;
}

/** NhwcConv: x [N, H, W, C], w [M, kH, kW, C/group], b [M] → [N, OH, OW, M]. */
export function nhwcConv(x: Tensor, w: Tensor, b: Float32Array | undefined, o: ConvOptions): Tensor {
  const [n, h, wd, c] = x.dims as [number, number, number, number];
  const [m, kh, kw, cg] = w.dims as [number, number, number, number];
  const oh = Math.floor((h + o.pads[0] + o.pads[2] - o.dilations[0] * (kh - 1) - 1) / o.strides[0]) + 1;
  const ow = Math.floor((wd + o.pads[1] + o.pads[3] - o.dilations[1] * (kw - 1) - 1) / o.strides[1]) + 1;
  const outPerGroup = m / o.group;
  const out = new Float32Array(n * oh * ow * m);
  for (let i = 0; i < n; i++) {
    for (let y = 0; y < oh; y++) {
      for (let x0 = 0; x0 < ow; x0++) {
        for (let f = 0; f < m; f++) {
          const g = Math.floor(f / outPerGroup);
          let sum = b ? b[f]! : 0;
          for (let ky = 0; ky < kh; ky++) {
            const iy = y * o.strides[0] - o.pads[0] + ky * o.dilations[0];
            if (iy < 0 || iy >= h) continue;
            for (let kx = 0; kx < kw; kx++) {
              const ix = x0 * o.strides[1] - o.pads[1] + kx * o.dilations[1];
              if (ix < 0 || ix >= wd) continue;
              for (let ch = 0; ch < cg; ch++) sum += x.data[((i * h + iy) * wd + ix) * c + g * cg + ch]! * w.data[((f * kh + ky) * kw + kx) * cg + ch]!;
            }
          }
          out[((i * oh + y) * ow + x0) * m + f] = sum;
        }
      }
    }
  }
  return { data: out, dims: [n, oh, ow, m] };
}

/** MultiHeadAttention over unpacked q [B, S, D], k [B, L, D], v [B, L, Dv] (plus bias [D + D + Dv]): softmax(q·kᵀ/√(D/heads))·v per head. */
export function multiHeadAttention(q: Tensor, k: Tensor, v: Tensor, heads: number, bias?: Float32Array): Float32Array {
  const [batch, s, d] = q.dims as [number, number, number];
  const l = k.dims[1]!;
  const dv = v.dims[2]!;
  const hd = d / heads;
  const hv = dv / heads;
  const qb = (i: number) => (bias ? bias[i % d]! : 0);
  const kb = (i: number) => (bias ? bias[d + (i % d)]! : 0);
  const vb = (i: number) => (bias ? bias[2 * d + (i % dv)]! : 0);
  const out = new Float32Array(batch * s * dv);
  for (let b = 0; b < batch; b++) {
    for (let h = 0; h < heads; h++) {
      for (let i = 0; i < s; i++) {
        const scores = new Float64Array(l);
        for (let j = 0; j < l; j++) {
          let dot = 0;
          for (let t = 0; t < hd; t++) {
            const qi = (b * s + i) * d + h * hd + t;
            const ki = (b * l + j) * d + h * hd + t;
            dot += (q.data[qi]! + qb(qi)) * (k.data[ki]! + kb(ki));
          }
          scores[j] = dot / Math.sqrt(hd);
        }
        const max = Math.max(...scores);
        let total = 0;
        for (let j = 0; j < l; j++) total += scores[j] = Math.exp(scores[j]! - max);
        for (let t = 0; t < hv; t++) {
          let sum = 0;
          for (let j = 0; j < l; j++) {
            const vi = (b * l + j) * dv + h * hv + t;
            sum += (scores[j]! / total) * (v.data[vi]! + vb(vi));
          }
          out[(b * s + i) * dv + h * hv + t] = sum;
        }
      }
    }
  }
  return out;
}

/** Slice `index` of axis 3 of a packed [B, S, N, P, H] tensor, as [B, S, N·H]. */
export function unpack(packed: Tensor, index: number): Tensor {
  const [b, s, n, p, h] = packed.dims as [number, number, number, number, number];
  const out = new Float32Array(b * s * n * h);
  for (let r = 0; r < b * s; r++) for (let head = 0; head < n; head++) for (let t = 0; t < h; t++) out[(r * n + head) * h + t] = packed.data[((r * n + head) * p + index) * h + t]!;
  return { data: out, dims: [b, s, n * h] };
}
