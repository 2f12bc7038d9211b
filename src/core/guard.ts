/**
 * Wraps a handler that runs outside any request's promise chain (a socket,
 * worker or child-process event, a timer, a stream callback) so that what it
 * throws goes to `onError`, where the caller turns it into the affected
 * request's error or one log line, instead of escaping as an uncaught
 * exception that would end the process and every client's work with it.
 * Routes need none: Express 5 catches what an async route throws.
 */
export function guarded<A extends unknown[]>(handler: (...args: A) => void, onError: (error: unknown) => void): (...args: A) => void {
  return (...args: A) => {
    try {
      handler(...args);
    } catch (error) {
      onError(error);
    }
  };
}
