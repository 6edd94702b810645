import { describe, expect, it } from 'vitest';
import {
  callbackTargetProblem,
  callbackUrlProblem,
  ORDERING_KEY_NEEDS_FIFO,
  parseRetryDurationMs,
  retryPolicyOf,
  retryPolicyProblem,
  retryScheduleOf,
  secretProblem,
  webhookCreateSchema,
  webhookPatchSchema,
} from '../../src/domain/webhook.js';
import { formatDurationMs } from '../../src/lib/duration.js';
import { compileFieldSelection, includeFieldProblem } from '../../src/domain/field-selection.js';
import { webhookFixture } from '../helpers/webhook-fixture.js';

describe('callbackUrlProblem', () => {
  it.each([
    'https://example.com/hook',
    'http://127.0.0.1:8080/x?y=1',
    'https://[::1]:9000/',
    'https://xn--bcher-kva.example/',
  ])('accepts %s', (url) => expect(callbackUrlProblem(url)).toBeUndefined());
  it.each([
    ['', 'must not be empty'],
    ['example.com/hook', 'valid absolute URL'],
    ['javascript:alert(1)', 'http or https'],
    ['file:///etc/passwd', 'http or https'],
    ['https://user:pw@example.com/', 'credentials'],
    ['https://example.com/#frag', 'fragment'],
    [' https://example.com/', 'whitespace'],
    ['https://exa mple.com/', 'whitespace'],
    [`https://example.com/${'x'.repeat(2048)}`, 'at most 2048'],
  ])('rejects %j', (url, reason) => expect(callbackUrlProblem(url)).toContain(reason));
});

describe('callbackTargetProblem (the SSRF guard at registration)', () => {
  it.each([
    ['http://169.254.169.254/', '169.254.169.254 is link-local (metadata)'],
    ['http://10.0.0.1/', '10.0.0.1 is private'],
    ['http://[::1]/', '::1 is loopback'],
    ['http://127.0.0.1:8080/', '127.0.0.1 is loopback'],
    ['https://192.168.1.20/hooks', '192.168.1.20 is private'],
    ['http://0x7f.1/', '127.0.0.1 is loopback'],
    ['http://2130706433/', '127.0.0.1 is loopback'],
    ['http://[::ffff:10.1.2.3]/', '::ffff:a01:203 is private via IPv4-mapped'],
    ['http://[fd00:ec2::254]/', 'fd00:ec2::254 is unique-local (metadata)'],
    ['http://0.0.0.0:9000/', '0.0.0.0 is unspecified'],
    ['http://localhost/', 'localhost always resolves to loopback'],
    ['http://LOCALHOST:3000/x', 'localhost always resolves to loopback'],
    ['http://localhost./', 'localhost. always resolves to loopback'],
    ['https://api.localhost/hooks', 'api.localhost always resolves to loopback'],
  ])('refuses %s', (url, reason) => {
    expect(callbackTargetProblem(url)).toBe(`callback_url must not point at a private or reserved address (${reason})`);
  });

  it.each([
    'https://example.com/hook',
    'https://93.184.216.34/',
    'http://[2606:4700::1111]/',
    'https://localhost.example.com/',
    'https://mylocalhost/',
    'https://10.0.0.1.nip.io/',
  ])('accepts %s (names are checked where they resolve: at delivery)', (url) =>
    expect(callbackTargetProblem(url)).toBeUndefined(),
  );
});

describe('secretProblem', () => {
  it.each(['s', 'a long shared secret', `whsec_${Buffer.alloc(24, 9).toString('base64')}`])('accepts %j', (secret) =>
    expect(secretProblem(secret)).toBeUndefined(),
  );
  it.each([
    ['', 'must not be empty'],
    ['x'.repeat(513), 'at most 512'],
    ['whsec_', 'base64'],
    ['whsec_not base64!', 'base64'],
    [`whsec_${Buffer.alloc(8).toString('base64')}`, 'at least 16 bytes'],
  ])('rejects %j', (secret, reason) => expect(secretProblem(secret)).toContain(reason));
});

describe('webhook body schemas', () => {
  it('parses a full create body and leaves secret optional', () => {
    expect(
      webhookCreateSchema.parse({ event_type: 'EVENT_TYPE_MACHINE_CREATED', callback_url: 'https://a.example/' }),
    ).toEqual({
      event_type: 'EVENT_TYPE_MACHINE_CREATED',
      callback_url: 'https://a.example/',
    });
  });
  it('requires at least one field on PATCH and rejects unknown fields', () => {
    expect(webhookPatchSchema.safeParse({}).success).toBe(false);
    expect(webhookPatchSchema.safeParse({ secret: 'x' }).success).toBe(true);
    expect(webhookPatchSchema.safeParse({ secret: 'x', extra: 1 }).success).toBe(false);
  });
});

describe('rate_limit_per_second', () => {
  const base = { event_type: 'EVENT_TYPE_MACHINE_CREATED', callback_url: 'https://a.example/' };
  const problem = 'rate_limit_per_second must be an integer from 1 to 10000';
  it.each([1, 20, 10_000])('accepts %j on create and PATCH', (rate) => {
    expect(webhookCreateSchema.parse({ ...base, rate_limit_per_second: rate }).rate_limit_per_second).toBe(rate);
    expect(webhookPatchSchema.parse({ rate_limit_per_second: rate })).toEqual({ rate_limit_per_second: rate });
  });
  it.each([0, -1, 1.5, 'x', '20', 10_001, true, Number.MAX_SAFE_INTEGER + 2])(
    'refuses %j with a message naming the field',
    (rate) => {
      for (const result of [
        webhookCreateSchema.safeParse({ ...base, rate_limit_per_second: rate }),
        webhookPatchSchema.safeParse({ rate_limit_per_second: rate }),
      ]) {
        expect(result.success).toBe(false);
        expect(new Set(result.error?.issues.map((issue) => issue.message))).toEqual(new Set([problem]));
      }
    },
  );
  it('is removed by null on PATCH only; absent on create means unlimited', () => {
    expect(webhookPatchSchema.parse({ rate_limit_per_second: null })).toEqual({ rate_limit_per_second: null });
    expect(webhookCreateSchema.safeParse({ ...base, rate_limit_per_second: null }).success).toBe(false);
    expect(webhookCreateSchema.parse(base)).not.toHaveProperty('rate_limit_per_second');
  });
});

describe('ordering', () => {
  const base = { event_type: 'EVENT_TYPE_MACHINE_CREATED', callback_url: 'https://a.example/' };
  it.each(['fifo', 'none'])('accepts %j on create and PATCH', (ordering) => {
    expect(webhookCreateSchema.parse({ ...base, ordering }).ordering).toBe(ordering);
    expect(webhookPatchSchema.parse({ ordering })).toEqual({ ordering });
  });
  it.each(['FIFO', 'lifo', '', null, 1, true, ['fifo']])('refuses %j with a message naming the field', (ordering) => {
    for (const result of [
      webhookCreateSchema.safeParse({ ...base, ordering }),
      webhookPatchSchema.safeParse({ ordering }),
    ]) {
      expect(result.success).toBe(false);
      expect(new Set(result.error?.issues.map((issue) => issue.message))).toEqual(
        new Set(['ordering must be "fifo" or "none"']),
      );
    }
  });
  it('is absent on create unless given', () => {
    expect(webhookCreateSchema.parse(base)).not.toHaveProperty('ordering');
  });
});

describe('ordering_key', () => {
  const base = { event_type: 'EVENT_TYPE_MACHINE_CREATED', callback_url: 'https://a.example/' };
  const messages = (result: { error?: { issues: { message: string }[] } }) =>
    result.error?.issues.map((issue) => issue.message);

  it('accepts a path into the envelope beside ordering fifo on create, and on PATCH (null removes it)', () => {
    expect(webhookCreateSchema.parse({ ...base, ordering: 'fifo', ordering_key: 'data.metadata.machine_id' })).toEqual({
      ...base,
      ordering: 'fifo',
      ordering_key: 'data.metadata.machine_id',
    });
    expect(webhookPatchSchema.parse({ ordering_key: 'data.gpus.0.name' })).toEqual({
      ordering_key: 'data.gpus.0.name',
    });
    expect(webhookPatchSchema.parse({ ordering_key: null })).toEqual({ ordering_key: null });
    expect(webhookCreateSchema.parse({ ...base, ordering: 'fifo' })).not.toHaveProperty('ordering_key');
  });

  it.each([undefined, 'none'])('refuses it on create with ordering %j: the rule is named', (ordering) => {
    const result = webhookCreateSchema.safeParse({
      ...base,
      ...(ordering === undefined ? {} : { ordering }),
      ordering_key: 'data.metadata.machine_id',
    });
    expect(result.success).toBe(false);
    expect(messages(result)).toEqual([ORDERING_KEY_NEEDS_FIFO]);
  });

  it.each([
    ['metadata.machine_id', 'ordering_key: must start with data, event_type, event_id, timestamp or version'],
    ['data.machine id', 'ordering_key: "machine id" is not a key'],
    ['', 'ordering_key: must be a dotted path into the event'],
    [7, 'ordering_key must be a string'],
    [{ path: 'data.x' }, 'ordering_key must be a string'],
  ])('refuses the path %j on create and PATCH, naming the field', (orderingKey, problem) => {
    for (const result of [
      webhookCreateSchema.safeParse({ ...base, ordering: 'fifo', ordering_key: orderingKey }),
      webhookPatchSchema.safeParse({ ordering_key: orderingKey }),
    ]) {
      expect(result.success).toBe(false);
      expect(messages(result)?.[0]).toContain(problem);
    }
  });
});

describe('retry policies (retry.schedule, retry.max_age)', () => {
  const INSTALLATION = [0, 5_000, 300_000, 1_800_000];

  it.each([
    ['30s', 30_000],
    ['5m', 300_000],
    ['2h', 7_200_000],
    ['1d', 86_400_000],
  ])('reads %s as %d ms and writes it back', (text, ms) => {
    expect(parseRetryDurationMs(text)).toBe(ms);
    expect(formatDurationMs(ms)).toBe(text);
  });

  it.each(['0s', '5', '1.5m', ' 5m', '5 m', '500ms', '-1s', '1w', '12345678s'])('refuses %j', (text) =>
    expect(parseRetryDurationMs(text)).toBeUndefined(),
  );

  it('bounds a policy by the installation’s retries and window', () => {
    const policy = (input: { schedule?: string[]; max_age?: string }) =>
      retryPolicyProblem(retryPolicyOf(input), INSTALLATION);
    expect(policy({ schedule: ['1s', '1m', '30m'], max_age: '35m' })).toBeUndefined();
    expect(policy({ schedule: ['1s', '1s', '1s', '1s'] })).toContain("at most the installation's 3 retries");
    expect(policy({ schedule: ['1h'] })).toContain('retry window, 35m 5s');
    expect(policy({ max_age: '1h' })).toContain("max_age must be at most the installation's retry window");
  });

  it('follows the installation’s first delay, then the webhook’s own retries; the installation’s schedule without one', () => {
    const own = webhookFixture({ retry: { scheduleMs: [1_000, 2_000] } });
    expect(retryScheduleOf(own, INSTALLATION)).toEqual([0, 1_000, 2_000]);
    // The same array for the same copy: no allocation per attempt.
    expect(retryScheduleOf(own, INSTALLATION)).toBe(retryScheduleOf(own, INSTALLATION));
    expect(retryScheduleOf(webhookFixture({ retry: { maxAgeMs: 60_000 } }), INSTALLATION)).toBe(INSTALLATION);
    expect(retryScheduleOf(webhookFixture(), INSTALLATION)).toBe(INSTALLATION);
    // Stored when the installation allowed more retries than it does now: cut to what it allows.
    const longer = webhookFixture({ retry: { scheduleMs: [1_000, 2_000, 3_000, 4_000, 5_000] } });
    expect(retryScheduleOf(longer, INSTALLATION)).toEqual([0, 1_000, 2_000, 3_000]);
  });

  it('takes retry on registration and PATCH (null removes it), refusing a policy that sets nothing or an unknown field', () => {
    const base = { event_type: 'EVENT_TYPE_MACHINE_CREATED', callback_url: 'https://example.com/h' };
    expect(webhookCreateSchema.safeParse({ ...base, retry: { schedule: ['1m'] } }).success).toBe(true);
    expect(webhookPatchSchema.safeParse({ retry: null }).success).toBe(true);
    const problems = (retry: unknown) =>
      webhookPatchSchema.safeParse({ retry }).error?.issues.map((issue) => issue.message) ?? [];
    expect(problems({})).toEqual(['retry must set schedule, max_age or both (null removes the policy)']);
    expect(problems({ attempts: 3 })).toEqual(['unknown field "retry.attempts"']);
    expect(problems({ schedule: '1m' })).toEqual(['retry.schedule must be a list of durations']);
    expect(problems({ schedule: Array.from({ length: 51 }, () => '1s') })).toEqual([
      'retry.schedule lists at most 50 retries',
    ]);
  });
});

describe('include_fields (field selection)', () => {
  it('keeps the named paths and the identifiers, in the data’s own key order; a list at a path whole; nothing else', () => {
    const pick = compileFieldSelection(['data.pricing', 'data.hardware_specs.gpus', 'data.absent.deep']);
    const data = {
      status: 'available',
      hardware_specs: { gpus: [{ name: 'A' }, { name: 'B' }], cpu_cores: 64 },
      metadata: { machine_id: 'm-1', hostname: 'h' },
      pricing: { per_hour: 2 },
    };
    expect(pick(data)).toEqual({
      hardware_specs: { gpus: [{ name: 'A' }, { name: 'B' }] },
      metadata: { machine_id: 'm-1' },
      pricing: { per_hour: 2 },
    });
    expect(Object.keys(pick(data) as object)).toEqual(['hardware_specs', 'metadata', 'pricing']);
    // A deployment event's identifiers.
    expect(
      compileFieldSelection(['data.status'])({ deployment_id: 'd-1', machine_id: 'm-1', image: 'x', status: 'up' }),
    ).toEqual({
      deployment_id: 'd-1',
      machine_id: 'm-1',
      status: 'up',
    });
    // A path through a list, or data that is not an object, keeps nothing there.
    expect(compileFieldSelection(['data.gpus.name'])({ gpus: [{ name: 'A' }] })).toEqual({});
    expect(compileFieldSelection(['data.status'])('text')).toEqual({});
  });

  it('takes only paths under data', () => {
    expect(includeFieldProblem('data.status', 'include_fields[0]')).toBeUndefined();
    expect(includeFieldProblem('event_type', 'include_fields[0]')).toBe(
      'include_fields[0]: must name a field under data, such as "data.status"',
    );
    expect(includeFieldProblem('data', 'include_fields[0]')).toContain('must name a field under data');
    expect(includeFieldProblem('data.a b', 'include_fields[2]')).toContain('include_fields[2]: "a b" is not a key');
  });
});
