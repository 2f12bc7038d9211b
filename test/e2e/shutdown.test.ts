import type { ChildProcess } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { afterEach, expect, it } from 'vitest';
import type { RunningModelList } from '../../src/api/ps.js';
import { CHAT_MODEL_ID, NEVER_END, tinyQwen3File } from '../helpers/chat-model.js';
import { runCli } from '../helpers/cli.js';
import { spawnServe } from '../helpers/serve-process.js';
import { tempHome } from '../helpers/server.js';

/**
 * Shutdown always ends: `lserve serve` holding a request in a runner that
 * does not answer (stopped with SIGSTOP, as a native call that never
 * returns would leave it) exits at the second SIGTERM at once, its runners
 * killed rather than waited for, and at the first one by itself within its
 * grace periods.
 */

let server: ChildProcess | undefined;
afterEach(() => {
  server?.kill('SIGKILL');
  server = undefined;
});

/** Whether a process is still running (a zombie, ended but not yet reaped by whoever inherited it, is not). */
function alive(pid: number): boolean {
  try {
    return !/^State:\s+Z/m.test(readFileSync(`/proc/${pid}/status`, 'utf8'));
  } catch {
    return false;
  }
}

/** `lserve serve` on a free port with a chat model, a streamed chat held in its stopped runner, and that runner's pid. */
async function serveWithStuckRunner(args: string[] = []): Promise<{ child: ChildProcess; runner: number; exited: Promise<number | null>; log: () => string }> {
  const home = await tempHome();
  const env = { ...process.env, LSERVE_HOME: home };
  expect((await runCli(['pull', tinyQwen3File(), '--kind', 'chat', '--id', CHAT_MODEL_ID], { env })).code).toBe(0);
  const { child, url: base, exited, log } = await spawnServe(home, ['--threads', '1', ...args]);
  server = child;
  const response = await fetch(`${base}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: CHAT_MODEL_ID, stream: true, max_tokens: 100_000, logit_bias: NEVER_END, messages: [{ role: 'user', content: 'go on' }] }),
  });
  const reader = response.body!.getReader();
  await reader.read(); // tokens are flowing
  const { models } = (await (await fetch(`${base}/v1/ps`)).json()) as RunningModelList;
  const runner = models[0]!.pid!;
  process.kill(runner, 'SIGSTOP');
  return { child, runner, exited, log };
}

it.runIf(process.platform === 'linux')('exits at the second SIGTERM at once, killing a runner that does not answer', async () => {
  const { child, runner, exited, log } = await serveWithStuckRunner();
  child.kill('SIGTERM');
  await new Promise((resolve) => setTimeout(resolve, 300));
  expect(alive(child.pid!)).toBe(true); // still shutting down: the held request has its grace period
  const second = performance.now();
  child.kill('SIGTERM');
  expect(await exited).toBe(1);
  expect(performance.now() - second).toBeLessThan(2000);
  expect(log()).toContain('SIGTERM again: exiting now');
  await new Promise((resolve) => setTimeout(resolve, 200));
  expect(alive(runner)).toBe(false);
});

it.runIf(process.platform === 'linux')('ends at the first SIGTERM by itself, within its grace periods, even with a runner that does not answer', async () => {
  // SIGTERM drains (drain.test.ts): here no grace, and 1 s for the held request before it is cut.
  const { child, runner, exited } = await serveWithStuckRunner(['--drain-grace', '0', '--drain-timeout', '1s']);
  const first = performance.now();
  child.kill('SIGTERM');
  expect(await exited).toBe(0);
  // 1 s for the held request, then 5 s for the runner to dispose of its model: then it is killed.
  expect(performance.now() - first).toBeLessThan(15_000);
  await new Promise((resolve) => setTimeout(resolve, 200));
  expect(alive(runner)).toBe(false);
}, 30_000);
