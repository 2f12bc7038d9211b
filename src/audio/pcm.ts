/**
 * Raw PCM helpers for the streaming transcription socket (binary frames of
 * 16-bit little-endian mono samples).
 */

const LITTLE_ENDIAN = new Uint8Array(new Uint16Array([1]).buffer)[0] === 1;

/**
 * 16-bit little-endian PCM → floats in [-1, 1) (sample / 32768). Reads
 * ⌊length / 2⌋ samples; a trailing odd byte is ignored (a caller that splits a
 * stream keeps it for the next piece). Never throws on alignment: an aligned
 * view is read in place as an Int16Array; a view at an odd byte offset (or a
 * big-endian host) is read byte by byte, so no copy is made either way.
 */
export function pcm16ToFloat32(bytes: Uint8Array): Float32Array {
  const count = bytes.length >> 1;
  const out = new Float32Array(count);
  if (LITTLE_ENDIAN && bytes.byteOffset % 2 === 0) {
    const samples = new Int16Array(bytes.buffer, bytes.byteOffset, count);
    for (let i = 0; i < count; i++) out[i] = samples[i]! / 32768;
  } else {
    for (let i = 0, j = 0; i < count; i++, j += 2) out[i] = (((bytes[j]! | (bytes[j + 1]! << 8)) << 16) >> 16) / 32768;
  }
  return out;
}
