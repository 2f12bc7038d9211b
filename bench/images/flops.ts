import type { ClipTextShape } from '../../test/fixtures/onnx/sd-turbo/clip.js';
import type { UnetShape } from '../../test/fixtures/onnx/sd-turbo/unet.js';
import type { VaeShape } from '../../test/fixtures/onnx/sd-turbo/vae.js';

/**
 * Floating-point operations (multiply and add counted as 2) of the matrix
 * work in one run of each graph: convolutions, linear layers and the two
 * attention products, walked in the same order as the fixture builders
 * (test/fixtures/onnx/sd-turbo/*). Normalisations, activations and softmax
 * are memory-bound and left out: what is counted is what a GEMM kernel does.
 */

const conv = (k: number, cin: number, cout: number, pixels: number) => 2 * k * k * cin * cout * pixels;
const linear = (tokens: number, cin: number, cout: number) => 2 * tokens * cin * cout;
/** q·kᵀ and p·v for `n` queries over `m` keys of width `c` (all heads). */
const attention = (n: number, m: number, c: number) => 2 * 2 * n * m * c;

export function unetFlops(shape: UnetShape, h: number, w: number, contextLength = 77): number {
  let flops = 0;
  const c0 = shape.channels[0]!;
  const temb = 4 * c0;
  flops += linear(1, c0, temb) + linear(1, temb, temb);
  const resnet = (cin: number, cout: number, px: number) => conv(3, cin, cout, px) + conv(3, cout, cout, px) + linear(1, temb, cout) + (cin === cout ? 0 : conv(1, cin, cout, px));
  const transformer = (c: number, px: number) =>
    2 * linear(px, c, c) + // proj_in, proj_out
    4 * linear(px, c, c) + attention(px, px, c) + // self-attention q, k, v, out
    2 * linear(px, c, c) + 2 * linear(contextLength, shape.crossDim, c) + attention(px, contextLength, c) + // cross-attention
    linear(px, c, 8 * c) + linear(px, 4 * c, c); // GEGLU feed-forward
  let px = h * w;
  flops += conv(3, shape.latentChannels, c0, px);
  const skips: number[] = [c0];
  let channels = c0;
  const levels = shape.channels.length;
  shape.channels.forEach((c, level) => {
    for (let j = 0; j < shape.layersPerBlock; j++) {
      flops += resnet(channels, c, px);
      channels = c;
      if (shape.attention[level]) flops += transformer(c, px);
      skips.push(c);
    }
    if (level < levels - 1) {
      px /= 4;
      flops += conv(3, c, c, px);
      skips.push(c);
    }
  });
  const top = shape.channels[levels - 1]!;
  flops += 2 * resnet(top, top, px) + transformer(top, px);
  for (let i = 0; i < levels; i++) {
    const level = levels - 1 - i;
    const c = shape.channels[level]!;
    for (let j = 0; j <= shape.layersPerBlock; j++) {
      flops += resnet(channels + skips.pop()!, c, px);
      channels = c;
      if (shape.attention[level]) flops += transformer(c, px);
    }
    if (level > 0) {
      px *= 4;
      flops += conv(3, c, c, px);
    }
  }
  return flops + conv(3, c0, shape.latentChannels, px);
}

export function vaeDecoderFlops(shape: VaeShape, h: number, w: number): number {
  const channels = [...shape.channels].reverse();
  let px = h * w;
  const lc = shape.latentChannels;
  const resnet = (cin: number, cout: number) => conv(3, cin, cout, px) + conv(3, cout, cout, px) + (cin === cout ? 0 : conv(1, cin, cout, px));
  let flops = conv(1, lc, lc, px) + conv(3, lc, channels[0]!, px);
  const top = channels[0]!;
  flops += 2 * resnet(top, top) + 4 * linear(px, top, top) + attention(px, px, top);
  let cin = top;
  channels.forEach((c, i) => {
    for (let j = 0; j <= shape.layersPerBlock; j++) {
      flops += resnet(cin, c);
      cin = c;
    }
    if (i < channels.length - 1) {
      px *= 4;
      flops += conv(3, c, c, px);
    }
  });
  return flops + conv(3, cin, 3, px);
}

export function textEncoderFlops(shape: ClipTextShape, tokens = 77): number {
  const perLayer = 4 * linear(tokens, shape.width, shape.width) + attention(tokens, tokens, shape.width) + linear(tokens, shape.width, shape.ffn) + linear(tokens, shape.ffn, shape.width);
  return shape.layers * perLayer;
}

/** TAESD's decoder: 64-channel 3x3 convs, blocks 3-3-3-1 at 1x, 2x, 4x, 8x the latent size. */
export function taesdFlops(h: number, w: number, channels = 64): number {
  let px = h * w;
  let flops = conv(3, 4, channels, px);
  [3, 3, 3, 1].forEach((blocks, stage) => {
    flops += blocks * 3 * conv(3, channels, channels, px);
    if (stage < 3) {
      px *= 4;
      flops += conv(3, channels, channels, px);
    }
  });
  return flops + conv(3, channels, 3, px);
}
