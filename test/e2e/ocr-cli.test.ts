import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import sharp from 'sharp';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runCli } from '../helpers/cli.js';
import { renderOneLine } from '../fixtures/ocr/corpus.js';
import { cer } from '../fixtures/ocr/cer.js';

/** `lserve ocr` as a user runs it (built CLI, bundled PP-OCRv4 weights). */

let dir: string;
let home: string;
const texts = ['Receipts are read offline.', 'Second image, second line.'];

beforeAll(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'lserve-ocr-cli-'));
  home = path.join(dir, 'home');
  for (const [i, text] of texts.entries()) await writeFile(path.join(dir, `scan-${i}.png`), (await renderOneLine(text, 26)).png);
});

afterAll(async () => {
  if (dir) await rm(dir, { recursive: true, force: true });
});

const cli = (args: string[], input?: Buffer) => runCli(['--home', home, 'ocr', ...args], { input, timeoutMs: 60_000 });

describe('lserve ocr', () => {
  it('prints the text of an image, and the full response with --json', async () => {
    const text = await cli([path.join(dir, 'scan-0.png')]);
    expect(text.code).toBe(0);
    expect(cer(texts[0]!, text.stdout.trim())).toBeLessThanOrEqual(0.02);
    const json = await cli(['--json', '--model', 'ppocr-v4-mobile', path.join(dir, 'scan-0.png')]);
    expect(json.code).toBe(0);
    const body = JSON.parse(json.stdout) as { text: string; lines: Array<{ box: number[][] }>; image_width: number };
    expect(body.text).toBe(text.stdout.trim());
    expect(body.lines[0]!.box).toHaveLength(4);
    expect(body.image_width).toBeGreaterThan(0);
  });

  it('reads stdin with -, expands globs, and keeps going past an unreadable file (exit 1)', async () => {
    const piped = await cli(['-'], await readFile(path.join(dir, 'scan-1.png')));
    expect(piped.code).toBe(0);
    expect(cer(texts[1]!, piped.stdout.trim())).toBeLessThanOrEqual(0.02);

    const many = await cli([path.join(dir, 'missing.png'), path.join(dir, 'scan-*.png')]);
    expect(many.code).toBe(1);
    expect(many.stderr).toMatch(/missing\.png: no such file/);
    expect(many.stdout).toContain(`==> ${path.join(dir, 'scan-0.png')} <==`);
    expect(many.stdout).toContain(`==> ${path.join(dir, 'scan-1.png')} <==`);
    expect(cer(texts.join('\n'), many.stdout.split('\n').filter((l) => l && !l.startsWith('==>')).join('\n'))).toBeLessThanOrEqual(0.02);
  });

  it('draws the detected boxes onto a copy with --boxes -o', async () => {
    const out = path.join(dir, 'boxes.png');
    const result = await cli(['--boxes', '-o', out, path.join(dir, 'scan-0.png')]);
    expect(result.code).toBe(0);
    const drawn = await sharp(out).raw().toBuffer({ resolveWithObject: true });
    const original = await sharp(path.join(dir, 'scan-0.png')).metadata();
    expect(drawn.info.width).toBe(original.width);
    // The box outline is red: some pixels are strongly red now.
    let red = 0;
    for (let i = 0; i < drawn.data.length; i += drawn.info.channels) if (drawn.data[i]! > 200 && drawn.data[i + 1]! < 60) red++;
    expect(red).toBeGreaterThan(50);
  });

  it('fails clearly on an unknown model and on an image that is not an image', async () => {
    const unknown = await cli(['--model', 'nope', path.join(dir, 'scan-0.png')]);
    expect(unknown.code).not.toBe(0);
    expect(unknown.stderr).toMatch(/does not exist/);
    await writeFile(path.join(dir, 'notes.txt'), 'not an image');
    const bad = await cli([path.join(dir, 'notes.txt')]);
    expect(bad.code).toBe(1);
    expect(bad.stderr).toMatch(/notes\.txt: Not an image/);
  });
});
