import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import ts from 'typescript';
import { describe, expect, expectTypeOf, it } from 'vitest';
import { JobQueue } from '../../src/core/job-queue.js';
import type { ChatDelta, ChatModel, ChatRequest } from '../../src/core/tasks/chat.js';
import type { EmbeddingModel } from '../../src/core/tasks/embed.js';
import type { ImagePipeline, LatentDecoderModel } from '../../src/core/tasks/image/image-pipeline.js';
import type { OcrModel } from '../../src/core/tasks/ocr.js';
import type { RankingModel } from '../../src/core/tasks/rerank.js';
import type { SpeechRuntime } from '../../src/core/tasks/speak/synthesizer.js';
import type { SpeechDetector, Transcriber } from '../../src/core/tasks/transcribe/transcriber.js';
import type { Remote } from '../../src/runtimes/runner/client.js';
import { RUNNER_KINDS } from '../../src/runtimes/runner/kinds.js';
import type { ChatRunnerClient } from '../../src/runtimes/runner/kinds/chat.js';
import type { EmbeddingRunnerClient } from '../../src/runtimes/runner/kinds/embedding.js';
import type { ImagePipelineRunnerClient, LatentDecoderRunnerClient } from '../../src/runtimes/runner/kinds/image.js';
import type { OcrRunnerClient } from '../../src/runtimes/runner/kinds/ocr.js';
import type { RankingRunnerClient } from '../../src/runtimes/runner/kinds/rerank.js';
import type { SpeechRunnerClient } from '../../src/runtimes/runner/kinds/speech.js';
import type { TranscriberRunnerClient } from '../../src/runtimes/runner/kinds/transcriber.js';

/**
 * The runner boundary's two ends per kind (src/runtimes/runner/kinds/): the
 * server's clients are the task interfaces, checked by the compiler (these
 * type assertions fail `npm run typecheck`, not the run), with no cast in
 * the runner code to make them so; and the runner's side serves exactly
 * the methods the loaded model has.
 */

describe('the clients', () => {
  it('are their kinds’ task interfaces', () => {
    expectTypeOf<ChatRunnerClient>().toExtend<ChatModel>();
    expectTypeOf<EmbeddingRunnerClient>().toExtend<EmbeddingModel>();
    expectTypeOf<RankingRunnerClient>().toExtend<RankingModel>();
    expectTypeOf<OcrRunnerClient>().toExtend<OcrModel>();
    expectTypeOf<TranscriberRunnerClient>().toExtend<Transcriber>();
    expectTypeOf<SpeechRunnerClient>().toExtend<SpeechRuntime>();
    expectTypeOf<ImagePipelineRunnerClient>().toExtend<ImagePipeline>();
    expectTypeOf<LatentDecoderRunnerClient>().toExtend<LatentDecoderModel>();
    // The table the server builds them from gives each kind its interface.
    expectTypeOf(RUNNER_KINDS.chat.client).returns.toEqualTypeOf<ChatModel>();
    expectTypeOf(RUNNER_KINDS.asr.client).returns.toEqualTypeOf<Transcriber>();
    expectTypeOf(RUNNER_KINDS.image.client).returns.toEqualTypeOf<ImagePipeline | LatentDecoderModel>();
  });

  it('call a runner only by a method of their interface, with its arguments, getting its result', () => {
    // Never run: the compiler checks these lines.
    const typed = (remote: Remote<ChatModel>, request: ChatRequest, signal: AbortSignal) => {
      expectTypeOf(remote.call('countTokens', request)).toEqualTypeOf<Promise<number>>();
      expectTypeOf(remote.stream('generate', request, signal)).toEqualTypeOf<AsyncIterable<ChatDelta>>();
      expectTypeOf(remote.call('prefill', request, signal)).toEqualTypeOf<Promise<void>>();
      // @ts-expect-error generate streams: it is not a call
      void remote.call('generate', request, signal);
      // @ts-expect-error countTokens takes a request
      void remote.call('countTokens', ['text']);
      // @ts-expect-error no such method
      void remote.call('countWords', request);
      // @ts-expect-error dispose is the server's, never a call to the runner
      void remote.call('dispose');
    };
    const part = (remote: Remote<SpeechDetector>, samples: Float32Array) => {
      expectTypeOf(remote.call('probabilities', samples)).toEqualTypeOf<Promise<Float32Array>>();
    };
    expect([typed, part]).toHaveLength(2);
  });

  it('need no cast to be their interfaces: none to a model type, no double cast, no any in the runner code', () => {
    const dir = fileURLToPath(new URL('../../src/runtimes/runner/', import.meta.url));
    const files = readdirSync(dir, { recursive: true, encoding: 'utf8' }).filter((file) => file.endsWith('.ts'));
    expect(files).toContain(path.join('kinds', 'chat.ts'));
    const MODEL_TYPE = /\b(LoadedModel|\w+Model|Transcriber|SpeechRuntime|SpeechDetector|ImagePipeline|\w+RunnerClient)\b/;
    const found: string[] = [];
    for (const file of files) {
      const source = ts.createSourceFile(file, readFileSync(path.join(dir, file), 'utf8'), ts.ScriptTarget.Latest, true);
      const at = (node: ts.Node) => `${file}:${source.getLineAndCharacterOfPosition(node.getStart()).line + 1}: ${node.getText()}`;
      const visit = (node: ts.Node): void => {
        if (node.kind === ts.SyntaxKind.AnyKeyword) found.push(at(node));
        if (ts.isAsExpression(node) || ts.isTypeAssertionExpression(node)) {
          let inner = node.expression;
          while (ts.isParenthesizedExpression(inner)) inner = inner.expression;
          if (MODEL_TYPE.test(node.type.getText()) || ts.isAsExpression(inner) || ts.isTypeAssertionExpression(inner)) found.push(at(node));
        }
        ts.forEachChild(node, visit);
      };
      visit(source);
    }
    expect(found).toEqual([]);
  });
});

const token: ChatDelta = { type: 'content', text: 'hi' };

function chatModel(extra: Partial<ChatModel> = {}): ChatModel {
  return {
    memoryBytes: 100,
    contextSize: 512,
    queued: 0,
    dispose: async () => {},
    async *generate() {
      yield token;
    },
    countTokens: async () => 7,
    tokenCounts: async (texts) => texts.map((text) => text.length),
    ...extra,
  };
}

describe("the runner's side", () => {
  it('serves the methods the loaded chat model has, its optional ones only when it has them', async () => {
    const plain = RUNNER_KINDS.chat.serve(chatModel());
    expect(plain.methods).toEqual(['generate', 'countTokens', 'tokenCounts']);
    expect(plain.props).toEqual({ memoryBytes: 100 });
    expect(plain.live()).toEqual({ queued: 0, contextSize: 512, memoryBytes: 100 });
    expect(await plain.call('tokenCounts', [['ab', 'cde']])).toEqual([2, 3]);
    const deltas: unknown[] = [];
    for await (const delta of plain.stream('generate', [{}, new AbortController().signal])) deltas.push(delta);
    expect(deltas).toEqual([token]);
    await expect(plain.call('prefill', [])).rejects.toThrow("the model has no method 'prefill'");

    const prefilled: string[] = [];
    const warm = RUNNER_KINDS.chat.serve(chatModel({ prefill: async (request) => void prefilled.push(request.model) }));
    expect(warm.methods).toEqual(['generate', 'countTokens', 'tokenCounts', 'prefill']);
    await warm.call('prefill', [{ model: 'm' }, new AbortController().signal]);
    expect(prefilled).toEqual(['m']);
  });

  it("serves a Transcriber's voice activity detector as a part, when it has one", async () => {
    const transcriber = (vad?: SpeechDetector): Transcriber => ({
      memoryBytes: 1,
      dispose: async () => {},
      wordTimestamps: true,
      vad,
      queue: new JobQueue(1, 'test'),
      transcribe: async () => ({ text: 'hi', language: 'en', duration: 1, segments: [] }),
    });
    const bare = RUNNER_KINDS.asr.serve(transcriber());
    expect([bare.methods, bare.parts, bare.props]).toEqual([['transcribe'], {}, { memoryBytes: 1, wordTimestamps: true }]);
    const withVad = RUNNER_KINDS.asr.serve(transcriber({ probabilities: async (samples) => samples.map((s) => s * 2) }));
    expect(withVad.parts).toEqual({ vad: ['probabilities'] });
    expect(await withVad.call('vad.probabilities', [new Float32Array([0.25])])).toEqual(new Float32Array([0.5]));
  });

  it('serves an image model as the pipeline or the latent decoder it is', () => {
    const pipelineModel: ImagePipeline = { memoryBytes: 1, dispose: async () => {}, canEncode: false, queue: new JobQueue(1, 'test'), generate: async () => ({ images: [] }) };
    const pipeline = RUNNER_KINDS.image.serve(pipelineModel);
    expect([pipeline.methods, pipeline.props]).toEqual([['generate'], { memoryBytes: 1, canEncode: false }]);
    const decoderModel: LatentDecoderModel = { memoryBytes: 2, dispose: async () => {}, decode: async (latents) => latents };
    const decoder = RUNNER_KINDS.image.serve(decoderModel);
    expect([decoder.methods, decoder.props]).toEqual([['decode'], { memoryBytes: 2 }]);
  });

  it("refuses a model that lacks its kind's methods", () => {
    expect(() => RUNNER_KINDS.chat.serve({ memoryBytes: 1, dispose: async () => {} })).toThrow('the model loaded is not a chat model: it has no generate, countTokens, tokenCounts');
    expect(() => RUNNER_KINDS.image.serve({ memoryBytes: 1, dispose: async () => {} })).toThrow(/not an image pipeline or a latent decoder: it has no decode/);
  });
});
