// The CapsulefileStore port over MikroORM. Draft checks and the change they
// guard happen in one transaction that first locks the Capsulefile row (a
// no-op UPDATE), so an upload racing a finalize either lands before the hash
// is computed or gets 'not_draft'; never a file outside the hashed set.
import { UniqueConstraintViolationException } from '@mikro-orm/core';
import type { SqlEntityManager } from '@mikro-orm/sql';
import { ApiError } from '../../shared/errors.js';
import {
  SYSTEM_OWNER,
  type Capsulefile,
  type CapsulefileDefinition,
  type CapsulefileFileBytes,
  type CapsulefileFileEntry,
  type CapsulefilePage,
  type CapsulefileStore,
  type DeleteOutcome,
  type FinalizeFn,
} from '../capsulefile/index.js';
import { CapsulefileEntity, CapsulefileFileEntity, type CapsulefileRow } from './entities.js';
import type { OutboxEvent } from '../domain/index.js';
import type { Orm } from './orm.js';
import { insertOutbox } from './webhook-store.js';
import { after, all, liveUsers, num, page, run } from './sql.js';

function toCapsulefile(r: CapsulefileRow): Capsulefile {
  return {
    id: r.id,
    owner: r.owner,
    is_system: r.owner === SYSTEM_OWNER,
    status: r.status === 'finalized' ? 'finalized' : 'draft',
    definition: JSON.parse(r.definition) as CapsulefileDefinition,
    content_hash: r.content_hash,
    size_bytes: r.size_bytes === null ? null : num(r.size_bytes),
    file_count: r.file_count === null ? null : num(r.file_count),
    finalized_at: r.finalized_at,
    created_at: r.created_at,
  };
}

function toRow(c: Capsulefile): CapsulefileRow {
  return {
    id: c.id,
    owner: c.owner,
    name: c.definition.name,
    status: c.status,
    definition: JSON.stringify(c.definition),
    content_hash: c.content_hash,
    size_bytes: c.size_bytes,
    file_count: c.file_count,
    finalized_at: c.finalized_at,
    created_at: c.created_at,
  };
}

function nameConflict(e: unknown): never {
  if (e instanceof UniqueConstraintViolationException) {
    throw new ApiError('resource_conflict', 'name: a Capsulefile with this name already exists in this account', {
      cause: e,
      extra: { field: 'name' },
    });
  }
  throw e;
}

export class SqlCapsulefileStore implements CapsulefileStore {
  constructor(private readonly orm: Orm) {}

  private em(): SqlEntityManager {
    return this.orm.em.fork() as SqlEntityManager;
  }
  /** Locks the row for the rest of the transaction; true when it exists in `status` (any when null). */
  private async lock(em: SqlEntityManager, id: string, status: string | null): Promise<boolean> {
    const sql = `update "capsulefiles" set "status" = "status" where "id" = ?${status === null ? '' : ' and "status" = ?'}`;
    return (await run(em, sql, status === null ? [id] : [id, status])) === 1;
  }

  async insertCapsulefile(c: Capsulefile, maxPerOwner: number | null = null): Promise<boolean> {
    try {
      return await this.em().transactional(async (em) => {
        if (maxPerOwner !== null) {
          // The account row is the per-owner lock: concurrent creates count one after another.
          await run(em, 'update "accounts" set "customer_id" = "customer_id" where "customer_id" = ?', [c.owner]);
          const [row] = await all<{ n: unknown }>(em, 'select count(*) as "n" from "capsulefiles" where "owner" = ?', [
            c.owner,
          ]);
          if (num(row?.n ?? 0) >= maxPerOwner) return false;
        }
        await em.insert(CapsulefileEntity, toRow(c));
        return true;
      });
    } catch (e) {
      nameConflict(e);
    }
  }

  async getCapsulefile(id: string): Promise<Capsulefile | null> {
    const r = await this.em().findOne(CapsulefileEntity, { id });
    return r ? toCapsulefile(r) : null;
  }

  async listCapsulefiles(owner: string, limit: number, cursor: string | null): Promise<CapsulefilePage> {
    // Keyset paging, newest first; the cursor is the last row's (created_at, id).
    const rows = await this.em().find(
      CapsulefileEntity,
      { owner: { $in: [owner, SYSTEM_OWNER] }, ...after(cursor, 'desc') } as never,
      { orderBy: { created_at: 'desc', id: 'desc' }, limit: limit + 1 },
    );
    return page(rows.map(toCapsulefile), limit);
  }

  async updateDraft(id: string, definition: CapsulefileDefinition): Promise<boolean> {
    try {
      return (
        (await this.em().nativeUpdate(
          CapsulefileEntity,
          { id, status: 'draft' },
          { name: definition.name, definition: JSON.stringify(definition) },
        )) === 1
      );
    } catch (e) {
      nameConflict(e);
    }
  }

  async putFile(
    id: string,
    file: CapsulefileFileBytes,
    bounds: { maxFiles: number; maxTotalBytes: number },
  ): Promise<'ok' | 'not_draft' | 'limit'> {
    return this.em().transactional(async (em) => {
      if (!(await this.lock(em, id, 'draft'))) return 'not_draft';
      const [agg] = await all<{ n: unknown; total: unknown }>(
        em,
        'select count(*) as "n", coalesce(sum("size_bytes"), 0) as "total" from "capsulefile_files" where "capsulefile_id" = ? and "filename" <> ?',
        [id, file.filename],
      );
      if (num(agg?.n ?? 0) + 1 > bounds.maxFiles || num(agg?.total ?? 0) + file.size_bytes > bounds.maxTotalBytes)
        return 'limit';
      // Same name in a draft: the new bytes replace the old ones.
      await em.nativeDelete(CapsulefileFileEntity, { capsulefile_id: id, filename: file.filename });
      await em.insert(CapsulefileFileEntity, {
        capsulefile_id: id,
        filename: file.filename,
        size_bytes: file.size_bytes,
        sha512: file.sha512,
        content_b64: Buffer.from(file.bytes).toString('base64'),
      });
      return 'ok';
    });
  }

  async files(id: string): Promise<CapsulefileFileEntry[]> {
    const rows = await this.em().find(CapsulefileFileEntity, { capsulefile_id: id }, { orderBy: { filename: 'asc' } });
    return rows.map((r) => ({ filename: r.filename, size_bytes: num(r.size_bytes), sha512: r.sha512 }));
  }

  async filesWithBytes(id: string): Promise<CapsulefileFileBytes[]> {
    const rows = await this.em().find(
      CapsulefileFileEntity,
      { capsulefile_id: id },
      { orderBy: { filename: 'asc' }, populate: ['content_b64'] as never },
    );
    return rows.map((r) => ({
      filename: r.filename,
      size_bytes: num(r.size_bytes),
      sha512: r.sha512,
      bytes: Buffer.from(r.content_b64, 'base64'),
    }));
  }

  async finalize(
    id: string,
    at: string,
    compute: FinalizeFn,
    events?: (finalized: Capsulefile) => OutboxEvent[],
  ): Promise<Capsulefile | null> {
    return this.em().transactional(async (em) => {
      const moved = await run(
        em,
        `update "capsulefiles" set "status" = 'finalized', "finalized_at" = ? where "id" = ? and "status" = 'draft'`,
        [at, id],
      );
      if (moved !== 1) return null;
      const row = await em.findOne(CapsulefileEntity, { id }, { refresh: true });
      if (!row) return null;
      const files = (
        await all<{ filename: string; size_bytes: unknown; sha512: string }>(
          em,
          'select "filename", "size_bytes", "sha512" from "capsulefile_files" where "capsulefile_id" = ?',
          [id],
        )
      ).map((f) => ({ filename: f.filename, size_bytes: num(f.size_bytes), sha512: f.sha512 }));
      const r = compute(JSON.parse(row.definition) as CapsulefileDefinition, files);
      await run(em, 'update "capsulefiles" set "content_hash" = ?, "size_bytes" = ?, "file_count" = ? where "id" = ?', [
        r.content_hash,
        r.size_bytes,
        r.file_count,
        id,
      ]);
      const done = toCapsulefile({
        ...row,
        status: 'finalized',
        finalized_at: at,
        content_hash: r.content_hash,
        size_bytes: r.size_bytes,
        file_count: r.file_count,
      });
      if (events) await insertOutbox(em, events(done));
      return done;
    });
  }

  // The row lock orders this against a capsule create pinning the Capsulefile:
  // its insert locks the same row first (SqlStore.insertCapsule), so the count
  // below sees every capsule committed before, and none can commit after.
  async deleteCapsulefile(id: string): Promise<DeleteOutcome> {
    return this.em().transactional(async (em) => {
      if (!(await this.lock(em, id, null))) return 'missing';
      if ((await liveUsers(em, 'capsulefile_id', id)) > 0) return 'in_use';
      await em.nativeDelete(CapsulefileFileEntity, { capsulefile_id: id });
      await em.nativeDelete(CapsulefileEntity, { id });
      return 'deleted';
    });
  }

  async syncSystemCapsulefiles(items: { capsulefile: Capsulefile; files: CapsulefileFileBytes[] }[]): Promise<void> {
    const keep = new Set(items.map((i) => i.capsulefile.id));
    const existing = await this.em().find(CapsulefileEntity, { owner: SYSTEM_OWNER });
    for (const old of existing) {
      if (keep.has(old.id)) continue;
      // A superseded version goes once no live capsule runs on it (else at a later start).
      await this.deleteCapsulefile(old.id);
    }
    const present = new Set(existing.map((r) => r.id));
    for (const { capsulefile, files } of items) {
      if (present.has(capsulefile.id)) continue;
      try {
        await this.em().transactional(async (em) => {
          await em.insert(CapsulefileEntity, toRow(capsulefile));
          for (const f of files) {
            await em.insert(CapsulefileFileEntity, {
              capsulefile_id: capsulefile.id,
              filename: f.filename,
              size_bytes: f.size_bytes,
              sha512: f.sha512,
              content_b64: Buffer.from(f.bytes).toString('base64'),
            });
          }
        });
      } catch (e) {
        // The previous version of the same name is still in use: it stays published until then.
        if (!(e instanceof UniqueConstraintViolationException)) throw e;
      }
    }
  }
}
