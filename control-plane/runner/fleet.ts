// Several runners behind one RunnerPort (docs/CONTROL_PLANE.md "Several
// runners"). Every heartbeat this control plane says hello to each runner it
// is configured with (a static list, or every address a DNS name resolves to)
// and records the answer in the registry, so that all control planes share
// one view: capacity, draining, lost. Create places a capsule on the least
// loaded live runner with room (the placement is written before the runner
// is asked), and every later call for it goes to that runner, from any replica.
import { lookup } from 'node:dns/promises';
import type { RunnerRegistry, RunnerNode } from '../domain/index.js';
import {
  RunnerError,
  type CreateCapsuleRequest,
  type RunnerHello,
  type RunnerMember,
  type RunnerPort,
} from '../../shared/runner-protocol.js';
import { within } from '../../shared/time.js';
import { ReconnectingRunner } from './reconnecting.js';

export interface RunnerAddress {
  host: string;
  port: number;
  /** The DNS name the address was found through: the name the runner's certificate must carry. */
  servername?: string;
}

export interface FleetOptions {
  /** The runners to reach now (re-read every heartbeat: a DNS name may gain or lose addresses). */
  addresses: () => Promise<RunnerAddress[]>;
  connect: (a: RunnerAddress) => RunnerPort;
  registry: RunnerRegistry;
  nowMs: () => number;
  heartbeatMs: number;
  /** CAPSULE_PLACEMENT_LABEL: runners carrying this label are preferred while one has room. */
  affinity: { key: string; value: string } | null;
  log: { warn(obj: object, msg?: string): void };
}

/** A hello that does not answer within this is a missed heartbeat. */
const HELLO_TIMEOUT_MS = 2000;
/** A placement without its capsule row counts as load this long (a create under way on some replica). */
const IN_FLIGHT_MS = 60_000;
/** Placements remembered in process; older ones are read back from the registry. */
const PLACEMENT_CACHE = 50_000;

interface Member {
  address: string;
  runner: ReconnectingRunner;
  hello: RunnerHello | null;
  up: boolean;
  /** Memory and capsules this process added (creates) or freed (destroys) here since the last hello, which did not count them. */
  deltaMb: number;
  deltaCount: number;
}

/** Resolves `dns:<name>:<port>` to every address of the name (a headless Service lists one per runner pod). */
export function dnsAddresses(name: string, port: number): () => Promise<RunnerAddress[]> {
  return async () => (await lookup(name, { all: true })).map((a) => ({ host: a.address, port, servername: name }));
}

export class RunnerFleet implements RunnerPort {
  private readonly members = new Map<string, Member>();
  private readonly byNode = new Map<string, Member>();
  /** Capsule -> runner (and its memory when this process created it). */
  private readonly placements = new Map<string, { nodeId: string; memoryMb: number | null }>();
  private registryView = new Map<string, RunnerNode>();
  private readonly listeners: (() => void)[] = [];
  private timer: NodeJS.Timeout | null = null;
  private ticking: Promise<void> | null = null;
  private closed = false;

  constructor(private readonly o: FleetOptions) {}

  /** First heartbeat (awaited), then one every heartbeatMs. */
  async start(): Promise<void> {
    await this.heartbeat();
    this.timer = setInterval(() => void this.heartbeat(), this.o.heartbeatMs);
    this.timer.unref();
  }

  /** Called when a runner becomes reachable again or anew: reconcile before the next capsule call. */
  onReconnect(cb: () => void): void {
    this.listeners.push(cb);
  }

  /** One heartbeat round; concurrent calls share it. */
  heartbeat(): Promise<void> {
    this.ticking ??= this.round().finally(() => (this.ticking = null));
    return this.ticking;
  }

  private async round(): Promise<void> {
    let addresses: RunnerAddress[];
    try {
      addresses = await this.o.addresses();
    } catch (e) {
      this.o.log.warn({ err: e }, 'runner discovery failed; keeping the runners known so far');
      addresses = [];
    }
    for (const a of addresses) {
      const key = `${a.host}:${a.port}`;
      if (this.members.has(key) || this.closed) continue;
      const runner = new ReconnectingRunner(() => this.o.connect(a));
      runner.onReconnect(() => this.notify());
      this.members.set(key, { address: key, runner, hello: null, up: false, deltaMb: 0, deltaCount: 0 });
    }
    await Promise.all([...this.members.values()].map((m) => this.greet(m)));
    try {
      this.registryView = new Map((await this.o.registry.runnerNodes()).map((n) => [n.node_id, n]));
    } catch (e) {
      this.o.log.warn({ err: e }, 'reading the runner registry failed');
    }
  }

  private async greet(m: Member): Promise<void> {
    try {
      const hello = await within(m.runner.hello(), HELLO_TIMEOUT_MS, 'hello timed out');
      const nodeId = hello.node_id ?? m.address;
      const wasUp = m.up;
      Object.assign(m, { hello, up: true, deltaMb: 0, deltaCount: 0 });
      this.byNode.set(nodeId, m);
      const c = hello.capacity;
      await this.o.registry.heartbeat(
        {
          node_id: nodeId,
          address: m.address,
          labels: hello.labels ?? {},
          capacity: c
            ? {
                memory_mb: c.memory_mb,
                committed_mb: c.committed_mb,
                free_mb: c.free_mb,
                capsules: c.capsules,
                max_capsules: c.max_capsules,
              }
            : null,
        },
        this.o.nowMs(),
      );
      if (!wasUp) this.notify();
    } catch (e) {
      if (m.up) this.o.log.warn({ runner: m.address, err: e }, 'runner missed a heartbeat');
      m.up = false;
    }
  }

  private notify(): void {
    for (const cb of this.listeners) cb();
  }

  private nodeIdOf(m: Member): string {
    return m.hello?.node_id ?? m.address;
  }

  /** Live, not draining, not declared lost, with room for `memoryMb`; the one to try first, then by load. */
  private async candidates(memoryMb: number): Promise<Member[]> {
    // Load is what every control plane placed (the registry), so replicas agree on it; if the
    // database cannot say, this process's view (last hello plus its own changes since).
    const placed = await this.o.registry.placedMemory(this.o.nowMs() - IN_FLIGHT_MS).catch(() => null);
    const load = (m: Member): number => {
      const c = m.hello?.capacity;
      const mb = placed ? (placed.get(this.nodeIdOf(m)) ?? 0) : (c?.committed_mb ?? 0) + m.deltaMb;
      return c && c.memory_mb > 0 ? mb / c.memory_mb : mb;
    };
    const affine = (m: Member): number => {
      const a = this.o.affinity;
      return a && m.hello?.labels?.[a.key] === a.value ? 0 : 1;
    };
    const fits = [...this.members.values()].filter((m) => {
      if (!m.up || !m.hello) return false;
      const reg = this.registryView.get(this.nodeIdOf(m));
      if (reg?.draining || reg?.lost_ms != null) return false;
      const c = m.hello.capacity;
      return !c || (c.free_mb - m.deltaMb >= memoryMb && c.capsules + m.deltaCount < c.max_capsules);
    });
    // Equal loads are broken at random, so that replicas placing at once do not all pick the same runner.
    const tie = new Map(fits.map((m) => [m, Math.random()]));
    return fits.sort((a, b) => affine(a) - affine(b) || load(a) - load(b) || tie.get(a)! - tie.get(b)!);
  }

  async create(req: CreateCapsuleRequest) {
    let last: unknown = new RunnerError('capacity', 'no runner can take the capsule now');
    let candidates = await this.candidates(req.memory_mb);
    // The estimate says full: capsules other replicas destroyed since the last hello may have freed room.
    if (candidates.length === 0) {
      await this.heartbeat();
      candidates = await this.candidates(req.memory_mb);
    }
    for (const m of candidates.slice(0, 3)) {
      const nodeId = this.nodeIdOf(m);
      await this.o.registry.place(req.capsule_id, nodeId, req.memory_mb, this.o.nowMs());
      this.count(m, req.memory_mb, 1);
      try {
        const created = await m.runner.create(req);
        this.remember(req.capsule_id, nodeId, req.memory_mb);
        return created;
      } catch (e) {
        this.count(m, -req.memory_mb, -1);
        // Full or gone since its last hello: try the next runner; anything else is the answer.
        if (!(e instanceof RunnerError) || (e.code !== 'capacity' && e.code !== 'unavailable')) {
          await this.o.registry.unplace(req.capsule_id).catch(() => undefined);
          throw e;
        }
        last = e;
      }
    }
    await this.o.registry.unplace(req.capsule_id).catch(() => undefined);
    throw last;
  }

  private count(m: Member, mb: number, n: number): void {
    m.deltaMb += mb;
    m.deltaCount += n;
  }

  private remember(capsuleId: string, nodeId: string, memoryMb: number | null): void {
    if (this.placements.size >= PLACEMENT_CACHE) this.placements.delete(this.placements.keys().next().value!);
    this.placements.set(capsuleId, { nodeId, memoryMb });
  }

  /** The runner a capsule was placed on, from any replica's placement. */
  private async memberOf(capsuleId: string): Promise<{ m: Member; memoryMb: number | null }> {
    let p = this.placements.get(capsuleId);
    if (p === undefined) {
      const row = await this.o.registry.placementOf(capsuleId);
      if (!row) throw new RunnerError('not_found', 'the capsule was placed on no runner');
      p = { nodeId: row.node_id, memoryMb: null };
      this.remember(capsuleId, p.nodeId, null);
    }
    const m = this.byNode.get(p.nodeId);
    if (!m) throw new RunnerError('unavailable', `runner ${p.nodeId} is not reachable from this control plane`);
    return { m, memoryMb: p.memoryMb };
  }

  private async runnerOf(capsuleId: string): Promise<ReconnectingRunner> {
    return (await this.memberOf(capsuleId)).m.runner;
  }

  async hello(): Promise<RunnerHello> {
    const up = [...this.members.values()].filter((m) => m.up && m.hello);
    const first = up[0]?.hello;
    if (!first) throw new RunnerError('unavailable', 'no runner is reachable');
    // One figure for the whole fleet: what every reachable runner can still admit, summed.
    const sum = (f: (c: NonNullable<RunnerHello['capacity']>) => number): number =>
      up.reduce((n, m) => n + (m.hello?.capacity ? f(m.hello.capacity) : 0), 0);
    return {
      ...first,
      lost: [],
      ...(up.some((m) => m.hello?.capacity)
        ? {
            capacity: {
              ...first.capacity!,
              memory_mb: sum((c) => c.memory_mb),
              committed_mb: sum((c) => c.committed_mb),
              free_mb: sum((c) => c.free_mb),
              capsules: sum((c) => c.capsules),
              max_capsules: sum((c) => c.max_capsules),
            },
          }
        : {}),
    };
  }

  nodes(): RunnerMember[] {
    return [...this.members.values()]
      .filter((m) => m.up && m.hello)
      .map((m) => ({ node_id: this.nodeIdOf(m), runner: m.runner, hello: m.hello! }));
  }

  async list(): Promise<string[]> {
    const lists = await Promise.all(this.nodes().map((n) => n.runner.list()));
    return lists.flat();
  }

  async exec(req: Parameters<RunnerPort['exec']>[0]) {
    return (await this.runnerOf(req.capsule_id)).exec(req);
  }
  async upload(id: string, filename: string, bytes: Uint8Array) {
    return (await this.runnerOf(id)).upload(id, filename, bytes);
  }
  async listOutput(id: string) {
    return (await this.runnerOf(id)).listOutput(id);
  }
  async readOutput(id: string, filename: string) {
    return (await this.runnerOf(id)).readOutput(id, filename);
  }
  async destroy(id: string) {
    const { m, memoryMb } = await this.memberOf(id);
    const r = await m.runner.destroy(id);
    // Free again before the next hello says so (memory known when this process created it; else the node's mean).
    const c = m.hello?.capacity;
    this.count(m, -(memoryMb ?? (c && c.capsules > 0 ? c.committed_mb / c.capsules : 0)), -1);
    this.placements.delete(id);
    return r;
  }
  async usage(id: string) {
    return (await this.runnerOf(id)).usage(id);
  }

  async close(): Promise<void> {
    this.closed = true;
    if (this.timer) clearInterval(this.timer);
    await this.ticking?.catch(() => undefined);
    await Promise.all([...this.members.values()].map((m) => m.runner.close().catch(() => undefined)));
  }
}
