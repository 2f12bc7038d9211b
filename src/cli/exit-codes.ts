import { isLserveError } from '../core/errors.js';

/**
 * The CLI's exit codes: one rule for every command, decided here.
 *
 * | code    | meaning |
 * |---------|---------|
 * | 0       | done |
 * | 1       | the command was understood and failed doing its work: a model that is unknown, not installed or of another kind; an input file that is missing or cannot be decoded; a download, the network, a busy port, a model that cannot load, a server `ps` cannot reach |
 * | 2       | the command line is wrong, whatever the machine holds: an unknown command or flag, a missing or extra argument, a value that is malformed, out of range or at odds with another flag, a flag's own file (`--aliases`, `--hf-token-file`) that is missing or malformed |
 * | 128 + N | stopped by signal N before it finished: 130 for Ctrl-C (SIGINT), 143 for SIGTERM (`pull`; `serve` exits 0 once drained) |
 */
export const EXIT_OK = 0;
export const EXIT_FAILURE = 1;
export const EXIT_USAGE = 2;

/** Codes of 4xx errors that are about the model or the input's content, not the command line: runtime failures (1). */
const FAILURE_CODES = new Set(['model_not_found', 'wrong_model_kind', 'invalid_image', 'invalid_audio']);

/**
 * The exit code of an engine error (core/errors.ts) raised by a command: a
 * request the engine refuses for a value the user typed (400) is a usage
 * error, unless it is about the model or an input file's content; 404s and
 * everything the engine fails at (5xx) are failures.
 */
export function exitCodeOf(error: unknown): number {
  if (!isLserveError(error)) return EXIT_FAILURE;
  if (error.status === 404 || error.status === 413 || error.status >= 500) return EXIT_FAILURE;
  if (error.code !== null && FAILURE_CODES.has(error.code)) return EXIT_FAILURE;
  return error.status >= 400 && error.status < 500 ? EXIT_USAGE : EXIT_FAILURE;
}
