import { open, type FileHandle } from 'node:fs/promises';
import path from 'node:path';
import onnxProto from 'onnx-proto';
import type { onnx as OnnxTypes } from 'onnx-proto';

/**
 * Reads tensors' external data from the files beside their graph, each file
 * opened once and read by position (one can exceed 2 GB, an fp32 UNet's,
 * past what readFile returns). A location outside the graph's folder is
 * refused: a graph file must not make lserve read elsewhere.
 */

export const EXTERNAL = onnxProto.onnx.TensorProto.DataLocation.EXTERNAL;

export class ExternalDataReader {
  private readonly files = new Map<string, Promise<FileHandle>>();

  constructor(private readonly dir: string) {}

  /** The bytes of a tensor stored externally (`dataLocation` EXTERNAL). */
  async read(tensor: OnnxTypes.ITensorProto): Promise<Uint8Array> {
    const entry = (key: string) => tensor.externalData?.find((e) => e.key === key)?.value;
    const location = entry('location');
    if (!location || path.isAbsolute(location) || location.split(/[\\/]/).includes('..')) throw new Error(`external data '${location}' of ${tensor.name} is outside the model folder`);
    let file = this.files.get(location);
    if (!file) this.files.set(location, (file = open(path.join(this.dir, location), 'r')));
    const handle = await file;
    const offset = Number(entry('offset') ?? 0);
    const length = entry('length') === undefined ? (await handle.stat()).size - offset : Number(entry('length'));
    const bytes = new Uint8Array(length);
    const { bytesRead } = await handle.read(bytes, 0, length, offset);
    if (bytesRead !== length) throw new Error(`external data '${location}' of ${tensor.name} ends before byte ${offset + length}`);
    return bytes;
  }

  async close(): Promise<void> {
    const handles = await Promise.allSettled(this.files.values());
    await Promise.all(handles.map((h) => (h.status === 'fulfilled' ? h.value.close() : undefined)));
  }
}
