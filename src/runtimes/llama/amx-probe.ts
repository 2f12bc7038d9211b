import { createRequire } from 'node:module';
import type { CpuProbeBindings } from './amx.js';

/**
 * The AMX probe's process (amx.ts starts it, through runtimes/launch):
 * `amx-probe <addon> <threads> <rounds>` runs the shipped addon's probe and
 * writes its result to stdout as JSON. Whatever the probe does to this
 * process, the one that started it is unharmed.
 */
const [addon, threads, rounds] = process.argv.slice(2);
const bindings = createRequire(import.meta.url)(addon!) as Pick<CpuProbeBindings, 'lserveProbeAmx'>;
process.stdout.write(JSON.stringify(bindings.lserveProbeAmx(Number(threads), Number(rounds))));
