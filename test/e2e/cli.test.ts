import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import sharp from 'sharp';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runCli } from '../helpers/cli.js';

const SUBCOMMANDS = ['pull', 'list', 'rm', 'run', 'transcribe', 'speak', 'ocr', 'serve'];

describe('lserve CLI', () => {
  it('lists every subcommand in --help', async () => {
    const { code, stdout } = await runCli(['--help']);
    expect(code).toBe(0);
    for (const name of SUBCOMMANDS) expect(stdout).toMatch(new RegExp(`^\\s+${name}\\b`, 'm'));
  });

  it.each(SUBCOMMANDS)('%s --help describes the command with examples', async (name) => {
    const { code, stdout } = await runCli([name, '--help']);
    expect(code).toBe(0);
    expect(stdout).toContain(`Usage: lserve ${name}`);
    expect(stdout).toContain('Examples:');
  });

  it('prints its version', async () => {
    const { code, stdout } = await runCli(['--version']);
    expect(code).toBe(0);
    expect(stdout.trim()).toMatch(/^\d+\.\d+\.\d+/);
  });

  it('ends quietly, with 0, when its reader closes the pipe early (lserve serve --help | head -1)', async () => {
    const child = spawn(process.execPath, [fileURLToPath(new URL('../../bin/lserve.js', import.meta.url)), 'serve', '--help'], { stdio: ['ignore', 'pipe', 'pipe'] });
    let stderr = '';
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    // The first line read, the pipe closes: as `head -1` does, before the help is all written.
    child.stdout.once('data', () => child.stdout.destroy());
    const [code] = (await once(child, 'close')) as [number];
    expect(stderr).toBe('');
    expect(code).toBe(0);
  });

  it('exits 2 on usage errors', async () => {
    expect((await runCli(['no-such-command'])).code).toBe(2);
    expect((await runCli(['serve', '--no-such-flag'])).code).toBe(2);
    expect((await runCli(['serve', '--port', 'eighty'])).code).toBe(2);
    expect((await runCli(['serve', '--log-format', 'xml'])).code).toBe(2);
    expect((await runCli(['serve', '--max-memory', 'lots'])).code).toBe(2);
    const ctx = await runCli(['serve', '--ctx-size', 'qwen=lots']);
    expect(ctx.code).toBe(2);
    expect(ctx.stderr).toContain('--ctx-size takes N or MODEL=N');
  });

  it('exits 2 on a --kv-cache-type other than f32, f16, q8_0 (serve: also from LSERVE_KV_CACHE_TYPE), naming the choices', async () => {
    for (const [args, env, words] of [
      [['serve', '--kv-cache-type', 'f8'], {}, "option '--kv-cache-type <type>' argument 'f8' is invalid"],
      [['serve'], { LSERVE_KV_CACHE_TYPE: 'bf16' }, "option '--kv-cache-type <type>' value 'bf16' from env 'LSERVE_KV_CACHE_TYPE' is invalid"],
      [['run', '--kv-cache-type', 'F32', 'qwen3-0.6b', 'hi'], {}, "option '--kv-cache-type <type>' argument 'F32' is invalid"],
    ] as const) {
      const result = await runCli([...args], { env });
      expect(result.code, args.join(' ')).toBe(2);
      expect(result.stderr).toContain(words);
      expect(result.stderr).toContain('Allowed choices are f32, f16, q8_0.');
    }
  });

  it('refuses a bad retention of stored responses', async () => {
    for (const args of [['--responses-ttl', 'forever'], ['--responses-ttl', '0'], ['--responses-max', '0'], ['--responses-max', 'lots']]) {
      const run = await runCli(['serve', ...args]);
      expect(run.code, args.join(' ')).toBe(2);
      expect(run.stderr).toContain(args[0]);
    }
  });
});

/**
 * One exit-code rule for every command (src/cli/exit-codes.ts): 2 when the
 * command line is wrong, 1 when a well-formed command fails at its work (a
 * model unknown, not installed or of another kind; an input; the network; a
 * busy port). Errors speak of the command line (-m/--model, flags), never of
 * an HTTP endpoint or body field. An empty store and the shipped catalog.
 */
describe('lserve CLI: exit codes and words', () => {
  let home: string;
  let picture: string;
  let env: NodeJS.ProcessEnv;

  beforeAll(async () => {
    home = await mkdtemp(path.join(os.tmpdir(), 'lserve-cli-words-'));
    picture = path.join(home, 'page.png');
    await writeFile(picture, await sharp({ create: { width: 32, height: 32, channels: 3, background: '#ffffff' } }).png().toBuffer());
    env = { LSERVE_HOME: home, LSERVE_CATALOG: '', HF_ENDPOINT: 'http://127.0.0.1:1' };
  });
  afterAll(async () => {
    if (home) await rm(home, { recursive: true, force: true });
  });

  const cli = (args: string[]) => runCli(args, { env });

  it('an unknown model exits 1 from every command', async () => {
    for (const args of [['pull', 'no-such-model'], ['run', 'no-such-model', 'hi'], ['speak', '-m', 'no-such-model', 'Hi.'], ['ocr', '-m', 'no-such-model', picture], ['imagine', '-m', 'no-such-model', 'a cat']]) {
      const result = await cli(args);
      expect({ args, code: result.code }).toEqual({ args, code: 1 });
      expect(result.stderr).toMatch(/^lserve: (Unknown model|Model) 'no-such-model'/);
    }
  });

  it('a model of another kind exits 1 saying what kind it is and what to pull for the command, in no HTTP words', async () => {
    const speak = await cli(['speak', '-m', 'whisper-base', 'Hi.']);
    expect(speak.code).toBe(1);
    expect(speak.stderr).toBe("lserve: Model 'whisper-base' is a speech recognition model, not a speech synthesis model. Run `lserve pull piper-en-lessac` to get one.\n");
    const run = await cli(['run', 'whisper-base', 'hi']);
    expect(run.code).toBe(1);
    expect(run.stderr).toBe("lserve: Model 'whisper-base' is a speech recognition model, not a chat model. Run `lserve pull qwen3-0.6b` to get one.\n");
    // The bundled OCR model is installed: it is named as such, and no pull of it is suggested.
    const transcribe = await cli(['transcribe', '-m', 'ppocr-v4-mobile', picture]);
    expect(transcribe.code).toBe(1);
    expect(transcribe.stderr).toBe("lserve: Model 'ppocr-v4-mobile' is an OCR model, not a speech recognition model. Run `lserve pull whisper-base` to get one.\n");
    const ocr = await cli(['ocr', '-m', 'piper-en-lessac', picture]);
    expect(ocr.code).toBe(1);
    expect(ocr.stderr).toMatch(/^lserve: Model 'piper-en-lessac' is a speech synthesis model, not an OCR model\. Installed: ppocr-v4-mobile\.\n$/);
    for (const result of [speak, run, transcribe, ocr]) expect(result.stderr).not.toMatch(/endpoint|request|'model'/);
  });

  it('a valid --kv-cache-type gets as far as the model: an unknown one exits 1, not 2', async () => {
    const result = await cli(['run', '--kv-cache-type', 'f32', 'no-such-model', 'hi']);
    expect(result.code).toBe(1);
    expect(result.stderr).toMatch(/^lserve: Model 'no-such-model' does not exist/);
  });

  it('a model that is not installed exits 1 and says how to pull it', async () => {
    const result = await cli(['speak', '-m', 'piper-en-lessac', 'Hi.']);
    expect(result.code).toBe(1);
    expect(result.stderr).toBe("lserve: Model 'piper-en-lessac' is not installed. Run `lserve pull piper-en-lessac` to download it.\n");
  });

  it('a busy port exits 1 with one line naming the address and --port', async () => {
    const holder = net.createServer();
    await new Promise<void>((resolve) => holder.listen(0, '127.0.0.1', resolve));
    const { port } = holder.address() as net.AddressInfo;
    try {
      const result = await cli(['serve', '--port', String(port), '--no-ui']);
      expect(result.code).toBe(1);
      expect(result.stderr).toBe(
        `lserve: 127.0.0.1:${port} is already in use (another lserve, or another program, is listening there); choose another port with --port, e.g. --port ${port + 1}\n`,
      );
    } finally {
      await new Promise<void>((resolve) => holder.close(() => resolve()));
    }
  });
});
