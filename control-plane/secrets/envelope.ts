// Envelope encryption of secrets at rest (webhook signing secrets, TOTP seeds,
// ...): each value gets its own random data key (AES-256-GCM), the data key
// is wrapped by the operator's master key (AES-256-GCM), and both layers are
// bound to a context string so a ciphertext cannot be moved to another row.
//
// Sealed form: `env1.<kek id>.<base64url wrapped key>.<base64url payload>`,
// each base64url part = 12-byte IV || ciphertext || 16-byte tag.
// The kek id (first 16 hex of SHA-256 of the master key) names the master
// key that sealed a value, so a wrong or rotated key fails loudly.
import { createCipheriv, createDecipheriv, createHash, randomBytes } from 'node:crypto';
import type { SecretBox } from '../domain/index.js';

const PREFIX = 'env1';
const IV_BYTES = 12;
const TAG_BYTES = 16;

export class SecretBoxError extends Error {
  override name = 'SecretBoxError';
}

function gcmSeal(key: Uint8Array, plaintext: Uint8Array, aad: string): Buffer {
  const iv = randomBytes(IV_BYTES);
  const c = createCipheriv('aes-256-gcm', key, iv);
  c.setAAD(Buffer.from(aad, 'utf8'));
  const body = Buffer.concat([c.update(plaintext), c.final()]);
  return Buffer.concat([iv, body, c.getAuthTag()]);
}

function gcmOpen(key: Uint8Array, sealed: Buffer, aad: string): Buffer {
  if (sealed.length < IV_BYTES + TAG_BYTES) throw new SecretBoxError('sealed value too short');
  const d = createDecipheriv('aes-256-gcm', key, sealed.subarray(0, IV_BYTES));
  d.setAAD(Buffer.from(aad, 'utf8'));
  d.setAuthTag(sealed.subarray(sealed.length - TAG_BYTES));
  try {
    return Buffer.concat([d.update(sealed.subarray(IV_BYTES, sealed.length - TAG_BYTES)), d.final()]);
  } catch {
    throw new SecretBoxError('sealed value does not authenticate (wrong master key, context or tampered)');
  }
}

/** AES-256-GCM envelope encryption under one 32-byte master key. */
export class EnvelopeBox implements SecretBox {
  readonly kekId: string;
  private readonly kek: Buffer;

  /** Copies the key; the caller zeroizes its own buffer. */
  constructor(masterKey: Uint8Array) {
    if (masterKey.length !== 32) throw new SecretBoxError('master key must be 32 bytes');
    this.kek = Buffer.from(masterKey);
    this.kekId = createHash('sha256').update(this.kek).digest('hex').slice(0, 16);
  }

  seal(plaintext: Uint8Array, context: string): string {
    const dek = randomBytes(32);
    try {
      const wrapped = gcmSeal(this.kek, dek, `${PREFIX}|dek|${context}`);
      const payload = gcmSeal(dek, plaintext, `${PREFIX}|data|${context}`);
      return `${PREFIX}.${this.kekId}.${wrapped.toString('base64url')}.${payload.toString('base64url')}`;
    } finally {
      dek.fill(0);
    }
  }

  /** Plaintext bytes; the caller zeroizes them when done. Throws SecretBoxError on any mismatch. */
  open(sealed: string, context: string): Uint8Array {
    const parts = sealed.split('.');
    if (parts.length !== 4 || parts[0] !== PREFIX) throw new SecretBoxError('not a sealed value');
    if (parts[1] !== this.kekId) throw new SecretBoxError(`sealed under another master key (${parts[1]})`);
    const dek = gcmOpen(this.kek, Buffer.from(parts[2]!, 'base64url'), `${PREFIX}|dek|${context}`);
    try {
      return gcmOpen(dek, Buffer.from(parts[3]!, 'base64url'), `${PREFIX}|data|${context}`);
    } finally {
      dek.fill(0);
    }
  }

  sealString(plaintext: string, context: string): string {
    const b = Buffer.from(plaintext, 'utf8');
    try {
      return this.seal(b, context);
    } finally {
      b.fill(0);
    }
  }

  openString(sealed: string, context: string): string {
    const b = Buffer.from(this.open(sealed, context));
    try {
      return b.toString('utf8');
    } finally {
      b.fill(0);
    }
  }

  /** Overwrites the master key copy (shutdown). */
  destroy(): void {
    this.kek.fill(0);
  }
}
