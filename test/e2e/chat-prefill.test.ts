import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { chat, collectChat, holdChat, prefillChat, type ChatMessage, type ChatModel, type ChatRequest } from '../../src/core/tasks/chat.js';
import { CHAT_MODEL_ID, NEVER_END, tinyQwen3File } from '../helpers/chat-model.js';
import { startTestServer, type TestServer } from '../helpers/server.js';

/**
 * Warming the chat model for a request still to come (ChatModel.prefill, as
 * a voice session does while the user speaks): the conversation so far is
 * evaluated ahead, so the request that continues it evaluates only its new
 * turn. Qwen3's template drops the empty thought of earlier answers, so
 * without a warm-up the next turn evaluates the last answer again.
 */

let server: TestServer;
const signal = new AbortController().signal;

beforeAll(async () => {
  server = await startTestServer({ engine: { threads: 1, parallel: 2 } });
  await server.engine.store.registerLocal(tinyQwen3File(), { kind: 'chat', id: CHAT_MODEL_ID });
}, 120_000);

afterAll(async () => {
  await server?.stop();
});

const request = (messages: ChatMessage[], maxTokens = 24): ChatRequest => ({
  model: CHAT_MODEL_ID,
  messages,
  maxTokens,
  temperature: 0,
  thinking: false,
  logitBias: NEVER_END,
});

/**
 * A conversation of its own (no other test's tokens cached for it): its
 * first turn answered, then the answer as the client keeps it, a text of 40
 * tokens or more that the sequence does not hold as written (as a voice
 * session's answer cut at what the user heard).
 */
async function conversation(topic: string): Promise<ChatMessage[]> {
  const messages: ChatMessage[] = [
    { role: 'system', content: `You talk about ${topic}.` },
    { role: 'user', content: `Tell me about ${topic}.` },
  ];
  await collectChat(chat(server.engine, request(messages), signal));
  const answer = `Here is what I know about ${topic}: they are found all over the world, they change with the seasons, and people have told stories about them for as long as there have been people.`;
  return [...messages, { role: 'assistant', content: answer }];
}

const nextTurn = { role: 'user', content: 'And then?' } as const;

/** The prompt tokens the next turn evaluated (not found in the cache). */
async function evaluated(messages: ChatMessage[]): Promise<number> {
  const { usage } = await collectChat(chat(server.engine, request([...messages, nextTurn], 1), signal));
  return usage.promptTokens - usage.cachedPromptTokens;
}

describe('chat prefill', () => {
  it('leaves the next turn only its own tokens to evaluate; without it the last answer is evaluated again', async () => {
    const cold = await evaluated(await conversation('rivers'));
    const warmed = await conversation('mountains');
    await prefillChat(server.engine, request([...warmed, { role: 'user', content: '' }]), signal);
    const warm = await evaluated(warmed);
    // The turn's text and the template around it: "<|im_end|>\n<|im_start|>user\nAnd then?<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n".
    expect(warm).toBeGreaterThan(0);
    expect(warm).toBeLessThanOrEqual(20);
    // Without it: also the 40 tokens or more of the last answer.
    expect(cold).toBeGreaterThanOrEqual(warm + 40);
  });

  it('a request that comes while the prefill is still evaluating waits for it and takes its sequence', async () => {
    const messages = await conversation('lakes');
    // On one lease, so that the model gets the prefill first and the request right after (the session's order, with no gap).
    const lease = await server.engine.acquire<ChatModel>(CHAT_MODEL_ID, ['chat']);
    try {
      const warming = lease.model.prefill!(request([...messages, { role: 'user', content: '' }]), signal);
      const { usage } = await collectChat(lease.model.generate(request([...messages, nextTurn], 1), signal));
      await warming;
      expect(usage.promptTokens - usage.cachedPromptTokens).toBeLessThanOrEqual(20);
    } finally {
      lease.release();
    }
  });

  it('does nothing, at once, unless a sequence stays free beside it (it never queues, nor takes the last free one)', async () => {
    const messages = await conversation('forests');
    // One of the two sequences taken: the request has started generating.
    const busy = collectChat(chat(server.engine, request([{ role: 'user', content: 'go on' }], 400), signal));
    await new Promise((resolve) => setTimeout(resolve, 300));
    let ended = false;
    void busy.then(() => (ended = true));
    await prefillChat(server.engine, request([...messages, { role: 'user', content: '' }]), signal);
    expect(ended).toBe(false);
    await busy;
    // Nothing was evaluated ahead: the next turn evaluates the last answer too.
    expect(await evaluated(messages)).toBeGreaterThan(40);
  });

  it('never fails: an unknown model is the coming request\'s to report', async () => {
    await expect(prefillChat(server.engine, { ...request([{ role: 'user', content: '' }]), model: 'no-such-model' }, signal)).resolves.toBeUndefined();
  });
});

describe('chat hold (a spoken answer pauses its text while its first piece is synthesised)', () => {
  /** A long generation named `id`, streamed: when each text delta came (performance.now()), and how it ended. */
  function generation(id: string, controller = new AbortController()) {
    const times: number[] = [];
    const ended = (async () => {
      for await (const delta of chat(server.engine, { ...request([{ role: 'user', content: 'go on' }], 120), generationId: id }, controller.signal)) {
        if (delta.type === 'reasoning' || delta.type === 'content') times.push(performance.now());
        if (delta.type === 'done') return delta.finishReason;
      }
    })();
    return { times, ended, controller };
  }
  const started = async (g: { times: number[] }) => expect.poll(() => g.times.length, { timeout: 30_000, interval: 5 }).toBeGreaterThan(3);

  it('pauses the generation after its current token until resumed, then it runs to its end', async () => {
    const g = generation('held-1');
    await started(g);
    const resume = await holdChat(server.engine, CHAT_MODEL_ID, 'held-1', 10_000);
    await new Promise((r) => setTimeout(r, 100));
    const during = g.times.length;
    await new Promise((r) => setTimeout(r, 400));
    // Nothing in 400 ms (at most the token under way when the hold came, before the 100 ms).
    expect(g.times.length).toBe(during);
    resume();
    await expect(g.ended).resolves.toBe('length');
    expect(g.times.length).toBeGreaterThan(during);
  }, 60_000);

  it('resumes by itself when the hold runs out, and at once when the generation is stopped', async () => {
    const timed = generation('held-2');
    await started(timed);
    const pausedAt = performance.now();
    await holdChat(server.engine, CHAT_MODEL_ID, 'held-2', 300);
    await expect(timed.ended).resolves.toBe('length');
    expect(performance.now() - pausedAt).toBeGreaterThan(250);

    const stopped = generation('held-3');
    await started(stopped);
    await holdChat(server.engine, CHAT_MODEL_ID, 'held-3', 30_000);
    const stoppedAt = performance.now();
    stopped.controller.abort();
    await stopped.ended.catch(() => {});
    expect(performance.now() - stoppedAt).toBeLessThan(2_000);
    // Its sequence is free again: two requests at once (both sequences) are answered, neither waiting out the hold.
    const both = performance.now();
    await Promise.all([0, 1].map(() => collectChat(chat(server.engine, request([{ role: 'user', content: 'hi' }], 2), signal))));
    expect(performance.now() - both).toBeLessThan(5_000);
  }, 60_000);

  it('does nothing for a generation it does not know', async () => {
    const resume = await holdChat(server.engine, CHAT_MODEL_ID, 'no-such-generation', 10_000);
    resume();
  });
});
