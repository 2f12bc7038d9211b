import { defaultLoaders } from './compose.js';
import { setLlamaAddonHome, setThreadpoolPolling } from './runtimes/llama/runtime.js';
import { serveRunner } from './runtimes/runner/child.js';

/**
 * The entry of a runner process (runtimes/runner): one model, loaded with
 * this build's loaders, served to the server that started it. Like the
 * composition root it may import the families, through compose.ts.
 */
serveRunner({
  loaders: defaultLoaders,
  init(home) {
    setLlamaAddonHome(home);
    // The server turns spinning on while this runner's model is the only one working.
    setThreadpoolPolling(false);
  },
  polling: setThreadpoolPolling,
});
