import { execFile } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';

const root = new URL('../../', import.meta.url);

describe("the repository's npm configuration", () => {
  it('gives npm nothing to warn about: every npm and npx call in a clone is quiet', async () => {
    const { stdout, stderr } = await promisify(execFile)('npm', ['pkg', 'get', 'name'], { cwd: root, env: { ...process.env, npm_config_loglevel: 'warn' } });
    expect(stdout.trim()).toBe('"lserve"');
    expect(stderr).not.toMatch(/npm warn/i);
  });

  it("keeps onnxruntime-node's CUDA download out of an install through npm's script policy, not an unknown config key", () => {
    const pkg = JSON.parse(readFileSync(new URL('package.json', root), 'utf8')) as { allowScripts: Record<string, boolean> };
    expect(pkg.allowScripts['onnxruntime-node']).toBe(false);
    expect(pkg.allowScripts['better-sqlite3']).toBe(true);
  });
});
