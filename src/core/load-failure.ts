import { stat } from 'node:fs/promises';
import { InsufficientMemoryError, LserveError, ModelLoadError } from './errors.js';
import type { InstalledModel } from './store.js';
import { formatBytes } from './units.js';

/**
 * The one place where a failed model load becomes the error a user reads,
 * whatever the runtime: the model's name and the cause in words to act on.
 * Memory shortages are 507 insufficient_memory; everything else (a corrupt
 * or incomplete file, an unsupported architecture) 500 model_load_failed.
 */
export async function describeLoadFailure(installed: InstalledModel, error: unknown): Promise<LserveError> {
  if (error instanceof LserveError) return error;
  const message = error instanceof Error ? error.message : String(error);
  const name = `Model '${installed.id}'`;
  // node-llama-cpp's InsufficientMemoryError: its own free-RAM check refused a context.
  if (error instanceof Error && error.constructor.name === 'InsufficientMemoryError') {
    return new InsufficientMemoryError(`${name} does not fit in the memory free now: ${message}. Set a smaller context with --ctx-size, lower --parallel, or unload other models.`, {
      cause: error,
    });
  }
  const files = await describeFiles(installed);
  return new ModelLoadError(`${name} could not be loaded: ${message}${/[.!]$/.test(message) ? '' : '.'} ${files}`, { cause: error });
}

/** What is on disk, so a truncated download or a moved file is plain to see. */
async function describeFiles(installed: InstalledModel): Promise<string> {
  const roles = Object.entries(installed.files);
  const parts: string[] = [];
  for (const [role, file] of roles) {
    const label = roles.length > 1 ? `${role} file` : 'file';
    try {
      parts.push(`${label} ${file} has ${formatBytes((await stat(file)).size)}`);
    } catch {
      parts.push(`${label} ${file} is missing`);
    }
  }
  const fix =
    installed.source === 'local' ? 'Check the file, or register another.'
    : installed.source === 'bundled' ? 'Reinstall lserve: the package that ships this model is damaged.'
    : `Run \`lserve rm ${installed.id}\` and pull it again.`;
  return `${parts.length ? `Its ${parts.join('; its ')}. ` : ''}${fix}`;
}
