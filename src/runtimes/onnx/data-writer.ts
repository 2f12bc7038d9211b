import type { FileHandle } from 'node:fs/promises';
import onnxProto from 'onnx-proto';
import type { onnx as OnnxTypes } from 'onnx-proto';
import { EXTERNAL, ExternalDataReader } from './external-reader.js';

/**
 * Writes a rewritten graph's tensors: each one's bytes read from wherever the
 * source graph keeps them (inline, or external data beside it), and placed
 * inline when small or appended to the new graph's own data file. Used by
 * the fp16 → fp32 conversion and the int8 quantizer.
 */

const { onnx } = onnxProto;

/** Initializers at least this large go to the external data file; smaller ones stay inline. */
const EXTERNAL_MIN_BYTES = 1024;

export class DataWriter {
  offset = 0;
  converted = 0;
  private readonly sources: ExternalDataReader;

  constructor(
    private readonly file: FileHandle,
    private readonly name: string,
    sourceDir: string,
  ) {
    this.sources = new ExternalDataReader(sourceDir);
  }

  /** The tensor's bytes, wherever the source keeps them (inline raw, typed fields, or its own external file). */
  async bytesOf(tensor: OnnxTypes.TensorProto): Promise<Uint8Array | undefined> {
    if (tensor.dataLocation === EXTERNAL) return this.sources.read(tensor);
    if (tensor.rawData?.length) return tensor.rawData;
    return undefined;
  }

  close(): Promise<void> {
    return this.sources.close();
  }

  async append(bytes: Uint8Array): Promise<{ offset: number; length: number }> {
    // 64-byte alignment lets ORT map the data without copying.
    const pad = (64 - (this.offset % 64)) % 64;
    if (pad) await this.file.write(new Uint8Array(pad), 0, pad, this.offset);
    const offset = this.offset + pad;
    await this.file.write(bytes, 0, bytes.length, offset);
    this.offset = offset + bytes.length;
    return { offset, length: bytes.length };
  }

  async place(tensor: OnnxTypes.TensorProto, bytes: Uint8Array, inline: boolean): Promise<void> {
    if (inline || bytes.length < EXTERNAL_MIN_BYTES) {
      tensor.rawData = bytes;
      tensor.dataLocation = onnx.TensorProto.DataLocation.DEFAULT;
      tensor.externalData = [];
      return;
    }
    const { offset, length } = await this.append(bytes);
    tensor.dataLocation = EXTERNAL;
    tensor.externalData = [
      onnx.StringStringEntryProto.create({ key: 'location', value: this.name }),
      onnx.StringStringEntryProto.create({ key: 'offset', value: String(offset) }),
      onnx.StringStringEntryProto.create({ key: 'length', value: String(length) }),
    ];
    tensor.rawData = new Uint8Array(0);
  }
}
