import { defaultLoaders } from './compose.js';
import { amxVerdict, denyAmx } from './runtimes/llama/amx.js';
import { setLlamaAddonHome, setThreadpoolPolling } from './runtimes/llama/runtime.js';
import { threadpoolAddon } from './runtimes/llama/shipped-addon.js';
import { serveRunner } from './runtimes/runner/child.js';

/**
 * The entry of a runner process (runtimes/runner): one model, loaded with
 * this build's loaders, served to the server that started it. Like the
 * composition root it may import the families, through compose.ts.
 */
serveRunner({
  loaders: defaultLoaders,
  async init(home) {
    setLlamaAddonHome(home);
    // The server turns spinning on while this runner's model is the only one working.
    setThreadpoolPolling(false);
    // AMX the machine only claims to have is kept from every runtime of the process,
    // ONNX Runtime's included, before any of them starts (llama.cpp also loads without its AMX variant).
    const amx = await amxVerdict(home, () => threadpoolAddon(home));
    const addon = amx.state === 'refused' ? await threadpoolAddon(home) : undefined;
    if (addon) denyAmx(addon);
  },
  polling: setThreadpoolPolling,
});
