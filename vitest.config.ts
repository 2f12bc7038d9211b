import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts', 'test/**/*.test.tsx'],
    // Inference is CPU-bound: running suites one or two at a time on a 2-core
    // machine is faster and more stable than oversubscribing it.
    fileParallelism: true,
    maxWorkers: 2,
    testTimeout: 60_000,
    hookTimeout: 120_000,
    globalSetup: ['test/helpers/global-setup.ts'],
    // The tests never compile: no background build of the threadpool addon by
    // the servers they start (its decisions are tested with a stand-in build).
    env: { LSERVE_LLAMA_BUILD: 'prebuilt' },
  },
});
