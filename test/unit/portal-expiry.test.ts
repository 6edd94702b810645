import { describe, expect, it } from 'vitest';
import { EXPIRY_WARNING_MS, expiryNotice } from '../../web/portal/src/expiry-notice.js';

describe('the portal’s session expiry warning (a fixed clock)', () => {
  const endsAtMs = Date.UTC(2026, 10, 24, 12);
  const at = (leftMs: number) => expiryNotice(endsAtMs, endsAtMs - leftMs);

  it('says nothing until the last five minutes', () => {
    expect(EXPIRY_WARNING_MS).toBe(5 * 60_000);
    expect(at(24 * 3_600_000)).toEqual({ kind: 'none' });
    expect(at(5 * 60_000 + 1)).toEqual({ kind: 'none' });
  });

  it('counts whole minutes up, then the last minute in 10-second steps', () => {
    expect(at(5 * 60_000)).toEqual({ kind: 'soon', left: '5 min' });
    expect(at(4 * 60_000 + 1)).toEqual({ kind: 'soon', left: '5 min' });
    expect(at(4 * 60_000)).toEqual({ kind: 'soon', left: '4 min' });
    expect(at(60_000)).toEqual({ kind: 'soon', left: '1 min' });
    expect(at(59_999)).toEqual({ kind: 'soon', left: '60 s' });
    expect(at(50_000)).toEqual({ kind: 'soon', left: '50 s' });
    expect(at(1)).toEqual({ kind: 'soon', left: '10 s' });
  });

  it('says the session is ending once its time is up, however late the page looks', () => {
    expect(at(0)).toEqual({ kind: 'ending' });
    expect(at(-3_600_000)).toEqual({ kind: 'ending' });
  });
});
