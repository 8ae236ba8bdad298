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
import { ReconnectingRunner } from './reconnecting.js';

export interface RunnerAddress {
  host: string;
  port: number;
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
/** Placements remembered in process; older ones are read back from the registry. */
const PLACEMENT_CACHE = 50_000;

interface Member {
  address: string;
  runner: ReconnectingRunner;
  hello: RunnerHello | null;
  up: boolean;
  /** Memory placed here by this process since the last hello (that hello did not count it yet). */
  placedMb: number;
  placedCount: number;
}

/** Resolves `dns:<name>:<port>` to every address of the name (a headless Service lists one per runner pod). */
export function dnsAddresses(name: string, port: number): () => Promise<RunnerAddress[]> {
  return async () => (await lookup(name, { all: true })).map((a) => ({ host: a.address, port }));
}

export class RunnerFleet implements RunnerPort {
  private readonly members = new Map<string, Member>();
  private readonly byNode = new Map<string, Member>();
  private readonly placements = new Map<string, string>();
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
      this.members.set(key, { address: key, runner, hello: null, up: false, placedMb: 0, placedCount: 0 });
    }
    await Promise.all([...this.members.values()].map((m) => this.greet(m)));
    try {
      this.registryView = new Map((await this.o.registry.runnerNodes()).map((n) => [n.node_id, n]));
    } catch (e) {
      this.o.log.warn({ err: e }, 'reading the runner registry failed');
    }
  }

  private async greet(m: Member): Promise<void> {
    let timer: NodeJS.Timeout | undefined;
    try {
      const hello = await Promise.race([
        m.runner.hello(),
        new Promise<never>((_, rej) => {
          timer = setTimeout(() => rej(new RunnerError('unavailable', 'hello timed out')), HELLO_TIMEOUT_MS);
        }),
      ]);
      const nodeId = hello.node_id ?? m.address;
      const wasUp = m.up;
      Object.assign(m, { hello, up: true, placedMb: 0, placedCount: 0 });
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
    } finally {
      clearTimeout(timer);
    }
  }

  private notify(): void {
    for (const cb of this.listeners) cb();
  }

  private nodeIdOf(m: Member): string {
    return m.hello?.node_id ?? m.address;
  }

  /** Live, not draining, not declared lost, with room for `memoryMb`; preferred first. */
  private candidates(memoryMb: number): Member[] {
    const load = (m: Member): number => {
      const c = m.hello?.capacity;
      return c && c.memory_mb > 0 ? (c.committed_mb + m.placedMb) / c.memory_mb : m.placedCount;
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
      return !c || (c.free_mb - m.placedMb >= memoryMb && c.capsules + m.placedCount < c.max_capsules);
    });
    // Ties are broken at random so that replicas placing at once do not all pick the same runner.
    const tie = new Map(fits.map((m) => [m, Math.random()]));
    return fits.sort((a, b) => affine(a) - affine(b) || load(a) - load(b) || tie.get(a)! - tie.get(b)!);
  }

  async create(req: CreateCapsuleRequest) {
    let last: unknown = new RunnerError('capacity', 'no runner can take the capsule now');
    for (const m of this.candidates(req.memory_mb).slice(0, 3)) {
      const nodeId = this.nodeIdOf(m);
      await this.o.registry.place(req.capsule_id, nodeId, this.o.nowMs());
      m.placedMb += req.memory_mb;
      m.placedCount++;
      try {
        const created = await m.runner.create(req);
        this.remember(req.capsule_id, nodeId);
        return created;
      } catch (e) {
        m.placedMb -= req.memory_mb;
        m.placedCount--;
        // Full or gone since its last hello: try the next runner; anything else is the answer.
        if (!(e instanceof RunnerError) || (e.code !== 'capacity' && e.code !== 'unavailable')) throw e;
        last = e;
      }
    }
    throw last;
  }

  private remember(capsuleId: string, nodeId: string): void {
    if (this.placements.size >= PLACEMENT_CACHE) this.placements.delete(this.placements.keys().next().value!);
    this.placements.set(capsuleId, nodeId);
  }

  /** The runner a capsule was placed on, from any replica's placement. */
  private async runnerOf(capsuleId: string): Promise<ReconnectingRunner> {
    let nodeId = this.placements.get(capsuleId);
    if (nodeId === undefined) {
      const p = await this.o.registry.placementOf(capsuleId);
      if (!p) throw new RunnerError('not_found', 'the capsule was placed on no runner');
      nodeId = p.node_id;
      this.remember(capsuleId, nodeId);
    }
    const m = this.byNode.get(nodeId);
    if (!m) throw new RunnerError('unavailable', `runner ${nodeId} is not reachable from this control plane`);
    return m.runner;
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
    return (await this.runnerOf(id)).destroy(id);
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
