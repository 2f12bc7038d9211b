import { mkdir, mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { writeFileWhole } from '../../src/core/write-whole.js';

let dir: string;
beforeEach(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'lserve-whole-'));
});
afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

describe('writeFileWhole', () => {
  it('replaces a file with the new content and leaves no partial file', async () => {
    const target = path.join(dir, 'manifest.json');
    await writeFile(target, 'old');
    await writeFileWhole(target, '{"new": true}', path.join(dir, '.manifest.json.part'));
    expect(await readFile(target, 'utf8')).toBe('{"new": true}');
    expect(await readdir(dir)).toEqual(['manifest.json']);
  });

  it('leaves the old file and no partial one when the write cannot complete', async () => {
    // A non-empty directory in the target's place: the rename fails after the partial file was written.
    const target = path.join(dir, 'taken');
    await mkdir(target);
    await writeFile(path.join(target, 'inside'), 'x');
    await expect(writeFileWhole(target, new Uint8Array([1, 2, 3]))).rejects.toThrow();
    expect((await readdir(dir)).sort()).toEqual(['taken']);
  });
});
