import { randomBytes } from 'node:crypto';
import { link, rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import type { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { z } from 'zod';
import { InvalidRequestError } from '../../core/errors.js';
import { createEncoder } from '../../audio/encode/index.js';
import { speechRequestSchema } from '../../api/speech.js';
import { MAX_INPUT_CHARS, prepareSpeech } from '../../core/tasks/speak.js';
import type { McpContext } from '../context.js';
import { progressReporter, runTool, structured } from '../results.js';
import { modelField, modelFor } from './model.js';

/** Formats with a container an agent's client can play as they are (raw PCM has none). */
const FORMATS = ['wav', 'mp3', 'opus', 'flac'] as const;

export function registerSpeakText(server: McpServer, ctx: McpContext): void {
  server.registerTool(
    'speak_text',
    {
      title: 'Speak text',
      description: 'Synthesises speech from text with a local text-to-speech model. The audio comes back as an audio content block (wav by default), with its length and sample rate.',
      inputSchema: z.strictObject({
        text: z.string().min(1).max(MAX_INPUT_CHARS).describe(`What to say (at most ${MAX_INPUT_CHARS} characters).`),
        voice: speechRequestSchema.shape.voice.describe("A preset voice (speaker) of the model; default: the model's first."),
        language: speechRequestSchema.shape.language.describe('The language (English, en, …); default: auto.'),
        speed: speechRequestSchema.shape.speed.describe('Speech rate, 0.25 to 4 (default 1).'),
        format: z.enum(FORMATS).optional().describe('Audio format (default wav).'),
        ...(ctx.localFiles ? { output_path: z.string().min(1).max(4096).optional().describe('Also write the audio to this new local file (an existing file is not overwritten).') } : {}),
        model: modelField('tts'),
      }),
      outputSchema: z.object({ model: z.string(), format: z.string(), mime_type: z.string(), sample_rate: z.number(), duration: z.number(), path: z.string().optional() }),
      annotations: { readOnlyHint: true, openWorldHint: false },
    },
    async (args, extra) =>
      runTool(ctx, extra, async (signal) => {
        const model = await modelFor(ctx.engine, 'tts', args.model);
        const speech = await prepareSpeech(ctx.engine, { model, input: args.text, voice: args.voice, language: args.language, speed: args.speed }, signal);
        const format = args.format ?? 'wav';
        let encoder;
        try {
          encoder = await createEncoder(format, speech.sampleRate);
        } catch (error) {
          speech.release();
          throw error;
        }
        const chunks: Uint8Array[] = [];
        const progress = progressReporter(extra);
        let produced = 0;
        const { samples } = await speech.run((block) => {
          chunks.push(...encoder.write(block));
          produced += block.length;
          progress(produced / speech.sampleRate, undefined, 'seconds of audio synthesised');
        }, signal);
        chunks.push(...encoder.end());
        const audio = Buffer.concat(chunks);
        const outputPath = typeof args.output_path === 'string' ? await writeNewFile(args.output_path, audio) : undefined;
        const mimeType = encoder.contentType;
        return structured(
          { model: speech.model, format, mime_type: mimeType, sample_rate: speech.sampleRate, duration: samples / speech.sampleRate, ...(outputPath ? { path: outputPath } : {}) },
          [{ type: 'audio', data: audio.toString('base64'), mimeType }],
        );
      }),
  );
}

/**
 * Writes `bytes` to a new file at `file` (stdio only: the agent runs lserve
 * as its own user, as `lserve speak -o` writes): whole or not at all — a
 * temporary file beside it, then linked into place, which fails rather than
 * replace a file that exists. Returns the absolute path.
 */
async function writeNewFile(file: string, bytes: Buffer): Promise<string> {
  const target = path.resolve(file);
  const temporary = path.join(path.dirname(target), `.${path.basename(target)}.${randomBytes(6).toString('hex')}.tmp`);
  try {
    await writeFile(temporary, bytes, { flag: 'wx' });
    await link(temporary, target);
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    const why = code === 'EEXIST' ? 'a file is already there (it is not overwritten)' : code === 'ENOENT' ? 'its folder does not exist' : code === 'EACCES' ? 'permission denied' : 'it cannot be written';
    throw new InvalidRequestError(`'output_path': ${target}: ${why}.`, { param: 'output_path', code: 'invalid_value' });
  } finally {
    await rm(temporary, { force: true });
  }
  return target;
}
