import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { S3Client } from '@aws-sdk/client-s3';
import S3rver from 's3rver';

/** s3rver's one account: it checks the access key ID, but (unlike S3 or MinIO) not the SigV4 signature. */
const CREDENTIALS = { accessKeyId: 'S3RVER', secretAccessKey: 'S3RVER' };

export interface LocalS3 {
  bucket: string;
  endpoint: string;
  /** The standard AWS variables that point the SDK's default chain at this server. */
  env: Record<string, string>;
  /** A client of its own, to look at or plant objects behind the server's back. */
  client: S3Client;
  /** Stops it (an outage); open connections are cut. */
  stop(): Promise<void>;
  /** Starts it again on the same port and data. */
  start(): Promise<void>;
  /** Cuts the connections it is serving on, as a storage failing mid-transfer. */
  cutConnections(): void;
  /** Stops it and removes its data. */
  destroy(): Promise<void>;
}

/**
 * s3rver, a local S3-compatible server, in this process on a free loopback
 * port with its data in a temporary folder and one bucket: path-style
 * requests, SigV4 headers, Range GETs, conditional GETs, HEAD, listing and
 * deletes, as the AWS SDK sends them.
 */
export async function startLocalS3(bucket = 'lserve-test'): Promise<LocalS3> {
  const directory = await mkdtemp(path.join(os.tmpdir(), 'lserve-s3-'));
  let port = 0;
  let server: S3rver | undefined;
  const start = async () => {
    // The bucket is made once: on a restart it is already in the data folder.
    server = new S3rver({ address: '127.0.0.1', port, silent: true, directory, configureBuckets: port ? [] : [{ name: bucket }] });
    port = (await server.run()).port;
  };
  await start();
  const endpoint = `http://127.0.0.1:${port}`;
  const stop = async () => {
    if (!server) return;
    const closing = server.close();
    server.httpServer.closeAllConnections();
    await closing;
    server = undefined;
  };
  const client = new S3Client({ endpoint, region: 'us-east-1', forcePathStyle: true, credentials: CREDENTIALS });
  return {
    bucket,
    endpoint,
    env: { AWS_ENDPOINT_URL_S3: endpoint, AWS_REGION: 'us-east-1', AWS_ACCESS_KEY_ID: CREDENTIALS.accessKeyId, AWS_SECRET_ACCESS_KEY: CREDENTIALS.secretAccessKey },
    client,
    stop,
    start,
    cutConnections: () => server?.httpServer.closeAllConnections(),
    async destroy() {
      await stop();
      client.destroy();
      await rm(directory, { recursive: true, force: true });
    },
  };
}
