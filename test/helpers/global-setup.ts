import { mkdir } from 'node:fs/promises';
import { existsSync } from 'node:fs';

/** Runs once before all suites: the CLI tests need the compiled dist/ (npm test builds it first). */
export default async function setup(): Promise<void> {
  await mkdir(new URL('../.cache/', import.meta.url), { recursive: true });
  if (!existsSync(new URL('../../dist/cli/main.js', import.meta.url))) {
    throw new Error('dist/ is missing: run `npm test` (which builds first) or `npm run build`');
  }
}
