// Identifiers and API keys. All randomness comes from the injected source.
import { createHash } from 'node:crypto';
import type { Random } from '../domain/index.js';

const hex = (b: Uint8Array): string => Buffer.from(b).toString('hex');

export const newId = (prefix: string, random: Random, bytes = 12): string => `${prefix}${hex(random(bytes))}`;

export const API_KEY_RE = /^svc_(live|test)_[0-9a-f]{32}$/;

export function newApiKey(mode: 'live' | 'test', random: Random): string {
  return `svc_${mode}_${hex(random(16))}`;
}

/** Characters of a key shown in listings (`svc_live_` plus three hex digits). */
export const KEY_PREFIX_CHARS = 12;

/** Keys are stored only as this digest. */
export const hashApiKey = (key: string): string => createHash('sha256').update(key, 'utf8').digest('hex');

export { sha512Prefixed } from '../../shared/node/sha512.js';
