// The first module of a worker thread started from the TypeScript sources
// (tests, tsx; module-entry.ts): it registers tsx's ESM loader in this thread,
// which Node 20 gives a worker no other way, then imports the worker's .ts
// module, named by the last argument. Never used from dist/, where workers
// start on their compiled .js.
import { register } from 'tsx/esm/api';

register();
await import(process.argv[process.argv.length - 1]);
