import type { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { z } from 'zod';
import { transcriptionRequestSchema } from '../../api/transcription.js';
import { transcribe } from '../../core/tasks/transcribe.js';
import type { McpContext } from '../context.js';
import { readPayload } from '../inputs.js';
import { progressReporter, runTool, structured } from '../results.js';
import { modelField, modelFor } from './model.js';
import { payloadFields, payloadOf } from './payload.js';

const timed = { start: z.number(), end: z.number() };

export function registerTranscribeAudio(server: McpServer, ctx: McpContext): void {
  server.registerTool(
    'transcribe_audio',
    {
      title: 'Transcribe audio',
      description: `Turns speech in a recording into text with a local speech recognition model (Whisper). The audio as ${ctx.localFiles ? 'a local file path, ' : ''}base64 or an http(s) URL: wav, mp3, flac, ogg/opus, webm or m4a. With timestamps, the segments (and words) with their start and end in seconds.`,
      inputSchema: z.strictObject({
        ...payloadFields('audio', 'audio', ctx),
        language: transcriptionRequestSchema.shape.language.describe("The spoken language's ISO 639-1 code (en, de, …), or auto (default) to detect it."),
        prompt: transcriptionRequestSchema.shape.prompt.describe('Text that guides spelling and style (names, terms).'),
        timestamps: z.enum(['none', 'segment', 'word']).optional().describe('none (default): the text only; segment: timed segments; word: timed words too (a "-timestamped" Whisper model).'),
        model: modelField('asr'),
      }),
      outputSchema: z.object({
        model: z.string(),
        text: z.string(),
        language: z.string(),
        duration: z.number(),
        segments: z.array(z.object({ ...timed, text: z.string() })).optional(),
        words: z.array(z.object({ ...timed, word: z.string() })).optional(),
      }),
      annotations: { readOnlyHint: true, openWorldHint: !ctx.localFiles },
    },
    async (args, extra) =>
      runTool(ctx, extra, async (signal) => {
        const model = await modelFor(ctx.engine, 'asr', typeof args.model === 'string' ? args.model : undefined);
        await ctx.engine.resolve(model, ['asr']);
        const { bytes, param } = await readPayload('audio', payloadOf('audio', args), ctx, signal);
        const progress = progressReporter(extra);
        const timestamps = args.timestamps ?? 'none';
        const result = await transcribe(
          ctx.engine,
          { model, audio: bytes, param, language: args.language, prompt: args.prompt ?? undefined, wordTimestamps: timestamps === 'word', onProgress: (done, total) => progress(done, total) },
          signal,
        );
        return structured({
          model: result.model,
          text: result.text,
          language: result.language,
          duration: result.duration,
          ...(timestamps === 'none' ? {} : { segments: result.segments.map(({ start, end, text }) => ({ start, end, text })) }),
          ...(timestamps === 'word' && result.words ? { words: result.words.map(({ start, end, word }) => ({ start, end, word })) } : {}),
        });
      }),
  );
}
