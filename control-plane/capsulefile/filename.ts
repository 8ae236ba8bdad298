// File names and sizes inside a Capsulefile. A file name is a relative path
// below /capsule/app; the charset is a portable ASCII subset so that names
// sort and hash the same everywhere (no Unicode normalization question).
import { invalid, type ApiError } from '../../shared/errors.js';
import { FILE_MAX_BYTES, FILE_MIN_BYTES, FILENAME_MAX_CHARS, FILENAME_MAX_DEPTH } from './limits.js';

const SEGMENT = /^[A-Za-z0-9._-]+$/;

/** Why `name` is not an acceptable Capsulefile file name, or null if it is. */
export function filenameProblem(name: string): string | null {
  if (name.length === 0) return 'must not be empty';
  if (name.length > FILENAME_MAX_CHARS) return `must be at most ${FILENAME_MAX_CHARS} characters`;
  if (name.includes('\0')) return 'must not contain NUL';
  if (name.startsWith('/')) return 'must be a relative path, not absolute';
  if (name.includes('\\')) return 'must use "/" as the separator, never "\\"';
  const segments = name.split('/');
  if (segments.length > FILENAME_MAX_DEPTH) return `must be at most ${FILENAME_MAX_DEPTH} levels deep`;
  for (const seg of segments) {
    if (seg === '') return 'must not contain empty path segments ("//" or a trailing "/")';
    if (seg === '.' || seg === '..') return 'must not contain "." or ".." segments (path traversal)';
    if (!SEGMENT.test(seg)) return 'may contain only letters, digits, ".", "_", "-" and "/"';
  }
  return null;
}

/** Throws invalid_parameters naming `field` when the name is not acceptable. */
export function assertFilename(name: string, field = 'filename'): void {
  const why = filenameProblem(name);
  if (why !== null) throw invalid(field, why);
}

/** Why a file of `size` bytes is refused, or null. 0-byte files are refused on purpose. */
export function fileSizeProblem(size: number): string | null {
  if (!Number.isSafeInteger(size) || size < 0) return 'size must be a non-negative integer';
  if (size < FILE_MIN_BYTES) return 'file is empty (0 bytes); Capsulefile files must not be empty';
  if (size > FILE_MAX_BYTES) return `file is larger than ${FILE_MAX_BYTES} bytes`;
  return null;
}

export function fileSizeError(size: number, field = 'body'): ApiError | null {
  const why = fileSizeProblem(size);
  return why === null ? null : invalid(field, why);
}
