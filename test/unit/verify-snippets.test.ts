import { spawnSync } from 'node:child_process';
import { generateKeyPairSync } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { publicKeyText } from '@hookline/verify';
import { signatureHeaders } from '../../src/delivery/outbound/sign.js';
import { SNIPPETS } from '../../web/portal/src/verify-snippets.js';

/** Whether python3 with the `cryptography` package runs here; in CI it must (.ci/run installs python3-cryptography). */
function pythonReady(): boolean {
  const probe = spawnSync('python3', ['-c', 'import cryptography'], { encoding: 'utf8' });
  if (probe.status === 0) return true;
  if (process.env.CI)
    throw new Error(
      'the Python snippet tests need python3 with cryptography in CI (apt-get install python3-cryptography)',
    );
  return false;
}

const snippet = (title: string) => {
  const found = SNIPPETS.find((s) => s.title === title);
  if (!found) throw new Error(`no snippet titled ${title}`);
  return found.code;
};

/** Runs a Python snippet's function on each case (headers, body as text) and returns what it answered. */
function runPython(code: string, call: string, cases: { headers: Record<string, string>; body: string }[]): boolean[] {
  const driver = `${code}

import json, sys
answers = []
for case in json.load(sys.stdin):
    headers, raw_body = case["headers"], case["body"].encode()
    answers.append(${call})
print(json.dumps(answers))
`;
  const run = spawnSync('python3', ['-c', driver], { input: JSON.stringify(cases), encoding: 'utf8', timeout: 20_000 });
  if (run.status !== 0) throw new Error(`python3 failed: ${run.stderr}`);
  return JSON.parse(run.stdout) as boolean[];
}

const BODY = '{"version":"1.0","event_id":"e-1","event_type":"EVENT_TYPE_MACHINE_CREATED","data":{"name":"größe ✓"}}';

describe.skipIf(!pythonReady())('the portal’s Python verification snippets, run against real signatures', () => {
  const nowSec = Math.floor(Date.now() / 1000);

  it('Python: hmac accepts a genuine request (whsec_ and plain secrets) and refuses a tampered one', () => {
    const cases = ['whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw', 'plain-secret-ü'].flatMap((secret) => {
      const headers = signatureHeaders({ webhookId: 'e-1', timestampSec: nowSec, body: BODY, secrets: [secret] });
      return [
        { secret, headers, body: BODY },
        { secret, headers, body: BODY.replace('größe', 'grosse') },
      ];
    });
    const answers = runPython(
      snippet('Python: hmac'),
      'verify(case["secret"], headers, raw_body)',
      cases.map(({ secret, headers, body }) => ({ headers, body, secret })),
    );
    expect(answers).toEqual([true, false, true, false]);
  });

  it('Python: Ed25519 (v1a) accepts a genuine request under either key of a rotation and refuses tampering and other keys', () => {
    const current = generateKeyPairSync('ed25519');
    const previous = generateKeyPairSync('ed25519');
    const stranger = generateKeyPairSync('ed25519');
    const headers = signatureHeaders({
      webhookId: 'e-1',
      timestampSec: nowSec,
      body: BODY,
      secrets: [],
      signingKeys: [current.privateKey, previous.privateKey],
    });
    const old = signatureHeaders({
      webhookId: 'e-1',
      timestampSec: nowSec - 600,
      body: BODY,
      secrets: [],
      signingKeys: [current.privateKey],
    });
    const cases = [
      { headers, body: BODY, keys: [publicKeyText(current.publicKey)] },
      { headers, body: BODY, keys: [publicKeyText(previous.publicKey)] },
      { headers, body: `${BODY} `, keys: [publicKeyText(current.publicKey)] },
      { headers, body: BODY, keys: [publicKeyText(stranger.publicKey)] },
      { headers: old, body: BODY, keys: [publicKeyText(current.publicKey)] },
    ];
    expect(
      runPython(
        snippet('Python: Ed25519 (v1a) with cryptography'),
        'verify_v1a(case["keys"], headers, raw_body)',
        cases,
      ),
    ).toEqual([true, true, false, false, false]);
  });
});
