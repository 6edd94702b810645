/**
 * HTTPS receivers for the many-receivers scenario (bench/receivers.ts), in a process of their own
 * so that their TLS work is not counted as the engine's. Started with IPC and the environment:
 * RECEIVERS (how many servers, each on its own 127.0.0.1 port, so each is an origin of its own),
 * IDLE_MS (each closes a connection idle this long, as a receiver's keep-alive timeout does),
 * TLS_CERT and TLS_KEY (PEM files). Sends `{ ports }` once listening; answers a `'stats'` message
 * with `{ requests, connections, resumed }` so far; exits on `'close'`.
 */
import { readFileSync } from 'node:fs';
import { createServer, type Server } from 'node:https';
import type { AddressInfo } from 'node:net';
import type { TLSSocket } from 'node:tls';

const count = Number(process.env.RECEIVERS);
const idleMs = Number(process.env.IDLE_MS);
const cert = readFileSync(process.env.TLS_CERT!, 'utf8');
const key = readFileSync(process.env.TLS_KEY!, 'utf8');

const stats = { requests: 0, connections: 0, resumed: 0 };
const servers: Server[] = [];

for (let i = 0; i < count; i++) {
  const server = createServer({ cert, key }, (req, res) => {
    req.resume();
    req.on('end', () => {
      stats.requests += 1;
      res.end();
    });
  });
  server.keepAliveTimeout = idleMs;
  server.on('secureConnection', (socket: TLSSocket) => {
    stats.connections += 1;
    if (socket.isSessionReused()) stats.resumed += 1;
  });
  servers.push(server);
}

await Promise.all(servers.map((server) => new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))));
process.send!({ ports: servers.map((server) => (server.address() as AddressInfo).port) });

process.on('message', (message) => {
  if (message === 'stats') process.send!({ ...stats });
  if (message === 'close') {
    for (const server of servers) server.closeAllConnections();
    process.exit(0);
  }
});
