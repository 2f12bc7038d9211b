/**
 * Completions benchmark (not a test): what an evaluation harness and an
 * editor ask of a text server, lserve beside llama.cpp's server on the same
 * GGUF (the Qwen3-0.6B-sized synthetic, bench/text/models.ts).
 *
 * 1. Multiple-choice scoring: `--items` items, each a context and 4
 *    continuations whose loglikelihood given the context decides the
 *    answer (what the standard evaluation harness's loglikelihood requests
 *    are). lserve: one POST /v1/completions per item with the 4 prompts,
 *    `echo`, `logprobs: 0`, `max_tokens: 0`, the continuation's tokens summed.
 *    llama-server answers no prompt log-probabilities (it refuses `echo`), so
 *    a harness scores each continuation token with a one-token /completion
 *    whose logit_bias forces that token, reading its log-probability from the
 *    raw logits (`post_sampling_probs: false`), the cache reused
 *    (`cache_prompt`). Items/s for both, and their ratio.
 * 2. Fill-in-the-middle: a 128-token middle between a code prefix and suffix,
 *    greedy, lserve's /v1/completions with `suffix` beside llama-server's
 *    /infill; medians of `--rounds` runs.
 *
 *   npx tsx bench/completions.ts [--items 200] [--rounds 5] [--threads 2] [--llama-bin /tmp/llama-build/build/bin] [--skip-llama]
 */
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { NEVER_END } from '../test/helpers/chat-model.js';
import { freePort } from '../test/helpers/free-port.js';
import { runLserve, startLserve, stopLserve } from './load/lserve.js';
import { llamaBin, startLlamaServer } from './text/llamacpp.js';
import { benchChatModel } from './text/models.js';

const { values: args } = parseArgs({
  options: {
    items: { type: 'string', default: '200' },
    rounds: { type: 'string', default: '5' },
    threads: { type: 'string', default: '2' },
    'llama-bin': { type: 'string', default: '/tmp/llama-build/build/bin' },
    'skip-llama': { type: 'boolean', default: false },
  },
});
const ITEMS = Number(args.items);
const ROUNDS = Number(args.rounds);
const MODEL = 'qwen3-bench';
const WORDS = 'river stone garden window market silver quiet morning engine paper forest signal bridge winter letter candle harbor'.split(' ');

/** A seeded item: a context of about 30 words and 4 continuations of 3 to 6. */
function item(i: number): { context: string; choices: string[] } {
  let seed = i * 2654435761;
  const next = () => (seed = (seed * 1103515245 + 12345) >>> 0) % WORDS.length;
  const words = (n: number) => Array.from({ length: n }, () => WORDS[next()]).join(' ');
  return { context: `Question ${i}: ${words(30)}. Answer:`, choices: [3, 4, 5, 6].map((n) => ` ${words(n)}.`) };
}

async function post<T>(url: string, body: unknown): Promise<T> {
  const res = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
  if (!res.ok) throw new Error(`${url}: ${res.status} ${await res.text()}`);
  return (await res.json()) as T;
}

/** lserve: the 4 prompts of an item in one request; each continuation's loglikelihood from its echoed tokens. */
async function scoreLserve(base: string, it: { context: string; choices: string[] }): Promise<number[]> {
  const answer = await post<{ choices: Array<{ index: number; logprobs: { token_logprobs: Array<number | null>; text_offset: number[] } }> }>(`${base}/v1/completions`, {
    model: MODEL,
    prompt: it.choices.map((c) => it.context + c),
    echo: true,
    logprobs: 0,
    max_tokens: 0,
  });
  return answer.choices
    .sort((a, b) => a.index - b.index)
    .map((c) => c.logprobs.token_logprobs.reduce<number>((sum, lp, k) => (c.logprobs.text_offset[k]! >= it.context.length ? sum + (lp ?? 0) : sum), 0));
}

/** llama-server: each continuation token forced in a one-token /completion, its log-probability from the raw logits. */
async function scoreLlama(base: string, it: { context: string; choices: string[] }): Promise<number[]> {
  const tokenize = async (text: string) => (await post<{ tokens: number[] }>(`${base}/tokenize`, { content: text, add_special: false })).tokens;
  const context = await tokenize(it.context);
  const scores: number[] = [];
  for (const choice of it.choices) {
    const all = await tokenize(it.context + choice);
    let sum = 0;
    for (let k = context.length; k < all.length; k++) {
      const answer = await post<{ completion_probabilities: Array<{ logprob: number }> }>(`${base}/completion`, {
        prompt: all.slice(0, k),
        n_predict: 1,
        n_probs: 1,
        temperature: 0,
        post_sampling_probs: false,
        cache_prompt: true,
        logit_bias: [[all[k], 1000]],
      });
      sum += answer.completion_probabilities[0]?.logprob ?? 0;
    }
    scores.push(sum);
  }
  return scores;
}

async function timeItems(score: (it: { context: string; choices: string[] }) => Promise<number[]>): Promise<{ perSecond: number; scores: number[][] }> {
  await score(item(-1)); // warm-up: the load, the first batches
  const started = performance.now();
  const scores: number[][] = [];
  for (let i = 0; i < ITEMS; i++) scores.push(await score(item(i)));
  return { perSecond: ITEMS / ((performance.now() - started) / 1000), scores };
}

const PREFIX = 'def fibonacci(n):\n    """Return the n-th Fibonacci number."""\n    if n < 2:\n        return n\n';
const SUFFIX = '\n\nif __name__ == "__main__":\n    print(fibonacci(10))\n';

async function fimLserve(base: string): Promise<number> {
  const started = performance.now();
  await post(`${base}/v1/completions`, { model: MODEL, prompt: PREFIX, suffix: SUFFIX, max_tokens: 128, temperature: 0, logit_bias: NEVER_END });
  return performance.now() - started;
}

async function fimLlama(base: string): Promise<number> {
  const started = performance.now();
  const bias = Object.keys(NEVER_END).map((id) => [Number(id), false]);
  await post(`${base}/infill`, { input_prefix: PREFIX, input_suffix: SUFFIX, n_predict: 128, temperature: 0, logit_bias: bias, cache_prompt: false });
  return performance.now() - started;
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
const home = mkdtempSync(path.join(os.tmpdir(), 'lserve-bench-completions-'));
const model = benchChatModel();
try {
  const pulled = await runLserve(home, ['pull', model, '--kind', 'chat', '--id', MODEL, '--quiet']);
  if (pulled.code !== 0) throw new Error(pulled.output);
  const lserve = await startLserve(home, ['--threads', args.threads!]);
  let ours: { perSecond: number; scores: number[][] };
  const oursFim: number[] = [];
  try {
    ours = await timeItems((it) => scoreLserve(lserve.base, it));
    await fimLserve(lserve.base);
    for (let r = 0; r < ROUNDS; r++) oursFim.push(await fimLserve(lserve.base));
  } finally {
    await stopLserve(lserve);
  }
  console.log(`\n${ITEMS} items × 4 continuations, ${args.threads} threads, node ${process.version}, ${os.cpus().length} CPUs`);
  console.log(`lserve        ${ours.perSecond.toFixed(2)} items/s; fill-in-the-middle (128 tokens) median ${median(oursFim).toFixed(0)} ms`);
  const bin = args['skip-llama'] ? undefined : llamaBin(args['llama-bin']!, 'llama-server');
  if (bin) {
    const server = await startLlamaServer(bin, model, { threads: Number(args.threads), port: await freePort() });
    try {
      const theirs = await timeItems((it) => scoreLlama(server.url, it));
      await fimLlama(server.url);
      const theirsFim: number[] = [];
      for (let r = 0; r < ROUNDS; r++) theirsFim.push(await fimLlama(server.url));
      console.log(`llama-server  ${theirs.perSecond.toFixed(2)} items/s; /infill (128 tokens) median ${median(theirsFim).toFixed(0)} ms`);
      console.log(`ratio lserve / llama-server: items/s ${(ours.perSecond / theirs.perSecond).toFixed(2)}; fill-in-the-middle time ${(median(oursFim) / median(theirsFim)).toFixed(2)}`);
      // The same numbers from both: the largest difference of a continuation's loglikelihood, and how often the chosen answer differs.
      let worst = 0;
      let differ = 0;
      ours.scores.forEach((s, i) => {
        s.forEach((v, k) => (worst = Math.max(worst, Math.abs(v - theirs.scores[i]![k]!))));
        const pick = (xs: number[]) => xs.indexOf(Math.max(...xs));
        if (pick(s) !== pick(theirs.scores[i]!)) differ++;
      });
      console.log(`agreement: largest |Δ loglikelihood| ${worst.toFixed(4)} nats; answers chosen differently ${differ} of ${ITEMS}`);
    } finally {
      await server.stop();
    }
  } else {
    console.log('llama-server: not run (--skip-llama, or no build at --llama-bin)');
  }
} finally {
  rmSync(home, { recursive: true, force: true });
}
