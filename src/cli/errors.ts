import { isLserveError } from '../core/errors.js';
import { CatalogError } from '../core/catalog.js';

/** Exit codes: 0 ok, 1 runtime failure, 2 usage error. */
export const EXIT_OK = 0;
export const EXIT_FAILURE = 1;
export const EXIT_USAGE = 2;

/** An error the CLI reports as one line and an exit code, without a stack trace. */
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

/** Prints an error as the user should see it and returns the exit code. */
export function reportError(error: unknown, verbose: boolean): number {
  if (error instanceof CliError) {
    process.stderr.write(`lserve: ${error.message}\n`);
    return error.exitCode;
  }
  if (isLserveError(error)) {
    process.stderr.write(`lserve: ${error.message}\n`);
    if (verbose && error.cause) process.stderr.write(`${(error.cause as Error).stack ?? String(error.cause)}\n`);
    return error.status >= 400 && error.status < 500 && error.status !== 404 ? EXIT_USAGE : EXIT_FAILURE;
  }
  if (error instanceof CatalogError) {
    process.stderr.write(`lserve: ${error.message}\n`);
    return EXIT_FAILURE;
  }
  const e = error as Error;
  process.stderr.write(`lserve: ${verbose ? (e?.stack ?? String(error)) : (e?.message ?? String(error))}\n`);
  return EXIT_FAILURE;
}
