import { linearToAlaw, linearToUlaw, type G711Law } from '../g711.js';
import { floatToInt16 } from './pcm16.js';

/** Float samples → G.711 codes, rounded and clamped to 16 bits first exactly as for PCM16 output, so both formats quantize alike. */
export function encodeG711(samples: Float32Array, law: G711Law): Uint8Array {
  const linear = floatToInt16(samples);
  const encode = law === 'ulaw' ? linearToUlaw : linearToAlaw;
  const out = new Uint8Array(linear.length);
  for (let i = 0; i < linear.length; i++) out[i] = encode(linear[i]!);
  return out;
}
