import { Readable } from 'node:stream';
import { DeleteObjectCommand, GetObjectCommand, HeadObjectCommand, ListObjectsV2Command, PutObjectCommand, S3Client } from '@aws-sdk/client-s3';
import { ServerError, UnavailableError } from '../errors.js';
import { contentTypeOf, filesToRemove, isFileName, newFileName, type ByteRange, type FileStore, type FileStoreOptions, type FileStores, type S3Location, type StoredFile } from './store.js';

/** Expired and surplus objects are looked for at most this often per store (one listing of its prefix). */
const SWEEP_INTERVAL_MS = 60_000;
/** Deletes in flight at once during a sweep. */
const DELETE_CONCURRENCY = 8;

interface S3Failure {
  name?: string;
  $metadata?: { httpStatusCode?: number };
}

const statusOf = (error: unknown) => (error as S3Failure).$metadata?.httpStatusCode;

/**
 * The storage's failure as the API's error: 503 when it could not be reached,
 * timed out or failed itself (retrying may work), 500 when it refused the
 * request (credentials, permissions, a missing bucket: the operator's to fix).
 * The message names the storage's error, never the bucket or the key.
 */
function storageError(error: unknown): ServerError | UnavailableError {
  const status = statusOf(error);
  const what = (error as S3Failure).name ?? 'Error';
  if (status === undefined || status >= 500 || status === 429) {
    return new UnavailableError(`The file storage is unavailable (${what}); retry later.`, { code: 'storage_unavailable', cause: error });
  }
  return new ServerError(`The file storage refused the request (${what}).`, { code: 'storage_error', cause: error });
}

const fail = (error: unknown): never => {
  throw storageError(error);
};

/** A catch handler: undefined for these statuses (the object is not there), the API's error for any other failure. */
const unless =
  (...statuses: number[]) =>
  (error: unknown): undefined => {
    if (statuses.includes(statusOf(error) ?? 0)) return undefined;
    return fail(error);
  };

/**
 * A FileStore in S3-compatible object storage: `<prefix>/<kind>/<name>` in
 * one bucket, shared by every replica. A file expires by its object's
 * LastModified (the storage's clock, so replicas agree); an expired one is
 * deleted when asked for, and by a sweep (at most once a minute, after a
 * write, in the background) that also removes the oldest beyond the size
 * cap. The ETag is the object's. Bytes are streamed from GetObject, a byte
 * range asked of the storage itself.
 */
export class S3FileStore implements FileStore {
  readonly where = 'in object storage';
  private sweeping: Promise<void> | undefined;
  private sweptAt = 0;

  constructor(
    private readonly client: S3Client,
    private readonly bucket: string,
    /** Ends with '/'. */
    private readonly folder: string,
    private readonly options: FileStoreOptions,
    private readonly log: (message: string) => void,
  ) {}

  async put(bytes: Uint8Array, extension: string): Promise<StoredFile> {
    const name = newFileName(extension, this.options);
    const contentType = contentTypeOf(name, this.options);
    const written = await this.client.send(new PutObjectCommand({ Bucket: this.bucket, Key: this.folder + name, Body: bytes, ContentType: contentType })).catch(fail);
    this.sweepSoon(name);
    const now = Date.now();
    return { name, size: bytes.byteLength, contentType, expiresAt: now + this.options.ttlMs, etag: written.ETag ?? '""', lastModified: new Date(now) };
  }

  async get(name: string): Promise<StoredFile | undefined> {
    if (!isFileName(name, this.options)) return undefined;
    const head = await this.client.send(new HeadObjectCommand({ Bucket: this.bucket, Key: this.folder + name })).catch(unless(404));
    if (!head?.LastModified || head.ContentLength === undefined || !head.ETag) return undefined;
    const writtenAt = head.LastModified.getTime();
    if (Date.now() - writtenAt >= this.options.ttlMs) {
      await this.delete(name);
      return undefined;
    }
    return {
      name,
      size: head.ContentLength,
      contentType: contentTypeOf(name, this.options),
      expiresAt: writtenAt + this.options.ttlMs,
      etag: head.ETag,
      lastModified: head.LastModified,
    };
  }

  async open(file: StoredFile, range?: ByteRange): Promise<Readable | undefined> {
    const request = new GetObjectCommand({
      Bucket: this.bucket,
      Key: this.folder + file.name,
      Range: range && `bytes=${range.start}-${range.end}`,
      // The object described, not another one written under its name since.
      IfMatch: file.etag,
    });
    // Deleted (404) or replaced (412) since get(): gone, as a file removed from disk.
    const object = await this.client.send(request).catch(unless(404, 412));
    if (!object) return undefined;
    if (!(object.Body instanceof Readable)) throw new ServerError('The file storage answered without a body stream.');
    return object.Body;
  }

  /** Deletes expired objects, then the oldest (never `keep`) while the prefix holds more than the cap. */
  async sweep(now = Date.now(), keep?: string): Promise<void> {
    const files: Array<{ name: string; size: number; writtenAt: number }> = [];
    let token: string | undefined;
    do {
      const page = await this.client.send(new ListObjectsV2Command({ Bucket: this.bucket, Prefix: this.folder, ContinuationToken: token })).catch(fail);
      for (const object of page.Contents ?? []) {
        const name = object.Key?.slice(this.folder.length) ?? '';
        // Anything else under the prefix is not this store's to delete.
        if (isFileName(name, this.options) && object.LastModified) files.push({ name, size: object.Size ?? 0, writtenAt: object.LastModified.getTime() });
      }
      token = page.IsTruncated ? page.NextContinuationToken : undefined;
    } while (token);
    const removed = filesToRemove(files, this.options, now, keep);
    for (let i = 0; i < removed.length; i += DELETE_CONCURRENCY) {
      await Promise.all(removed.slice(i, i + DELETE_CONCURRENCY).map((file) => this.delete(file.name)));
    }
  }

  /** Waits for a sweep in flight (the server is closing). */
  async idle(): Promise<void> {
    await this.sweeping;
  }

  private sweepSoon(keep: string): void {
    const now = Date.now();
    if (this.sweeping || now - this.sweptAt < SWEEP_INTERVAL_MS) return;
    this.sweptAt = now;
    this.sweeping = this.sweep(now, keep)
      .catch((error: unknown) => this.log(`sweeping ${this.folder} in the file storage failed: ${(error as Error).message}`))
      .finally(() => (this.sweeping = undefined));
  }

  /** Deletes an object; a failure only means it stays until the next sweep (another replica may have deleted it first). */
  private async delete(name: string): Promise<void> {
    await this.client.send(new DeleteObjectCommand({ Bucket: this.bucket, Key: this.folder + name })).catch((error: unknown) => {
      if (statusOf(error) !== 404) this.log(`deleting ${this.folder}${name} from the file storage failed: ${(error as Error).message}`);
    });
  }
}

/**
 * The client for `--files s3://…`: endpoint, region and credentials from the
 * SDK's standard chain (AWS_ENDPOINT_URL_S3 or AWS_ENDPOINT_URL, AWS_REGION,
 * AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, profiles, instance roles).
 */
export async function openS3FileStores(location: S3Location, log: (message: string) => void): Promise<FileStores> {
  // MinIO-style servers answer at <endpoint>/<bucket>, not at a bucket's own host name.
  const endpoint = process.env.AWS_ENDPOINT_URL_S3 ?? process.env.AWS_ENDPOINT_URL;
  const client = new S3Client({
    forcePathStyle: Boolean(endpoint),
    // Checksums only where S3 requires them: many S3-compatible servers refuse the newer default ones.
    requestChecksumCalculation: 'WHEN_REQUIRED',
    responseChecksumValidation: 'WHEN_REQUIRED',
    // An unreachable or hung storage is a 503 in seconds, not a request that waits forever.
    requestHandler: { connectionTimeout: 5_000, requestTimeout: 30_000, throwOnRequestTimeout: true },
  });
  try {
    await client.config.region();
  } catch {
    client.destroy();
    throw new Error('--files s3://… needs a region: set AWS_REGION (any name, e.g. us-east-1, for most S3-compatible servers).');
  }
  const stores: S3FileStore[] = [];
  return {
    open(kind, options) {
      const store = new S3FileStore(client, location.bucket, `${location.prefix ? `${location.prefix}/` : ''}${kind}/`, options, log);
      stores.push(store);
      return store;
    },
    async close() {
      await Promise.all(stores.map((store) => store.idle()));
      client.destroy();
    },
  };
}
