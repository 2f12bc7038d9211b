/**
 * The body of a sherpa-onnx child process, as CommonJS source that
 * process.ts runs with `node -e`. A string, not a file to fork: it then
 * starts the same way from dist/ (plain `tsc` output, which copies no .cjs
 * assets) and from the TypeScript sources under the test runner (where there
 * is no compiled file to fork), with no build step or loader flags — the
 * approach src/runtimes/onnx/session.ts takes for its worker threads.
 *
 * The common part below loads sherpa-onnx-node (or reports `fatal` and
 * exits), exits when the server closes the IPC channel, and hands every
 * message to the service's body, which defines:
 *
 *   handle(msg)          — the service's messages, `load` and `unload` included;
 *   failed(msg, error)   — `handle` threw for `msg` (report it, or rethrow).
 *
 * and may use `sherpa`, `send(message)` and `messageOf(error)`. Bodies stay
 * small: they only drive sherpa-onnx; every policy (limits, restarts, errors
 * to users) lives in the server's process.
 *
 * Protocol: see protocol.ts.
 */
export function childSource(body: string): string {
  return `
'use strict';
(() => {
let sherpa;
try {
  sherpa = require(process.env.LSERVE_SHERPA_MODULE);
} catch (error) {
  process.send({ t: 'fatal', error: String((error && error.message) || error) }, () => process.exit(1));
  return;
}
const send = (message) => { if (process.connected) process.send(message); };
const messageOf = (error) => String((error && error.message) || error);
process.on('disconnect', () => process.exit(0));
${body}
process.on('message', (msg) => {
  try {
    handle(msg);
  } catch (error) {
    failed(msg, error);
  }
});
send({ t: 'ready', version: String(sherpa.version || '') });
})();
`;
}
