import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Engine } from '../../src/core/engine.js';
import { runCli } from '../helpers/cli.js';
import { tempHome } from '../helpers/server.js';
import { CHAT_MODEL_ID, tinyQwen3File } from '../helpers/chat-model.js';
import { rm } from 'node:fs/promises';

/** `lserve run` one-shot through the built CLI (bin/lserve.js), as in a shell pipeline. */

let home: string;

beforeAll(async () => {
  home = await tempHome();
  await new Engine({ home }).store.registerLocal(tinyQwen3File(), { kind: 'chat', id: CHAT_MODEL_ID });
});

afterAll(async () => {
  await rm(home, { recursive: true, force: true });
});

describe('lserve run', () => {
  it('answers a prompt with piped stdin on stdout and exits 0', async () => {
    const res = await runCli(['--home', home, 'run', CHAT_MODEL_ID, 'summarise', '--max-tokens', '4', '--temperature', '0', '--threads', '1'], { input: 'some notes\n' });
    expect(res.stderr).toBe('');
    expect(res.code).toBe(0);
    expect(res.stdout.length).toBeGreaterThan(0);
  });

  it('--json prints the whole chat.completion', async () => {
    const res = await runCli(['--home', home, 'run', CHAT_MODEL_ID, 'hi', '--json', '--max-tokens', '3', '--no-think', '--threads', '1']);
    expect(res.code).toBe(0);
    const body = JSON.parse(res.stdout) as { object: string; usage: { completion_tokens: number }; choices: Array<{ message: { role: string } }> };
    expect(body.object).toBe('chat.completion');
    expect(body.choices[0]!.message.role).toBe('assistant');
    expect(body.usage.completion_tokens).toBeLessThanOrEqual(3);
  });

  it('an unknown model is a one-line error', async () => {
    const res = await runCli(['--home', home, 'run', 'no-such-model', 'hi']);
    expect(res.code).toBe(1);
    expect(res.stderr).toMatch(/^lserve: Model 'no-such-model' does not exist/);
  });

  it('no prompt and nothing piped is a usage error', async () => {
    const res = await runCli(['--home', home, 'run', CHAT_MODEL_ID]);
    expect(res.code).toBe(2);
    expect(res.stderr).toContain('no prompt');
  });
});
