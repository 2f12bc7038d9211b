import type { Engine } from '../core/engine.js';
import type { UrlPolicy } from '../http/net/fetch-public.js';

/**
 * What the MCP server's tools run with. One McpServer is built per stdio
 * session (`lserve mcp`) and per HTTP session (`lserve serve --mcp`,
 * Streamable HTTP); both share the engine's tasks with the rest of
 * lserve and differ only in what their inputs may read.
 */
export interface McpContext {
  engine: Engine;
  /**
   * Whether tools take local file paths (`image_path`, `audio_path`): yes over
   * stdio, where the agent runs lserve on its own machine as its user, as a
   * CLI command reads the files it is given; never over HTTP.
   */
  localFiles: boolean;
  /** What `*_url` inputs may reach, and the most bytes any input may carry (the server's --allow-private-urls and upload limit). */
  urls: UrlPolicy;
  /** Aborted when the work must stop whatever the client says: the server shutting down. */
  signal?: AbortSignal;
  /** Where faults are logged (stderr over stdio: stdout carries only MCP). */
  log: (message: string) => void;
}

/** Largest input read from a path or URL over stdio, where no server limit applies (the HTTP server's default --max-upload). */
export const STDIO_MAX_INPUT_BYTES = 256 * 1024 * 1024;
