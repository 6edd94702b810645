/**
 * The delivery-thread experiment: a worker-role engine (the delivery worker, as `hookline worker`
 * runs it) in a `worker_threads` thread of the bench process, beside the API in the main thread.
 * `BenchEngine.startWorkerThread` starts it; the `e2e-thread` scenario measures it against Hookline in
 * one thread and the naive worker. Its messages: `started` once it runs; `stop` asks it to close,
 * and it answers `stopped`.
 */
import os from 'node:os';
import { parentPort, workerData } from 'node:worker_threads';
import { pino } from 'pino';
import type { EngineConfig } from '../src/engine/index.js';
import { createEngine } from '../src/engine/index.js';
import { createLogger } from '../src/logger.js';

interface ThreadData {
  config: EngineConfig & { secretKey: Uint8Array };
}

const port = parentPort!;
const { config } = workerData as ThreadData;
// The production logger to the null device, as the bench's in-process engines.
const destination = pino.destination({ dest: os.devNull, sync: false }) as unknown as NodeJS.WritableStream;
const engine = await createEngine(
  { ...config, secretKey: Buffer.from(config.secretKey) },
  {
    role: 'worker',
    logger: createLogger({ level: config.logLevel, format: 'json', fd: 1, destination }),
  },
);
await engine.start();
port.postMessage('started');
port.on('message', (message) => {
  if (message !== 'stop') return;
  void engine.close(2_000).then(() => {
    port.postMessage('stopped');
    port.close();
  });
});
