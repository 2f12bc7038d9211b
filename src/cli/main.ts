import { Command, CommanderError } from 'commander';
import { createRequire } from 'node:module';
import { EXIT_OK, EXIT_USAGE } from './exit-codes.js';
import { paramWordsOf, reportError } from './errors.js';
import { imagineCommand } from './commands/imagine.js';
import { listCommand } from './commands/list.js';
import { mcpCommand } from './commands/mcp.js';
import { ocrCommand } from './commands/ocr.js';
import { psCommand } from './commands/ps.js';
import { pullCommand } from './commands/pull.js';
import { rmCommand } from './commands/rm.js';
import { runCommand } from './commands/run.js';
import { serveCommand } from './commands/serve.js';
import { speakCommand } from './commands/speak.js';
import { transcribeCommand } from './commands/transcribe.js';

const { version } = createRequire(import.meta.url)('../../package.json') as { version: string };

export function buildProgram(): Command {
  const program = new Command('lserve')
    .description('Local model inference: chat, embeddings, rerank, OCR, speech and images behind OpenAI/Anthropic-compatible APIs.')
    .version(version)
    .option('--home <dir>', 'where models are stored (default $LSERVE_HOME or ~/.lserve)')
    .option('--catalog <file>', 'models.json to use instead of the shipped catalog (default $LSERVE_CATALOG)')
    .option('--verbose', 'log engine activity and full error traces')
    .showHelpAfterError('(run with --help for usage)');
  for (const command of [pullCommand(), listCommand(), rmCommand(), runCommand(), transcribeCommand(), speakCommand(), imagineCommand(), ocrCommand(), serveCommand(), mcpCommand(), psCommand()]) {
    program.addCommand(command);
  }
  // Usage errors exit 2 (commander uses 1 by default); help and version exit 0.
  const exitOverride = (cmd: Command) => {
    cmd.exitOverride((err: CommanderError) => {
      throw err;
    });
    cmd.commands.forEach(exitOverride);
  };
  exitOverride(program);
  return program;
}

export async function main(argv: string[]): Promise<number> {
  const program = buildProgram();
  // The command that runs: its errors are told in its own words (its flags for the engine's field names).
  let running: string | undefined;
  program.hook('preAction', (_program, action) => {
    running = action.name();
  });
  try {
    await program.parseAsync(argv);
    return process.exitCode === undefined ? EXIT_OK : Number(process.exitCode);
  } catch (error) {
    if (error instanceof CommanderError) {
      if (error.code === 'commander.helpDisplayed' || error.code === 'commander.version' || error.code === 'commander.help') return EXIT_OK;
      return EXIT_USAGE;
    }
    return reportError(error, Boolean(program.opts().verbose), paramWordsOf(running));
  }
}

// A reader that stops early (`lserve list | head`) closes the pipe: the output is done, not an error.
for (const stream of [process.stdout, process.stderr]) {
  stream.on('error', (error: NodeJS.ErrnoException) => {
    if (error.code === 'EPIPE') process.exit(EXIT_OK);
    throw error;
  });
}

const code = await main(process.argv);
// `serve` keeps running until a signal; everything else exits with its code.
if (code !== 0) process.exit(code);
