import { randomUUID } from 'node:crypto';

/** A machine event for ingest, of a fresh id and machine, that the vendor's webhooks for `eventType` receive. */
export const machineEvent = (vendorId: string, eventType = 'EVENT_TYPE_MACHINE_CREATED') => ({
  event_id: randomUUID(),
  event_type: eventType,
  vendor_id: vendorId,
  data: { status: 'available', metadata: { machine_id: `m-${randomUUID().slice(0, 8)}` } },
});

/** A machine event for ingest, of a fresh id, about machine `machineId` (a FIFO webhook's ordering key value). */
export const machineEventFor = (vendorId: string, machineId: string, eventType = 'EVENT_TYPE_MACHINE_CREATED') => ({
  event_id: randomUUID(),
  event_type: eventType,
  vendor_id: vendorId,
  data: { status: 'available', metadata: { machine_id: machineId } },
});
