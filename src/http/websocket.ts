import type { IncomingMessage } from 'node:http';
import type { WebSocket } from 'ws';
import type { ServerContext } from './context.js';

/** A WebSocket endpoint: the upgrade is routed here by exact path. */
export interface WebSocketRoute {
  path: string;
  /**
   * Validates the upgrade before it is accepted; throw a typed error to refuse
   * with that status. Returns the connection handler.
   */
  accept(req: IncomingMessage, url: URL, ctx: ServerContext): Promise<(socket: WebSocket) => void>;
}
