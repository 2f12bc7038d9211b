import { defaultHome } from '../../src/core/store.js';
import { shippedAddonFor } from '../../src/runtimes/llama/shipped-addon.js';
import { addonSources, findThreadpoolAddon } from '../../src/runtimes/llama/threadpool-addon.js';

/**
 * Where suites about lserve's threadpool addon (its bindings) find it: one
 * built for this install in the lserve home (`npm run build:llama`;
 * LSERVE_HOME picks the home), else 'scratch' — the shipped one, which
 * getRuntime installs into whatever home it is given; undefined: neither,
 * so there is no binding to test.
 */
export function threadpoolAddonHome(): string | 'scratch' | undefined {
  const sources = addonSources();
  if (!sources || process.platform !== 'linux') return undefined;
  if (findThreadpoolAddon(defaultHome(), sources)) return defaultHome();
  return shippedAddonFor(sources) ? 'scratch' : undefined;
}

export const NO_ADDON = ' (skipped: no threadpool addon for this install; npm run build:llama)';
