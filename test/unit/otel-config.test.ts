import { describe, expect, it } from 'vitest';
import { ConfigError, loadConfig } from '../../src/config/env.js';
import { tracingConfigFrom } from '../../src/config/otel.js';
import { startupLine } from '../../src/cli/startup.js';

describe('trace export settings from the OTEL_* variables', () => {
  it('is off without an endpoint, and when disabled or with the exporter none', () => {
    expect(tracingConfigFrom({})).toBeUndefined();
    expect(tracingConfigFrom({ OTEL_SERVICE_NAME: 'x', OTEL_TRACES_SAMPLER: 'always_on' })).toBeUndefined();
    expect(
      tracingConfigFrom({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318', OTEL_SDK_DISABLED: 'true' }),
    ).toBeUndefined();
    expect(
      tracingConfigFrom({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318', OTEL_TRACES_EXPORTER: 'none' }),
    ).toBeUndefined();
    expect(loadConfig({}).tracing).toBeUndefined();
  });

  it('defaults: http/protobuf, service hookline, parentbased_always_on; the base endpoint gets /v1/traces', () => {
    expect(tracingConfigFrom({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318/' })).toEqual({
      url: 'http://collector:4318/v1/traces',
      protocol: 'http/protobuf',
      headers: {},
      serviceName: 'hookline',
      sampler: 'parentbased_always_on',
      samplerRatio: 1,
    });
  });

  it('the signal’s own variables win and are used as given', () => {
    expect(
      tracingConfigFrom({
        OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318',
        OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'https://traces.example/ingest',
        OTEL_EXPORTER_OTLP_PROTOCOL: 'http/protobuf',
        OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: 'http/json',
        OTEL_EXPORTER_OTLP_HEADERS: 'x-a=1,authorization=Bearer%20base',
        OTEL_EXPORTER_OTLP_TRACES_HEADERS: 'Authorization=Bearer%20traces',
        OTEL_SERVICE_NAME: 'hooks-eu',
        OTEL_TRACES_SAMPLER: 'parentbased_traceidratio',
        OTEL_TRACES_SAMPLER_ARG: '0.25',
      }),
    ).toEqual({
      url: 'https://traces.example/ingest',
      protocol: 'http/json',
      headers: { 'x-a': '1', authorization: 'Bearer traces' },
      serviceName: 'hooks-eu',
      sampler: 'parentbased_traceidratio',
      samplerRatio: 0.25,
    });
  });

  it('refuses what it cannot do, naming the variable and never a header value', () => {
    const problems = (env: Record<string, string>) => {
      const result = tracingConfigFrom({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318', ...env });
      return Array.isArray(result) ? result : [];
    };
    expect(problems({ OTEL_EXPORTER_OTLP_PROTOCOL: 'grpc' })[0]).toMatchObject({
      variable: 'OTEL_EXPORTER_OTLP_PROTOCOL',
      message: expect.stringContaining('grpc is not supported') as string,
    });
    expect(problems({ OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: 'thrift' })[0]?.variable).toBe(
      'OTEL_EXPORTER_OTLP_TRACES_PROTOCOL',
    );
    expect(problems({ OTEL_TRACES_SAMPLER: 'jaeger_remote' })[0]?.variable).toBe('OTEL_TRACES_SAMPLER');
    expect(problems({ OTEL_TRACES_SAMPLER: 'traceidratio', OTEL_TRACES_SAMPLER_ARG: '1.5' })[0]?.variable).toBe(
      'OTEL_TRACES_SAMPLER_ARG',
    );
    expect(problems({ OTEL_TRACES_EXPORTER: 'zipkin' })[0]?.variable).toBe('OTEL_TRACES_EXPORTER');
    const bad = problems({ OTEL_EXPORTER_OTLP_HEADERS: 'api-key=s3cr%ZZet' });
    expect(bad[0]?.variable).toBe('OTEL_EXPORTER_OTLP_HEADERS');
    expect(JSON.stringify(bad)).not.toContain('s3cr');
    expect(problems({ OTEL_EXPORTER_OTLP_HEADERS: 'no-equals-sign' })[0]?.message).toContain('name=value');
    expect(tracingConfigFrom({ OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'collector:4318' })).toEqual([
      { variable: 'OTEL_EXPORTER_OTLP_TRACES_ENDPOINT', message: expect.stringContaining('http') as string },
    ]);
  });

  it('stops the start through loadConfig with every problem named', () => {
    expect(() =>
      loadConfig({ OTEL_EXPORTER_OTLP_ENDPOINT: 'ftp://collector', OTEL_EXPORTER_OTLP_PROTOCOL: 'grpc' }),
    ).toThrow(ConfigError);
    try {
      loadConfig({ OTEL_EXPORTER_OTLP_ENDPOINT: 'ftp://collector', OTEL_EXPORTER_OTLP_PROTOCOL: 'grpc' });
    } catch (error) {
      expect((error as Error).message).toContain('OTEL_EXPORTER_OTLP_ENDPOINT: expected an http or https URL');
      expect((error as Error).message).toContain('OTEL_EXPORTER_OTLP_PROTOCOL: grpc is not supported');
    }
    expect(loadConfig({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318' }).tracing?.url).toBe(
      'http://collector:4318/v1/traces',
    );
  });
});

describe('the start-up line names where traces go', () => {
  it('origin and path with the protocol, never the endpoint’s credentials or query; off without one', () => {
    const line = (env: Record<string, string>) =>
      startupLine({
        role: 'all',
        config: { ...loadConfig(env), redisUrl: 'redis://127.0.0.1:6379' },
        redis: { url: 'redis://127.0.0.1:6379', origin: 'configured' },
        addresses: {},
      }).fields.traces;
    expect(line({})).toBe('off');
    expect(
      line({
        OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'https://user:pa55@traces.example/v1/traces?api_key=k3y',
        OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json',
      }),
    ).toBe('https://traces.example/v1/traces (http/json)');
  });
});
