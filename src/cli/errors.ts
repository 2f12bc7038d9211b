import { isLserveError, type LserveError } from '../core/errors.js';
import { CatalogError } from '../core/catalog.js';
import { EXIT_FAILURE, EXIT_USAGE, exitCodeOf } from './exit-codes.js';

export { EXIT_FAILURE, EXIT_OK, EXIT_USAGE } from './exit-codes.js';

/** An error the CLI reports as one line and an exit code (src/cli/exit-codes.ts), without a stack trace. */
export class CliError extends Error {
  constructor(
    message: string,
    readonly exitCode: number = EXIT_FAILURE,
  ) {
    super(message);
  }
}

export function notAvailableYet(command: string): never {
  throw new CliError(`'lserve ${command}' is not available yet in this version.`, EXIT_USAGE);
}

/**
 * What each command calls the request fields the engine names in its errors
 * (`'steps'` → `--steps`, `'model'` → `-m/--model`), so that an error of the
 * engine speaks of the command line, not of an HTTP body.
 */
export type ParamWords = Record<string, string>;

const PARAM_WORDS: Record<string, ParamWords> = {
  run: { model: 'the <model> argument', messages: 'the prompt', max_tokens: '--max-tokens', temperature: '--temperature' },
  transcribe: { model: '-m/--model', language: '--language', prompt: '--prompt', temperature: '--temperature', timestamp_granularities: '--word-timestamps', response_format: '--format' },
  speak: {
    model: '-m/--model',
    input: 'the text',
    voice: '--voice',
    speaker: '--speaker',
    voice_description: '--describe',
    instructions: '--describe',
    ref_audio: '--clone',
    ref_text: '--ref-text',
    language: '--language',
    speed: '--speed',
    seed: '--seed',
    max_frames: '--frames',
  },
  imagine: {
    model: '-m/--model',
    prompt: 'the prompt',
    negative_prompt: '--negative',
    n: '-n',
    size: '--size',
    steps: '--steps',
    seed: '--seed',
    guidance_scale: '--guidance',
    output_compression: '--quality',
    vae: '--vae',
    strength: '--strength',
  },
  ocr: { model: '-m/--model' },
};

/** The words of the command named `name` (commander's name of the subcommand that ran). */
export function paramWordsOf(name: string | undefined): ParamWords {
  return (name !== undefined && PARAM_WORDS[name]) || {};
}

/** An engine error's message in the command's words: each quoted field name it mentions becomes its flag. */
export function cliMessage(error: LserveError, words: ParamWords): string {
  let message = error.message;
  for (const [param, flag] of Object.entries(words)) message = message.split(`'${param}'`).join(flag);
  return message;
}

/** Prints an error as the user should see it and returns the exit code. */
export function reportError(error: unknown, verbose: boolean, words: ParamWords = {}): number {
  if (error instanceof CliError) {
    process.stderr.write(`lserve: ${error.message}\n`);
    return error.exitCode;
  }
  if (isLserveError(error)) {
    process.stderr.write(`lserve: ${cliMessage(error, words)}\n`);
    if (verbose && error.cause) process.stderr.write(`${(error.cause as Error).stack ?? String(error.cause)}\n`);
    return exitCodeOf(error);
  }
  if (error instanceof CatalogError) {
    process.stderr.write(`lserve: ${error.message}\n`);
    return EXIT_FAILURE;
  }
  const e = error as Error;
  process.stderr.write(`lserve: ${verbose ? (e?.stack ?? String(error)) : (e?.message ?? String(error))}\n`);
  return EXIT_FAILURE;
}
