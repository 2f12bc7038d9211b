// Builds the playground (src/ui → dist/ui): its TypeScript modules with their
// own tsconfig (DOM library, no Node types), then the page, stylesheet and
// icon copied beside them. Run by `npm run build` after the server's build.
import { execFileSync } from 'node:child_process';
import { copyFileSync, mkdirSync, readdirSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const root = fileURLToPath(new URL('..', import.meta.url));
const source = path.join(root, 'src', 'ui');
const target = path.join(root, 'dist', 'ui');
const tsc = createRequire(import.meta.url).resolve('typescript/bin/tsc');
rmSync(target, { recursive: true, force: true });
execFileSync(process.execPath, [tsc, '-p', path.join(source, 'tsconfig.json')], { stdio: 'inherit' });
mkdirSync(target, { recursive: true });
for (const name of readdirSync(source)) {
  if (/\.(html|css|svg)$/.test(name)) copyFileSync(path.join(source, name), path.join(target, name));
}
