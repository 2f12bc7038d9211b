/**
 * Float samples → 16-bit PCM, the sample format every speech output starts
 * from (WAV, raw PCM, FLAC at 16 bits, the Opus encoder's input).
 */

const LITTLE_ENDIAN = new Uint8Array(new Uint16Array([1]).buffer)[0] === 1;

/**
 * Floats in [-1, 1] → signed 16-bit integers: ×32768, rounded, clamped to
 * [−32768, 32767] (the inverse of the decoders' ÷32768, so PCM that came from
 * 16-bit integers converts back exactly). NaN becomes 0.
 */
export function floatToInt16(samples: Float32Array): Int16Array {
  const out = new Int16Array(samples.length);
  for (let i = 0; i < samples.length; i++) {
    const v = Math.round(samples[i]! * 32768);
    // NaN fails both comparisons and the Int16Array stores it as 0.
    out[i] = v > 32767 ? 32767 : v < -32768 ? -32768 : v;
  }
  return out;
}

/** The little-endian bytes of `samples`: a view of the same memory on little-endian hosts, a swapped copy otherwise. */
export function int16LeBytes(samples: Int16Array): Uint8Array {
  const view = new Uint8Array(samples.buffer, samples.byteOffset, samples.byteLength);
  if (LITTLE_ENDIAN) return view;
  const out = new Uint8Array(view.length);
  for (let i = 0; i < view.length; i += 2) {
    out[i] = view[i + 1]!;
    out[i + 1] = view[i]!;
  }
  return out;
}
