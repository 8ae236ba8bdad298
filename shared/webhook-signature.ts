// Webhook delivery signature (docs/WEBHOOKS.md "Verifying the signature"):
//   Svc-Webhook-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256(signing_secret, t + "." + raw body)>
// The secret is used as the UTF-8 bytes of the whole `whsec_...` string.
// Isomorphic (@noble/hashes), so receivers in browsers or workers can check it too.
import { hmac } from '@noble/hashes/hmac.js';
import { sha256 } from '@noble/hashes/sha2.js';
import { toHex, utf8, bytesEqual, fromHex } from './proof/encoding.js';

export const WEBHOOK_SIGNATURE_HEADER = 'Svc-Webhook-Signature';

/** Default tolerance between the header's t and the receiver's clock. */
export const WEBHOOK_TOLERANCE_SECONDS = 300;

function mac(secret: string, timestamp: number, body: string | Uint8Array): Uint8Array {
  const prefix = utf8(`${timestamp}.`);
  const raw = typeof body === 'string' ? utf8(body) : body;
  const msg = new Uint8Array(prefix.length + raw.length);
  msg.set(prefix, 0);
  msg.set(raw, prefix.length);
  return hmac(sha256, utf8(secret), msg);
}

/** The header value for a delivery sent at `timestamp` (unix seconds). */
export function signWebhook(secret: string, timestamp: number, body: string | Uint8Array): string {
  if (!Number.isSafeInteger(timestamp) || timestamp < 0)
    throw new RangeError('signWebhook: timestamp must be unix seconds');
  return `t=${timestamp},v1=${toHex(mac(secret, timestamp, body))}`;
}

export type WebhookCheck = { ok: true; timestamp: number } | { ok: false; reason: 'malformed' | 'stale' | 'mismatch' };

/**
 * Checks a received header against the raw body; `now` is unix seconds from
 * the receiver's (injected) clock. Accepts any of several v1 values (secret rotation).
 */
export function verifyWebhookSignature(
  header: string,
  secret: string,
  body: string | Uint8Array,
  now: number,
  toleranceSeconds = WEBHOOK_TOLERANCE_SECONDS,
): WebhookCheck {
  let t: number | undefined;
  const sigs: Uint8Array[] = [];
  for (const part of header.split(',')) {
    const eq = part.indexOf('=');
    if (eq < 0) return { ok: false, reason: 'malformed' };
    const k = part.slice(0, eq).trim();
    const v = part.slice(eq + 1).trim();
    if (k === 't') {
      if (!/^\d{1,15}$/.test(v)) return { ok: false, reason: 'malformed' };
      t = Number(v);
    } else if (k === 'v1') {
      const b = /^[0-9a-f]{64}$/.test(v) ? fromHex(v) : undefined;
      if (b === undefined) return { ok: false, reason: 'malformed' };
      sigs.push(b);
    }
  }
  if (t === undefined || sigs.length === 0) return { ok: false, reason: 'malformed' };
  if (Math.abs(now - t) > toleranceSeconds) return { ok: false, reason: 'stale' };
  const expected = mac(secret, t, body);
  return sigs.some((s) => bytesEqual(s, expected)) ? { ok: true, timestamp: t } : { ok: false, reason: 'mismatch' };
}
