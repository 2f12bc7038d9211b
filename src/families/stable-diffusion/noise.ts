/**
 * Seeded standard-normal noise for the initial latents: the same seed gives
 * the same numbers on every run (xoshiro128** seeded through splitmix32, then
 * Box–Muller in double precision), so a seed reproduces an image bit for bit
 * on one machine and ONNX Runtime build.
 */

function splitmix32(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x9e3779b9) >>> 0;
    let z = state;
    z = Math.imul(z ^ (z >>> 16), 0x85ebca6b) >>> 0;
    z = Math.imul(z ^ (z >>> 13), 0xc2b2ae35) >>> 0;
    return (z ^ (z >>> 16)) >>> 0;
  };
}

/** Uniform doubles in (0, 1) from xoshiro128**. */
export function uniformSource(seed: number): () => number {
  const init = splitmix32(seed);
  let a = init();
  let b = init();
  let c = init();
  let d = init();
  return () => {
    const result = Math.imul(rotl(Math.imul(b, 5) >>> 0, 7), 9) >>> 0;
    const t = (b << 9) >>> 0;
    c ^= a;
    d ^= b;
    b ^= c;
    a ^= d;
    c ^= t;
    d = rotl(d >>> 0, 11);
    a >>>= 0;
    b >>>= 0;
    c >>>= 0;
    // Never 0: Box–Muller takes log(u).
    return (result + 0.5) / 4294967296;
  };
}

function rotl(x: number, k: number): number {
  return ((x << k) | (x >>> (32 - k))) >>> 0;
}

/**
 * A seeded stream of standard-normal values: each call returns the next
 * `count` (pairs from Box–Muller; an odd count drops its pair's second
 * value). The first call gives what gaussianNoise(seed, count) gives; the
 * ancestral sampler draws each step's fresh noise from the same stream.
 */
export function gaussianStream(seed: number): (count: number) => Float32Array {
  const uniform = uniformSource(seed);
  return (count) => {
    const out = new Float32Array(count);
    for (let i = 0; i < count; i += 2) {
      const radius = Math.sqrt(-2 * Math.log(uniform()));
      const angle = 2 * Math.PI * uniform();
      out[i] = radius * Math.cos(angle);
      if (i + 1 < count) out[i + 1] = radius * Math.sin(angle);
    }
    return out;
  };
}

export function gaussianNoise(seed: number, count: number): Float32Array {
  return gaussianStream(seed)(count);
}

/** Seed of image `index` of a request: seed, seed+1, … (wrapping at 2^32). */
export function seedOf(base: number, index: number): number {
  return (base + index) >>> 0;
}
