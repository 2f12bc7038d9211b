import { spawn, spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

/**
 * The Python the SDK tests run: the virtual environment .ci/run makes at
 * test/.cache/py when present, otherwise python3; and the version of the
 * openai package it imports with `modules`, undefined when it cannot (the
 * tests are then skipped, saying what to install).
 */
const VENV_PYTHON = fileURLToPath(new URL('../.cache/py/bin/python', import.meta.url));
export const python = existsSync(VENV_PYTHON) ? VENV_PYTHON : 'python3';

export function openaiVersion(modules: string[] = ['openai']): string | undefined {
  const sdk = spawnSync(python, ['-c', `import ${modules.join(', ')}; print(openai.__version__)`], { encoding: 'utf8' });
  return sdk.status === 0 ? sdk.stdout.trim() : undefined;
}

/** Runs a Python script with `env`; its exit code and everything it printed. */
export async function runPython(script: string, env: NodeJS.ProcessEnv): Promise<{ code: number | null; output: string }> {
  const child = spawn(python, [script], { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
  let output = '';
  child.stdout.on('data', (d: Buffer) => (output += d));
  child.stderr.on('data', (d: Buffer) => (output += d));
  const code = await new Promise<number | null>((resolve, reject) => {
    child.on('error', reject);
    child.on('close', resolve);
  });
  return { code, output };
}
