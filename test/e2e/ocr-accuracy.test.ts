import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { OcrResponse } from '../../src/api/ocr.js';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { cer } from '../fixtures/ocr/cer.js';
import { FONTS, SENTENCES } from '../fixtures/ocr/corpus.js';
import { paragraph, renderText, type Rendered } from '../fixtures/ocr/render.js';

/**
 * Accuracy of the whole pipeline with the bundled, real PP-OCRv4 weights,
 * through the real HTTP server, on images rendered here: recognised text
 * (character error rate), boxes against where the ink really is, and
 * reading order.
 */

let server: TestServer;

beforeAll(async () => {
  server = await startTestServer();
});

afterAll(async () => {
  await server?.stop();
});

async function recognise(png: Buffer): Promise<OcrResponse> {
  const res = await fetch(`${server.url}/v1/ocr`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'ppocr-v4-mobile', image_base64: png.toString('base64') }),
  });
  expect(res.status).toBe(200);
  return (await res.json()) as OcrResponse;
}

/** Each rendered line's ink lies inside the box of the recognised line with the same text. */
function expectBoxesContainInk(result: OcrResponse, rendered: Rendered, slack = 2): void {
  for (const line of rendered.lines) {
    const found = result.lines.find((l) => cer(line.text, l.text) < 0.1);
    expect(found, `no recognised line for '${line.text}'`).toBeDefined();
    const xs = found!.box.map((p) => p[0]);
    const ys = found!.box.map((p) => p[1]);
    const [x0, y0, x1, y1] = line.ink;
    expect(Math.min(...xs)).toBeLessThanOrEqual(x0 + slack);
    expect(Math.min(...ys)).toBeLessThanOrEqual(y0 + slack);
    expect(Math.max(...xs)).toBeGreaterThanOrEqual(x1 - slack);
    expect(Math.max(...ys)).toBeGreaterThanOrEqual(y1 - slack);
  }
}

function expectResponseShape(result: OcrResponse, width: number, height: number): void {
  expect(result.image_width).toBe(width);
  expect(result.image_height).toBe(height);
  expect(Number.isInteger(result.elapsed_ms)).toBe(true);
  for (const line of result.lines) {
    expect(line.score).toBeGreaterThan(0);
    expect(line.score).toBeLessThanOrEqual(1);
    expect(line.box).toHaveLength(4);
    for (const [x, y] of line.box) {
      expect(Number.isInteger(x) && Number.isInteger(y)).toBe(true);
      expect(x).toBeGreaterThanOrEqual(0);
      expect(x).toBeLessThanOrEqual(width);
      expect(y).toBeGreaterThanOrEqual(0);
      expect(y).toBeLessThanOrEqual(height);
    }
    // Clockwise from the top-left.
    const [tl, tr, br, bl] = line.box;
    expect(tr[0]).toBeGreaterThan(tl[0]);
    expect(br[1]).toBeGreaterThan(tr[1]);
    expect(bl[0]).toBeLessThan(br[0]);
  }
}

describe('PP-OCRv4 (bundled) on rendered text', () => {
  it.each(FONTS.map((font, i) => [font, [20, 26, 34][i]!] as const))('reads a paragraph in %s at %ipx', async (font, size) => {
    const texts = SENTENCES.slice(0, 5);
    const rendered = await renderText({ width: size * 40, height: size * 11, lines: paragraph(texts, { x: size, y: size * 2, size, font }) });
    const result = await recognise(rendered.png);
    expectResponseShape(result, size * 40, size * 11);
    expect(cer(rendered.text, result.text)).toBeLessThanOrEqual(0.02);
    // Reading order: lines come out in the order they were printed.
    expect(result.lines.map((l) => l.text)).toHaveLength(texts.length);
    expect(result.text.split('\n')).toHaveLength(texts.length);
    expectBoxesContainInk(result, rendered);
  });

  it('reads light text on a dark background', async () => {
    const rendered = await renderText({
      width: 1000,
      height: 200,
      background: '#1d2433',
      foreground: '#f0f0f0',
      lines: paragraph(SENTENCES.slice(5, 8), { x: 24, y: 50, size: 24, font: 'DejaVu Serif' }),
    });
    const result = await recognise(rendered.png);
    expect(cer(rendered.text, result.text)).toBeLessThanOrEqual(0.02);
    expectBoxesContainInk(result, rendered);
  });

  it('turns an upside-down line with the direction classifier', async () => {
    const rendered = await renderText({
      width: 900,
      height: 160,
      lines: [
        { text: SENTENCES[3], x: 20, y: 50, size: 26 },
        { text: SENTENCES[6], x: 20, y: 120, size: 26, upsideDown: true },
      ],
    });
    const result = await recognise(rendered.png);
    expect(cer(rendered.text, result.text)).toBeLessThanOrEqual(0.02);
    expectBoxesContainInk(result, rendered);
  });

  it('reads a 3000x2000 page (downscaled for detection, boxes in original pixels)', async () => {
    const texts = SENTENCES.slice(0, 12);
    const rendered = await renderText({ width: 3000, height: 2000, lines: paragraph(texts, { x: 120, y: 200, size: 56, lineHeight: 140 }) });
    const result = await recognise(rendered.png);
    expectResponseShape(result, 3000, 2000);
    expect(cer(rendered.text, result.text)).toBeLessThanOrEqual(0.02);
    expectBoxesContainInk(result, rendered, 4);
  });

  it('answers an image with no text with empty text and lines', async () => {
    const { png } = await renderText({ width: 300, height: 200, lines: [] });
    const result = await recognise(png);
    expect(result).toMatchObject({ text: '', lines: [], image_width: 300, image_height: 200 });
  });
});
