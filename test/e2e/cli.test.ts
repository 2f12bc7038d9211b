import { describe, expect, it } from 'vitest';
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

  it('refuses a bad retention of stored responses', async () => {
    for (const args of [['--responses-ttl', 'forever'], ['--responses-ttl', '0'], ['--responses-max', '0'], ['--responses-max', 'lots']]) {
      const run = await runCli(['serve', ...args]);
      expect(run.code, args.join(' ')).toBe(2);
      expect(run.stderr).toContain(args[0]);
    }
  });
});
