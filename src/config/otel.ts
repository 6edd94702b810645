/**
 * OpenTelemetry trace export, configured by the standard variables only
 * (https://opentelemetry.io/docs/specs/otel/configuration/sdk-environment-variables/ and the OTLP
 * exporter's): no endpoint, no tracing, and nothing of it is loaded.
 */

type OtlpProtocol = 'http/protobuf' | 'http/json';

const SAMPLERS = [
  'always_on',
  'always_off',
  'traceidratio',
  'parentbased_always_on',
  'parentbased_always_off',
  'parentbased_traceidratio',
] as const;
type SamplerName = (typeof SAMPLERS)[number];

export interface TracingConfig {
  /** Where spans are POSTed: OTEL_EXPORTER_OTLP_TRACES_ENDPOINT as given, or OTEL_EXPORTER_OTLP_ENDPOINT plus `/v1/traces`. */
  readonly url: string;
  readonly protocol: OtlpProtocol;
  /** OTEL_EXPORTER_OTLP_HEADERS (and _TRACES_HEADERS over it): sent with each export; never logged. */
  readonly headers: Readonly<Record<string, string>>;
  readonly serviceName: string;
  readonly sampler: SamplerName;
  /** The ratio of the traceidratio samplers, 0-1. */
  readonly samplerRatio: number;
}

/** The variables read here, by name; absent or empty means unset. */
export type OtelEnv = Partial<
  Record<
    | 'OTEL_SDK_DISABLED'
    | 'OTEL_TRACES_EXPORTER'
    | 'OTEL_EXPORTER_OTLP_ENDPOINT'
    | 'OTEL_EXPORTER_OTLP_TRACES_ENDPOINT'
    | 'OTEL_EXPORTER_OTLP_PROTOCOL'
    | 'OTEL_EXPORTER_OTLP_TRACES_PROTOCOL'
    | 'OTEL_EXPORTER_OTLP_HEADERS'
    | 'OTEL_EXPORTER_OTLP_TRACES_HEADERS'
    | 'OTEL_SERVICE_NAME'
    | 'OTEL_TRACES_SAMPLER'
    | 'OTEL_TRACES_SAMPLER_ARG',
    string
  >
>;

/** What is wrong with a variable, naming it; the message never quotes a header value. */
export interface OtelProblem {
  variable: string;
  message: string;
}

/**
 * Trace export's settings, undefined when off (no endpoint; OTEL_SDK_DISABLED=true; or
 * OTEL_TRACES_EXPORTER=none), or the problems that stop the process.
 */
export function tracingConfigFrom(env: OtelEnv): TracingConfig | undefined | OtelProblem[] {
  const problems: OtelProblem[] = [];
  if (env.OTEL_SDK_DISABLED?.trim().toLowerCase() === 'true') return undefined;
  const exporter = env.OTEL_TRACES_EXPORTER?.trim().toLowerCase();
  if (exporter === 'none') return undefined;
  if (exporter !== undefined && exporter !== 'otlp')
    problems.push({ variable: 'OTEL_TRACES_EXPORTER', message: 'expected otlp or none' });

  const traces = env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT?.trim();
  const base = env.OTEL_EXPORTER_OTLP_ENDPOINT?.trim();
  if (!traces && !base) return problems.length > 0 ? problems : undefined;
  const variable = traces ? 'OTEL_EXPORTER_OTLP_TRACES_ENDPOINT' : 'OTEL_EXPORTER_OTLP_ENDPOINT';
  // The signal's own endpoint is used as given; the base one gets the signal's path.
  const url = traces || `${base!.replace(/\/+$/, '')}/v1/traces`;
  const urlProblem = endpointProblem(url);
  if (urlProblem !== undefined) problems.push({ variable, message: urlProblem });

  const protocolVariable = env.OTEL_EXPORTER_OTLP_TRACES_PROTOCOL?.trim()
    ? 'OTEL_EXPORTER_OTLP_TRACES_PROTOCOL'
    : 'OTEL_EXPORTER_OTLP_PROTOCOL';
  const protocol = (env[protocolVariable]?.trim() || 'http/protobuf').toLowerCase();
  if (protocol === 'grpc')
    problems.push({
      variable: protocolVariable,
      message: 'grpc is not supported: use http/protobuf (the collector port 4318) or http/json',
    });
  else if (protocol !== 'http/protobuf' && protocol !== 'http/json')
    problems.push({ variable: protocolVariable, message: 'expected http/protobuf or http/json' });

  const headers: Record<string, string> = {};
  for (const name of ['OTEL_EXPORTER_OTLP_HEADERS', 'OTEL_EXPORTER_OTLP_TRACES_HEADERS'] as const) {
    const parsed = parseHeaders(env[name]);
    if (typeof parsed === 'string') problems.push({ variable: name, message: parsed });
    else Object.assign(headers, parsed);
  }

  const sampler = (env.OTEL_TRACES_SAMPLER?.trim() || 'parentbased_always_on').toLowerCase();
  if (!(SAMPLERS as readonly string[]).includes(sampler))
    problems.push({ variable: 'OTEL_TRACES_SAMPLER', message: `expected one of ${SAMPLERS.join(', ')}` });
  const arg = env.OTEL_TRACES_SAMPLER_ARG?.trim();
  const ratio = arg ? Number(arg) : 1;
  if (sampler.endsWith('traceidratio') && !(Number.isFinite(ratio) && ratio >= 0 && ratio <= 1))
    problems.push({ variable: 'OTEL_TRACES_SAMPLER_ARG', message: 'expected a ratio between 0 and 1, such as 0.1' });

  if (problems.length > 0) return problems;
  return Object.freeze({
    url,
    protocol: protocol as OtlpProtocol,
    headers: Object.freeze(headers),
    serviceName: env.OTEL_SERVICE_NAME?.trim() || 'hookline',
    sampler: sampler as SamplerName,
    samplerRatio: ratio,
  });
}

function endpointProblem(text: string): string | undefined {
  let url: URL;
  try {
    url = new URL(text);
  } catch {
    return 'expected an absolute http(s) URL such as http://collector:4318';
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') return 'expected an http or https URL';
  return undefined;
}

/** `key=value,key2=value2`, values percent-encoded (the specification's format); or why not, without quoting a value. */
function parseHeaders(text: string | undefined): Record<string, string> | string {
  const headers: Record<string, string> = {};
  if (!text?.trim()) return headers;
  for (const [n, pair] of text.split(',').entries()) {
    if (pair.trim() === '') continue;
    const at = pair.indexOf('=');
    const name = at < 0 ? '' : pair.slice(0, at).trim();
    if (!/^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/.test(name)) return `entry ${n + 1}: expected name=value, comma-separated`;
    let value: string;
    try {
      value = decodeURIComponent(pair.slice(at + 1).trim());
    } catch {
      return `entry ${n + 1} (${name}): its value is not valid percent-encoding`;
    }
    if (/[\r\n\0]/.test(value)) return `entry ${n + 1} (${name}): its value holds a line break`;
    headers[name.toLowerCase()] = value;
  }
  return headers;
}
