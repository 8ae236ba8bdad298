// File names and sizes inside a Capsulefile. A file name is a plain name
// (no directories: the runner mounts a flat /capsule/app) in a portable ASCII
// subset, so that names sort and hash the same everywhere (no Unicode
// normalization question). Allowing more names later changes no existing hash.
import { invalid, type ApiError } from '../../shared/errors.js';
import { FILE_MAX_BYTES, FILE_MIN_BYTES, FILENAME_MAX_CHARS } from './limits.js';

const NAME = /^[A-Za-z0-9._-]+$/;

/** Why `name` is not an acceptable Capsulefile file name, or null if it is. */
export function filenameProblem(name: string): string | null {
  if (name.length === 0) return 'must not be empty';
  if (name.length > FILENAME_MAX_CHARS) return `must be at most ${FILENAME_MAX_CHARS} characters`;
  if (name.includes('\0')) return 'must not contain NUL';
  if (name === '.' || name === '..' || name.split(/[/\\]/).some((seg) => seg === '..' || seg === '.'))
    return 'must not be or contain "." or ".." (path traversal)';
  if (name.startsWith('/')) return 'must be a plain file name, not an absolute path';
  if (name.includes('/') || name.includes('\\'))
    return 'must be a plain file name without "/" or "\\" (no directories)';
  if (!NAME.test(name)) return 'may contain only letters, digits, ".", "_" and "-"';
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
