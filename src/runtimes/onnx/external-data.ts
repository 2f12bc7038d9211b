import { open, stat, type FileHandle } from 'node:fs/promises';
import path from 'node:path';

/**
 * Which files an ONNX graph keeps its weights in (the ONNX "external data"
 * of exports over protobuf's 2 GB limit: optimum writes `model.onnx_data`
 * beside `model.onnx`, diffusers' export script `weights.pb`). The graph's
 * protobuf is walked field by field with positional reads, so the weights a
 * graph keeps inline (up to 2 GB of them) are skipped, never read: finding
 * out costs milliseconds whatever the graph's size.
 *
 * A `location` is relative to the graph's own folder (that is where ONNX
 * Runtime looks when a session is created from the graph's path); one that
 * is absolute or climbs out of that folder is refused, as is a reference
 * past the end of its file (a truncated download).
 */

export interface ExternalDataFile {
  /** The location as the graph writes it (relative to the graph's folder). */
  location: string;
  /** Absolute path. */
  path: string;
  /** Bytes the graph's tensors need from it (the largest offset + length). */
  needed: number;
  /** Tensors stored in it. */
  tensors: number;
}

/** A graph that cannot be read, or whose external data is missing or unusable; the message names the file. */
export class ExternalDataError extends Error {
  constructor(
    message: string,
    readonly file: string,
  ) {
    super(message);
    this.name = 'ExternalDataError';
  }
}

interface Reference {
  tensor: string;
  location?: string;
  offset: number;
  length?: number;
}

/** The external data files `graph` refers to, checked to exist and to be long enough. */
export async function externalDataFiles(graph: string): Promise<ExternalDataFile[]> {
  const references = await scanGraphFile(graph);
  const folder = path.dirname(graph);
  const files = new Map<string, ExternalDataFile>();
  for (const ref of references) {
    const location = ref.location;
    if (!location) throw new ExternalDataError(`${graph}: tensor '${ref.tensor}' is stored externally but names no file`, graph);
    if (path.isAbsolute(location) || location.split(/[\\/]/).includes('..')) {
      throw new ExternalDataError(`${graph}: tensor '${ref.tensor}' is stored in '${location}', outside the graph's folder; refusing to read it`, graph);
    }
    let file = files.get(location);
    if (!file) files.set(location, (file = { location, path: path.join(folder, location), needed: 0, tensors: 0 }));
    file.tensors++;
    file.needed = Math.max(file.needed, ref.offset + (ref.length ?? 0));
  }
  for (const file of files.values()) {
    let size: number;
    try {
      const info = await stat(file.path);
      if (!info.isFile()) throw new Error('not a file');
      size = info.size;
    } catch {
      throw new ExternalDataError(`${graph} keeps ${file.tensors} of its tensors in '${file.location}', which is missing beside it (${file.path})`, file.path);
    }
    if (size < file.needed) {
      throw new ExternalDataError(`${file.path} is ${size} bytes, but ${graph} reads up to byte ${file.needed} of it (truncated?)`, file.path);
    }
  }
  return [...files.values()];
}

/** ONNX protobuf field numbers walked here (onnx.proto). */
const MODEL_GRAPH = 7;
const GRAPH = { node: 1, initializer: 5, sparseInitializer: 15 };
const NODE_ATTRIBUTE = 5;
const ATTRIBUTE = { t: 5, g: 6, tensors: 10, graphs: 11, sparseTensor: 22, sparseTensors: 23 };
const SPARSE = { values: 1, indices: 2 };
const TENSOR = { name: 8, externalData: 13, dataLocation: 14 };
const ENTRY = { key: 1, value: 2 };
const EXTERNAL = 1;

type Kind = 'model' | 'graph' | 'node' | 'attribute' | 'sparse' | 'tensor';

/** Sub-messages to descend into, by the kind of message being walked. */
const CHILDREN: Record<Exclude<Kind, 'tensor'>, Record<number, Kind>> = {
  model: { [MODEL_GRAPH]: 'graph' },
  graph: { [GRAPH.node]: 'node', [GRAPH.initializer]: 'tensor', [GRAPH.sparseInitializer]: 'sparse' },
  node: { [NODE_ATTRIBUTE]: 'attribute' },
  attribute: { [ATTRIBUTE.t]: 'tensor', [ATTRIBUTE.tensors]: 'tensor', [ATTRIBUTE.g]: 'graph', [ATTRIBUTE.graphs]: 'graph', [ATTRIBUTE.sparseTensor]: 'sparse', [ATTRIBUTE.sparseTensors]: 'sparse' },
  sparse: { [SPARSE.values]: 'tensor', [SPARSE.indices]: 'tensor' },
};

/** Every externally stored tensor of the graph file (initializers, attribute tensors, subgraphs). */
export async function scanGraphFile(file: string): Promise<Reference[]> {
  let handle: FileHandle;
  try {
    handle = await open(file, 'r');
  } catch {
    throw new ExternalDataError(`${file} is missing or cannot be read`, file);
  }
  try {
    const reader = new Reader(handle, (await handle.stat()).size);
    const found: Reference[] = [];
    await walk(reader, 0, reader.size, 'model', found);
    return found;
  } catch (error) {
    if (error instanceof ExternalDataError) throw error;
    throw new ExternalDataError(`${file} is not a readable ONNX graph (${(error as Error).message})`, file);
  } finally {
    await handle.close();
  }
}

async function walk(reader: Reader, start: number, end: number, kind: Kind, found: Reference[]): Promise<void> {
  if (kind === 'tensor') return tensor(reader, start, end, found);
  const children = CHILDREN[kind];
  let at = start;
  while (at < end) {
    const field = await reader.field(at, end);
    const child = field.length !== undefined ? children[field.number] : undefined;
    if (child) await walk(reader, field.valueAt, field.valueAt + field.length!, child, found);
    at = field.next;
  }
}

async function tensor(reader: Reader, start: number, end: number, found: Reference[]): Promise<void> {
  let name = '';
  let external = false;
  const entries: Record<string, string> = {};
  let at = start;
  while (at < end) {
    const field = await reader.field(at, end);
    if (field.number === TENSOR.name && field.length !== undefined) name = await reader.text(field.valueAt, field.length);
    else if (field.number === TENSOR.dataLocation && field.varint !== undefined) external = field.varint === EXTERNAL;
    else if (field.number === TENSOR.externalData && field.length !== undefined) {
      const entry = await stringEntry(reader, field.valueAt, field.valueAt + field.length);
      entries[entry.key] = entry.value;
    }
    at = field.next;
  }
  if (!external) return;
  const number = (key: string) => {
    const value = entries[key];
    if (value === undefined) return undefined;
    if (!/^\d+$/.test(value)) throw new Error(`tensor '${name}' has a malformed external data ${key} '${value}'`);
    return Number(value);
  };
  found.push({ tensor: name, location: entries.location, offset: number('offset') ?? 0, length: number('length') });
}

async function stringEntry(reader: Reader, start: number, end: number): Promise<{ key: string; value: string }> {
  const entry = { key: '', value: '' };
  let at = start;
  while (at < end) {
    const field = await reader.field(at, end);
    if (field.length !== undefined && field.number === ENTRY.key) entry.key = await reader.text(field.valueAt, field.length);
    if (field.length !== undefined && field.number === ENTRY.value) entry.value = await reader.text(field.valueAt, field.length);
    at = field.next;
  }
  return entry;
}

interface Field {
  number: number;
  /** Where the value starts (after the tag and, for length-delimited fields, the length). */
  valueAt: number;
  /** Length of a length-delimited value. */
  length?: number;
  /** Value of a varint field. */
  varint?: number;
  next: number;
}

const BLOCK = 1 << 16;

/** Positional reads through one cached block: the walk reads tags and short strings, and jumps over everything else. */
class Reader {
  private block = Buffer.alloc(0);
  private blockStart = 0;

  constructor(
    private readonly handle: FileHandle,
    readonly size: number,
  ) {}

  private async bytes(at: number, length: number): Promise<Buffer> {
    if (at < this.blockStart || at + length > this.blockStart + this.block.length) {
      const size = Math.min(Math.max(length, BLOCK), this.size - at);
      const buffer = Buffer.alloc(Math.max(size, 0));
      const { bytesRead } = await this.handle.read(buffer, 0, buffer.length, at);
      this.block = buffer.subarray(0, bytesRead);
      this.blockStart = at;
    }
    const offset = at - this.blockStart;
    if (offset + length > this.block.length) throw new Error(`the file ends at byte ${this.size}, inside a field`);
    return this.block.subarray(offset, offset + length);
  }

  async text(at: number, length: number): Promise<string> {
    return (await this.bytes(at, length)).toString('utf8');
  }

  /** A varint at `at` (up to 2^53, enough for any length or offset here) and the position after it. */
  private async varint(at: number, end: number): Promise<{ value: number; next: number }> {
    const window = await this.bytes(at, Math.min(10, end - at));
    let value = 0;
    let scale = 1;
    for (let i = 0; i < window.length; i++) {
      const byte = window[i]!;
      value += (byte & 0x7f) * scale;
      if (byte < 0x80) return { value, next: at + i + 1 };
      scale *= 128;
    }
    throw new Error(`a malformed varint at byte ${at}`);
  }

  async field(at: number, end: number): Promise<Field> {
    const tag = await this.varint(at, end);
    const number = Math.floor(tag.value / 8);
    const wire = tag.value % 8;
    switch (wire) {
      case 0: {
        const v = await this.varint(tag.next, end);
        return { number, valueAt: tag.next, varint: v.value, next: v.next };
      }
      case 1:
        return this.bounded({ number, valueAt: tag.next, next: tag.next + 8 }, end);
      case 2: {
        const length = await this.varint(tag.next, end);
        return this.bounded({ number, valueAt: length.next, length: length.value, next: length.next + length.value }, end);
      }
      case 5:
        return this.bounded({ number, valueAt: tag.next, next: tag.next + 4 }, end);
      default:
        throw new Error(`an unexpected protobuf wire type ${wire} at byte ${at}`);
    }
  }

  private bounded(field: Field, end: number): Field {
    if (field.next > end) throw new Error(`a field at byte ${field.valueAt} runs past its message's end (${end})`);
    return field;
  }
}
