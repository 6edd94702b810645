/**
 * How a receiver checks Hookline's signatures (docs/receiving-webhooks.md), per language.
 * `webhook-signature` is `v1,<base64 HMAC-SHA256(key, "{webhook-id}.{webhook-timestamp}.{body}")>`
 * (two space-separated entries during a secret rotation); the key is the base64-decoded rest of a
 * `whsec_` secret, or any other secret's UTF-8 bytes. The legacy `x-webhook-signature` is
 * `sha256=<hex HMAC-SHA256(secret as UTF-8, body)>`. A webhook with `signature: "ed25519"` also (or
 * instead) sends `v1a,<base64 Ed25519 signature of the same content>`, checked with its public key
 * (`whpk_<base64 of the 32 raw bytes>`).
 */
export interface Snippet {
  title: string;
  install?: string;
  code: string;
}

export const SNIPPETS: Snippet[] = [
  {
    title: 'TypeScript: @hookline/verify',
    install: 'npm install @hookline/verify',
    code: `import { isTestEvent, verifyStandardWebhook, type WebhookDelivery } from '@hookline/verify';

// rawBody: the request body's bytes exactly as received, before any JSON parsing.
if (!verifyStandardWebhook({ secret: process.env.WEBHOOK_SECRET!, headers: req.headers, body: rawBody })) {
  res.writeHead(401).end();
  return;
}
const delivery = JSON.parse(rawBody.toString('utf8')) as WebhookDelivery;
if (!isTestEvent(delivery) && delivery.event_type === 'EVENT_TYPE_MACHINE_UPDATED') {
  console.log(delivery.data.metadata.machine_id, delivery.data.status);
}`,
  },
  {
    title: 'TypeScript: standardwebhooks',
    install: 'npm install standardwebhooks',
    code: `import { Webhook } from 'standardwebhooks';

// A whsec_ secret as it is; any other secret as its raw UTF-8 bytes.
const wh = secret.startsWith('whsec_') ? new Webhook(secret) : new Webhook(Buffer.from(secret, 'utf8'), { format: 'raw' });
// Throws on a bad signature, or a timestamp more than 5 minutes off.
const event = wh.verify(rawBody, {
  'webhook-id': req.headers['webhook-id'],
  'webhook-timestamp': req.headers['webhook-timestamp'],
  'webhook-signature': req.headers['webhook-signature'],
});`,
  },
  {
    title: 'Python: standardwebhooks',
    install: 'pip install standardwebhooks',
    code: `from standardwebhooks import Webhook

# A whsec_ secret as it is; any other secret as bytes: Webhook(secret.encode()).
wh = Webhook(secret)
# Raises on a bad signature or a timestamp more than 5 minutes off.
payload = wh.verify(raw_body, {
    "webhook-id": headers["webhook-id"],
    "webhook-timestamp": headers["webhook-timestamp"],
    "webhook-signature": headers["webhook-signature"],
})`,
  },
  {
    title: 'Python: hmac',
    code: `import base64, hashlib, hmac, time

def verify(secret: str, headers, raw_body: bytes) -> bool:
    key = base64.b64decode(secret[6:]) if secret.startswith("whsec_") else secret.encode()
    msg_id, ts = headers["webhook-id"], headers["webhook-timestamp"]
    if abs(time.time() - int(ts)) > 300:
        return False  # too old or too new: a replayed request
    signed = f"{msg_id}.{ts}.".encode() + raw_body
    expected = base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()
    return any(
        hmac.compare_digest(entry[3:], expected)
        for entry in headers["webhook-signature"].split()
        if entry.startswith("v1,")
    )`,
  },
  {
    title: 'TypeScript: Ed25519 (v1a) with @hookline/verify',
    install: 'npm install @hookline/verify',
    code: `import { verifyAsymmetricWebhook } from '@hookline/verify';

// The webhook's public keys: GET /vendors/v1/webhooks/{id}/public-keys (whpk_…), or the key set
// /.well-known/jwks.json?webhook_id=<the webhook's id>. During a rotation two keys sign.
const ok = verifyAsymmetricWebhook({ publicKeys: [process.env.WEBHOOK_PUBLIC_KEY!], headers: req.headers, body: rawBody });`,
  },
  {
    title: 'Python: Ed25519 (v1a) with cryptography',
    install: 'pip install cryptography',
    code: `import base64, time
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

def verify_v1a(public_keys: list[str], headers, raw_body: bytes) -> bool:
    msg_id, ts = headers["webhook-id"], headers["webhook-timestamp"]
    if abs(time.time() - int(ts)) > 300:
        return False  # too old or too new: a replayed request
    signed = f"{msg_id}.{ts}.".encode() + raw_body
    keys = [Ed25519PublicKey.from_public_bytes(base64.b64decode(k.removeprefix("whpk_"))) for k in public_keys]
    for entry in headers["webhook-signature"].split():
        if not entry.startswith("v1a,"):
            continue
        for key in keys:
            try:
                key.verify(base64.b64decode(entry[4:]), signed)
                return True
            except InvalidSignature:
                pass
    return False`,
  },
  {
    title: 'Go: crypto/hmac',
    code: `import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"net/http"
	"strconv"
	"strings"
	"time"
)

func verify(secret string, h http.Header, rawBody []byte) bool {
	key := []byte(secret)
	if rest, ok := strings.CutPrefix(secret, "whsec_"); ok {
		decoded, err := base64.StdEncoding.DecodeString(rest)
		if err != nil {
			return false
		}
		key = decoded
	}
	id, ts := h.Get("webhook-id"), h.Get("webhook-timestamp")
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || time.Since(time.Unix(sec, 0)).Abs() > 5*time.Minute {
		return false
	}
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(id + "." + ts + "."))
	mac.Write(rawBody)
	expected := base64.StdEncoding.EncodeToString(mac.Sum(nil))
	for _, entry := range strings.Fields(h.Get("webhook-signature")) {
		if sig, ok := strings.CutPrefix(entry, "v1,"); ok && hmac.Equal([]byte(sig), []byte(expected)) {
			return true
		}
	}
	return false
}`,
  },
  {
    title: 'Legacy header: x-webhook-signature',
    code: `// sha256=<hex HMAC-SHA256 of the body, keyed by the whole secret as UTF-8 text (whsec_ included)>.
// No timestamp: it does not protect against replays. Prefer webhook-signature.
import { createHmac, timingSafeEqual } from 'node:crypto';

function verifyLegacy(secret: string, rawBody: Buffer, header: string | undefined): boolean {
  const expected = Buffer.from(\`sha256=\${createHmac('sha256', secret).update(rawBody).digest('hex')}\`);
  const given = Buffer.from(header ?? '');
  return given.length === expected.length && timingSafeEqual(given, expected);
}`,
  },
];
