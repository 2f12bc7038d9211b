/**
 * Cooperative yielding for the pipeline's JavaScript loops (connected
 * components, line warps): on a large page they add up to hundreds of
 * milliseconds, so they give the event loop a turn whenever `budgetMs` has
 * passed since the last one, keeping the server responsive during OCR.
 */
export function yielder(budgetMs = 10): () => Promise<void> {
  let last = performance.now();
  return async () => {
    if (performance.now() - last < budgetMs) return;
    await new Promise<void>((resolve) => setImmediate(resolve));
    last = performance.now();
  };
}
