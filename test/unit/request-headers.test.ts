import { describe, expect, it } from 'vitest';
import { attemptRequestHeaders, maskSignature } from '../../src/delivery/outbound/request-headers.js';
import { deliveryHeaders } from '../../src/delivery/outbound/sign.js';

const EVENT_ID = '3f1c8f0e-2b8c-4c7e-9f3a-1234567890ab';

describe('maskSignature', () => {
  it.each([
    ['v1,K5oZfzN95Z9UVu1EsfQmfVNQhnkZ2pj9o9NDN/H/pI4=', 'v1,••••'],
    ['v1,abc= v1,def=', 'v1,•••• v1,••••'],
    ['sha256=0123456789abcdef', 'sha256=••••'],
    ['no-scheme-at-all', '••••'],
  ])('%s → %s', (value, masked) => {
    expect(maskSignature(value)).toBe(masked);
  });
});

describe('attemptRequestHeaders', () => {
  const sent = { host: 'hooks.example.com:8443', bodyBytes: 612, signatures: 1, userAgent: 'Hookline/1.2.3' };

  it('rebuilds the headers in the order sent, with the signed timestamp and masked signatures', () => {
    const headers = attemptRequestHeaders({
      eventId: EVENT_ID,
      eventType: 'EVENT_TYPE_MACHINE_CREATED',
      attempt: 3,
      atMs: 1_763_726_400_999,
      sent,
    });
    expect(Object.entries(headers)).toEqual([
      ['host', 'hooks.example.com:8443'],
      ['connection', 'keep-alive'],
      ['webhook-id', EVENT_ID],
      // The attempt started 999 ms into this second: its whole seconds are what was signed.
      ['webhook-timestamp', '1763726400'],
      ['webhook-signature', 'v1,••••'],
      ['x-webhook-signature', 'sha256=••••'],
      ['x-webhook-event', 'EVENT_TYPE_MACHINE_CREATED'],
      ['x-webhook-attempt', '3'],
      ['content-type', 'application/json'],
      ['user-agent', 'Hookline/1.2.3'],
      ['content-length', '612'],
    ]);
  });

  it('shows one entry per signing secret, and no signature headers without a secret', () => {
    const input = { eventId: EVENT_ID, eventType: 'EVENT_TYPE_MACHINE_CREATED', attempt: 1, atMs: 0 };
    expect(attemptRequestHeaders({ ...input, sent: { ...sent, signatures: 2 } })['webhook-signature']).toBe(
      'v1,•••• v1,••••',
    );
    const unsigned = attemptRequestHeaders({ ...input, sent: { ...sent, signatures: 0 } });
    expect(Object.keys(unsigned).filter((name) => name.includes('signature'))).toEqual([]);
  });

  it('shows Ed25519 entries (v1a) after the HMAC ones, and no legacy header for keys alone', () => {
    const input = { eventId: EVENT_ID, eventType: 'EVENT_TYPE_MACHINE_CREATED', attempt: 1, atMs: 0 };
    const both = attemptRequestHeaders({ ...input, sent: { ...sent, signatures: 1, keySignatures: 2 } });
    expect(both['webhook-signature']).toBe('v1,•••• v1a,•••• v1a,••••');
    expect(both['x-webhook-signature']).toBe('sha256=••••');
    const keysOnly = attemptRequestHeaders({ ...input, sent: { ...sent, signatures: 0, keySignatures: 1 } });
    expect(keysOnly['webhook-signature']).toBe('v1a,••••');
    expect(keysOnly['x-webhook-signature']).toBeUndefined();
  });

  it('holds the headers the sender is given, in their order, between the client’s and the sender’s own', () => {
    const own = deliveryHeaders({
      webhookId: EVENT_ID,
      eventType: 'EVENT_TYPE_MACHINE_CREATED',
      attempt: 1,
      timestampSec: 5,
      body: '{}',
      secrets: ['a', 'b'],
    });
    const shown = attemptRequestHeaders({
      eventId: EVENT_ID,
      eventType: 'EVENT_TYPE_MACHINE_CREATED',
      attempt: 1,
      atMs: 5_000,
      sent: { ...sent, signatures: 2 },
    });
    expect(Object.keys(shown)).toEqual([
      'host',
      'connection',
      ...Object.keys(own),
      'content-type',
      'user-agent',
      'content-length',
    ]);
    for (const [name, value] of Object.entries(own))
      expect(shown[name]).toBe(name.includes('signature') ? maskSignature(value) : value);
  });
});
