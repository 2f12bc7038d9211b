import { randomUUID } from 'node:crypto';
import { Command } from 'commander';
import { chatCompletionFrom } from '../../api/chat.js';
import { chat, collectChat, type ChatMessage, type ChatRequest } from '../../core/tasks/chat.js';
import { CliError, EXIT_USAGE } from '../errors.js';
import { collect, createEngine, CTX_SIZE_HELP, globalOptions, positiveInt, type EngineFlags } from '../context.js';

interface RunFlags extends EngineFlags {
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

export function runCommand(): Command {
  return new Command('run')
    .description('Chat with a model: one answer for a prompt or piped stdin, or an interactive chat on a terminal.')
    .argument('<model>', 'chat model id')
    .argument('[prompt]', 'prompt (stdin is appended when piped)')
    .option('--system <text>', 'system prompt')
    .option('--max-tokens <n>', 'maximum tokens to generate')
    .option('--temperature <t>', 'sampling temperature')
    .option('--think', 'enable thinking (reasoning) for models that support it')
    .option('--no-think', 'disable thinking')
    .option('--json', 'print the full chat.completion response')
    .option('--threads <n>', 'CPU threads (0 = runtime default)')
    .option('--ctx-size <size>', CTX_SIZE_HELP, collect)
    .addHelpText('after', '\nExamples:\n  $ lserve run qwen3-0.6b "Why is the sky blue?"\n  $ cat notes.txt | lserve run qwen3-0.6b "summarise"\n  $ lserve run qwen3-0.6b            # interactive chat')
    .action(async (model: string, prompt: string | undefined, flags: RunFlags, command: Command) => {
      const options = requestOptions(flags);
      const piped = !process.stdin.isTTY;
      const input = piped ? await readStdin() : '';
      const text = [prompt, input.trim()].filter((part) => part).join('\n\n');
      // A CLI session serves one conversation: one sequence is enough.
      const engine = createEngine(globalOptions(command), flags, { parallel: 1, maxQueue: 1 });
      try {
        if (!text) {
          if (piped || !process.stdout.isTTY) throw new CliError('no prompt: pass one as an argument or pipe text on stdin', EXIT_USAGE);
          await engine.resolve(model, ['chat']);
          const { runChatView } = await import('../views/chat-app.js');
          await runChatView({ engine, model, system: flags.system, options });
          return;
        }
        const messages: ChatMessage[] = [...(flags.system ? [{ role: 'system' as const, content: flags.system }] : []), { role: 'user', content: text }];
        const controller = new AbortController();
        process.once('SIGINT', () => controller.abort(new Error('interrupted')));
        const deltas = chat(engine, { model, messages, ...options }, controller.signal);
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
