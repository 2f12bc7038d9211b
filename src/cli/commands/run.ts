import { randomUUID } from 'node:crypto';
import { Command, Option } from 'commander';
import { chatCompletionFrom } from '../../api/chat.js';
import { readFile } from 'node:fs/promises';
import { chat, checkChatMedia, collectChat, MEDIA_MARKER, type ChatMedia, type ChatMessage, type ChatRequest } from '../../core/tasks/chat.js';
import { decodeChatMedia } from '../../core/tasks/chat-media.js';
import { CliError, EXIT_FAILURE, EXIT_USAGE } from '../errors.js';
import { collect, createEngine, CTX_SIZE_HELP, globalOptions, KV_CACHE_TYPE_HELP, positiveInt, type EngineFlags } from '../context.js';
import { KV_CACHE_TYPES } from '../../core/loader.js';

interface RunFlags extends EngineFlags {
  image?: string[];
  audio?: string[];
  system?: string;
  maxTokens?: string;
  temperature?: string;
  think?: boolean;
  json?: boolean;
}

async function readStdin(): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const chunk of process.stdin) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks).toString('utf8');
}

function requestOptions(flags: RunFlags): Omit<ChatRequest, 'model' | 'messages'> {
  let temperature: number | undefined;
  if (flags.temperature !== undefined) {
    temperature = Number(flags.temperature);
    if (!Number.isFinite(temperature) || temperature < 0 || temperature > 2) throw new CliError(`--temperature must be 0-2, got '${flags.temperature}'`, EXIT_USAGE);
  }
  return {
    maxTokens: flags.maxTokens === undefined ? undefined : positiveInt(flags.maxTokens, '--max-tokens'),
    temperature,
    thinking: flags.think,
  };
}

/** The --image and --audio files, read (a missing one is an error naming it: exit 1, as for any input file). */
async function mediaFiles(flags: RunFlags): Promise<ChatMedia[]> {
  const read = async (kind: ChatMedia['kind'], flag: string, file: string): Promise<ChatMedia> => {
    const bytes = await readFile(file).catch((error: NodeJS.ErrnoException) => {
      throw new CliError(`${flag} ${file}: ${error.code === 'ENOENT' ? 'no such file' : error.message}`, EXIT_FAILURE);
    });
    return { kind, param: `${flag} ${file}`, source: { bytes } };
  };
  return Promise.all([...(flags.image ?? []).map((f) => read('image', '--image', f)), ...(flags.audio ?? []).map((f) => read('audio', '--audio', f))]);
}

export function runCommand(): Command {
  return new Command('run')
    .description('Chat with a model: one answer for a prompt or piped stdin, or an interactive chat on a terminal.')
    .argument('<model>', 'chat model id')
    .argument('[prompt]', 'prompt (stdin is appended when piped)')
    .option('--image <file>', 'an image for the prompt (repeatable); the model needs a projector (lserve pull … --mmproj)', collect)
    .option('--audio <file>', 'an audio clip (wav, mp3, …) for the prompt (repeatable); for audio-input models', collect)
    .option('--system <text>', 'system prompt')
    .option('--max-tokens <n>', 'maximum tokens to generate')
    .option('--temperature <t>', 'sampling temperature')
    .option('--think', 'enable thinking (reasoning) for models that support it')
    .option('--no-think', 'disable thinking')
    .option('--json', 'print the full chat.completion response')
    .option('--threads <n>', 'CPU threads (0 = runtime default)')
    .option('--ctx-size <size>', CTX_SIZE_HELP, collect)
    .addOption(new Option('--kv-cache-type <type>', KV_CACHE_TYPE_HELP).choices(KV_CACHE_TYPES))
    .addHelpText('after', '\nExamples:\n  $ lserve run qwen3-0.6b "Why is the sky blue?"\n  $ cat notes.txt | lserve run qwen3-0.6b "summarise"\n  $ lserve run qwen2.5-vl-3b "What is in this picture?" --image photo.jpg\n  $ lserve run qwen3-0.6b            # interactive chat')
    .action(async (model: string, prompt: string | undefined, flags: RunFlags, command: Command) => {
      const options = requestOptions(flags);
      const piped = !process.stdin.isTTY;
      const input = piped ? await readStdin() : '';
      const text = [prompt, input.trim()].filter((part) => part).join('\n\n');
      // A CLI session serves one conversation: one sequence is enough.
      const engine = createEngine(globalOptions(command), flags, { parallel: 1, maxQueue: 1 });
      try {
        const media = await mediaFiles(flags);
        if (!text) {
          if (media.length) throw new CliError('--image and --audio go with a prompt: pass one as an argument or on stdin', EXIT_USAGE);
          if (piped || !process.stdout.isTTY) throw new CliError('no prompt: pass one as an argument or pipe text on stdin', EXIT_USAGE);
          await engine.resolve(model, ['chat']);
          const { runChatView } = await import('../views/chat-app.js');
          await runChatView({ engine, model, system: flags.system, options });
          return;
        }
        // The images and clips come before the text, as llama.cpp's own CLI puts them.
        const user: ChatMessage = { role: 'user', content: MEDIA_MARKER.repeat(media.length) + text, ...(media.length ? { media } : {}) };
        const messages: ChatMessage[] = [...(flags.system ? [{ role: 'system' as const, content: flags.system }] : []), user];
        const controller = new AbortController();
        process.once('SIGINT', () => controller.abort(new Error('interrupted')));
        const request = { model, messages, ...options };
        if (media.length) {
          await checkChatMedia(engine, request);
          for (const item of media) await decodeChatMedia(item, (item.source as { bytes: Uint8Array }).bytes, controller.signal);
        }
        const deltas = chat(engine, request, controller.signal);
        if (flags.json) {
          const result = await collectChat(deltas);
          process.stdout.write(`${JSON.stringify(chatCompletionFrom(result, model, `chatcmpl-${randomUUID()}`, Math.floor(Date.now() / 1000)), null, 2)}\n`);
          return;
        }
        // The answer goes to stdout as it is generated; reasoning, when shown, to stderr.
        let last = '';
        for await (const delta of deltas) {
          if (delta.type === 'content') {
            process.stdout.write(delta.text);
            last = delta.text;
          } else if (delta.type === 'reasoning' && process.stderr.isTTY) {
            process.stderr.write(process.env.NO_COLOR ? delta.text : `\x1b[2m${delta.text}\x1b[22m`);
          }
        }
        if (!last.endsWith('\n')) process.stdout.write('\n');
      } finally {
        await engine.close();
      }
    });
}
