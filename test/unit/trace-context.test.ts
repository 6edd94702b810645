import { describe, expect, it } from 'vitest';
import { deliveryTraceContext, parseTraceparent, traceparentOf } from '../../src/domain/trace.js';

const TRACE = '4bf92f3577b34da6a3ce929d0e0e4736';
const SPAN = '00f067aa0ba902b7';

describe('W3C traceparent', () => {
  it('reads a valid header and writes it back', () => {
    const header = `00-${TRACE}-${SPAN}-01`;
    expect(parseTraceparent(header)).toEqual({ traceId: TRACE, spanId: SPAN, sampled: true });
    expect(traceparentOf(parseTraceparent(header)!)).toBe(header);
    expect(parseTraceparent(`00-${TRACE}-${SPAN}-00`)?.sampled).toBe(false);
    // Only bit 0 of the flags means sampled.
    expect(parseTraceparent(`00-${TRACE}-${SPAN}-03`)?.sampled).toBe(true);
    expect(parseTraceparent(`00-${TRACE}-${SPAN}-02`)?.sampled).toBe(false);
  });

  it('reads a later version’s first four fields, ignoring what it adds', () => {
    expect(parseTraceparent(`01-${TRACE}-${SPAN}-01-what-comes-later`)).toEqual({
      traceId: TRACE,
      spanId: SPAN,
      sampled: true,
    });
  });

  it.each([
    ['absent', undefined],
    ['not text', ['00-a-b-01']],
    ['empty', ''],
    ['upper-case hex', `00-${TRACE.toUpperCase()}-${SPAN}-01`],
    ['an all-zero trace id', `00-${'0'.repeat(32)}-${SPAN}-01`],
    ['an all-zero span id', `00-${TRACE}-${'0'.repeat(16)}-01`],
    ['version ff', `ff-${TRACE}-${SPAN}-01`],
    ['version 00 with more fields', `00-${TRACE}-${SPAN}-01-extra`],
    ['a short trace id', `00-${TRACE.slice(1)}-${SPAN}-01`],
    ['not hex', `00-${TRACE.slice(1)}g-${SPAN}-01`],
    ['too long', `01-${TRACE}-${SPAN}-01-${'x'.repeat(300)}`],
  ])('ignores a header that is %s', (_, value) => {
    expect(parseTraceparent(value)).toBeUndefined();
  });

  it('gives a delivery without a trace one trace id for all its attempts, a span id each', () => {
    const a = deliveryTraceContext('2f1c0a9e-1b2c-8d3e-9f40-123456789abc');
    const b = deliveryTraceContext('2f1c0a9e-1b2c-8d3e-9f40-123456789abc');
    expect(a.traceId).toMatch(/^[0-9a-f]{32}$/);
    expect(b.traceId).toBe(a.traceId);
    expect(b.spanId).not.toBe(a.spanId);
    expect(a.sampled).toBe(false);
    expect(deliveryTraceContext('another').traceId).not.toBe(a.traceId);
    expect(parseTraceparent(traceparentOf(a))).toEqual(a);
  });
});
