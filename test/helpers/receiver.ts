import { createServer, type IncomingHttpHeaders, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { closeServer, listenOnLoopback } from './http-server.js';

export interface ReceivedRequest {
  path: string;
  headers: IncomingHttpHeaders;
  body: string;
  atMs: number;
}

/** How the receiver answers one request: a status (and headers, body), or `hang` to never answer. */
export type Script = { status: number; headers?: Record<string, string>; body?: string; delayMs?: number } | 'hang';

/**
 * A real HTTP receiver on 127.0.0.1 (port 0). Each path answers from its own script queue (the last
 * entry repeats); every request is recorded.
 */
export class TestReceiver {
  readonly requests: ReceivedRequest[] = [];
  private readonly scripts = new Map<string, Script[]>();
  private readonly hanging = new Set<ServerResponse>();
  private readonly server = createServer((request, response) => {
    const chunks: Buffer[] = [];
    request.on('data', (chunk: Buffer) => chunks.push(chunk));
    request.on('end', () => {
      const path = request.url ?? '/';
      this.requests.push({
        path,
        headers: request.headers,
        body: Buffer.concat(chunks).toString('utf8'),
        atMs: Date.now(),
      });
      const queue = this.scripts.get(path) ?? [];
      const script = (queue.length > 1 ? queue.shift() : queue[0]) ?? { status: 200 };
      if (script === 'hang') {
        this.hanging.add(response);
        return;
      }
      const answer = () => response.writeHead(script.status, script.headers).end(script.body ?? '');
      if (script.delayMs) setTimeout(answer, script.delayMs);
      else answer();
    });
  });

  /**
   * Starts listening on 127.0.0.1 (a free port by default); resolves with the base URL. A receiver
   * closed earlier may start again, on the same port to come back where its webhooks point.
   */
  start(port = 0): Promise<string> {
    return listenOnLoopback(this.server, port);
  }

  get base(): string {
    return `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
  }

  /** Sets how `path` answers from now on. */
  script(path: string, ...answers: Script[]): void {
    this.scripts.set(path, [...answers]);
  }

  at(path: string): ReceivedRequest[] {
    return this.requests.filter((r) => r.path === path);
  }

  async close(): Promise<void> {
    for (const response of this.hanging) response.destroy();
    this.hanging.clear();
    await closeServer(this.server);
  }
}

/** Receivers a test starts as it needs them, all closed together in afterEach. */
export function receiverPool(): { start(): Promise<TestReceiver>; closeAll(): Promise<void> } {
  const started: TestReceiver[] = [];
  return {
    async start() {
      const r = new TestReceiver();
      await r.start();
      started.push(r);
      return r;
    },
    async closeAll() {
      for (const r of started.splice(0)) await r.close();
    },
  };
}
