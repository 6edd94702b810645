import type { IncomingMessage } from 'node:http';

/**
 * Why a refused body is read to its end before the answer: a request whose body is over the limit
 * is refused before it has been read (from its Content-Length, or once the limit is passed), while
 * the producer is still sending it. Many producers write the whole body before they read the
 * answer; if the server answered and closed the connection with those bytes unread, its kernel
 * would reset the connection (RST), and the producer's kernel would throw the 413 away unread: the
 * producer saw EPIPE or ECONNRESET instead of the reason. So the rest of the body is read and
 * discarded first, up to a bound in bytes and time (a web server's "lingering close"); a body
 * declared bigger than the bound, or one that does not end within it, is answered at once (a
 * producer that far off the limit is not one to wait for).
 */

/** Bytes of a refused body read and discarded at most, after the limit. */
const DISCARD_BYTES_MAX = 32 * 1024 * 1024;
/** How long the rest of a refused body may take to arrive. */
const DISCARD_MS_MAX = 10_000;

/**
 * Reads what is left of `request`'s body and throws it away; resolves once it has ended, or the
 * bound is reached (the connection is then closed with the answer as before).
 */
export function discardRestOfBody(request: IncomingMessage): Promise<void> {
  const declared = Number(request.headers['content-length']);
  if (request.complete || request.destroyed || declared > DISCARD_BYTES_MAX) return Promise.resolve();
  return new Promise((resolve) => {
    let read = 0;
    const done = () => {
      clearTimeout(timer);
      request.off('data', onData).off('end', done).off('close', done).off('error', done);
      request.pause();
      resolve();
    };
    const onData = (chunk: Buffer) => {
      read += chunk.length;
      if (read > DISCARD_BYTES_MAX) done();
    };
    const timer = setTimeout(done, DISCARD_MS_MAX);
    request.on('data', onData).once('end', done).once('close', done).once('error', done);
    request.resume();
  });
}
