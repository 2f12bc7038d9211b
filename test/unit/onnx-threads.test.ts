import os from 'node:os';
import { describe, expect, it } from 'vitest';
import { ortSessionOptions } from '../../src/runtimes/onnx/session.js';
import { machineCores, machineThreads } from '../../src/runtimes/onnx/threads.js';

describe('ONNX Runtime thread plan', () => {
  it('gives every session the machine’s cores, or --threads when set, and one inter-op thread', () => {
    const cores = machineCores();
    expect(cores).toBeGreaterThanOrEqual(1);
    expect(cores).toBeLessThanOrEqual(os.availableParallelism());
    expect(machineThreads(0)).toBe(cores);
    expect(machineThreads(3)).toBe(3);
    expect(ortSessionOptions({ threads: 0 })).toMatchObject({ intraOpNumThreads: cores, interOpNumThreads: 1, executionMode: 'sequential' });
    expect(ortSessionOptions({ threads: 5 }).intraOpNumThreads).toBe(5);
  });
});
