// Stored Capsulefile records and the storage and base-image ports the service
// needs. Types only: no I/O.
import type { CapsulefileFileEntry } from './content-hash.js';
import type { CapsulefileDefinition } from './schema.js';
import type { OutboxEvent } from '../domain/webhooks.js';

export type CapsulefileStatus = 'draft' | 'finalized';

/** Owner value of service-published Capsulefiles (never a customer id). */
export const SYSTEM_OWNER = '@system';

export interface Capsulefile {
  id: string;
  /** customer_id, or SYSTEM_OWNER. */
  owner: string;
  is_system: boolean;
  status: CapsulefileStatus;
  definition: CapsulefileDefinition;
  content_hash: string | null;
  size_bytes: number | null;
  file_count: number | null;
  finalized_at: string | null;
  created_at: string;
}

export interface CapsulefilePage {
  items: Capsulefile[];
  next_cursor: string | null;
}

export interface CapsulefileFileBytes extends CapsulefileFileEntry {
  bytes: Uint8Array;
}

/** What finalize computes from the locked draft (pure; runs inside the store's transaction). */
export type FinalizeFn = (
  definition: CapsulefileDefinition,
  files: readonly CapsulefileFileEntry[],
) => {
  content_hash: string;
  size_bytes: number;
  file_count: number;
};

export type DeleteOutcome = 'deleted' | 'missing' | 'in_use';

export interface CapsulefileStore {
  /**
   * Unique (owner, name): a duplicate throws resource_conflict naming `name`.
   * With `maxPerOwner`, inserts only while the owner holds fewer (counted and
   * inserted under one lock on the owner); false when the quota is reached.
   */
  insertCapsulefile(c: Capsulefile, maxPerOwner?: number | null): Promise<boolean>;
  getCapsulefile(id: string): Promise<Capsulefile | null>;
  /** The owner's and the system's Capsulefiles, newest first, keyset cursor. */
  listCapsulefiles(owner: string, limit: number, cursor: string | null): Promise<CapsulefilePage>;
  /** Replaces the definition only while the row is a draft; false when it is not (any more). */
  updateDraft(id: string, definition: CapsulefileDefinition): Promise<boolean>;
  /**
   * Adds or replaces one file only while the row is a draft, atomically with the
   * draft check; 'not_draft' when finalize won the race; 'limit' when the file
   * count or total size would pass the bounds.
   */
  putFile(
    id: string,
    file: CapsulefileFileBytes,
    bounds: { maxFiles: number; maxTotalBytes: number },
  ): Promise<'ok' | 'not_draft' | 'limit'>;
  files(id: string): Promise<CapsulefileFileEntry[]>;
  filesWithBytes(id: string): Promise<CapsulefileFileBytes[]>;
  /** draft -> finalized in one transaction: the row is locked, then `compute` sees exactly the final file set. */
  finalize(
    id: string,
    at: string,
    compute: FinalizeFn,
    /** Webhook events of the finalized record (capsulefile.finalized), written in the same transaction. */
    events?: (finalized: Capsulefile) => OutboxEvent[],
  ): Promise<Capsulefile | null>;
  /** Deletes the row and its files unless a live capsule references it. */
  deleteCapsulefile(id: string): Promise<DeleteOutcome>;
  /**
   * Publishes the service's reference Capsulefiles: inserts the given ones
   * (already finalized) that are missing, removes system rows no longer
   * published unless live capsules use them.
   */
  syncSystemCapsulefiles(items: { capsulefile: Capsulefile; files: CapsulefileFileBytes[] }[]): Promise<void>;
}

/** The read-only base image capsules run on: which declared packages it lacks. */
export interface BaseImage {
  /**
   * Declared packages the image does not satisfy, in declaration order: absent
   * (`ecosystem:entry`) or installed in a version outside the pin
   * (`ecosystem:entry (installed <version>)`). Entries are valid (schema.ts).
   */
  unmetPackages(packages: Readonly<Partial<Record<string, readonly string[]>>>): Promise<string[]>;
}
