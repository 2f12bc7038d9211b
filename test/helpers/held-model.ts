import type { Engine } from '../../src/compose.js';
import type { ModelKind } from '../../src/core/catalog.js';
import type { LoadedModel } from '../../src/core/loader.js';

/**
 * Loads a model and keeps its lease until `release()`, so a test file can call
 * the runtime's own methods while the engine still counts it as in use (it is
 * neither unloaded nor swapped under the test).
 */
export async function holdModel<T extends LoadedModel>(engine: Engine, id: string, kinds: ModelKind[]): Promise<{ runtime: T; release: () => Promise<void> }> {
  let runtime!: T;
  let letGo!: () => void;
  let held!: Promise<void>;
  await new Promise<void>((ready) => {
    held = engine.withModel<T, void>(id, kinds, async (model) => {
      runtime = model;
      ready();
      await new Promise<void>((resolve) => (letGo = resolve));
    });
  });
  return {
    runtime,
    release: async () => {
      letGo();
      await held;
    },
  };
}
