// The operator's master key (the KEK of control-plane/secrets/envelope.ts):
// 32 random bytes, base64 or hex, in the file CAPSULE_MASTER_KEY_FILE.
// The embedded single-node default (SQLite) generates one in its data
// directory (0600) on first start and says so; a PostgreSQL install never
// generates secrets (SPEC: self-hosted secrets are supplied by the operator).
import { randomBytes } from 'node:crypto';
import { chmodSync, closeSync, constants, mkdirSync, openSync, readFileSync, statSync, writeSync } from 'node:fs';
import { dirname } from 'node:path';
import type { MasterKeyConfig } from '../config.js';
import { ConfigError } from '../config.js';

/** Parses the file's text: 32 bytes as base64 (44 chars) or hex (64 chars). */
export function parseMasterKey(text: string, source: string): Buffer {
  const t = text.trim();
  let key: Buffer | null = null;
  if (/^[0-9a-fA-F]{64}$/.test(t)) key = Buffer.from(t, 'hex');
  else if (/^[A-Za-z0-9+/]{43}=$/.test(t)) key = Buffer.from(t, 'base64');
  if (!key || key.length !== 32)
    throw new ConfigError(`${source}: expected 32 random bytes as base64 (44 characters) or hex (64 characters)`);
  return key;
}

/** Reads (or, for the embedded default, creates) the master key. The caller zeroizes the buffer. */
export function loadMasterKey(c: MasterKeyConfig, log: { warn(obj: object, msg: string): void }): Buffer {
  if (c.generateIfMissing) {
    // The embedded default's data directory may not exist yet on a first start (the database opens after this).
    mkdirSync(dirname(c.file), { recursive: true, mode: 0o700 });
    try {
      // O_EXCL: never overwrite a key that exists (it seals every stored secret).
      const fd = openSync(c.file, constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL, 0o600);
      const key = randomBytes(32);
      try {
        writeSync(fd, `${key.toString('base64')}\n`);
      } finally {
        closeSync(fd);
        key.fill(0);
      }
      log.warn(
        { file: c.file },
        'generated a master key for the embedded install; back it up: stored secrets cannot be read without it',
      );
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'EEXIST') throw e;
    }
  }
  let text: string;
  try {
    text = readFileSync(c.file, 'utf8');
  } catch (e) {
    throw new ConfigError(`CAPSULE_MASTER_KEY_FILE (${c.file}): ${(e as Error).message}`);
  }
  const mode = statSync(c.file).mode & 0o077;
  if (mode !== 0) {
    if (c.generateIfMissing) chmodSync(c.file, 0o600);
    else log.warn({ file: c.file }, 'the master key file is readable by group or others; make it 0400 or 0600');
  }
  return parseMasterKey(text, `CAPSULE_MASTER_KEY_FILE (${c.file})`);
}
