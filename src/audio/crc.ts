/**
 * The checksums audio containers carry, written by the encoders (encode/)
 * and checked when reading (containers/), table-driven, MSB-first
 * (non-reflected) unless noted:
 *   crc8:  FLAC frame header (x⁸+x²+x+1, init 0);
 *   crc16: FLAC frame (x¹⁶+x¹⁵+x²+1, init 0);
 *   crc16Lame: the MP3 LAME tag (the same polynomial, bit-reflected, init 0);
 *   crc32Ogg: Ogg pages (0x04C11DB7, init 0, no final xor).
 */

function msbTable(poly: number, width: number): Uint32Array {
  const table = new Uint32Array(256);
  const top = 2 ** (width - 1);
  const size = 2 ** width;
  for (let i = 0; i < 256; i++) {
    let r = i * 2 ** (width - 8);
    // Plain arithmetic then >>> 0: a 32-bit value would turn negative under the bitwise operators alone.
    for (let b = 0; b < 8; b++) r = (((r * 2) % size) ^ (r >= top ? poly : 0)) >>> 0;
    table[i] = r;
  }
  return table;
}

const CRC8 = msbTable(0x07, 8);
const CRC16 = msbTable(0x8005, 16);
const CRC32 = msbTable(0x04c11db7, 32);
const CRC16_REFLECTED = (() => {
  const table = new Uint16Array(256);
  for (let i = 0; i < 256; i++) {
    let r = i;
    for (let b = 0; b < 8; b++) r = r & 1 ? (r >>> 1) ^ 0xa001 : r >>> 1;
    table[i] = r;
  }
  return table;
})();

export function crc8(b: Uint8Array, start = 0, end = b.length): number {
  let crc = 0;
  for (let i = start; i < end; i++) crc = CRC8[crc ^ b[i]!]!;
  return crc;
}

/** Running CRC-16 of b[start, end) (pass the previous value to continue where an earlier stretch ended). */
export function crc16(b: Uint8Array, start = 0, end = b.length, crc = 0): number {
  for (let i = start; i < end; i++) crc = ((crc << 8) & 0xffff) ^ CRC16[(crc >>> 8) ^ b[i]!]!;
  return crc;
}

/** Running reflected CRC-16 (pass the previous value to continue over several buffers). */
export function crc16Lame(b: Uint8Array, crc = 0): number {
  for (let i = 0; i < b.length; i++) crc = (crc >>> 8) ^ CRC16_REFLECTED[(crc ^ b[i]!) & 0xff]!;
  return crc;
}

/** Running Ogg CRC-32 (pass the previous value to continue over several buffers). */
export function crc32Ogg(b: Uint8Array, crc = 0): number {
  for (let i = 0; i < b.length; i++) crc = ((crc << 8) ^ CRC32[(crc >>> 24) ^ b[i]!]!) >>> 0;
  return crc;
}
