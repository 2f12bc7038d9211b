import type { IncomingMessage } from 'node:http';
import type { WebSocket } from 'ws';
import type { ServerContext } from './context.js';

/** A WebSocket endpoint: the upgrade is routed here by exact path. */
export interface WebSocketRoute {
  path: string;
  /** Largest message accepted; ws closes the socket with 1009 beyond it. */
  maxFrameBytes: number;
  /**
   * Validates the upgrade before it is accepted; throw a typed error to refuse
   * with that status. Returns the session the socket is handed to.
   */
  accept(req: IncomingMessage, url: URL, ctx: ServerContext): Promise<WebSocketSession>;
}

export interface WebSocketSession {
  /** Takes the upgraded socket over; from here the session's own handlers release what accept took. */
  open(socket: WebSocket): void;
  /** The client left before the upgrade completed: release what accept took. */
  abandon(): void;
}
