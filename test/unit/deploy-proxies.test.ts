import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { serveCommand } from '../../src/cli/commands/serve.js';
import { parseByteSize } from '../../src/core/units.js';

/**
 * deploy/haproxy.cfg and deploy/nginx.conf, checked by the proxies
 * themselves (`haproxy -c`, `nginx -t`: Debian's haproxy and nginx packages,
 * which .ci/run installs), each beside a broken copy that must fail, so a
 * check that passes everything cannot pass for one that works.
 */

const DEPLOY = fileURLToPath(new URL('../../deploy/', import.meta.url));

/** The tool on PATH or in the sbin folders (where Debian puts both, off a normal user's PATH). */
function findTool(name: string): string | undefined {
  const dirs = [...(process.env.PATH ?? '').split(path.delimiter), '/usr/sbin', '/usr/local/sbin', '/sbin'];
  return dirs.map((dir) => path.join(dir, name)).find((file) => existsSync(file));
}

const haproxy = findTool('haproxy');
const nginx = findTool('nginx');

const scratch = mkdtempSync(path.join(os.tmpdir(), 'lserve-deploy-'));
afterAll(() => rmSync(scratch, { recursive: true, force: true }));

/** A copy of a deploy file with one edit, in the scratch folder; the edit must apply. */
function brokenCopy(name: string, from: string, to: string): string {
  const text = readFileSync(path.join(DEPLOY, name), 'utf8');
  expect(text).toContain(from);
  const file = path.join(scratch, `broken-${name}`);
  writeFileSync(file, text.replace(from, to));
  return file;
}

/** Runs a check; what it reports goes to stderr. Its stdout is /dev/null: nginx opens /dev/stdout (the access log), which a socket, as a piped stdout is here, refuses. */
function run(tool: string, args: string[]): { status: number | null; output: string } {
  const result = spawnSync(tool, args, { encoding: 'utf8', stdio: ['ignore', 'ignore', 'pipe'] });
  return { status: result.status, output: result.stderr };
}

describe.skipIf(!haproxy)('deploy/haproxy.cfg (needs haproxy: apt-get install haproxy)', () => {
  const check = (file: string) => run(haproxy!, ['-c', '-f', file]);

  it('is valid to haproxy -c', () => {
    const { status, output } = check(path.join(DEPLOY, 'haproxy.cfg'));
    expect(status, output).toBe(0);
  });

  it('checks /ready, and a broken copy fails', () => {
    expect(readFileSync(path.join(DEPLOY, 'haproxy.cfg'), 'utf8')).toMatch(/http-check send meth GET uri \/ready /);
    const { status, output } = check(brokenCopy('haproxy.cfg', 'timeout tunnel 1h', 'timeout tunnel forever'));
    expect(status).not.toBe(0);
    expect(output).toMatch(/tunnel/);
  });
});

describe.skipIf(!nginx)('deploy/nginx.conf (needs nginx: apt-get install nginx)', () => {
  // Errors to stderr, and the pid file (which -t opens) in the scratch folder: the check needs no root.
  const check = (file: string) => run(nginx!, ['-t', '-q', '-e', 'stderr', '-g', `pid ${path.join(scratch, 'nginx.pid')};`, '-c', file]);

  it('is valid to nginx -t', () => {
    const { status, output } = check(path.join(DEPLOY, 'nginx.conf'));
    expect(status, output).toBe(0);
  });

  it('streams and upgrades, and a broken copy fails', () => {
    const text = readFileSync(path.join(DEPLOY, 'nginx.conf'), 'utf8');
    for (const line of ['proxy_buffering off;', 'proxy_http_version 1.1;', 'proxy_set_header Upgrade $http_upgrade;', 'proxy_set_header Connection $connection_upgrade;']) expect(text).toContain(line);
    const { status, output } = check(brokenCopy('nginx.conf', 'proxy_buffering off;', 'proxy_buffering sometimes;'));
    expect(status).not.toBe(0);
    expect(output).toMatch(/proxy_buffering/);
  });
});

it("deploy/nginx.conf lets through every upload lserve takes by default (so lserve answers the 413, in its shape)", () => {
  const limit = /client_max_body_size (\d+m);/.exec(readFileSync(path.join(DEPLOY, 'nginx.conf'), 'utf8'))?.[1];
  expect(limit).toBeDefined();
  const option = serveCommand().options.find((o) => o.long === '--max-upload');
  expect(parseByteSize(limit!)).toBeGreaterThan(parseByteSize(String(option?.defaultValue)));
});
