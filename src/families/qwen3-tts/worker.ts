import { parentPort } from 'node:worker_threads';
import { FrameGenerator, type GenerateRequest, type GeneratorInit } from './generator.js';
import { PromptError } from './prompt.js';

/**
 * Entry of the generator worker: one FrameGenerator, driven by messages from
 * GeneratorWorker (worker-client.ts). Frames stream back as they are made; an
 * abort arrives through a shared flag that the loop reads every frame, without
 * waiting for a message to be delivered.
 */

type Request =
  | { id: number; type: 'init'; init: GeneratorInit }
  | { id: number; type: 'reference'; samples: Float32Array; withCodes: boolean }
  | { id: number; type: 'generate'; request: GenerateRequest; abort: SharedArrayBuffer; hold?: SharedArrayBuffer }
  | { id: number; type: 'release' };

const port = parentPort!;
let generator: FrameGenerator | undefined;

function ready(): FrameGenerator {
  if (!generator) throw new Error('the generator is not initialised');
  return generator;
}

port.on('message', async (message: Request) => {
  const { id } = message;
  try {
    if (message.type === 'init') {
      generator = await FrameGenerator.create(message.init);
      port.postMessage({ id, ok: true, result: { graphNotes: generator.graphNotes, loop: generator.loop } });
    } else if (message.type === 'reference') {
      const result = await ready().encodeReference(message.samples, message.withCodes);
      port.postMessage({ id, ok: true, result }, [result.xvector.buffer as ArrayBuffer, ...result.frames.map((f) => f.buffer as ArrayBuffer)]);
    } else if (message.type === 'generate') {
      const flag = new Int32Array(message.abort);
      const allowance = message.hold && new Int32Array(message.hold);
      let made = 0;
      const aborted = () => {
        // As many frames made as the caller allows (LoopHold): wait, re-reading the abort flag every 20 ms.
        for (let allowed; allowance && made >= (allowed = Atomics.load(allowance, 0)) && Atomics.load(flag, 0) === 0; ) Atomics.wait(allowance, 0, allowed, 20);
        return Atomics.load(flag, 0) !== 0;
      };
      const onFrame = (codes: Int32Array) => {
        made++;
        port.postMessage({ id, update: codes }, [codes.buffer as ArrayBuffer]);
      };
      const result = await ready().generate(message.request, onFrame, aborted);
      port.postMessage({ id, ok: true, result });
    } else if (message.type === 'release') {
      await generator?.release();
      generator = undefined;
      port.postMessage({ id, ok: true });
    }
  } catch (error) {
    const param = error instanceof PromptError ? error.param : undefined;
    port.postMessage({ id, ok: false, error: error instanceof Error ? error.message : String(error), param });
  }
});
