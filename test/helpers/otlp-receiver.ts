import { createServer, type IncomingHttpHeaders } from 'node:http';
import { gunzipSync } from 'node:zlib';
import { closeServer, listenOnLoopback } from './http-server.js';

/** One span as an OTLP/HTTP receiver decoded it, ids in hex, attributes flattened. */
export interface ReceivedSpan {
  traceId: string;
  spanId: string;
  /** '' for a root span. */
  parentSpanId: string;
  /** The W3C tracestate the span carries ('' when none). */
  traceState: string;
  name: string;
  /** OTLP's SpanKind: 1 internal, 2 server, 3 client, 4 producer, 5 consumer. */
  kind: number;
  startMs: number;
  endMs: number;
  attributes: Record<string, string | number | boolean>;
  events: { name: string; attributes: Record<string, string | number | boolean> }[];
  links: { traceId: string; spanId: string }[];
  /** OTLP's StatusCode: 0 unset, 1 ok, 2 error. */
  status: { code: number; message: string };
  /** The resource's attributes (service.name, …). */
  resource: Record<string, string | number | boolean>;
}

export interface ReceivedExport {
  contentType: string;
  headers: IncomingHttpHeaders;
  spans: ReceivedSpan[];
}

/**
 * A real OTLP/HTTP trace receiver on 127.0.0.1 (what a collector's otlphttp receiver is to the
 * exporter): takes POST /v1/traces in http/protobuf or http/json, decodes every span (the protobuf
 * by the wire format, field numbers from opentelemetry-proto's trace.proto), answers 200.
 */
export class OtlpReceiver {
  readonly exports: ReceivedExport[] = [];
  private readonly server = createServer((request, response) => {
    const chunks: Buffer[] = [];
    request.on('data', (chunk: Buffer) => chunks.push(chunk));
    request.on('end', () => {
      let body = Buffer.concat(chunks);
      if (request.headers['content-encoding'] === 'gzip') body = gunzipSync(body);
      const contentType = request.headers['content-type'] ?? '';
      try {
        const spans = contentType.includes('json')
          ? fromJson(JSON.parse(body.toString('utf8')) as JsonRequest)
          : fromProtobuf(body);
        this.exports.push({ contentType, headers: request.headers, spans });
        response.writeHead(200, { 'content-type': contentType }).end(contentType.includes('json') ? '{}' : '');
      } catch (error) {
        response.writeHead(400).end(String(error));
      }
    });
  });

  get spans(): ReceivedSpan[] {
    return this.exports.flatMap((e) => e.spans);
  }

  start(): Promise<string> {
    return listenOnLoopback(this.server);
  }

  close(): Promise<void> {
    return closeServer(this.server);
  }
}

// --- http/json (OTLP JSON: ids in hex, 64-bit integers as strings) ---

interface JsonValue {
  stringValue?: string;
  boolValue?: boolean;
  intValue?: string | number;
  doubleValue?: number;
}
interface JsonKeyValue {
  key: string;
  value: JsonValue;
}
interface JsonSpan {
  traceId: string;
  spanId: string;
  parentSpanId?: string;
  traceState?: string;
  name: string;
  kind: number;
  startTimeUnixNano: string | number;
  endTimeUnixNano: string | number;
  attributes?: JsonKeyValue[];
  events?: { name: string; attributes?: JsonKeyValue[] }[];
  links?: { traceId: string; spanId: string }[];
  status?: { code?: number; message?: string };
}
interface JsonRequest {
  resourceSpans?: { resource?: { attributes?: JsonKeyValue[] }; scopeSpans?: { spans?: JsonSpan[] }[] }[];
}

function jsonAttributes(list: JsonKeyValue[] | undefined): Record<string, string | number | boolean> {
  const out: Record<string, string | number | boolean> = {};
  for (const { key, value } of list ?? [])
    out[key] =
      value.stringValue ??
      value.boolValue ??
      (value.intValue === undefined ? undefined : Number(value.intValue)) ??
      value.doubleValue ??
      '';
  return out;
}

function fromJson(request: JsonRequest): ReceivedSpan[] {
  return (request.resourceSpans ?? []).flatMap((rs) => {
    const resource = jsonAttributes(rs.resource?.attributes);
    return (rs.scopeSpans ?? []).flatMap((ss) =>
      (ss.spans ?? []).map((s) => ({
        traceId: s.traceId,
        spanId: s.spanId,
        parentSpanId: s.parentSpanId ?? '',
        traceState: s.traceState ?? '',
        name: s.name,
        kind: s.kind,
        startMs: Number(BigInt(s.startTimeUnixNano) / 1_000_000n),
        endMs: Number(BigInt(s.endTimeUnixNano) / 1_000_000n),
        attributes: jsonAttributes(s.attributes),
        events: (s.events ?? []).map((e) => ({ name: e.name, attributes: jsonAttributes(e.attributes) })),
        links: (s.links ?? []).map((l) => ({ traceId: l.traceId, spanId: l.spanId })),
        status: { code: s.status?.code ?? 0, message: s.status?.message ?? '' },
        resource,
      })),
    );
  });
}

// --- http/protobuf: the wire format, by field number ---

type Field = { no: number; wire: number; varint?: bigint; bytes?: Buffer; fixed?: Buffer };

function fields(buffer: Buffer): Field[] {
  const out: Field[] = [];
  let at = 0;
  const varint = (): bigint => {
    let value = 0n;
    for (let shift = 0n; ; shift += 7n) {
      const byte = buffer[at++];
      if (byte === undefined) throw new Error('truncated varint');
      value |= BigInt(byte & 0x7f) << shift;
      if ((byte & 0x80) === 0) return value;
    }
  };
  while (at < buffer.length) {
    const key = Number(varint());
    const no = key >>> 3;
    const wire = key & 7;
    if (wire === 0) out.push({ no, wire, varint: varint() });
    else if (wire === 1) {
      out.push({ no, wire, fixed: buffer.subarray(at, at + 8) });
      at += 8;
    } else if (wire === 2) {
      const length = Number(varint());
      out.push({ no, wire, bytes: buffer.subarray(at, at + length) });
      at += length;
    } else if (wire === 5) {
      out.push({ no, wire, fixed: buffer.subarray(at, at + 4) });
      at += 4;
    } else throw new Error(`unsupported wire type ${wire}`);
  }
  return out;
}

const all = (list: Field[], no: number) => list.filter((f) => f.no === no);
const one = (list: Field[], no: number) => list.find((f) => f.no === no);
const text = (f: Field | undefined) => f?.bytes?.toString('utf8') ?? '';
const hex = (f: Field | undefined) => f?.bytes?.toString('hex') ?? '';
const nanosMs = (f: Field | undefined) => (f?.fixed === undefined ? 0 : Number(f.fixed.readBigUInt64LE() / 1_000_000n));

function protoAttributes(list: Field[]): Record<string, string | number | boolean> {
  const out: Record<string, string | number | boolean> = {};
  for (const kv of list) {
    const parts = fields(kv.bytes!);
    const value = fields(one(parts, 2)?.bytes ?? Buffer.alloc(0));
    const [v] = value;
    out[text(one(parts, 1))] =
      v === undefined
        ? ''
        : v.no === 1
          ? text(v)
          : v.no === 2
            ? v.varint === 1n
            : v.no === 3
              ? Number(BigInt.asIntN(64, v.varint!))
              : v.no === 4
                ? v.fixed!.readDoubleLE()
                : '';
  }
  return out;
}

function fromProtobuf(body: Buffer): ReceivedSpan[] {
  return all(fields(body), 1).flatMap((rsField) => {
    const rs = fields(rsField.bytes!);
    const resource = protoAttributes(all(fields(one(rs, 1)?.bytes ?? Buffer.alloc(0)), 1));
    return all(rs, 2).flatMap((ssField) =>
      all(fields(ssField.bytes!), 2).map((spanField) => {
        const s = fields(spanField.bytes!);
        const status = fields(one(s, 15)?.bytes ?? Buffer.alloc(0));
        return {
          traceId: hex(one(s, 1)),
          spanId: hex(one(s, 2)),
          parentSpanId: hex(one(s, 4)),
          traceState: text(one(s, 3)),
          name: text(one(s, 5)),
          kind: Number(one(s, 6)?.varint ?? 0n),
          startMs: nanosMs(one(s, 7)),
          endMs: nanosMs(one(s, 8)),
          attributes: protoAttributes(all(s, 9)),
          events: all(s, 11).map((e) => {
            const parts = fields(e.bytes!);
            return { name: text(one(parts, 2)), attributes: protoAttributes(all(parts, 3)) };
          }),
          links: all(s, 13).map((l) => {
            const parts = fields(l.bytes!);
            return { traceId: hex(one(parts, 1)), spanId: hex(one(parts, 2)) };
          }),
          status: { code: Number(one(status, 3)?.varint ?? 0n), message: text(one(status, 2)) },
          resource,
        };
      }),
    );
  });
}
