import { describe, expect, it } from 'vitest';
import { buildCharset, parseDictionary } from '../../src/families/ppocr/model.js';
import { ctcGreedyDecode } from '../../src/families/ppocr/ctc.js';
import { dbPostprocess } from '../../src/families/ppocr/db.js';
import { detectionSize } from '../../src/families/ppocr/detect.js';
import { convexHull, minAreaRect, orderCorners, rectCorners, unclipRect } from '../../src/families/ppocr/geometry.js';
import { lineCrop, padQuad, turn180 } from '../../src/families/ppocr/lines.js';
import { ocrOptions } from '../../src/families/ppocr/options.js';
import { readingRows } from '../../src/families/ppocr/order.js';
import { decodeBase64Payload } from '../../src/http/remote-input.js';
import type { Point, Quad } from '../../src/image/types.js';
import { warpQuad } from '../../src/image/warp.js';

const options = ocrOptions({}, 'test');

describe('geometry', () => {
  it('convex hull drops interior and collinear points', () => {
    const hull = convexHull([[0, 0], [2, 0], [4, 0], [4, 4], [0, 4], [2, 2], [1, 3]]);
    expect(hull).toHaveLength(4);
    expect(hull).toEqual(expect.arrayContaining([[0, 0], [4, 0], [4, 4], [0, 4]]));
  });

  it('min-area rect of a rotated rectangle recovers its size and corners', () => {
    const angle = (20 * Math.PI) / 180;
    const [c, s] = [Math.cos(angle), Math.sin(angle)];
    const corners: Point[] = [[-50, -10], [50, -10], [50, 10], [-50, 10]].map(([x, y]) => [100 + x! * c - y! * s, 80 + x! * s + y! * c]);
    const rect = minAreaRect([...corners, [100, 80], [110, 82]]);
    expect(Math.max(rect.width, rect.height)).toBeCloseTo(100, 6);
    expect(Math.min(rect.width, rect.height)).toBeCloseTo(20, 6);
    const ordered = orderCorners(rectCorners(rect));
    // Clockwise from the top-left: TL has the smallest x of the two leftmost points' upper one.
    expect(ordered[0][0]).toBeLessThan(ordered[1][0]);
    expect(ordered[3][1]).toBeGreaterThan(ordered[0][1]);
    expect(ordered[2][1]).toBeGreaterThan(ordered[1][1]);
  });

  it('unclip grows every side by area·ratio/perimeter', () => {
    const grown = unclipRect({ center: [0, 0], width: 100, height: 10, axis: [1, 0] }, 1.5);
    const d = (100 * 10 * 1.5) / 220;
    expect(grown.width).toBeCloseTo(100 + 2 * d);
    expect(grown.height).toBeCloseTo(10 + 2 * d);
  });

  it('pads a quad along its own axes and turns crops', () => {
    const quad: Quad = [[10, 10], [110, 10], [110, 30], [10, 30]];
    expect(padQuad(quad, 0.5)).toEqual([[0, 0], [120, 0], [120, 40], [0, 40]]);
    const crop = lineCrop(quad);
    expect(crop.ratio).toBeCloseTo(5);
    expect(turn180(crop).sample[0]).toEqual([110, 30]);
    // A tall box is read rotated: its ratio is height / width.
    expect(lineCrop([[0, 0], [20, 0], [20, 100], [0, 100]]).ratio).toBeCloseTo(5);
  });
});

describe('DB post-processing', () => {
  function map(width: number, height: number, rects: Array<[number, number, number, number, number]>): Float32Array {
    const prob = new Float32Array(width * height);
    for (const [x0, y0, x1, y1, p] of rects) for (let y = y0; y < y1; y++) for (let x = x0; x < x1; x++) prob[y * width + x] = p;
    return prob;
  }
  const db = { threshold: 0.3, boxThreshold: 0.6, unclipRatio: 1.5, maxCandidates: 1000, minSize: 3 };

  it('finds one box per region, drops weak and tiny regions, and unclips', async () => {
    const prob = map(200, 100, [
      [20, 20, 120, 30, 0.9], // a text line
      [20, 60, 80, 70, 0.4], // above threshold but weak: dropped by box score
      [150, 80, 152, 82, 0.99], // too small
    ]);
    const boxes = await dbPostprocess(prob, 200, 100, db);
    expect(boxes).toHaveLength(1);
    const [tl, tr, br, bl] = boxes[0]!.quad;
    expect(boxes[0]!.score).toBeCloseTo(0.9, 5);
    // Region pixel centres span x 20..119, y 20..29; unclip adds ~7.9 per side.
    const d = (99 * 9 * 1.5) / (2 * (99 + 9));
    expect(tl[0]).toBeCloseTo(20 - d, 4);
    expect(tl[1]).toBeCloseTo(20 - d, 4);
    expect(br[0]).toBeCloseTo(119 + d, 4);
    expect(br[1]).toBeCloseTo(29 + d, 4);
    expect(tr[0]).toBeGreaterThan(tl[0]);
    expect(bl[1]).toBeGreaterThan(tl[1]);
  });

  it('returns nothing for an empty map', async () => {
    expect(await dbPostprocess(new Float32Array(64 * 64), 64, 64, db)).toEqual([]);
  });
});

describe('CTC decoding', () => {
  const charset = ['', 'a', 'b', ' '];
  function probs(steps: number[][]): Float32Array {
    return Float32Array.from(steps.flat());
  }

  it('collapses repeats, drops blanks, keeps spaces and averages kept probabilities', () => {
    // a a _ a b _ ' ' b
    const p = probs([
      [0.1, 0.8, 0.05, 0.05],
      [0.1, 0.6, 0.2, 0.1],
      [0.9, 0.05, 0.03, 0.02],
      [0.1, 0.7, 0.1, 0.1],
      [0.1, 0.1, 0.7, 0.1],
      [0.9, 0.05, 0.03, 0.02],
      [0.1, 0.1, 0.1, 0.7],
      [0.1, 0.1, 0.7, 0.1],
    ]);
    const decoded = ctcGreedyDecode(p, 0, 8, 4, charset);
    expect(decoded.text).toBe('aab b');
    expect(decoded.score).toBeCloseTo((0.8 + 0.7 + 0.7 + 0.7 + 0.7) / 5, 6);
  });

  it('decodes only the steps asked for, from an offset', () => {
    const p = probs([[0.9, 0.1, 0, 0], [0.1, 0.1, 0.8, 0], [0.1, 0.9, 0, 0]]);
    expect(ctcGreedyDecode(p, 4, 1, 4, charset).text).toBe('b');
    expect(ctcGreedyDecode(p, 0, 1, 4, charset)).toEqual({ text: '', score: 0 });
  });

  it('builds the class table from a PP-OCR dictionary', () => {
    const dict = parseDictionary('\uFEFFa\r\nb\n \n');
    expect(dict).toEqual(['a', 'b', ' ']);
    expect(buildCharset(dict, 5, 'm')).toEqual(['', 'a', 'b', ' ', ' ']);
    expect(buildCharset(dict, 4, 'm')).toEqual(['', 'a', 'b', ' ']);
    expect(() => buildCharset(dict, 99, 'm')).toThrow(/99 output classes/);
  });
});

describe('detector input size and reading order', () => {
  it('scales into the detector limits in multiples of 32', () => {
    expect(detectionSize(3000, 2000, options)).toEqual({ width: 960, height: 640 });
    expect(detectionSize(500, 40, options)).toEqual({ width: 800, height: 64 });
    expect(detectionSize(10, 10, options)).toEqual({ width: 64, height: 64 });
  });

  it('groups boxes into rows and orders rows top to bottom, boxes left to right', () => {
    const box = (x: number, y: number, w = 50, h = 20): { quad: Quad; id: string } => ({ quad: [[x, y], [x + w, y], [x + w, y + h], [x, y + h]], id: `${x},${y}` });
    const rows = readingRows([box(200, 103), box(10, 100), box(10, 140), box(300, 97)]);
    expect(rows.map((r) => r.map((b) => b.id))).toEqual([['10,100', '200,103', '300,97'], ['10,140']]);
  });
});

describe('perspective warp', () => {
  it('samples an axis-aligned quad exactly', () => {
    const width = 4;
    const data = new Uint8Array(width * 2 * 3);
    for (let i = 0; i < width * 2; i++) data.fill(i * 10, i * 3, i * 3 + 3);
    const out = warpQuad({ data, width, height: 2 }, [[0, 0], [4, 0], [4, 2], [0, 2]], 4, 2);
    expect([...out.data]).toEqual([...data]);
    const flipped = warpQuad({ data, width, height: 2 }, [[4, 2], [0, 2], [0, 0], [4, 0]], 4, 2);
    expect(flipped.data[0]).toBe(70);
  });
});

describe('base64 payloads', () => {
  it('accepts raw base64, URL-safe base64 and data URIs', () => {
    const bytes = Buffer.from([0xfb, 0xff, 0x00, 0x10]);
    expect(decodeBase64Payload(bytes.toString('base64'), 'p')).toEqual(bytes);
    expect(decodeBase64Payload(bytes.toString('base64url'), 'p')).toEqual(bytes);
    expect(decodeBase64Payload(`data:image/png;base64,${bytes.toString('base64')}`, 'p', 'image/')).toEqual(bytes);
  });

  it('rejects bad alphabets, wrong media types and empty payloads with 400s', () => {
    expect(() => decodeBase64Payload('not base64!!', 'p')).toThrow(expect.objectContaining({ status: 400, code: 'invalid_base64' }));
    expect(() => decodeBase64Payload('data:text/plain;base64,aGk=', 'p', 'image/')).toThrow(expect.objectContaining({ code: 'invalid_media_type' }));
    expect(() => decodeBase64Payload('data:image/png,rawdata', 'p', 'image/')).toThrow(expect.objectContaining({ code: 'invalid_base64' }));
    expect(() => decodeBase64Payload('  ', 'p')).toThrow(expect.objectContaining({ code: 'empty_image' }));
  });
});
