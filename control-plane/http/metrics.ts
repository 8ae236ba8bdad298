// Prometheus metrics of one control plane (`GET /metrics`, text exposition
// format): request rate and latency by route, method and status (exec and
// destroy latency are their routes' series), proof signing time, queue
// depths (unsigned proofs, webhook deliveries, heavy tenants' requests
// waiting for their turn), the runner's capsules and
// memory, and the process's own figures. One registry per control plane, so
// several in one process (tests) never share counters. Route labels are the
// router's patterns, never raw paths: ids cannot grow the series.
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';
import type { RunnerCapacity, RunnerHello, RunnerPort } from '../../shared/runner-protocol.js';
import type { ServiceMetrics, Store } from '../domain/index.js';
import { within } from '../../shared/time.js';

export interface HttpMetrics extends ServiceMetrics {
  registry: Registry;
  observe(method: string, route: string | null, status: number, seconds: number): void;
}

export function createMetrics(
  runner: RunnerPort,
  queues: () => ReturnType<Store['queueDepths']>,
  fairWaiting: () => number,
): HttpMetrics {
  const registry = new Registry();
  collectDefaultMetrics({ register: registry, prefix: 'capsule_' });
  const requests = new Counter({
    name: 'capsule_http_requests_total',
    help: 'HTTP requests answered, by route pattern, method and status',
    labelNames: ['route', 'method', 'status'] as const,
    registers: [registry],
  });
  const latency = new Histogram({
    name: 'capsule_http_request_duration_seconds',
    help: 'HTTP request latency by route pattern and method (exec and destroy included)',
    labelNames: ['route', 'method'] as const,
    buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 120],
    registers: [registry],
  });

  // The runner's figures are read at scrape time: one bounded hello per scrape, shared by the gauges
  // (the registry starts their collects together) and forgotten once answered, so the next scrape asks again.
  let hello: Promise<RunnerHello | null> | null = null;
  const scrape = (): Promise<RunnerHello | null> => {
    hello ??= within(runner.hello(), 2000)
      .catch(() => null)
      .finally(() => (hello = null));
    return hello;
  };
  new Gauge({
    name: 'capsule_runner_up',
    help: '1 when the runner answered the scrape',
    registers: [registry],
    async collect() {
      this.set((await scrape()) ? 1 : 0);
    },
  });
  const perNode = (name: string, help: string, pick: (c: RunnerCapacity) => number): void => {
    new Gauge({
      name,
      help,
      labelNames: ['node_id'] as const,
      registers: [registry],
      async collect() {
        this.reset();
        // Several runners: each one's figures as of its last heartbeat; one runner: its hello now.
        const members = runner.nodes?.() ?? [];
        for (const m of members) if (m.hello.capacity) this.set({ node_id: m.node_id }, pick(m.hello.capacity));
        if (runner.nodes) return;
        const h = await scrape();
        if (h?.capacity) this.set({ node_id: h.node_id ?? 'local' }, pick(h.capacity));
      },
    });
  };
  perNode('capsule_runner_capsules', 'Live capsules on the runner', (c) => c.capsules);
  perNode('capsule_runner_committed_memory_mb', 'Memory committed to live capsules (MB)', (c) => c.committed_mb);
  perNode('capsule_runner_free_memory_mb', 'Memory the runner can still admit (MB)', (c) => c.free_mb);

  const signing = new Histogram({
    name: 'capsule_proof_signing_seconds',
    help: 'Time to sign one proof, by outcome (buffered: the managed key was unavailable)',
    labelNames: ['outcome'] as const,
    buckets: [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5],
    registers: [registry],
  });
  // Queue depths are read from the database at scrape time (shared by every replica).
  let depths: ReturnType<typeof queues> | null = null;
  const readDepths = (): ReturnType<typeof queues> => {
    depths ??= queues().finally(() => (depths = null));
    return depths;
  };
  const depth = (name: string, help: string, pick: (d: Awaited<ReturnType<typeof queues>>) => number): void => {
    new Gauge({
      name,
      help,
      registers: [registry],
      async collect() {
        const d = await readDepths().catch(() => null);
        if (d) this.set(pick(d));
      },
    });
  };
  depth('capsule_unsigned_proofs', 'Proofs of wiped capsules waiting for the signing key', (d) => d.unsigned_proofs);
  depth(
    'capsule_webhook_deliveries_pending',
    'Webhook deliveries waiting to be made',
    (d) => d.webhook_deliveries_pending,
  );

  new Gauge({
    name: 'capsule_fair_gate_waiting',
    help: "Heavy accounts' requests waiting for their turn (CAPSULE_FAIR_HEAVY_SLOTS)",
    registers: [registry],
    collect() {
      this.set(fairWaiting());
    },
  });

  return {
    registry,
    proofSigned(seconds, outcome) {
      signing.observe({ outcome }, seconds);
    },
    observe(method, route, status, seconds) {
      const r = route ?? 'unmatched';
      requests.inc({ route: r, method, status: String(status) });
      latency.observe({ route: r, method }, seconds);
    },
  };
}
