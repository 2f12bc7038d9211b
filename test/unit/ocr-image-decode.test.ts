import sharp from 'sharp';
import { describe, expect, it } from 'vitest';
import { decodeImage } from '../../src/image/decode.js';
import { drawPolygons } from '../../src/image/draw.js';
import { pngHeader } from '../helpers/png.js';

/** Decoding for OCR (src/image): every supported format to upright RGB, every bad input to its typed error. */

const solid = (width: number, height: number, color: string) => sharp({ create: { width, height, channels: 3, background: color } });

function pixel(image: { data: Uint8Array; width: number }, x: number, y: number): number[] {
  const o = (y * image.width + x) * 3;
  return [image.data[o]!, image.data[o + 1]!, image.data[o + 2]!];
}

/** A minimal BMP writer: 24-bit bottom-up, or 8-bit with a palette. */
function bmp(width: number, height: number, colorAt: (x: number, y: number) => [number, number, number], paletted = false): Buffer {
  const bpp = paletted ? 8 : 24;
  const rowBytes = Math.ceil((width * bpp) / 32) * 4;
  const palette: number[][] = [];
  const paletteBytes = paletted ? 256 * 4 : 0;
  const offset = 14 + 40 + paletteBytes;
  const buf = Buffer.alloc(offset + rowBytes * height);
  buf.write('BM', 0, 'ascii');
  buf.writeUInt32LE(buf.length, 2);
  buf.writeUInt32LE(offset, 10);
  buf.writeUInt32LE(40, 14);
  buf.writeInt32LE(width, 18);
  buf.writeInt32LE(height, 22);
  buf.writeUInt16LE(1, 26);
  buf.writeUInt16LE(bpp, 28);
  for (let y = 0; y < height; y++) {
    const row = offset + (height - 1 - y) * rowBytes;
    for (let x = 0; x < width; x++) {
      const [r, g, b] = colorAt(x, y);
      if (paletted) {
        let index = palette.findIndex((p) => p[0] === r && p[1] === g && p[2] === b);
        if (index < 0) index = palette.push([r, g, b]) - 1;
        buf[row + x] = index;
      } else {
        buf[row + x * 3] = b;
        buf[row + x * 3 + 1] = g;
        buf[row + x * 3 + 2] = r;
      }
    }
  }
  palette.forEach(([r, g, b], i) => buf.set([b!, g!, r!, 0], 54 + i * 4));
  return buf;
}


describe('decodeImage', () => {
  it.each(['png', 'jpeg', 'webp', 'tiff', 'gif'] as const)('decodes %s to RGB', async (format) => {
    const input = await solid(30, 20, '#ff0000').toFormat(format).toBuffer();
    const image = await decodeImage(input);
    expect(image).toMatchObject({ width: 30, height: 20, format });
    expect(image.data.length).toBe(30 * 20 * 3);
    const [r, g, b] = pixel(image, 10, 10);
    expect(r).toBeGreaterThan(200);
    expect(g! + b!).toBeLessThan(60);
  });

  it('decodes 24-bit and 8-bit paletted BMP (which libvips cannot)', async () => {
    const color = (x: number): [number, number, number] => (x < 5 ? [255, 0, 0] : [0, 0, 255]);
    for (const paletted of [false, true]) {
      const image = await decodeImage(bmp(10, 3, color, paletted));
      expect(image).toMatchObject({ width: 10, height: 3, format: 'bmp' });
      expect(pixel(image, 0, 0)).toEqual([255, 0, 0]);
      expect(pixel(image, 9, 2)).toEqual([0, 0, 255]);
    }
  });

  it('applies EXIF orientation', async () => {
    const input = await solid(40, 20, '#00ff00').jpeg().withMetadata({ orientation: 6 }).toBuffer();
    expect(await decodeImage(input)).toMatchObject({ width: 20, height: 40 });
  });

  it('takes the first frame of an animation', async () => {
    const red = await solid(20, 10, '#ff0000').png().toBuffer();
    const blue = await solid(20, 10, '#0000ff').png().toBuffer();
    const gif = await sharp([red, blue], { join: { animated: true } }).gif().toBuffer();
    const image = await decodeImage(gif);
    expect(image).toMatchObject({ width: 20, height: 10 });
    expect(pixel(image, 5, 5)[0]).toBeGreaterThan(200);
  });

  it('expands greyscale and composites alpha onto white', async () => {
    const grey = await solid(8, 8, '#808080').greyscale().png().toBuffer();
    expect(pixel(await decodeImage(grey), 1, 1)).toEqual([128, 128, 128]);
    const clear = await sharp({ create: { width: 8, height: 8, channels: 4, background: { r: 0, g: 0, b: 0, alpha: 0 } } }).png().toBuffer();
    expect(pixel(await decodeImage(clear), 1, 1)).toEqual([255, 255, 255]);
  });

  it('maps every bad input to a typed error', async () => {
    const png = await solid(64, 64, '#123456').png().toBuffer();
    await expect(decodeImage(Buffer.alloc(0))).rejects.toMatchObject({ status: 400, code: 'invalid_image', param: 'image' });
    await expect(decodeImage(Buffer.from('just some text, not an image'))).rejects.toMatchObject({ status: 400, code: 'invalid_image', param: 'image' });
    await expect(decodeImage(png.subarray(0, png.length - 40))).rejects.toMatchObject({ status: 400, code: 'invalid_image', param: 'image' });
    await expect(decodeImage(pngHeader(20_000, 20_000))).rejects.toMatchObject({ status: 413, code: 'image_too_large' });
    await expect(decodeImage(png, { maxPixels: 100 })).rejects.toMatchObject({ status: 413 });
    await expect(decodeImage(Buffer.from('BM\0\0\0\0'))).rejects.toMatchObject({ status: 400, code: 'invalid_image', param: 'image' });
    const svg = Buffer.from('<svg xmlns="http://www.w3.org/2000/svg" width="10" height="10"><rect width="10" height="10"/></svg>');
    await expect(decodeImage(svg)).rejects.toMatchObject({ status: 400, code: 'invalid_image', param: 'image' });
  });
});

describe('drawPolygons', () => {
  it('draws outlines on a copy, leaving the original untouched', () => {
    const image = { data: new Uint8Array(20 * 20 * 3).fill(255), width: 20, height: 20 };
    const out = drawPolygons(image, [[[2, 2], [17, 2], [17, 17], [2, 17]]]);
    expect(pixel(out, 2, 10)).toEqual([230, 30, 30]);
    expect(pixel(out, 10, 10)).toEqual([255, 255, 255]);
    expect(pixel(image, 2, 10)).toEqual([255, 255, 255]);
  });
});
