// The Capsulefile content hash: `sha512:` + hex SHA-512 of the UTF-8 bytes of
// the RFC 8785 (JCS) serialization of one fixed object (docs/CAPSULEFILE.md,
// "Content hash"). Customers recompute it with `capsule capsulefile hash DIR`.
// WARNING: changing anything here changes every content hash: proofs already
// issued carry the old ones. Add a new `format` value instead.
import { sha512 } from '@noble/hashes/sha2.js';
import { bytesToHex, utf8ToBytes } from '@noble/hashes/utils.js';
import { invalid } from '../../shared/errors.js';
import { canonicalize } from '../../shared/proof/index.js';
import { filenameProblem, fileSizeProblem } from './filename.js';
import { FILES_MAX, FILES_TOTAL_MAX_BYTES } from './limits.js';
import { DEFINITION_FIELDS, parseDefinition, type CapsulefileDefinition } from './schema.js';

/** Version tag inside the hashed object; bump only with a documented new canonical form. */
export const CONTENT_HASH_FORMAT = 'capsulefile-content/v1';

export type CapsulefileFileEntry = { filename: string; size_bytes: number; sha512: string };

const SHA512 = /^sha512:[0-9a-f]{128}$/;

/** Hex SHA-512 (isomorphic; for large files an adapter may use node:crypto, same digest). */
export const sha512Hex = (data: Uint8Array | string): string =>
  bytesToHex(sha512(typeof data === 'string' ? utf8ToBytes(data) : data));

/** Checks a file list (names, sizes, digests, duplicates, totals); throws invalid_parameters naming `files.N`. */
export function checkFileEntries(files: readonly CapsulefileFileEntry[]): void {
  if (files.length > FILES_MAX) throw invalid('files', `at most ${FILES_MAX} files`);
  const seen = new Set<string>();
  let total = 0;
  files.forEach((f, i) => {
    const why = filenameProblem(f.filename);
    if (why !== null) throw invalid(`files.${i}.filename`, why);
    if (seen.has(f.filename)) throw invalid(`files.${i}.filename`, `"${f.filename}" is listed twice`);
    seen.add(f.filename);
    const sizeWhy = fileSizeProblem(f.size_bytes);
    if (sizeWhy !== null) throw invalid(`files.${i}.size_bytes`, `${f.filename}: ${sizeWhy}`);
    if (!SHA512.test(f.sha512))
      throw invalid(`files.${i}.sha512`, 'must be sha512: followed by 128 lower-case hex digits');
    total += f.size_bytes;
  });
  if (total > FILES_TOTAL_MAX_BYTES) throw invalid('files', `files must total at most ${FILES_TOTAL_MAX_BYTES} bytes`);
}

/**
 * The object whose JCS bytes are hashed: every definition field (null when not
 * declared) and the files sorted by filename. Exposed so tests and docs can show it.
 */
export function canonicalContent(
  definition: CapsulefileDefinition,
  files: readonly CapsulefileFileEntry[],
): Record<string, unknown> {
  const def = parseDefinition(definition);
  checkFileEntries(files);
  const fields: Record<string, unknown> = {};
  for (const f of DEFINITION_FIELDS) fields[f] = def[f] ?? null;
  const sorted = [...files]
    .map((f) => ({ filename: f.filename, sha512: f.sha512, size_bytes: f.size_bytes }))
    // Filenames are ASCII (filename.ts), so code-unit order is also byte order.
    .sort((a, b) => (a.filename < b.filename ? -1 : a.filename > b.filename ? 1 : 0));
  return { definition: fields, files: sorted, format: CONTENT_HASH_FORMAT };
}

/** `sha512:<hex>` over JCS(canonicalContent(definition, files)). */
export function contentHash(definition: CapsulefileDefinition, files: readonly CapsulefileFileEntry[]): string {
  return `sha512:${sha512Hex(canonicalize(canonicalContent(definition, files)))}`;
}
