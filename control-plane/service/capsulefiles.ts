// Capsulefiles: create a draft, update it, add files, finalize (content hash),
// read, list, delete; and the finalized view a pinned capsule is built from.
// System Capsulefiles are visible to every account, read-only, not deletable.
import { ApiError, invalid } from '../../shared/errors.js';
import {
  SYSTEM_OWNER,
  assertFilename,
  contentHash,
  fileSizeProblem,
  limits,
  mergePatch,
  parseDefinition,
  type Capsulefile,
  type CapsulefileFileBytes,
  type CapsulefileFileEntry,
  type CapsulefilePage,
} from '../capsulefile/index.js';
import { nullAsAbsent, type Caller } from '../domain/index.js';
import { newEvent } from './webhooks.js';
import type { Deps } from './deps.js';
import { newId, sha512Prefixed } from './ids.js';

export const notFound = (field?: string): ApiError =>
  new ApiError('resource_not_found', `${field ? `${field}: ` : ''}Capsulefile not found`);

/** The 400 text for declared packages the base image does not satisfy (same at Capsulefile and capsule create). */
export const unmetPackagesWhy = (unmet: string[]): string =>
  `declared package ${unmet.join(', ')} is not in the base image (packages are never downloaded)`;

export interface CapsulefileDetail {
  capsulefile: Capsulefile;
  files: CapsulefileFileEntry[];
}

export class CapsulefileService {
  constructor(private readonly d: Deps) {}

  /** Own or system Capsulefile; anything else is 404 (ownership, as for capsules). */
  async visible(caller: Caller, id: string, field?: string): Promise<Capsulefile> {
    const c = id.length <= 64 ? await this.d.capsulefiles.getCapsulefile(id) : null;
    if (!c || (c.owner !== caller.account.customer_id && !c.is_system)) throw notFound(field);
    return c;
  }

  /** A Capsulefile the caller may change: its own draft. */
  async ownDraft(caller: Caller, id: string): Promise<Capsulefile> {
    const c = await this.visible(caller, id);
    if (c.is_system) throw new ApiError('resource_conflict', 'system Capsulefiles are read-only');
    if (c.status !== 'draft') throw new ApiError('resource_conflict', 'Capsulefile is finalized and immutable');
    return c;
  }

  async create(caller: Caller, body: unknown): Promise<Capsulefile> {
    // The detail view answers null for undeclared fields; sent back, null means not declared.
    const definition = parseDefinition(nullAsAbsent(body));
    await this.checkPackages(definition);
    const c: Capsulefile = {
      id: newId('cf_', this.d.random),
      owner: caller.account.customer_id,
      is_system: false,
      status: 'draft',
      definition,
      content_hash: null,
      size_bytes: null,
      file_count: null,
      finalized_at: null,
      created_at: this.d.clock.nowIso(),
    };
    const max = this.d.capsulefileLimits[caller.account.tier].max_capsulefiles;
    if (!(await this.d.capsulefiles.insertCapsulefile(c, max))) {
      throw new ApiError(
        'quota_exceeded',
        `quota reached: Capsulefiles (${max}) for tier ${caller.account.tier}; delete one or upgrade`,
        { extra: { limit: 'capsulefiles' } },
      );
    }
    this.d.log.info({ capsulefile_id: c.id, customer_id: c.owner }, 'capsulefile created');
    return c;
  }

  /** Declared packages must be in the base image (at the pinned version), else 400 naming `packages`. */
  private async checkPackages(definition: Capsulefile['definition']): Promise<void> {
    if (!definition.packages) return;
    const unmet = await this.d.baseImage.unmetPackages(definition.packages);
    if (unmet.length > 0) throw invalid('packages', unmetPackagesWhy(unmet));
  }

  async detail(caller: Caller, id: string): Promise<CapsulefileDetail> {
    const c = await this.visible(caller, id);
    return { capsulefile: c, files: await this.d.capsulefiles.files(c.id) };
  }

  async list(caller: Caller, limit: number, cursor: string | null): Promise<CapsulefilePage> {
    return this.d.capsulefiles.listCapsulefiles(caller.account.customer_id, limit, cursor);
  }

  async update(caller: Caller, id: string, patch: unknown): Promise<Capsulefile> {
    const c = await this.ownDraft(caller, id);
    const definition = mergePatch(c.definition, patch);
    await this.checkPackages(definition);
    if (!(await this.d.capsulefiles.updateDraft(c.id, definition)))
      throw new ApiError('resource_conflict', 'Capsulefile is finalized and immutable');
    return { ...c, definition };
  }

  async addFile(caller: Caller, id: string, filename: unknown, bytes: Uint8Array): Promise<CapsulefileFileEntry> {
    const c = await this.ownDraft(caller, id);
    if (typeof filename !== 'string' || filename === '') throw invalid('filename', 'query parameter is required');
    assertFilename(filename);
    const sizeWhy = fileSizeProblem(bytes.length);
    if (sizeWhy !== null) throw invalid('body', sizeWhy);
    const entry: CapsulefileFileBytes = { filename, size_bytes: bytes.length, sha512: sha512Prefixed(bytes), bytes };
    const r = await this.d.capsulefiles.putFile(c.id, entry, {
      maxFiles: limits.FILES_MAX,
      maxTotalBytes: limits.FILES_TOTAL_MAX_BYTES,
    });
    if (r === 'not_draft') throw new ApiError('resource_conflict', 'Capsulefile is finalized and immutable');
    if (r === 'limit')
      throw invalid(
        'body',
        `a Capsulefile holds at most ${limits.FILES_MAX} files and ${limits.FILES_TOTAL_MAX_BYTES} bytes`,
      );
    return { filename: entry.filename, size_bytes: entry.size_bytes, sha512: entry.sha512 };
  }

  async finalize(caller: Caller, id: string): Promise<Capsulefile> {
    const c = await this.ownDraft(caller, id);
    // Immutable from here on: a package the capsule could never get is refused now, not at capsule create.
    await this.checkPackages(c.definition);
    const done = await this.d.capsulefiles.finalize(
      c.id,
      this.d.clock.nowIso(),
      (definition, files) => ({
        content_hash: contentHash(definition, files),
        size_bytes: files.reduce((n, f) => n + f.size_bytes, 0),
        file_count: files.length,
      }),
      (f) => [
        newEvent(this.d, caller.account.customer_id, 'capsulefile.finalized', {
          capsulefile_id: f.id,
          name: f.definition.name,
          content_hash: f.content_hash,
          file_count: f.file_count,
          size_bytes: f.size_bytes,
          finalized_at: f.finalized_at,
        }),
      ],
    );
    if (!done) throw new ApiError('resource_conflict', 'Capsulefile is finalized and immutable');
    this.d.webhooks.kick?.();
    this.d.log.info({ capsulefile_id: c.id, content_hash: done.content_hash }, 'capsulefile finalized');
    return done;
  }

  async delete(caller: Caller, id: string): Promise<void> {
    const c = await this.visible(caller, id);
    if (c.is_system) throw new ApiError('resource_conflict', 'system Capsulefiles are not deletable');
    const r = await this.d.capsulefiles.deleteCapsulefile(c.id);
    if (r === 'missing') throw notFound();
    if (r === 'in_use') throw new ApiError('resource_conflict', 'Capsulefile is in use by active capsules');
  }

  /**
   * The finalized Capsulefile a capsule is pinned to, with its file bytes.
   * A draft is refused with 400 naming `capsulefile_id` (the issue's rule).
   */
  async forCapsule(caller: Caller, id: string): Promise<{ capsulefile: Capsulefile; files: CapsulefileFileBytes[] }> {
    const c = await this.visible(caller, id, 'capsulefile_id');
    if (c.status !== 'finalized' || c.content_hash === null)
      throw invalid('capsulefile_id', 'Capsulefile is a draft: finalize it first');
    return { capsulefile: c, files: await this.d.capsulefiles.filesWithBytes(c.id) };
  }

  /** Publishes the reference Capsulefiles read from policies/system-capsulefiles at start. */
  async publishSystem(
    sources: { definition: unknown; files: { filename: string; bytes: Uint8Array }[] }[],
  ): Promise<Capsulefile[]> {
    const items = sources.map((s) => {
      const definition = parseDefinition(s.definition);
      const files = s.files.map((f) => ({
        filename: f.filename,
        size_bytes: f.bytes.length,
        sha512: sha512Prefixed(f.bytes),
        bytes: f.bytes,
      }));
      const hash = contentHash(definition, files);
      const capsulefile: Capsulefile = {
        // Stable per content: the same sources give the same id on every install and restart.
        id: `cf_sys_${hash.slice('sha512:'.length, 'sha512:'.length + 24)}`,
        owner: SYSTEM_OWNER,
        is_system: true,
        status: 'finalized',
        definition,
        content_hash: hash,
        size_bytes: files.reduce((n, f) => n + f.size_bytes, 0),
        file_count: files.length,
        finalized_at: this.d.clock.nowIso(),
        created_at: this.d.clock.nowIso(),
      };
      return { capsulefile, files };
    });
    await this.d.capsulefiles.syncSystemCapsulefiles(items);
    return items.map((i) => i.capsulefile);
  }
}
