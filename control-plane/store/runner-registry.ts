// The runner registry: nodes as the control planes last reached them
// (heartbeat rows they upsert), draining and lost marks, and where each
// capsule was placed. Declaring a node lost is one conditional update, so
// with several control planes exactly one declares it.
import type { SqlEntityManager } from '@mikro-orm/sql';
import type { Capsule, RunnerNode, RunnerRegistry } from '../domain/index.js';
import { LIVE_STATUSES } from '../domain/index.js';
import type { CapsuleRow } from './entities.js';
import type { Orm } from './orm.js';
import { toCapsule } from './sql-store.js';
import { all, num, run } from './sql.js';

interface NodeRow {
  node_id: string;
  address: string;
  labels: string;
  capacity: string | null;
  heartbeat_at: unknown;
  draining: unknown;
  lost_at: unknown;
}

const LIVE_IN = `(${LIVE_STATUSES.map(() => '?').join(', ')})`;

export class SqlRunnerRegistry implements RunnerRegistry {
  constructor(private readonly orm: Orm) {}

  private em(): SqlEntityManager {
    return this.orm.em.fork() as SqlEntityManager;
  }

  async heartbeat(n: Pick<RunnerNode, 'node_id' | 'address' | 'labels' | 'capacity'>, nowMs: number): Promise<void> {
    await run(
      this.em(),
      `insert into "runner_nodes" ("node_id", "address", "labels", "capacity", "heartbeat_at", "draining", "lost_at")
       values (?, ?, ?, ?, ?, 0, null)
       on conflict ("node_id") do update set "address" = excluded."address", "labels" = excluded."labels",
         "capacity" = excluded."capacity", "lost_at" = null,
         "heartbeat_at" = case when "runner_nodes"."heartbeat_at" > excluded."heartbeat_at"
           then "runner_nodes"."heartbeat_at" else excluded."heartbeat_at" end`,
      [n.node_id, n.address, JSON.stringify(n.labels), n.capacity ? JSON.stringify(n.capacity) : null, nowMs],
    );
  }

  async runnerNodes(): Promise<RunnerNode[]> {
    const rows = await all<NodeRow>(this.em(), 'select * from "runner_nodes" order by "node_id"', []);
    return rows.map((r) => ({
      node_id: r.node_id,
      address: r.address,
      labels: JSON.parse(r.labels) as Record<string, string>,
      capacity: r.capacity === null ? null : (JSON.parse(r.capacity) as RunnerNode['capacity']),
      heartbeat_ms: num(r.heartbeat_at),
      draining: num(r.draining) === 1,
      lost_ms: r.lost_at === null ? null : num(r.lost_at),
    }));
  }

  async setDraining(nodeId: string, draining: boolean): Promise<boolean> {
    return (
      (await run(this.em(), 'update "runner_nodes" set "draining" = ? where "node_id" = ?', [
        draining ? 1 : 0,
        nodeId,
      ])) === 1
    );
  }

  async declareLost(nowMs: number, lostAfterMs: number): Promise<string[]> {
    const em = this.em();
    const stale = await all<{ node_id: string }>(
      em,
      'select "node_id" from "runner_nodes" where "lost_at" is null and "heartbeat_at" < ?',
      [nowMs - lostAfterMs],
    );
    const declared: string[] = [];
    for (const { node_id } of stale) {
      // Conditional: a heartbeat that landed meanwhile, or another control plane's declaration, wins.
      const moved = await run(
        em,
        'update "runner_nodes" set "lost_at" = ? where "node_id" = ? and "lost_at" is null and "heartbeat_at" < ?',
        [nowMs, node_id, nowMs - lostAfterMs],
      );
      if (moved === 1) declared.push(node_id);
    }
    return declared;
  }

  async place(capsuleId: string, nodeId: string, memoryMb: number, nowMs: number): Promise<void> {
    // A create retried on another runner moves its placement.
    await run(
      this.em(),
      `insert into "capsule_placements" ("capsule_id", "node_id", "memory_mb", "placed_at") values (?, ?, ?, ?)
       on conflict ("capsule_id") do update set "node_id" = excluded."node_id", "memory_mb" = excluded."memory_mb",
         "placed_at" = excluded."placed_at"`,
      [capsuleId, nodeId, memoryMb, nowMs],
    );
  }

  async unplace(capsuleId: string): Promise<void> {
    await run(this.em(), 'delete from "capsule_placements" where "capsule_id" = ?', [capsuleId]);
  }

  async placedMemory(inFlightSinceMs: number): Promise<Map<string, number>> {
    // Destroyed capsules' placements are gone (deleted with the status move), so this reads live ones only.
    const rows = await all<{ node_id: string; mb: unknown }>(
      this.em(),
      `select p."node_id", sum(p."memory_mb") as "mb" from "capsule_placements" p
       left join "capsules" c on c."id" = p."capsule_id"
       where (c."id" is null and p."placed_at" >= ?) or c."status" in ${LIVE_IN}
       group by p."node_id"`,
      [inFlightSinceMs, ...LIVE_STATUSES],
    );
    return new Map(rows.map((r) => [r.node_id, num(r.mb)]));
  }

  async prunePlacements(beforeMs: number): Promise<number> {
    return run(
      this.em(),
      `delete from "capsule_placements" where "placed_at" < ?
       and not exists (select 1 from "capsules" c where c."id" = "capsule_placements"."capsule_id"
         and c."status" in ${LIVE_IN})`,
      [beforeMs, ...LIVE_STATUSES],
    );
  }

  async placementOf(capsuleId: string): Promise<{ node_id: string; placed_ms: number } | null> {
    const rows = await all<{ node_id: string; placed_at: unknown }>(
      this.em(),
      'select "node_id", "placed_at" from "capsule_placements" where "capsule_id" = ?',
      [capsuleId],
    );
    const r = rows[0];
    return r ? { node_id: r.node_id, placed_ms: num(r.placed_at) } : null;
  }

  async liveCapsulesOn(nodeId: string): Promise<Capsule[]> {
    const rows = await all<CapsuleRow>(
      this.em(),
      `select c.* from "capsules" c join "capsule_placements" p on p."capsule_id" = c."id"
       where p."node_id" = ? and c."status" in ${LIVE_IN}`,
      [nodeId, ...LIVE_STATUSES],
    );
    return rows.map(toCapsule);
  }

  async liveCapsulesOnLostNodes(limit: number): Promise<Capsule[]> {
    const rows = await all<CapsuleRow>(
      this.em(),
      `select c.* from "capsules" c join "capsule_placements" p on p."capsule_id" = c."id"
       join "runner_nodes" n on n."node_id" = p."node_id"
       where n."lost_at" is not null and c."status" in ${LIVE_IN} order by c."created_at" limit ?`,
      [...LIVE_STATUSES, limit],
    );
    return rows.map(toCapsule);
  }
}
