import { render } from 'ink-testing-library';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Engine } from '../../src/compose.js';
import { chat } from '../../src/core/tasks/chat.js';
import { ChatView } from '../../src/cli/views/chat-view.js';
import { tempHome } from '../helpers/server.js';
import { CHAT_MODEL_ID, NEVER_END, tinyQwen3File } from '../helpers/chat-model.js';
import { rm } from 'node:fs/promises';

/** The interactive chat view, driven by keystrokes, generating with the real engine. */

let home: string;
let engine: Engine;

beforeAll(async () => {
  home = await tempHome();
  engine = new Engine({ home, threads: 1, parallel: 1 });
  await engine.store.registerLocal(tinyQwen3File(), { kind: 'chat', id: CHAT_MODEL_ID });
});

afterAll(async () => {
  await engine.close();
  await rm(home, { recursive: true, force: true });
});

let lastFrameForDebug: (() => string | undefined) | undefined;
const tick = (ms = 20) => new Promise((r) => setTimeout(r, ms));

async function until(check: () => boolean, ms = 20_000) {
  const end = Date.now() + ms;
  while (!check()) {
    if (Date.now() > end) throw new Error(`timed out; last frame ends:\n${(lastFrameForDebug?.() ?? '').slice(-300)}`);
    await tick();
  }
}

describe('ChatView', () => {
  it('streams an answer with tok/s, and /clear empties the conversation', async () => {
    const send = (messages: Parameters<typeof chat>[1]['messages'], signal: AbortSignal) =>
      chat(engine, { model: CHAT_MODEL_ID, messages, maxTokens: 4, temperature: 0, logitBias: NEVER_END }, signal);
    const view = render(<ChatView model={CHAT_MODEL_ID} send={send} />);
    lastFrameForDebug = view.lastFrame;
    for (const ch of 'hello') view.stdin.write(ch);
    await tick();
    view.stdin.write('\r');
    await until(() => (view.lastFrame() ?? '').includes('tok/s'));
    expect(view.lastFrame()).toContain('› hello');
    expect(view.lastFrame()).toContain('4 tokens');
    for (const ch of '/clear') view.stdin.write(ch);
    await until(() => /\/clear$/.test(view.lastFrame() ?? ''));
    await until(() => !/…$/.test(view.lastFrame() ?? '')); // idle again
    view.stdin.write('\r');
    await until(() => (view.lastFrame() ?? '').includes('conversation cleared'));
    expect(view.lastFrame()).not.toContain('› hello');
    view.unmount();
  });

  it('Ctrl-C stops a generation without leaving', async () => {
    const send = (messages: Parameters<typeof chat>[1]['messages'], signal: AbortSignal) =>
      chat(engine, { model: CHAT_MODEL_ID, messages, maxTokens: 3000, temperature: 0, logitBias: NEVER_END }, signal);
    const view = render(<ChatView model={CHAT_MODEL_ID} send={send} />);
    lastFrameForDebug = view.lastFrame;
    view.stdin.write('x');
    await tick();
    view.stdin.write('\r');
    await until(() => /…$/.test(view.lastFrame() ?? '')); // generating (ink trims the prompt's trailing space)
    await tick(200);
    view.stdin.write('\x03');
    await until(() => (view.lastFrame() ?? '').includes('stopped'));
    expect(view.lastFrame()).toMatch(/›$/); // the prompt is back
    view.unmount();
  });
});
