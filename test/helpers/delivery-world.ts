import { afterEach } from 'vitest';
import { testApp, type TestApp, type TestAppOptions } from './app.js';
import { TestReceiver } from './receiver.js';
import { startTestWorker, type TestWorker } from './worker.js';

/** An engine's API, one worker, one receiver and a vendor key: what a delivery test starts from. */
export interface DeliveryWorld {
  t: TestApp;
  receiver: TestReceiver;
  worker: TestWorker;
  /** A `vendor` key of the world's vendor. */
  key: string;
}

export async function startDeliveryWorld(vendorId: string, options: TestAppOptions = {}): Promise<DeliveryWorld> {
  const t = await testApp(options);
  const receiver = new TestReceiver();
  await receiver.start();
  const key = await t.keyFor(['vendor'], vendorId);
  // The worker logs where the app does, so a test reads both in one place.
  const worker = await startTestWorker(t, options.logger === undefined ? {} : { logger: options.logger });
  return { t, receiver, worker, key };
}

export async function stopDeliveryWorld(world: DeliveryWorld): Promise<void> {
  await world.worker.close();
  await world.receiver.close();
  await world.t.close();
}

/**
 * A suite's delivery world, one per test: `start` begins it (as startDeliveryWorld), and it is stopped
 * after each test that started one.
 */
export function useDeliveryWorld(vendorId: string): (options?: TestAppOptions) => Promise<DeliveryWorld> {
  let world: DeliveryWorld | undefined;
  afterEach(async () => {
    if (world) await stopDeliveryWorld(world);
    world = undefined;
  });
  return async (options = {}) => (world = await startDeliveryWorld(vendorId, options));
}
