import { readFileSync } from 'node:fs';
import type { IncomingHttpHeaders, ServerResponse } from 'node:http';
import { createServer, type Server } from 'node:https';
import type { AddressInfo } from 'node:net';
import type { TLSSocket } from 'node:tls';
import type { TestCa } from './test-ca.js';

/** One request an HTTPS receiver got, with what its connection said about TLS. */
export interface SeenRequest {
  path: string;
  headers: IncomingHttpHeaders;
  body: string;
  /** The server name the client sent (SNI), false without one. */
  servername: string | false;
  /** Whether the connection resumed a TLS session. */
  resumed: boolean;
  /** The client certificate's CN, when the connection presented one. */
  clientCn: string | undefined;
}

/**
 * A real HTTPS receiver on 127.0.0.1 serving the run's CA's certificate. `requireClientCert` makes
 * it a mutual-TLS receiver that refuses handshakes without a certificate of that CA; `answer`
 * writes each response (default 200); idle connections close after `idleMs` (default 5 s);
 * `certificate` replaces the run's server certificate (one the CA issued for other names).
 */
export async function startHttpsReceiver(
  ca: TestCa,
  options: {
    requireClientCert?: boolean;
    idleMs?: number;
    answer?: (seen: SeenRequest, res: ServerResponse) => void;
    certificate?: { cert: string; key: string };
  } = {},
) {
  const seen: SeenRequest[] = [];
  const answer = options.answer ?? ((_seen, res) => res.writeHead(200).end('ok'));
  const server: Server = createServer(
    {
      cert: options.certificate?.cert ?? ca.cert,
      key: options.certificate?.key ?? ca.key,
      ...(options.requireClientCert
        ? { requestCert: true, rejectUnauthorized: true, ca: readFileSync(ca.caPath, 'utf8') }
        : {}),
    },
    (req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (chunk: Buffer) => chunks.push(chunk));
      req.on('end', () => {
        const socket = req.socket as TLSSocket;
        const cn = socket.getPeerCertificate().subject?.CN;
        const entry: SeenRequest = {
          path: req.url ?? '/',
          headers: req.headers,
          body: Buffer.concat(chunks).toString('utf8'),
          servername: socket.servername ?? false,
          resumed: socket.isSessionReused(),
          clientCn: typeof cn === 'string' ? cn : undefined,
        };
        seen.push(entry);
        answer(entry, res);
      });
    },
  );
  server.keepAliveTimeout = options.idleMs ?? 5_000;
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as AddressInfo).port;
  return {
    seen,
    port,
    base: `https://127.0.0.1:${port}`,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
