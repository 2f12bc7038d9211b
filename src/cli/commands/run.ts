import { Command } from 'commander';
import { notAvailableYet } from '../errors.js';

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
    .addHelpText('after', '\nExamples:\n  $ lserve run qwen3-0.6b "Why is the sky blue?"\n  $ cat notes.txt | lserve run qwen3-0.6b "summarise"')
    .action(() => notAvailableYet('run'));
}
