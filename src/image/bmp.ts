import { InvalidMediaError } from '../core/errors.js';

/**
 * A BMP decoder: libvips (and so sharp's prebuilt binaries) cannot read BMP,
 * yet scanners and Windows tools still produce it. Covers what those write:
 * BITMAPINFOHEADER and later (V4/V5), 1/4/8-bit palettes, 16/24/32-bit,
 * BI_RGB and BI_BITFIELDS, bottom-up and top-down. RLE is refused.
 */

export interface DecodedBmp {
  data: Uint8Array; // RGBA
  width: number;
  height: number;
}

const BI_RGB = 0;
const BI_BITFIELDS = 3;
const BI_ALPHABITFIELDS = 6;

export function isBmp(buf: Uint8Array): boolean {
  return buf.length >= 2 && buf[0] === 0x42 && buf[1] === 0x4d;
}

function corrupt(why: string): InvalidMediaError {
  return new InvalidMediaError('image', `Corrupt or unsupported BMP image: ${why}`);
}

/** Decodes a BMP; `maxPixels` is checked before any pixel buffer is allocated. */
export function decodeBmp(buf: Uint8Array, maxPixels: number, onTooLarge: (w: number, h: number) => Error): DecodedBmp {
  if (buf.length < 26) throw corrupt('file too short');
  const view = new DataView(buf.buffer, buf.byteOffset, buf.byteLength);
  const pixelOffset = view.getUint32(10, true);
  const headerSize = view.getUint32(14, true);
  if (headerSize < 40 || 14 + headerSize > buf.length) throw corrupt(`unsupported header size ${headerSize}`);
  const width = view.getInt32(18, true);
  const rawHeight = view.getInt32(22, true);
  const bpp = view.getUint16(28, true);
  const compression = view.getUint32(30, true);
  const topDown = rawHeight < 0;
  const height = Math.abs(rawHeight);
  if (width <= 0 || height <= 0) throw corrupt(`invalid size ${width}x${rawHeight}`);
  if (width * height > maxPixels) throw onTooLarge(width, height);
  if (![1, 4, 8, 16, 24, 32].includes(bpp)) throw corrupt(`unsupported bit depth ${bpp}`);
  if (compression !== BI_RGB && compression !== BI_BITFIELDS && compression !== BI_ALPHABITFIELDS) {
    throw corrupt(`compression ${compression} (RLE) is not supported`);
  }

  let masks: [number, number, number, number];
  if (compression === BI_RGB) {
    masks = bpp === 16 ? [0x7c00, 0x03e0, 0x001f, 0] : [0xff0000, 0xff00, 0xff, 0];
  } else {
    // Masks follow a 40-byte header, or sit inside a V2+ header.
    const at = 14 + 40;
    if (at + 12 > buf.length) throw corrupt('bitfield masks missing');
    const alpha = headerSize >= 56 || compression === BI_ALPHABITFIELDS ? view.getUint32(at + 12, true) : 0;
    masks = [view.getUint32(at, true), view.getUint32(at + 4, true), view.getUint32(at + 8, true), alpha];
  }

  let palette: Uint8Array | undefined;
  if (bpp <= 8) {
    const colors = view.getUint32(46, true) || 1 << bpp;
    const start = 14 + headerSize + (compression === BI_BITFIELDS && headerSize === 40 ? 12 : 0);
    if (start + colors * 4 > buf.length) throw corrupt('palette truncated');
    palette = buf.subarray(start, start + colors * 4);
  }

  const rowBytes = Math.ceil((width * bpp) / 32) * 4;
  if (pixelOffset + rowBytes * height > buf.length) throw corrupt('pixel data truncated');
  const out = new Uint8Array(width * height * 4);
  const channel = masks.map((m) => maskInfo(m));
  for (let y = 0; y < height; y++) {
    const row = pixelOffset + (topDown ? y : height - 1 - y) * rowBytes;
    let o = y * width * 4;
    for (let x = 0; x < width; x++, o += 4) {
      if (palette) {
        const bit = x * bpp;
        const byte = buf[row + (bit >> 3)]!;
        const index = bpp === 8 ? byte : (byte >> (8 - bpp - (bit & 7))) & ((1 << bpp) - 1);
        const p = index * 4;
        if (p + 2 >= palette.length) throw corrupt(`palette index ${index} out of range`);
        out[o] = palette[p + 2]!;
        out[o + 1] = palette[p + 1]!;
        out[o + 2] = palette[p]!;
        out[o + 3] = 255;
      } else if (bpp === 24) {
        const p = row + x * 3;
        out[o] = buf[p + 2]!;
        out[o + 1] = buf[p + 1]!;
        out[o + 2] = buf[p]!;
        out[o + 3] = 255;
      } else {
        const p = row + x * (bpp / 8);
        const v = bpp === 16 ? view.getUint16(p, true) : view.getUint32(p, true);
        for (let c = 0; c < 4; c++) {
          const info = channel[c]!;
          out[o + c] = info ? info.scale(v) : 255;
        }
      }
    }
  }
  return { data: out, width, height };
}

function maskInfo(mask: number): { scale: (v: number) => number } | undefined {
  if (mask === 0) return undefined;
  let shift = 0;
  while (((mask >>> shift) & 1) === 0) shift++;
  const max = mask >>> shift;
  return { scale: (v) => Math.round((((v & mask) >>> shift) * 255) / max) };
}
